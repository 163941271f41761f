"""``memwarden bench judge``: the rules judge's precision and recall on a labelled table.

The table (``benchmarks/data/judge_pairs.jsonl``) holds statement pairs of the kind teams
write, each labelled ``contradiction`` or ``compatible`` by a person, written before the
rules were measured on it. Every fourth pair (the 4th, 8th, …) is held out: the rules are
tuned on the other three quarters only, so the held-out figures say how the rules do on
sentences nobody looked at while changing them. The figures are in docs/judge.md.

Per rule: its precision (of the pairs it called contradictions, the share that are) and its
recall (of all labelled contradictions, the share it called). A rule that decided only
``compatible`` pairs has no precision and is left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from memwarden.domain.model.judging import Judge, RulesJudge, Statement

TABLE = Path(__file__).resolve().parent / "data" / "judge_pairs.jsonl"
HELD_OUT_EVERY = 4

Label = Literal["contradiction", "compatible"]
Part = Literal["tuning", "held_out", "all"]


class Pair(msgspec.Struct, frozen=True):
    a: str
    b: str
    label: Label
    kind: str


class Score(msgspec.Struct, frozen=True):
    """Counts behind a precision and a recall: called contradictions that are (``true``),
    called ones that are not (``false``), and the labelled contradictions of the part."""

    true: int
    false: int
    contradictions: int

    @property
    def precision(self) -> float | None:
        called = self.true + self.false
        return self.true / called if called else None

    @property
    def recall(self) -> float | None:
        return self.true / self.contradictions if self.contradictions else None


class Report(msgspec.Struct, frozen=True):
    part: Part
    pairs: int
    overall: Score
    by_rule: dict[str, Score]
    wrong: list[tuple[Pair, str]]
    """Every pair the judge got wrong, with the rule that decided it."""


def load_pairs(path: Path = TABLE) -> list[Pair]:
    decoder = msgspec.json.Decoder(Pair)
    return [decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def held_out(index: int) -> bool:
    """The 4th, 8th, 12th … pair of the table (``index`` from 0) is held out."""
    return index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1


def part_of(pairs: Sequence[Pair], part: Part) -> list[Pair]:
    if part == "all":
        return list(pairs)
    return [p for i, p in enumerate(pairs) if held_out(i) == (part == "held_out")]


def measure(judge: Judge, pairs: Iterable[Pair], part: Part) -> Report:
    pairs = list(pairs)
    contradictions = sum(1 for p in pairs if p.label == "contradiction")
    true: dict[str, int] = {}
    false: dict[str, int] = {}
    wrong: list[tuple[Pair, str]] = []
    for pair in pairs:
        judgement = judge.judge(Statement(content=pair.a), Statement(content=pair.b))
        if judgement.contradicts:
            counts = true if pair.label == "contradiction" else false
            counts[judgement.rule] = counts.get(judgement.rule, 0) + 1
        if judgement.contradicts != (pair.label == "contradiction"):
            wrong.append((pair, judgement.rule))
    rules = sorted(set(true) | set(false))
    by_rule = {
        r: Score(true=true.get(r, 0), false=false.get(r, 0), contradictions=contradictions) for r in rules
    }
    overall = Score(true=sum(true.values()), false=sum(false.values()), contradictions=contradictions)
    return Report(part=part, pairs=len(pairs), overall=overall, by_rule=by_rule, wrong=wrong)


def _figure(value: float | None) -> str:
    return "   -" if value is None else f"{value:.3f}"


def render(reports: Sequence[Report]) -> str:
    lines = [f"{'part':<9} {'rule':<12} {'called':>6} {'right':>6} {'precision':>9} {'recall':>7}"]
    for report in reports:
        rows = [*report.by_rule.items(), ("overall", report.overall)]
        for rule, score in rows:
            lines.append(
                f"{report.part:<9} {rule:<12} {score.true + score.false:>6} {score.true:>6}"
                f" {_figure(score.precision):>9} {_figure(score.recall):>7}"
            )
        lines.append(
            f"{report.part:<9} ({report.pairs} pairs, {report.overall.contradictions} labelled contradictions)"
        )
    return "\n".join(lines)


def run_judge_bench(args: argparse.Namespace) -> int:
    pairs = load_pairs(Path(args.table) if args.table else TABLE)
    judge = RulesJudge()
    parts: tuple[Part, ...] = ("tuning", "held_out", "all")
    reports = [measure(judge, part_of(pairs, part), part) for part in parts]
    if args.json:
        sys.stdout.write(
            json.dumps(
                {
                    r.part: {
                        "pairs": r.pairs,
                        "contradictions": r.overall.contradictions,
                        "precision": r.overall.precision,
                        "recall": r.overall.recall,
                        "by_rule": {
                            rule: {"called": s.true + s.false, "precision": s.precision, "recall": s.recall}
                            for rule, s in r.by_rule.items()
                        },
                    }
                    for r in reports
                },
                indent=2,
            )
            + "\n"
        )
    else:
        sys.stdout.write(render(reports) + "\n")
    if args.wrong:
        tuning = reports[0]  # only the tuning part's mistakes are shown: the held-out part stays unread
        for pair, rule in tuning.wrong:
            sys.stdout.write(f"[{pair.label} {pair.kind} {rule}] {pair.a} | {pair.b}\n")
    return 0
