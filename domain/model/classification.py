"""Classification of every persisted fact: PII kinds, secret kinds, sensitivity.

Deterministic pattern rules, so the result is explainable and testable without a model.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

Sensitivity = Literal["public", "internal", "confidential", "secret"]


class Classification(msgspec.Struct, frozen=True):
    sensitivity: Sensitivity = "internal"
    pii: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()


# The lookbehind starts a match only where a local part starts: linear, not quadratic, time.
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    # grouped: optional +country, optional (area), then groups split by space, dot or dash
    r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){2,4}"
    # (area) counts as a group: (415) 555-0100
    r"|(?:\+\d{1,3}[\s.-]?)?\(\d{2,4}\)[\s.-]?\d{2,4}[\s.-]\d{2,4}"
    # E.164 without separators: +14155550100
    r"|\+\d{8,15}"
    r")(?!\w)"
)
# Dates and times (2026-11-30, 2026-11-30 14:30:05) and IPv4 addresses are not phones.
_NOT_PHONE = re.compile(
    r"(?<![\d.])\d{4}[-./]\d{1,2}[-./]\d{1,2}(?:[ T]\d{1,2}(?:[:.]\d{2}){1,2}(?:[.,]\d+)?)?(?![\d])"
    r"|(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])"
)
_CARD_RUN = re.compile(r"(?<!\d)\d+(?:[ -]\d+)*(?!\d)")
_MIN_CARD_GROUP = 3
_NATIONAL_IDS: dict[str, re.Pattern[str]] = {
    "us_ssn": re.compile(r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)"),
    "uk_nino": re.compile(
        r"\b(?![DFIQUV])[A-CEGHJ-PR-TW-Z](?![DFIQUVO])[A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
    ),
    "iban": re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b"),
}
# Words after "password is" that describe a password instead of being one.
_PROSE_AFTER_IS = (
    r"(?:required|needed|missing|wrong|incorrect|invalid|expired|stored|managed|kept|saved|"
    r"shared|changed|reset|rotated|set|not|never|always|still|being|also|only|correct|"
    r"empty|blank|unknown|written|hidden|encrypted|hashed|too|very|case|in|on|at|from|"
    r"that|this|what|when|where|which|there|their|they|about|like|same|different)\b"
)
_SECRETS: dict[str, re.Pattern[str]] = {
    "aws_access_key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "private_key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    "github_token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{22,}\b"),
    "slack_token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    "api_key": re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bsk-[A-Za-z0-9_-]{20,}\b"),
    "password": re.compile(
        r"(?i)\b(?:password|passwd|pwd|passphrase|secret)\b\s*"
        r"(?:[:=]\s*\S{4,}|is\s+(?!" + _PROSE_AFTER_IS + r")\S{4,})"
    ),
}


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


_ENOUGH_DIGITS_FOR_A_CARD = re.compile(r"(?:\d\D*+){13}")


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Spans of Luhn-valid 13-19 digit numbers, written whole or in groups of 3 or more.

    Every run of consecutive groups is a candidate, so a card written right after
    another number ("ref 12345 4111 1111 1111 1111") is still found.
    """
    spans: list[tuple[int, int]] = []
    if not _ENOUGH_DIGITS_FOR_A_CARD.search(text):
        return spans
    for run in _CARD_RUN.finditer(text):
        groups = [(m.start() + run.start(), m.end() + run.start()) for m in re.finditer(r"\d+", run.group())]
        for first in range(len(groups)):
            digits = ""
            for last in range(first, len(groups)):
                start, end = groups[last]
                if end - start < _MIN_CARD_GROUP:
                    break
                digits += text[start:end]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and luhn_valid(digits):
                    spans.append((groups[first][0], end))
    return spans


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    """Blank out spans already classified, so their digits are not read as a phone."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = "\x00" * (end - start)
    return "".join(chars)


def _has_phone(text: str) -> bool:
    """A phone number has 9 to 15 digits. ``text`` is masked: cards, national ids, IBANs,
    dates and times (2026-11-30 14:30) and IPv4 addresses are already blanked out."""
    return any(9 <= sum(c.isdigit() for c in m.group()) <= 15 for m in _PHONE.finditer(text))


def classify(text: str) -> Classification:
    pii: list[str] = []
    if _EMAIL.search(text):
        pii.append("email")
    taken = _card_spans(text)
    if taken:
        pii.append("card")
    for kind, pattern in _NATIONAL_IDS.items():
        found = [m.span() for m in pattern.finditer(text)]
        if found:
            pii.append(kind)
            taken.extend(found)
    taken.extend(m.span() for m in _NOT_PHONE.finditer(text))
    if _has_phone(_mask(text, taken)):
        pii.append("phone")
    secrets = tuple(kind for kind, pattern in _SECRETS.items() if pattern.search(text))
    sensitivity: Sensitivity = "secret" if secrets else "confidential" if pii else "internal"
    return Classification(sensitivity=sensitivity, pii=tuple(sorted(pii)), secrets=secrets)
