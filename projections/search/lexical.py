"""The lexical lane's words: one tokenizer for documents and queries, and BM25.

Terms are lowercased word tokens, English stop words dropped, Snowball-stemmed, so
"groups" finds "group". Scores are Okapi BM25 with statistics kept per namespace by the
search index projection (summed over the caller's scope at query time, so a score never
depends on documents the caller cannot see).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

import Stemmer

K1 = 1.2
B = 0.75
MAX_TERM_CHARS = 40

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEMMER = Stemmer.Stemmer("english")
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "let",
        "us",
        "yes",
        "ok",
        "okay",
    ]
)


@lru_cache(maxsize=16_384)
def _stem(word: str) -> str:
    stemmed: str = _STEMMER.stemWord(word)
    return stemmed


def terms(text: str) -> list[str]:
    """The text's terms in order, repeats kept (term frequency counts them)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [
        _stem(word)
        for word in _WORD.findall(folded)
        if word not in STOP_WORDS and len(word) <= MAX_TERM_CHARS
    ]


def term_frequencies(text: str) -> tuple[Counter[str], int]:
    """Each distinct term with its count, and the document length in terms."""
    found = terms(text)
    return Counter(found), len(found)


def query_terms(text: str) -> list[str]:
    """A query's distinct terms, in first-seen order."""
    return list(dict.fromkeys(terms(text)))
