"""A realistic import for ``bench review``: statements of the kind teams write (schedules,
owners, versions, places, limits, numbered steps, templated records, histories, ranges), most
of them distinct facts that share a sentence frame with another number or name, a few real
updates that contradict what was said before. Each statement knows its frame, its subject and
its value, so a finding can be scored: a true contradiction says another value of the same
subject in the same frame.

Nothing here is taken from LoCoMo; names and numbers are drawn from a seeded generator."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

TEAMS = (
    "payments",
    "search",
    "platform",
    "mobile",
    "billing",
    "identity",
    "data",
    "growth",
    "infra",
    "support",
)
PEOPLE = (
    "Ana Ruiz",
    "Ben Okafor",
    "Chen Wei",
    "Dara Singh",
    "Eli Cohen",
    "Fatima Noor",
    "Goran Petrov",
    "Hana Sato",
)
SERVICES = ("ledger-api", "auth-gateway", "search-indexer", "invoice-worker", "push-relay", "report-builder")
CLUSTERS = ("staging", "production", "analytics", "sandbox")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
RUNBOOKS = ("failover", "key rotation", "database restore", "release")
ACTIONS = (
    "page the on-call lead",
    "freeze deploys",
    "snapshot the volumes",
    "drain the queue",
    "notify support",
)
PROJECTS = ("PAY", "SRCH", "PLAT", "MOB")


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    frame: str
    subject: str
    value: str
    update: bool = False
    """Says another value of a subject already stated: a real contradiction of the earlier one."""


Frame = Callable[[random.Random], tuple[str, str, Callable[[str], str], Callable[[random.Random], str]]]


def _hour(rng: random.Random) -> str:
    return f"{rng.randint(7, 17)}:{rng.choice(('00', '15', '30', '45'))}"


# Each frame: (frame name, subject, sentence of a value, draw a value). A subject stated twice
# with two values is a contradiction; two subjects in one frame are two facts.
FRAMES: tuple[Frame, ...] = (
    lambda r: (
        "standup",
        (t := r.choice(TEAMS)),
        lambda v, t=t: f"The {t} team's daily standup is at {v}",
        _hour,
    ),
    lambda r: (
        "owner",
        (s := r.choice(SERVICES)),
        lambda v, s=s: f"{s} is owned by {v}",
        lambda r: r.choice(PEOPLE),
    ),
    lambda r: (
        "k8s",
        (c := r.choice(CLUSTERS)),
        lambda v, c=c: f"The {c} cluster runs Kubernetes 1.{v}",
        lambda r: str(r.randint(27, 33)),
    ),
    lambda r: (
        "floor",
        (t := r.choice(TEAMS)),
        lambda v, t=t: f"The {t} team sits on floor {v} of the Lisbon office",
        lambda r: str(r.randint(1, 9)),
    ),
    lambda r: (
        "upload",
        (s := r.choice(SERVICES)),
        lambda v, s=s: f"The upload limit of {s} is {v} MB",
        lambda r: str(r.choice((10, 25, 50, 100, 250))),
    ),
    lambda r: (
        "retention",
        (s := r.choice(SERVICES)),
        lambda v, s=s: f"Logs of {s} are kept for {v} days",
        lambda r: str(r.choice((7, 14, 30, 90, 365))),
    ),
    lambda r: (
        "lead",
        (t := r.choice(TEAMS)),
        lambda v, t=t: f"{v} leads the {t} team",
        lambda r: r.choice(PEOPLE),
    ),
    lambda r: (
        "retro",
        (t := r.choice(TEAMS)),
        lambda v, t=t: f"The {t} retro happens every {v}",
        lambda r: r.choice(WEEKDAYS),
    ),
)


def _record(rng: random.Random, n: int, known: dict[tuple[str, str], str]) -> Statement:
    """A record that shares its frame with many others but is about a thing of its own (a
    runbook step, a ticket, a year's headcount, a sprint). Said again, it says the same: a
    team's records repeat, they do not contradict themselves."""
    kind = n % 4
    sentence: Callable[[str], str]
    draw: Callable[[], str]
    if kind == 0:
        book, step = rng.choice(RUNBOOKS), rng.randint(1, 12)
        frame, subject, draw = "step", f"{book}#{step}", lambda: rng.choice(ACTIONS)
        sentence = lambda v: f"Step {step} of the {book} runbook: {v}"  # noqa: E731
    elif kind == 1:
        project, ticket = rng.choice(PROJECTS), rng.randint(100, 9999)
        frame, subject, draw = "ticket", f"{project}-{ticket}", lambda: rng.choice(PEOPLE)
        sentence = lambda v: f"Ticket {project}-{ticket} is assigned to {v}"  # noqa: E731
    elif kind == 2:
        year, team = rng.randint(2018, 2026), rng.choice(TEAMS)
        frame, subject, draw = "headcount", f"{team}@{year}", lambda: str(rng.randint(3, 40))
        sentence = lambda v: f"In {year} the {team} team had {v} engineers"  # noqa: E731
    else:
        sprint, team = rng.randint(10, 99), rng.choice(TEAMS)
        frame, subject, draw = "sprint", f"{team}#{sprint}", lambda: rng.choice(WEEKDAYS)
        sentence = lambda v: f"Sprint {sprint} of the {team} team ends on {v}"  # noqa: E731
    value = known.setdefault((frame, subject), draw())
    return Statement(sentence(value), frame, subject, value)


def statements(count: int, seed: int = 2026, updates: float = 0.08) -> Iterator[Statement]:
    """``count`` statements: framed facts, a share of them later updated, and distinct
    same-frame records (steps, tickets, histories, sprints) between them."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not secrets
    said: dict[tuple[str, str], tuple[Callable[[str], str], Callable[[random.Random], str], str]] = {}
    records: dict[tuple[str, str], str] = {}
    for n in range(count):
        roll = rng.random()
        if said and roll < updates:
            (frame, subject), (sentence, draw, old) = rng.choice(list(said.items()))
            value = draw(rng)
            while value == old:
                value = draw(rng)
            said[frame, subject] = (sentence, draw, value)
            yield Statement(sentence(value), frame, subject, value, update=True)
        elif roll < 0.55:
            frame, subject, sentence, draw = rng.choice(FRAMES)(rng)
            if (frame, subject) in said:
                yield _record(rng, n, records)
                continue
            value = draw(rng)
            said[frame, subject] = (sentence, draw, value)
            yield Statement(sentence(value), frame, subject, value)
        else:
            yield _record(rng, n, records)


def contradicts(a: Statement, b: Statement) -> bool:
    """The truth a finding is scored by: the same subject in the same frame, another value."""
    return (a.frame, a.subject) == (b.frame, b.subject) and a.value != b.value
