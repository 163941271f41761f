"""Real concurrency against the real PostgreSQL.

Separate ``Core`` objects stand for separate processes (own pools, own stream caches, own
group committers); a few tests use real OS processes (multiprocessing, spawn).
"""

from __future__ import annotations

import multiprocessing
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.app import StreamConflict
from memwarden.domain.ledger.keys import KeyEncryptionKey, SigningKey
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import AuditRecorded, ClaimSet
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.text import normalize
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import SCHEMA, Settings

T = TypeVar("T")
NS = "acme/eng"
EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
CHAIN = SQL("{}.ledger_chain").format(Identifier(SCHEMA))
RACERS = 4


def race(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run the calls in threads released together by a barrier; re-raise any failure."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], T]) -> T:
        barrier.wait(timeout=60)
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [f.result(timeout=120) for f in futures]


@pytest.fixture
def cores(settings: Settings) -> Iterator[list[Core]]:
    opened = [open_core(settings) for _ in range(RACERS)]
    try:
        yield opened
    finally:
        for c in opened:
            c.close()


class ConflictCounter:
    """Counts the appends that lost a race (StreamConflict) across the racing Cores."""

    def __init__(self, cores: Sequence[Core]) -> None:
        self.count = 0
        self._lock = threading.Lock()
        for c in cores:
            append = c.ledger.append

            def counting(*args: Any, _append: Any = append, **kwargs: Any) -> int:
                try:
                    return int(_append(*args, **kwargs))
                except StreamConflict:
                    with self._lock:
                        self.count += 1
                    raise

            c.ledger.append = counting  # type: ignore[method-assign]


@pytest.fixture
def reader(settings: Settings) -> Iterator[Core]:
    with open_core(settings) as opened:
        yield opened


def fresh_states(reader: Core, ids: Sequence[UUID]) -> dict[UUID, MemoryState]:
    """Fold each memory from the ledger, not from any cache."""
    reader.memory.streams.cache.clear()
    return {i: s for i in ids if (s := reader.memory.memory(i)) is not None}


def topic_counts(core: Core) -> Counter[str]:
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        rows = conn.execute(SQL("SELECT topic, count(*) FROM {} GROUP BY topic").format(EVENTS)).fetchall()
    return Counter(dict(rows))


def assert_gapless(core: Core) -> int:
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        events = [r[0] for r in conn.execute(SQL("SELECT notification_id FROM {} ORDER BY 1").format(EVENTS))]
        links = [r[0] for r in conn.execute(SQL("SELECT position FROM {} ORDER BY 1").format(CHAIN))]
    assert events == list(range(1, len(events) + 1)), "event positions have gaps or duplicates"
    assert links == events, "chain positions do not match event positions"
    return len(events)


def assert_positions_are_audits_of(core: Core, results: Sequence[WriteResult]) -> None:
    """The position a write returns is its audit record, naming the memory it wrote."""
    for result in results:
        [recorded] = core.ledger.read(result.position - 1, 1)
        assert recorded.position == result.position
        assert isinstance(recorded.event, AuditRecorded)
        assert recorded.event.op == "write"
        assert recorded.event.subject_ids == (result.id,)


# -- (a) racing writers on one slot ---------------------------------------------------------


def test_racing_writers_on_one_slot_leave_exactly_one_current(cores: list[Core], reader: Core) -> None:
    rounds = 8
    conflicts = ConflictCounter(cores)
    results: list[WriteResult] = []
    for r in range(rounds):
        calls = [
            lambda c=c, i=i, r=r: c.memory.write(
                Identity(NS, f"agent-{i}", "agent"),
                WriteMemory(
                    content=f"Dana sits in room {r}-{i}",
                    subject="Dana",
                    attribute="desk",
                    value=f"room {r}-{i}",
                ),
            )
            for i, c in enumerate(cores)
        ]
        results.extend(race(calls))
        ids = [res.id for res in results]
        assert None not in ids
        assert len(set(ids)) == len(ids)
        states = fresh_states(reader, ids)  # type: ignore[arg-type]
        assert set(states) == set(ids), "a write was lost"
        now = datetime.now(UTC)
        current = [i for i, s in states.items() if s.is_current(now)]
        assert len(current) == 1, f"round {r}: {len(current)} current memories hold the slot"
        for memory_id, state in states.items():
            if memory_id == current[0]:
                assert state.superseded_by == ()
                continue
            assert len(state.superseded_by) == 1, (memory_id, state.superseded_by)
            assert state.status == "retired" or (state.valid_to is not None and state.valid_to <= now)

    outcomes = Counter(res.outcome for res in results)
    assert outcomes == {"stored": 1, "superseded": rounds * RACERS - 1}
    print(f"slot race: {conflicts.count} appends lost a race and re-decided")
    assert conflicts.count > 0, "the writers never actually raced"
    # a single line of corrections: every memory but the head was superseded exactly once
    superseded = Counter(old for res in results for old in res.supersedes)
    assert all(n == 1 for n in superseded.values())
    head = next(
        i
        for i, s in fresh_states(reader, [r.id for r in results]).items()  # type: ignore[misc]
        if s.is_current(datetime.now(UTC))
    )
    assert set(superseded) == {res.id for res in results} - {head}
    assert sum(1 for res in results if not res.supersedes) == 1

    slot_id = reader.memory.claim_ids.slot(NS, "Dana", "desk")
    claim = reader.ledger.stream_heads([slot_id])[slot_id]
    assert isinstance(claim.event, ClaimSet)
    assert claim.event.holders == (head,)

    assert topic_counts(reader)["MemoryWritten"] == rounds * RACERS
    assert_gapless(reader)
    assert_positions_are_audits_of(reader, results)
    report = reader.ledger.verify()
    assert report.ok, report


# -- (b) racing identical normalized text -----------------------------------------------------


def test_racing_identical_text_stores_once_and_deduplicates_the_rest(cores: list[Core], reader: Core) -> None:
    rounds = 5
    conflicts = ConflictCounter(cores)
    for r in range(rounds):
        variants = [
            f"The build server for project {r} is CI-7",
            f"the build server for project {r} is ci-7.",
            f"  THE BUILD SERVER FOR PROJECT {r} IS CI-7 ",
            f"The  build server\tfor project {r} is CI-7!",
        ]
        assert len({normalize(v) for v in variants}) == 1
        texts = [variants[i % len(variants)] for i in range(RACERS)]
        calls = [
            lambda c=c, i=i, text=text: c.memory.write(
                Identity(NS, f"agent-{i}", "agent"), WriteMemory(content=text)
            )
            for i, (c, text) in enumerate(zip(cores, texts, strict=True))
        ]
        results = race(calls)
        outcomes = Counter(res.outcome for res in results)
        assert outcomes == {"stored": 1, "deduplicated": RACERS - 1}, outcomes
        ids = {res.id for res in results}
        assert len(ids) == 1
        [memory_id] = ids
        assert memory_id is not None
        state = fresh_states(reader, [memory_id])[memory_id]
        assert state.is_current(datetime.now(UTC))
        assert {p.actor for p in state.provenance} == {f"agent-{i}" for i in range(RACERS)}
        stream = reader.ledger.streams([memory_id])[memory_id]
        kinds = Counter(type(rec.event).__name__ for rec in stream)
        assert kinds == {"MemoryWritten": 1, "MemoryReaffirmed": RACERS - 1}
        text_id = reader.memory.claim_ids.text(NS, variants[0])
        claim = reader.ledger.stream_heads([text_id])[text_id]
        assert isinstance(claim.event, ClaimSet)
        assert claim.event.holders == (memory_id,)

    print(f"text race: {conflicts.count} appends lost a race and re-decided")
    assert conflicts.count >= rounds * (RACERS - 1), "every loser of a round must have re-decided"
    assert topic_counts(reader)["MemoryWritten"] == rounds
    assert_gapless(reader)
    report = reader.ledger.verify()
    assert report.ok, report


# -- (c) real OS processes ---------------------------------------------------------------------


def _process_writer(
    settings: Settings, index: int, count: int, threads: int, barrier: Any, queue: Any
) -> None:
    """Runs in a spawned process: open a Core, wait for the others, write ``count`` facts."""
    try:
        with open_core(settings) as core:
            barrier.wait(timeout=120)
            identity = Identity(NS, f"proc-{index}", "agent")

            def one(j: int) -> tuple[str, str, int]:
                result = core.memory.write(
                    identity,
                    WriteMemory(
                        content=f"Process {index} learned fact {j}: service {index}x{j} is on port {8000 + j}"
                    ),
                )
                return result.outcome, str(result.id), result.position

            with ThreadPoolExecutor(threads) as pool:
                out = list(pool.map(one, range(count)))
        queue.put((index, out, None))
    except BaseException as error:
        queue.put((index, [], repr(error)))


@pytest.mark.slow
def test_processes_write_concurrently_on_one_gapless_chain(settings: Settings) -> None:
    # Key files are made first (see the key race test below); the schema, the shared
    # secret and everything else are created by the racing processes themselves.
    KeyEncryptionKey.load(settings)
    SigningKey.load(settings)
    processes, count, threads = 3, 20, 2
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_process_writer, args=(settings, i, count, threads, barrier, queue))
        for i in range(processes)
    ]
    for w in workers:
        w.start()
    try:
        reports = [queue.get(timeout=180) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
    errors = [(i, e) for i, _, e in reports if e is not None]
    assert not errors, errors
    assert all(w.exitcode == 0 for w in workers)
    written = [row for _, out, _ in reports for row in out]
    assert len(written) == processes * count
    assert {outcome for outcome, _, _ in written} == {"stored"}
    assert len({memory_id for _, memory_id, _ in written}) == len(written)
    assert len({position for _, _, position in written}) == len(written)

    with open_core(settings) as core:
        head = assert_gapless(core)
        assert max(position for _, _, position in written) <= head
        assert topic_counts(core)["MemoryWritten"] == processes * count
        results = [
            WriteResult(outcome="stored", id=UUID(memory_id), position=position)
            for _, memory_id, position in written
        ]
        assert_positions_are_audits_of(core, results)
        states = fresh_states(core, [r.id for r in results])  # type: ignore[misc]
        assert len(states) == len(results)
        report = core.ledger.verify()
        assert report.ok, report
        assert report.checked == head


def _load_keys_in_rounds(directories: list[str], barrier: Any, queue: Any) -> None:
    for directory in directories:
        barrier.wait(timeout=120)
        settings = Settings(data_dir=Path(directory))
        try:
            queue.put(
                (directory, KeyEncryptionKey.load(settings).key_id, SigningKey.load(settings).key_id, None)
            )
        except Exception as error:
            queue.put((directory, None, None, repr(error)))


@pytest.mark.slow
def test_processes_starting_together_on_a_fresh_data_dir_agree_on_the_keys() -> None:
    """N processes of a fresh install (no key files yet) start at the same moment: every
    one must end up with the same key-encryption key and signing key, none may fail."""
    processes, rounds = 8, 80
    with tempfile.TemporaryDirectory() as root:
        directories = [str(Path(root) / f"data-{n}") for n in range(rounds)]
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(processes)
        queue = ctx.Queue()
        workers = [
            ctx.Process(target=_load_keys_in_rounds, args=(directories, barrier, queue))
            for _ in range(processes)
        ]
        for w in workers:
            w.start()
        try:
            seen = [queue.get(timeout=180) for _ in range(processes * rounds)]
        finally:
            for w in workers:
                w.join(timeout=60)
                if w.is_alive():
                    w.kill()
    failures = [(d, e) for d, _, _, e in seen if e is not None]
    disagreements = {d for d in directories if len({(k, s) for dd, k, s, _ in seen if dd == d}) != 1}
    assert not failures, f"{len(failures)} of {len(seen)} key loads failed, e.g. {failures[0]}"
    assert not disagreements


# -- (d) one Core, many threads: group commit ----------------------------------------------------


def test_many_threads_on_one_core_share_group_commits(core: Core) -> None:
    threads, per_thread = 16, 10
    batches: list[int] = []
    committer = core.ledger._committer
    commit = committer._commit

    def counting(groups: Sequence[Any]) -> Any:
        batches.append(len(groups))
        return commit(groups)

    committer._commit = counting
    barrier = threading.Barrier(threads)

    def worker(t: int) -> list[WriteResult]:
        identity = Identity(NS, f"agent-{t}", "agent")
        barrier.wait(timeout=60)
        return [
            core.memory.write(
                identity, WriteMemory(content=f"Thread {t} observed that queue q{t}x{j} drains nightly")
            )
            for j in range(per_thread)
        ]

    with ThreadPoolExecutor(threads) as pool:
        results = [r for rs in pool.map(worker, range(threads)) for r in rs]

    total = threads * per_thread
    assert len(results) == total
    assert {r.outcome for r in results} == {"stored"}
    assert len({r.id for r in results}) == total
    assert len({r.position for r in results}) == total
    assert sum(batches) == total, "every append went through the group committer once"
    assert max(batches) > 1, f"no two writers ever shared a commit: {batches}"
    head = assert_gapless(core)
    assert head == total * 3  # MemoryWritten, its text claim, its audit record
    assert topic_counts(core) == {"MemoryWritten": total, "ClaimSet": total, "AuditRecorded": total}
    assert_positions_are_audits_of(core, results)
    report = core.ledger.verify()
    assert report.ok, report
    assert report.checked == head
