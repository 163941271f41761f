"""`memwarden demo`: a guided tour of the write path on the embedded default."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.chain import ChainReport
from memwarden.domain.ledger.recorder import verify_tables
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import Settings, default_data_dir
from memwarden.projections.search.service import SearchQuery

Say = Callable[[str], None]


@contextmanager
def demo_settings(configured: Settings, say: Say = print) -> Iterator[Settings]:
    """The settings the tour runs on.

    With a database (``DATABASE_URL``) or a data directory other than the default one
    (``MEMWARDEN_DATA_DIR``), the configured deployment, as for every command. Otherwise a
    fresh data directory in the system temp dir, removed when the tour ends (its embedded
    server stopped first): a guided tour starts from an empty ledger and leaves no demo
    tenant, keys or server behind in the default data directory.
    """
    if configured.database_url is not None or configured.data_dir != default_data_dir().resolve():
        yield configured
        return
    with tempfile.TemporaryDirectory(prefix="memwarden-demo-") as scratch:
        say("no MEMWARDEN_DATA_DIR or DATABASE_URL: the tour runs in a fresh temporary data directory")
        say("(removed when it ends; set MEMWARDEN_DATA_DIR to keep its data)")
        yield msgspec.structs.replace(configured, data_dir=Path(scratch).resolve())


def _step(say: Say, number: int, title: str) -> None:
    say(f"\n{number}. {title}")


def _result(say: Say, result: WriteResult) -> None:
    say(f"   -> outcome={result.outcome} id={result.id} position={result.position}")
    if result.supersedes:
        say(f"      supersedes {', '.join(str(i) for i in result.supersedes)}")
    if result.dispute_id:
        say(f"      dispute {result.dispute_id} opened for a reviewer")
    for finding in result.findings:
        say(f"      finding {finding} opened for a reviewer")
    for decision in result.decisions:
        say(f"      decision {decision}: settled automatically, a reviewer may overturn it")


def _report(say: Say, report: ChainReport) -> None:
    if report.ok:
        say(
            f"   -> chain holds: {report.checked} events, head {report.head_position} {report.head_hash[:16]}…"
        )
    else:
        say(f"   -> chain BROKEN at position {report.first_bad_position}: {report.problem}")


def run_demo(runtime: Runtime, say: Say = print) -> dict[str, Any]:
    """Run the tour; return the facts a test can check."""
    team = f"demo-{uuid.uuid4().hex[:6]}/eng"
    agent = Identity(team, "agent-ava", "agent")
    agent2 = Identity(team, "agent-bo", "agent")
    hr = Identity(team, "hr-hana", "member")
    reviewer = Identity(team.split("/", maxsplit=1)[0], "lead-lee", "admin")
    memory, reads = runtime.memory, runtime.reads
    say(f"memwarden demo — data in {runtime.settings.data_dir}, namespace {team}")

    _step(say, 1, "An agent writes a fact from a conversation (slot dana/address).")
    first = memory.write(
        agent,
        WriteMemory(
            content="Dana's home address is 1 Main Street",
            subject="dana",
            attribute="address",
            value="1 Main Street",
            event_time=datetime(2026, 1, 10, tzinfo=UTC),
        ),
    )
    _result(say, first)

    _step(say, 2, "Another agent writes the same fact, differently cased: no second memory.")
    dup = memory.write(agent2, WriteMemory(content="dana's home address is 1 main street."))
    _result(say, dup)

    _step(say, 3, "HR writes a newer address with manual (higher-trust) provenance.")
    newer = memory.write(
        hr,
        WriteMemory(
            content="Dana's home address is 9 Elm Road",
            subject="dana",
            attribute="address",
            value="9 Elm Road",
            provenance=ProvenanceClaim(source="manual", ref="hr-ticket-4711"),
            event_time=datetime(2026, 6, 1, tzinfo=UTC),
        ),
    )
    _result(say, newer)
    old = reads.read(agent, first.id or uuid.UUID(int=0), after=newer.position)
    if old is not None:
        say(f"   the old fact still holds until {old.valid_to:%Y-%m-%d} (succession: not retired)")

    _step(say, 4, "An agent contradicts HR from a conversation (lower trust): quarantined.")
    contra = memory.write(
        agent,
        WriteMemory(
            content="Dana's home address is 5 Oak Avenue",
            subject="dana",
            attribute="address",
            value="5 Oak Avenue",
        ),
    )
    _result(say, contra)
    hidden = reads.read(agent, contra.id or uuid.UUID(int=0), after=contra.position)
    say(f"   reading it as the agent: {'not found (quarantined)' if hidden is None else 'VISIBLE'}")
    open_disputes = reads.disputes(reviewer, after=contra.position)
    say(f"   open disputes for the reviewer: {open_disputes.count}")

    _step(say, 5, "A reviewer resolves the dispute: keep the HR address.")
    assert contra.dispute_id is not None
    resolved = memory.resolve_dispute(
        reviewer,
        ResolveDispute(
            dispute_id=contra.dispute_id, decision="keep_old", reason="HR record is authoritative"
        ),
    )
    say(
        f"   -> dispute {resolved.dispute.status}: {resolved.dispute.decision} by {resolved.dispute.reviewer}"
    )

    facts = _prove(runtime, say, (agent, agent2, hr), newer, resolved.position)
    return {
        "outcomes": [first.outcome, dup.outcome, newer.outcome, contra.outcome],
        **facts,
        "finding": _autopilot(runtime, say, (agent, agent2), reviewer),
        "proposal": _consolidate(runtime, say, (agent, agent2)),
    }


def _autopilot(
    runtime: Runtime, say: Say, agents: tuple[Identity, Identity], reviewer: Identity
) -> str | None:
    """Step 11: an unslotted contradiction with a fact of the organization, which a team's
    write never settles: found after the commit by the conflict autopilot (run here
    in-process; `memwarden worker` runs it on Redis), a finding for a reviewer."""
    _step(say, 11, "A team agent contradicts the organization's fact without a slot: the autopilot finds it.")
    org = Identity(reviewer.namespace, "agent-orla", "agent")
    runtime.memory.write(org, WriteMemory(content="The all-hands standup is at 9:30"))
    second = runtime.memory.write(agents[1], WriteMemory(content="The all-hands standup is at 10:00"))
    assert second.id is not None
    result = runtime.autopilot.judge_memory(second.id, second.position, "demo")
    found = runtime.reads.findings(reviewer, after=result.position).items
    for f in found:
        say(f"   -> finding for a reviewer (another namespace's fact): rule {f.rule}, {f.explanation}")
    return found[0].rule if found else None


def _consolidate(runtime: Runtime, say: Say, agents: tuple[Identity, Identity]) -> str | None:
    """Step 12: two agents say one thing twice; consolidation drafts a proposal for a
    reviewer (nothing is published unattended)."""
    _step(say, 12, "Two agents write the same fact in other words: consolidation proposes one statement.")
    runtime.memory.write(
        agents[0],
        WriteMemory(content="The staging cluster is rebuilt from the golden image every Sunday night"),
    )
    second = runtime.memory.write(
        agents[1],
        WriteMemory(content="Every Sunday night the staging cluster is rebuilt from the golden image"),
    )
    result = runtime.consolidation.consolidate(agents[0].namespace, second.position, "demo")
    proposals = [p for p in map(runtime.consolidation.proposal, result.drafted) if p is not None]
    for p in proposals:
        say(
            f"   -> proposal ({p.kind}, {len(p.sources)} sources, {p.status}):"
            f" {runtime.consolidation.content(p)!r}"
        )
    return proposals[0].kind if proposals else None


def _prove(
    runtime: Runtime, say: Say, cast: tuple[Identity, Identity, Identity], newer: WriteResult, after: int
) -> dict[str, Any]:
    """Steps 6-10: history, verification, retrieval, and proving the ledger (and catching a tamper)."""
    memory, reads = runtime.memory, runtime.reads
    agent, agent2, hr = cast
    _step(say, 6, "The fact's history, both directions, both time axes.")
    steps = reads.history(agent, newer.id or uuid.UUID(int=0), after=after) or []
    for s in steps:
        valid = (
            f"valid {s.valid_from:%Y-%m-%d}..{s.valid_to:%Y-%m-%d}"
            if s.valid_to
            else f"valid {s.valid_from:%Y-%m-%d}.."
        )
        step = f" -> {s.kind} ({s.reason})" if s.kind else ""
        say(f"   {s.content!r:45} {s.status:8} {valid}{step}")

    _step(say, 7, "A second agent verifies HR's fact; the writer cannot verify its own.")
    verified = memory.verify(agent2, VerifyMemory(memory_id=newer.id or uuid.UUID(int=0), supports=True))
    say(f"   -> trust tier now {verified.trust_tier}")
    try:
        memory.verify(hr, VerifyMemory(memory_id=newer.id or uuid.UUID(int=0), supports=True))
        self_verify = "ACCEPTED"
    except DomainError as error:
        self_verify = f"refused ({error.code}: {error.detail})"
    say(f"   HR verifying its own write: {self_verify}")

    retrieval = _retrieve(runtime, say, agent2, verified.position)

    _step(say, 9, "ledger verify: recompute the whole hash chain.")
    report = runtime.ledger.verify()
    _report(say, report)

    _step(say, 10, "A tampered copy of the ledger: one byte of one event changed.")
    tampered_position = newer.position
    tampered = _verify_tampered_copy(runtime, tampered_position)
    say(f"   (changed the event at position {tampered_position})")
    _report(say, tampered)
    return {
        "verified": verified.trust_tier,
        "self_verify": self_verify,
        "report": report,
        "tampered": tampered,
        "tampered_position": tampered_position,
        "history": len(steps),
        **retrieval,
    }


def _retrieve(runtime: Runtime, say: Say, agent: Identity, after: int) -> dict[str, Any]:
    """Step 8: hybrid search, a working set with a signed receipt, and a context fault."""
    _step(say, 8, "Another agent looks it up: search, a signed working set, a fault.")
    answer = runtime.reads.search.search(agent, SearchQuery(query="where does Dana live?", k=3), after=after)
    for r in answer.results:
        say(f"   search [{answer.driver}] {r.score:.2f} {r.content!r}")
    capsule = runtime.working_sets.assemble(agent, 60, "Dana's address", after=after)
    problem = runtime.working_sets.verify_capsule(capsule)
    say(
        f"   capsule: {len(capsule.blocks)} blocks, Merkle root {capsule.receipt.merkle_root[:16]}…, "
        f"read at position {capsule.receipt.position}, receipt {'verifies' if problem is None else problem}"
    )
    fault = runtime.working_sets.fault(agent, "What is the parking policy for visitors?")
    say(f"   fault 'parking policy for visitors': {fault.source or 'miss'} (score {fault.score:.2f})")
    return {
        "search": [r.content for r in answer.results],
        "capsule_ok": problem is None,
        "fault": fault.source,
    }


def _verify_tampered_copy(runtime: Runtime, position: int) -> ChainReport:
    name = f"demo_tampered_{uuid.uuid4().hex[:8]}"
    schema = Identifier(name)
    source = Identifier(runtime.ledger.schema)
    with runtime.ledger.datastore.get_connection() as conn, conn.transaction(force_rollback=True):
        conn.execute(SQL("CREATE SCHEMA {}").format(schema))
        conn.execute(SQL("CREATE TABLE {t}.events AS SELECT * FROM {s}.events").format(t=schema, s=source))
        conn.execute(
            SQL("CREATE TABLE {t}.ledger_chain AS SELECT * FROM {s}.ledger_chain").format(t=schema, s=source)
        )
        conn.execute(
            SQL(
                "UPDATE {t}.events SET state = set_byte(state, 2, get_byte(state, 2) # 1)"
                " WHERE notification_id = %s"
            ).format(t=schema),
            (position,),
        )
        return verify_tables(conn.cursor(), name)
