"""The rules judge on the labelled table of statement pairs (benchmarks/data/judge_pairs.jsonl):
precision and recall held above their floors on the part the rules were tuned on and on the
held-out part (every 4th pair), per rule and overall. The figures are in docs/judge.md."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.judge import Pair, Part, Report, Score, held_out, load_pairs, measure, part_of
from memwarden.domain.model.judging import Judgement, RulesJudge, Statement

PRECISION_FLOOR = 0.95
RECALL_FLOOR = 0.8
RULE_PRECISION_FLOOR = 0.9
"""Each rule on its own, over the whole table: a rule that starts calling look-alikes
contradictions fails here even when the others hide it in the overall figure."""

PAIRS = load_pairs()
JUDGE = RulesJudge()


def test_the_table_is_large_labelled_and_of_the_kinds_teams_write() -> None:
    assert len(PAIRS) >= 300
    labels = Counter(p.label for p in PAIRS)
    assert labels["contradiction"] >= 100
    assert labels["compatible"] >= 150
    kinds = {p.kind for p in PAIRS}
    assert {"schedule", "owner", "version", "place", "limit", "list", "record", "history", "range"} <= kinds
    assert len({(p.a, p.b) for p in PAIRS}) == len(PAIRS)  # no pair twice


def test_most_look_alikes_are_the_same_frame_with_another_number() -> None:
    """The table's hard half: compatible pairs that share most words and both hold a number."""
    numbered = [
        p
        for p in PAIRS
        if p.label == "compatible" and any(c.isdigit() for c in p.a) and any(c.isdigit() for c in p.b)
    ]
    assert len(numbered) >= 120


def test_every_fourth_pair_is_held_out() -> None:
    held = part_of(PAIRS, "held_out")
    tuning = part_of(PAIRS, "tuning")
    assert len(held) + len(tuning) == len(PAIRS)
    assert held[0] == PAIRS[3]
    assert [held_out(i) for i in range(8)] == [False] * 3 + [True] + [False] * 3 + [True]
    assert {p.kind for p in held} == {p.kind for p in PAIRS}


@pytest.mark.parametrize("part", ["tuning", "held_out", "all"])
def test_precision_and_recall_hold_their_floors(part: Part) -> None:
    report = measure(JUDGE, part_of(PAIRS, part), part)
    precision, recall = report.overall.precision, report.overall.recall
    assert precision is not None
    assert recall is not None
    assert precision >= PRECISION_FLOOR, _mistakes(report)
    assert recall >= RECALL_FLOOR, _mistakes(report)


def test_every_rule_that_calls_contradictions_is_precise() -> None:
    report = measure(JUDGE, PAIRS, "all")
    assert {"frame", "negation", "antonym"} <= set(report.by_rule)
    for rule, score in report.by_rule.items():
        assert (score.precision or 0.0) >= RULE_PRECISION_FLOOR, (rule, _mistakes(report))


def test_the_judge_is_symmetric_on_the_table() -> None:
    for pair in PAIRS:
        forward = JUDGE.judge(Statement(content=pair.a), Statement(content=pair.b))
        backward = JUDGE.judge(Statement(content=pair.b), Statement(content=pair.a))
        assert forward.verdict == backward.verdict, pair


def test_explanations_never_depend_on_the_words_judged() -> None:
    """An explanation goes on the ledger unsealed: it names a rule and a kind of difference,
    so the whole table draws only a handful of distinct explanations, none with a digit."""
    explanations = {JUDGE.judge(Statement(content=p.a), Statement(content=p.b)).explanation for p in PAIRS}
    assert len(explanations) <= 25
    assert not any(c.isdigit() for text in explanations for c in text)


class _Always:
    """A judge with one answer, to check the counting."""

    name = "always"

    def __init__(self, verdict: bool) -> None:
        self.verdict = verdict

    def judge(self, a: Statement, b: Statement) -> Judgement:
        if self.verdict:
            return Judgement(verdict="contradiction", rule="always", explanation="always")
        return Judgement(verdict="compatible", rule="never", explanation="never")


def test_the_counting_behind_the_figures() -> None:
    pairs = [
        Pair(a="x is 1", b="x is 2", label="contradiction", kind="k"),
        Pair(a="y is 1", b="z is 1", label="compatible", kind="k"),
        Pair(a="w is 1", b="w is 3", label="contradiction", kind="k"),
        Pair(a="v is 1", b="u is 2", label="compatible", kind="k"),
    ]
    everything = measure(_Always(True), pairs, "all")
    assert everything.overall == Score(true=2, false=2, contradictions=2)
    assert (everything.overall.precision, everything.overall.recall) == (0.5, 1.0)
    assert everything.by_rule == {"always": Score(true=2, false=2, contradictions=2)}
    nothing = measure(_Always(False), pairs, "all")
    assert (nothing.overall.precision, nothing.overall.recall) == (None, 0.0)
    assert nothing.by_rule == {}
    assert len(nothing.wrong) == 2


def _mistakes(report: Report) -> str:
    return "\n".join(f"[{p.label} {p.kind} {rule}] {p.a} | {p.b}" for p, rule in report.wrong)


def test_a_long_text_is_no_sentence_frame() -> None:
    """Comparing word by word is quadratic: texts longer than a sentence are not framed
    (the negation rule, linear, still looks at them)."""
    long_a, long_b = "word " * 3000 + "is 5", "word " * 3000 + "is 6"
    assert JUDGE.judge(Statement(content=long_a), Statement(content=long_b)).rule == "none"
    negated = JUDGE.judge(Statement(content=long_a), Statement(content="word " * 3000 + "is not 5"))
    assert (negated.verdict, negated.rule) == ("contradiction", "negation")
