"""`memwarden bench proofs`: the Merkle tree's cost and its proofs' speed on a generated ledger.

1. Generate N events through the real ledger (``bench time``'s generator: sealed,
   hash-chained, group-committed writes with their audit records), timed: the append.
2. Tree upkeep, same run: ONE catch-up of every read model from zero over those events, the
   tree's own work timed apart. Appending with every read model kept up takes the append's
   time plus the projecting: the tree makes that throughput slower by its share of the whole
   (target: at most 10%). Its share of the other read models' time is reported beside (and
   held to the same 10%).
3. A served API over that ledger: inclusion and consistency proofs over HTTP, p50/p95, random
   positions and sizes, each verified by the client (target p95 < 10 ms); proof sizes (hashes,
   and the answer's bytes). Same-run reference, interleaved with them: an audited read that
   does almost nothing (the newest checkpoint), the floor every audited answer pays; and the
   proofs alone, in-process (no HTTP, no audit record), p50/p95.
4. A witness's rounds (fetch the newest checkpoint, check consistency with the one it
   cosigned, cosign, post), each after a new checkpoint, timed.
5. The tree's rebuild rate from the ledger, events/s.
The machine's load average (1 minute) is reported at the start and the end.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from psycopg import Cursor

from benchmarks.api import HttpClient, _free_port, _serve
from benchmarks.common import deployment_env, percentile, scratch_database
from benchmarks.time import Generator
from memwarden.api.cli.witness import Witness, make_key, witness_once
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.projections.merkle.projection import MerkleProjection
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.runner import ProjectionRunner
from memwarden.projections.tracking import Position
from memwarden_client.proofs import VerifierKey, verify_consistency, verify_inclusion

UPKEEP_TARGET = 0.10
P95_TARGET_MS = 10.0


WITNESS_ROUNDS = 5


class ProofsBench(msgspec.Struct, kw_only=True):
    events: int
    generate_events_per_second: float
    append_seconds: float
    other_projections_seconds: float
    tree_seconds: float
    append_with_read_models_events_per_second: float
    """Appending and keeping every read model up, the tree included: events / (append +
    projecting)."""
    append_without_tree_events_per_second: float
    """The same without the tree's share of the projecting."""
    append_slowdown: float
    """How much slower the tree makes it: tree / (append + projecting)."""
    tree_upkeep_share: float
    """The tree's time against every other read model's, same catch-up."""
    tree_against_append: float
    """The tree's time against the append's alone (the tree is kept off the append's path,
    by the projector; this is what it would cost there)."""
    tree_upkeep_target: float = UPKEEP_TARGET
    tree_rebuild_events_per_second: float
    inclusion_p50_ms: float
    inclusion_p95_ms: float
    consistency_p50_ms: float
    consistency_p95_ms: float
    inclusion_in_process_p50_ms: float
    inclusion_in_process_p95_ms: float
    consistency_in_process_p50_ms: float
    consistency_in_process_p95_ms: float
    """The proofs alone (the tree's one query and the hashing), no HTTP, no audit record."""
    audited_read_p50_ms: float
    audited_read_p95_ms: float
    """Same-run reference: GET /v1/compliance/checkpoints?limit=1, interleaved with the proofs."""
    proof_p95_target_ms: float = P95_TARGET_MS
    inclusion_hashes_max: int
    inclusion_bytes_mean: float
    inclusion_answer_bytes_mean: float
    """The inclusion answer's JSON (the audit path, root, leaf hash and the leaf's record)."""
    consistency_hashes_max: int
    witness_round_ms: float
    """The median of the timed rounds."""
    witness_round_max_ms: float
    proofs_verified: int
    load_average_start: float
    load_average_end: float


class TimedMerkle(MerkleProjection):
    """The tree's projection, counting the time spent in its own work."""

    seconds = 0.0

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        began = time.perf_counter()
        super().apply(curs, schema, events)
        TimedMerkle.seconds += time.perf_counter() - began


def _project_all(runtime: Runtime) -> tuple[float, float]:
    """(seconds for every read model but the tree, seconds of the tree) in ONE catch-up of all
    of them from zero: the tree's share of projecting, same run, same events read."""
    projections = [
        TimedMerkle() if isinstance(p, MerkleProjection) else p for p in runtime.reads.runner.projections
    ]
    runner = ProjectionRunner(runtime.ledger, projections, runtime.core.params.conninfo())
    TimedMerkle.seconds = 0.0
    began = time.perf_counter()
    runner.catch_up()
    total = time.perf_counter() - began
    return total - TimedMerkle.seconds, TimedMerkle.seconds


def _timed(client: HttpClient, path: str) -> tuple[float, dict[str, object], int]:
    """(seconds, the decoded answer, its bytes) of one GET."""
    began = time.perf_counter()
    status, body = client.call("GET", path)
    seconds = time.perf_counter() - began
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:300]!r}")
    answer: dict[str, object] = msgspec.json.decode(body)
    return seconds, answer, len(body)


def _b64s(values: object) -> list[bytes]:
    assert isinstance(values, list)
    return [base64.b64decode(v) for v in values]


