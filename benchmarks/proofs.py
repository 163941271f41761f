"""`memwarden bench proofs`: the Merkle tree's cost and its proofs' speed on a generated ledger.

1. Generate N events through the real ledger (``bench time``'s generator: sealed,
   hash-chained, group-committed writes with their audit records).
2. Tree upkeep as a share of projecting: catch every other read model up, then build the tree
   alone over the same events (a rebuild into a shadow schema): its time against theirs.
   Target: the tree adds at most 10%.
3. A served API over that ledger: inclusion and consistency proofs over HTTP, p50/p95, random
   positions and sizes, each verified by the client (target p95 < 10 ms); proof sizes.
4. A witness's round (fetch the checkpoint, check consistency, cosign, post), timed.
5. The tree's rebuild rate from the ledger, events/s.
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
from benchmarks.common import percentile, scratch_database
from benchmarks.time import Generator
from memwarden.api.cli.witness import Witness, make_key, witness_once
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.projections.merkle.projection import MerkleProjection
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.runner import ProjectionRunner
from memwarden_client.proofs import VerifierKey, verify_consistency, verify_inclusion

UPKEEP_TARGET = 0.10
P95_TARGET_MS = 10.0


class ProofsBench(msgspec.Struct, kw_only=True):
    events: int
    generate_events_per_second: float
    other_projections_seconds: float
    tree_seconds: float
    tree_upkeep_share: float
    tree_upkeep_target: float = UPKEEP_TARGET
    tree_rebuild_events_per_second: float
    inclusion_p50_ms: float
    inclusion_p95_ms: float
    consistency_p50_ms: float
    consistency_p95_ms: float
    proof_p95_target_ms: float = P95_TARGET_MS
    inclusion_hashes_max: int
    inclusion_bytes_mean: float
    consistency_hashes_max: int
    witness_round_ms: float
    proofs_verified: int


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


def _timed(client: HttpClient, path: str) -> tuple[float, dict[str, object]]:
    began = time.perf_counter()
    status, body = client.call("GET", path)
    seconds = time.perf_counter() - began
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:300]!r}")
    answer: dict[str, object] = msgspec.json.decode(body)
    return seconds, answer


def _b64s(values: object) -> list[bytes]:
    assert isinstance(values, list)
    return [base64.b64decode(v) for v in values]


def run_proofs_bench(args: argparse.Namespace) -> int:
    total, queries = int(args.events), int(args.queries)
    rng = random.Random(6962)  # noqa: S311 - reproducible positions, not secrets
    witness = Witness("bench.witness/w1", make_key(Path(tempfile.mkdtemp()) / "w1.pem"))
    with scratch_database("memwarden_bench_proofs") as (settings, _params):
        with Runtime(settings, follow=False) as runtime:
            generator = Generator(runtime)
            began = time.perf_counter()
            generator.run(total)
            generate_rate = generator.events / (time.perf_counter() - began)
            sys.stderr.write("projecting every read model, the tree timed apart...\n")
            others, tree = _project_all(runtime)
            sys.stderr.write("rebuilding the tree alone...\n")
            rebuilt = Rebuilder(runtime.reads.runner).rebuild("merkle")
            operator = Identity("benchproofs", "operator@bench", "owner")
            auditor = runtime.core.governance.issue_key(
                operator, IssueKey(target="benchproofs", actor="audrey", role="auditor")
            ).key
            head = runtime.ledger.head_position()
            runtime.ledger.checkpoint(runtime.reads.tree.root)
            log_key = VerifierKey.parse(runtime.ledger.vkey)
        env = {
            **os.environ,
            "DATABASE_URL": settings.database_url or "",
            "MEMWARDEN_DATA_DIR": str(settings.data_dir),
            "MEMWARDEN_WITNESS_KEYS": witness.vkey.encode(),
        }
        port = _free_port()
        server = _serve(env, port, 1)
        client = HttpClient(port, auditor)
        try:
            figures = _measure(client, head, queries, rng)
            state = Path(tempfile.mkdtemp()) / "w1.state.json"
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {auditor}"}
            ) as http:
                began = time.perf_counter()
                witness_once(http, witness, log_key, state)
                witness_ms = (time.perf_counter() - began) * 1000
        finally:
            client.close()
            server.terminate()
            server.wait(timeout=30)
    result = msgspec.convert(
        {
            "events": head,
            "generate_events_per_second": round(generate_rate),
            "other_projections_seconds": round(others, 1),
            "tree_seconds": round(tree, 2),
            "tree_upkeep_share": round(tree / others, 3),
            "tree_rebuild_events_per_second": round(rebuilt.events_per_second),
            "witness_round_ms": round(witness_ms, 1),
            **figures,
        },
        ProofsBench,
    )
    sys.stdout.write((msgspec.json.encode(result).decode() if args.json else _text(result)) + "\n")
    ok = (
        result.tree_upkeep_share <= UPKEEP_TARGET
        and max(result.inclusion_p95_ms, result.consistency_p95_ms) < P95_TARGET_MS
    )
    return 0 if ok else 1


def _measure(client: HttpClient, head: int, queries: int, rng: random.Random) -> dict[str, float | int]:
    inclusion: list[float] = []
    consistency: list[float] = []
    sizes: list[int] = []
    widths: list[int] = []
    cwidths: list[int] = []
    verified = 0
    for _ in range(queries):
        size = rng.randint(1, head)
        position = rng.randint(1, size)
        seconds, answer = _timed(client, f"/v1/compliance/proofs/inclusion?position={position}&size={size}")
        inclusion.append(seconds)
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
        seconds, answer = _timed(client, f"/v1/compliance/proofs/consistency?from={first}&to={size}")
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
    return {
        "inclusion_p50_ms": round(percentile(inclusion, 0.5) * 1000, 2),
        "inclusion_p95_ms": round(percentile(inclusion, 0.95) * 1000, 2),
        "consistency_p50_ms": round(percentile(consistency, 0.5) * 1000, 2),
        "consistency_p95_ms": round(percentile(consistency, 0.95) * 1000, 2),
        "inclusion_hashes_max": max(widths),
        "inclusion_bytes_mean": round(sum(sizes) / len(sizes), 1),
        "consistency_hashes_max": max(cwidths),
        "proofs_verified": verified,
    }


def _text(r: ProofsBench) -> str:
    return "\n".join(
        [
            f"ledger: {r.events:,} events, generated at {r.generate_events_per_second:,.0f}/s",
            f"tree upkeep: {r.tree_seconds:.2f} s of one catch-up that spent {r.other_projections_seconds:.1f} s on every other read model"
            f" = {r.tree_upkeep_share:.1%} (target <= {r.tree_upkeep_target:.0%})",
            f"tree rebuild: {r.tree_rebuild_events_per_second:,.0f} events/s",
            f"inclusion over HTTP: p50 {r.inclusion_p50_ms} ms, p95 {r.inclusion_p95_ms} ms"
            f" (target p95 < {r.proof_p95_target_ms} ms); at most {r.inclusion_hashes_max} hashes,"
            f" {r.inclusion_bytes_mean:.0f} bytes on average",
            f"consistency over HTTP: p50 {r.consistency_p50_ms} ms, p95 {r.consistency_p95_ms} ms;"
            f" at most {r.consistency_hashes_max} hashes",
            f"witness round (fetch, check consistency, cosign, post): {r.witness_round_ms} ms",
            f"{r.proofs_verified} proofs verified by the client",
        ]
    )