def run_proofs_bench(args: argparse.Namespace) -> int:
    total, queries = int(args.events), int(args.queries)
    rng = random.Random(6962)  # noqa: S311 - reproducible positions, not secrets
    witness = Witness("bench.witness/w1", make_key(Path(tempfile.mkdtemp()) / "w1.pem"))
    load_start = os.getloadavg()[0]
    with scratch_database("memwarden_bench_proofs") as (settings, _params):
        with Runtime(settings, follow=False) as runtime:
            generator = Generator(runtime)
            began = time.perf_counter()
            generator.run(total)
            appending = time.perf_counter() - began
            sys.stderr.write("projecting every read model, the tree timed apart...\n")
            others, tree = _project_all(runtime)
            sys.stderr.write("rebuilding the tree alone...\n")
            rebuilt = Rebuilder(runtime.reads.runner).rebuild("merkle")
            operator = Identity("benchproofs", "operator@bench", "owner")
            auditor = runtime.core.governance.issue_key(
                operator, IssueKey(target="benchproofs", actor="audrey", role="auditor")
            ).key
            head = runtime.ledger.head_position()
            sys.stderr.write("proofs in-process...\n")
            in_process = _in_process(runtime, head, queries)
            runtime.ledger.checkpoint(runtime.reads.tree.root)
            log_key = VerifierKey.parse(runtime.ledger.vkey)
        env = deployment_env(settings, MEMWARDEN_WITNESS_KEYS=witness.vkey.encode())
        port = _free_port()
        server = _serve(env, port, 1)
        client = HttpClient(port, auditor)
        try:
            sys.stderr.write("proofs over HTTP...\n")
            figures = _measure(client, head, queries, rng)
            rounds = _witness_rounds(port, auditor, witness, log_key)
        finally:
            client.close()
            server.terminate()
            server.wait(timeout=30)
    events = generator.events
    result = msgspec.convert(
        {
            "events": head,
            "generate_events_per_second": round(events / appending),
            "append_seconds": round(appending, 2),
            "other_projections_seconds": round(others, 2),
            "tree_seconds": round(tree, 2),
            "append_with_read_models_events_per_second": round(events / (appending + others + tree)),
            "append_without_tree_events_per_second": round(events / (appending + others)),
            "append_slowdown": round(tree / (appending + others + tree), 4),
            "tree_upkeep_share": round(tree / others, 4),
            "tree_against_append": round(tree / appending, 4),
            "tree_rebuild_events_per_second": round(rebuilt.events_per_second),
            "witness_round_ms": round(percentile(rounds, 0.5) * 1000, 1),
            "witness_round_max_ms": round(max(rounds) * 1000, 1),
            "load_average_start": round(load_start, 2),
            "load_average_end": round(os.getloadavg()[0], 2),
            **figures,
            **in_process,
        },
        ProofsBench,
    )
    sys.stdout.write((msgspec.json.encode(result).decode() if args.json else _text(result)) + "\n")
    ok = (
        result.append_slowdown <= UPKEEP_TARGET
        and result.tree_upkeep_share <= UPKEEP_TARGET
        and max(result.inclusion_p95_ms, result.consistency_p95_ms) < P95_TARGET_MS
    )
    return 0 if ok else 1


def _in_process(runtime: Runtime, head: int, queries: int) -> dict[str, float]:
    """The proofs' own cost: ``TreeReads`` called directly, random positions and sizes."""
    rng = random.Random(9162)  # noqa: S311 - reproducible positions, not secrets
    runtime.reads.wait_for(head)  # every read model, the tree included, at the head
    runtime.reads.runner.reached_hint = Position(head)  # known here, as a serving process learns it
    tree = runtime.reads.tree
    inclusion: list[float] = []
    consistency: list[float] = []
    for _ in range(queries):
        size = rng.randint(1, head)
        position, first = rng.randint(1, size), rng.randint(1, size)
        began = time.perf_counter()
        tree.inclusion(position, size)
        inclusion.append(time.perf_counter() - began)
        began = time.perf_counter()
        tree.consistency(first, size)
        consistency.append(time.perf_counter() - began)
    return {
        "inclusion_in_process_p50_ms": round(percentile(inclusion, 0.5) * 1000, 2),
        "inclusion_in_process_p95_ms": round(percentile(inclusion, 0.95) * 1000, 2),
        "consistency_in_process_p50_ms": round(percentile(consistency, 0.5) * 1000, 2),
        "consistency_in_process_p95_ms": round(percentile(consistency, 0.95) * 1000, 2),
    }


def _witness_rounds(port: int, auditor: str, witness: Witness, log_key: VerifierKey) -> list[float]:
    """Seconds of each witness round after the first (which has nothing to be consistent
    with): a new checkpoint, then the round, timed."""
    state = Path(tempfile.mkdtemp()) / "w1.state.json"
    rounds: list[float] = []
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {auditor}"}
    ) as http:
        witness_once(http, witness, log_key, state)
        for _ in range(WITNESS_ROUNDS):
            made = http.post("/v1/compliance/ledger/checkpoint")
            if made.status_code != 200:
                raise RuntimeError(f"checkpoint: {made.status_code} {made.text[:300]}")
            began = time.perf_counter()
            said = witness_once(http, witness, log_key, state)
            rounds.append(time.perf_counter() - began)
            if not said.startswith("cosigned"):
                raise RuntimeError(f"the witness did not cosign: {said}")
    return rounds


def _measure(client: HttpClient, head: int, queries: int, rng: random.Random) -> dict[str, float | int]:
    inclusion: list[float] = []
    consistency: list[float] = []
    reference: list[float] = []
    sizes: list[int] = []
    answers: list[int] = []
    widths: list[int] = []
    cwidths: list[int] = []
    verified = 0
    for _ in range(queries):
        size = rng.randint(1, head)
        position = rng.randint(1, size)
        path = f"/v1/compliance/proofs/inclusion?position={position}&size={size}"
        seconds, answer, length = _timed(client, path)
        inclusion.append(seconds)
        answers.append(length)
        proof = _b64s(answer["proof"])
        widths.append(len(proof))
        sizes.append(32 * len(proof))
        verify_inclusion(
            position - 1,
            size,
            base64.b64decode(str(answer["leaf_hash"])),
            proof,
            base64.b64decode(str(answer["root"])),
        )
        first = rng.randint(1, size)
        seconds, answer, _ = _timed(client, f"/v1/compliance/proofs/consistency?from={first}&to={size}")
        consistency.append(seconds)
        proof = _b64s(answer["proof"])
        cwidths.append(len(proof))
        verify_consistency(
            first,
            size,
            base64.b64decode(str(answer["first_root"])),
            base64.b64decode(str(answer["second_root"])),
            proof,
        )
        verified += 2
        seconds, _, _ = _timed(client, "/v1/compliance/checkpoints?limit=1")
        reference.append(seconds)
    return {
        "inclusion_p50_ms": round(percentile(inclusion, 0.5) * 1000, 2),
        "inclusion_p95_ms": round(percentile(inclusion, 0.95) * 1000, 2),
        "consistency_p50_ms": round(percentile(consistency, 0.5) * 1000, 2),
        "consistency_p95_ms": round(percentile(consistency, 0.95) * 1000, 2),
        "audited_read_p50_ms": round(percentile(reference, 0.5) * 1000, 2),
        "audited_read_p95_ms": round(percentile(reference, 0.95) * 1000, 2),
        "inclusion_hashes_max": max(widths),
        "inclusion_bytes_mean": round(sum(sizes) / len(sizes), 1),
        "inclusion_answer_bytes_mean": round(sum(answers) / len(answers), 1),
        "consistency_hashes_max": max(cwidths),
        "proofs_verified": verified,
    }


def _text(r: ProofsBench) -> str:
    return "\n".join(
        [
            f"load average (1 min): {r.load_average_start} at the start, {r.load_average_end} at the end",
            f"ledger: {r.events:,} events, appended in {r.append_seconds:.1f} s ({r.generate_events_per_second:,.0f}/s)",
            f"one catch-up of every read model: {r.other_projections_seconds:.1f} s for all but the tree,"
            f" {r.tree_seconds:.2f} s for the tree",
            f"append with every read model kept up: {r.append_with_read_models_events_per_second:,.0f} events/s,"
            f" {r.append_without_tree_events_per_second:,.0f} without the tree: {r.append_slowdown:.1%} slower"
            f" (target <= {r.tree_upkeep_target:.0%})",
            f"tree upkeep against the other read models: {r.tree_upkeep_share:.1%} (target <= {r.tree_upkeep_target:.0%});"
            f" against the append alone: {r.tree_against_append:.1%}",
            f"tree rebuild: {r.tree_rebuild_events_per_second:,.0f} events/s",
            f"inclusion over HTTP: p50 {r.inclusion_p50_ms} ms, p95 {r.inclusion_p95_ms} ms"
            f" (target p95 < {r.proof_p95_target_ms} ms); at most {r.inclusion_hashes_max} hashes,"
            f" {r.inclusion_bytes_mean:.0f} bytes of hashes on average, {r.inclusion_answer_bytes_mean:.0f} bytes answered",
            f"consistency over HTTP: p50 {r.consistency_p50_ms} ms, p95 {r.consistency_p95_ms} ms;"
            f" at most {r.consistency_hashes_max} hashes",
            f"the proofs alone, in-process (no HTTP, no audit record): inclusion p50 {r.inclusion_in_process_p50_ms} ms,"
            f" p95 {r.inclusion_in_process_p95_ms} ms; consistency p50 {r.consistency_in_process_p50_ms} ms,"
            f" p95 {r.consistency_in_process_p95_ms} ms",
            f"same-run reference, an audited read of the newest checkpoint: p50 {r.audited_read_p50_ms} ms,"
            f" p95 {r.audited_read_p95_ms} ms",
            f"witness round (fetch, check consistency, cosign, post): {r.witness_round_ms} ms median,"
            f" {r.witness_round_max_ms} ms at most, of {WITNESS_ROUNDS}",
            f"{r.proofs_verified} proofs verified by the client",
        ]
    )
