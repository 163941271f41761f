"""memwarden_client against a real ``memwarden serve`` process: every syscall and the
admin, compliance and ops routes, sync and async, cursor iteration, retries honouring
``Retry-After``, and one exception class per error code.

The tests share one served process (``module_server``); each works in a tenant of its own."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import anyio
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from memwarden_client import AsyncClient, Client, Retry
from memwarden_client import errors as e
from memwarden_client import requests as q
from tests.e2e.review_seed import seed_review_queues
from tests.processes import cli_key

# Under pytest -n, on one worker: the module's one served process is started once.
pytestmark = pytest.mark.xdist_group(__name__)

Served = tuple[subprocess.Popen[bytes], str, str]
ONCE = Retry(attempts=1)


@pytest.fixture
def env(module_env: dict[str, str]) -> dict[str, str]:
    """The environment of the module's server, for `memwarden keys create`."""
    return module_env


@pytest.fixture
def served(module_server: tuple[subprocess.Popen[bytes], str], env: dict[str, str], tenant: str) -> Served:
    """The module's server, and an agent key of the test's ``<tenant>/eng``."""
    server, base = module_server
    return server, base, cli_key(env, f"{tenant}/eng", "bot", "agent")


def test_every_syscall_and_route_sync(served: Served, env: dict[str, str], tenant: str) -> None:
    _server, base, agent_key = served
    owner_key = cli_key(env, tenant, "ops", "owner")
    with Client(base, owner_key) as owner, Client(base, agent_key) as agent:
        member_key, auditor_key = _admin_routes(owner, tenant)
        stored_id = _syscalls(base, owner, agent, member_key, tenant)
        _compliance_routes(base, auditor_key, owner, agent, stored_id, tenant)
        _ops_routes(base, owner, member_key)


def _admin_routes(owner: Client, tenant: str) -> tuple[str, str]:
    """Keys and policies; returns a member's and an auditor's key."""
    member_key = owner.create_key(target=f"{tenant}/eng", actor="dana", role="member").key
    auditor = owner.create_key(target=tenant, actor="audrey", role="auditor")
    assert {k.actor for k in owner.keys().items} >= {"bot", "dana", "audrey", "ops"}
    policy = owner.put_namespace_policy(
        namespace=tenant, directives=(q.DirectiveSpec(id="tone", text="Be brief."),)
    )
    assert policy.version >= 1
    assert owner.namespace_policy(namespace=tenant).directives[0].id == "tone"
    return member_key, auditor.key


def _syscalls(base: str, owner: Client, agent: Client, member_key: str, tenant: str) -> UUID:
    """Every agent syscall; returns the id of the first memory written."""
    stored = agent.write(content="The on-call rotation changes every Monday at 09:00")
    assert stored.outcome == "stored"
    assert stored.id is not None
    again = agent.write(content="The on-call rotation changes every Monday at 09:00")
    assert again.outcome == "deduplicated"
    batch = agent.write_batch(
        items=[q.WriteItem(content="Staging lives in eu-west-1"), q.WriteItem(content="")]
    )
    assert [r.outcome for r in batch.results] == ["stored", "rejected"]
    ticket = agent.write_async(content="Release notes go to #releases").ticket
    deadline = time.monotonic() + 30
    while (status := agent.write_status(ticket=ticket)).state in {"pending", "running"}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status.state == "done"
    memory = agent.read(id=stored.id)
    assert memory.content == "The on-call rotation changes every Monday at 09:00"
    assert memory.namespace == f"{tenant}/eng"
    found = agent.search(query="on-call rotation", k=3)
    assert found.results[0].id == stored.id
    capsule = agent.assemble(budget_tokens=300, task_hint="on-call")
    assert capsule.receipt.merkle_root
    assert any("on-call" in b.content for b in capsule.blocks)
    fault = agent.fault(question="When does the on-call rotation change?")
    assert fault.hit is True
    assert agent.history(id=stored.id).versions[0].id == stored.id
    assert agent.pin(id=stored.id).pinned is True
    assert agent.unpin(id=stored.id).pinned is False
    stats = agent.stats()
    assert stats.namespace == f"{tenant}/eng"
    assert stats.current == 3
    directives = agent.policy().directives
    assert [(d.id, d.acknowledged) for d in directives] == [("tone", False)]
    assert agent.policy_ack(directive_id="tone").acknowledged is True
    with Client(base, member_key) as member:
        assert member.verify(id=stored.id, supports=True).trust_tier == "verified"
    share = owner.share(id=stored.id, with_namespace=f"{tenant}/sales")
    assert share.share_id
    return stored.id


def _compliance_routes(
    base: str, auditor_key: str, owner: Client, agent: Client, stored_id: UUID, tenant: str
) -> None:
    with Client(base, auditor_key) as compliance:
        checkpoint = compliance.make_checkpoint()
        check = compliance.verify_ledger(checkpoint=checkpoint)
        assert check.ok is True
        assert check.checked >= checkpoint.position
        second = compliance.make_checkpoint()
        kept = list(compliance.iter_checkpoints(limit=1))  # one per page
        assert kept.index(second) < kept.index(checkpoint)  # newest first
        assert compliance.checkpoints().items == kept
        records = list(compliance.iter_audit(limit=3))
        assert len(records) > 6  # several pages
        assert [r.position for r in records] == sorted({r.position for r in records})
        assert {"write", "search", "assemble"} <= {r.op for r in records}
        writes = list(compliance.iter_audit(op="write", outcome="ok", limit=2))
        assert {r.actor for r in writes} == {"bot"}
        believed = list(
            compliance.iter_as_of(
                as_of=datetime.now(UTC) + timedelta(seconds=1), target=f"{tenant}/eng", limit=1
            )
        )
        assert {m.content for m in believed} >= {"Staging lives in eu-west-1"}

        forgotten = owner.forget(ids=(stored_id,), reason="test erasure")
        assert forgotten.erased == 1
        certificate = compliance.certificate(certificate_id=forgotten.certificate.id)
        assert certificate == forgotten.certificate
        assert compliance.verify_certificate(certificate=certificate).valid is True
        forged = q.VerifyCertificate(certificate=msgspec_replace(certificate, count=7))
        assert compliance.call(forged).valid is False
    assert agent.read(id=stored_id).content is None


def _ops_routes(base: str, owner: Client, member_key: str) -> None:
    """Projections, disputes and key revocation."""
    projections = owner.projections()
    assert projections.projections
    name = projections.projections[0].name
    rebuilt = owner.rebuild_projection(name=name, verify=True)
    assert rebuilt.name == name
    assert owner.disputes().items == []
    with pytest.raises(e.NotFound):
        owner.resolve_dispute(dispute_id=uuid4(), decision="keep_old")
    assert owner.revoke_key(key_id=member_key.split("_")[1]).revoked is True
    with pytest.raises(e.Unauthenticated), Client(base, member_key, retry=ONCE) as revoked:
        revoked.stats()


def msgspec_replace(struct: q.r.Certificate, **changes: object) -> q.r.Certificate:
    import msgspec  # noqa: PLC0415

    return msgspec.structs.replace(struct, **changes)


def test_one_exception_class_per_error_code(served: Served, env: dict[str, str], tenant: str) -> None:
    _server, base, agent_key = served
    owner_key = cli_key(env, tenant, "ops", "owner")
    admin_key = cli_key(env, f"{tenant}/eng", "lead", "admin")
    with Client(base, agent_key, retry=ONCE) as agent, Client(base, owner_key, retry=ONCE) as owner:
        with pytest.raises(e.InvalidRequest) as invalid:
            agent.write(content="nul \x00 byte")
        assert invalid.value.status == 400
        assert "content" in invalid.value.detail
        with pytest.raises(e.ProvenanceNotAllowed):
            agent.write(content="I say so", provenance=q.ProvenanceClaim(source="manual"))
        with pytest.raises(e.Forbidden):
            agent.create_key(target=f"{tenant}/eng", actor="x", role="agent")
        with Client(base, admin_key, retry=ONCE) as admin, pytest.raises(e.OutsideSubtree):
            admin.create_key(target=f"{tenant}/sales", actor="x", role="agent")
        with pytest.raises(e.NotFound) as missing:
            agent.read(id=uuid4())
        assert missing.value.status == 404
        with pytest.raises(e.VersionConflict):
            owner.put_namespace_policy(namespace=f"{tenant}/eng", forbid_secrets=True, expected_version=41)
        with pytest.raises(e.TooLarge):
            agent.write(content="x" * 1_100_000)
        with pytest.raises(e.Unauthenticated), Client(base, "mw_0000_nope", retry=ONCE) as stranger:
            stranger.stats()
        owner.put_namespace_policy(namespace=tenant, suspended=True)
        with pytest.raises(e.TenantSuspended):
            agent.stats()
        owner.put_namespace_policy(namespace=tenant, suspended=False)
        assert agent.stats().namespace == f"{tenant}/eng"
    waits: list[float] = []
    with (
        pytest.raises(e.Unavailable) as down,
        Client(
            "http://127.0.0.1:9", agent_key, retry=Retry(attempts=3, backoff=0.01), sleep=waits.append
        ) as nowhere,
    ):
        nowhere.stats()
    assert down.value.status == 0
    assert waits == [0.01, 0.02]


def test_a_rate_limited_call_is_retried_after_the_wait_it_was_told(
    served: Served, env: dict[str, str], tenant: str
) -> None:
    _server, base, agent_key = served
    owner_key = cli_key(env, tenant, "ops", "owner")
    with Client(base, owner_key) as owner:
        # a token every 3 s: the bucket is still empty when the patient client calls, however
        # slowly the machine gets there (at 60 a minute, a loaded machine took over the second)
        owner.put_namespace_policy(namespace=tenant, rate_limit_per_minute=20)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with Client(base, agent_key, retry=ONCE) as hasty:
        told: e.RateLimited | None = None
        for _ in range(200):
            try:
                hasty.stats()
            except e.RateLimited as error:
                told = error
                break
        assert told is not None, "20 a minute never ran out"
        assert told.status == 429
        assert told.retry_after is not None
        assert told.retry_after >= 1
    with Client(base, agent_key, retry=Retry(attempts=3), sleep=sleep) as patient:
        assert patient.stats().namespace == f"{tenant}/eng"
    assert waits
    assert waits[0] >= 1  # Retry-After, not the 0.25 s backoff


def test_the_async_client(served: Served, env: dict[str, str], tenant: str) -> None:
    _server, base, agent_key = served
    auditor_key = cli_key(env, tenant, "audrey", "auditor")

    async def scenario() -> None:
        async with AsyncClient(base, agent_key) as agent, AsyncClient(base, auditor_key) as auditor:
            written_text = "The VPN gateway is vpn.acme.example"
            written = await agent.write(content=written_text)
            assert written.outcome == "stored"
            found = await agent.search(query="VPN gateway")
            assert found.results[0].id == written.id
            assert written.id is not None
            then = await agent.read(id=written.id, as_of="now")  # time travel: a plain read's shape
            assert then.content == written_text
            assert then.as_of is not None
            assert then.position is not None
            with pytest.raises(e.NotValidThen) as not_then:
                await agent.read(id=written.id, as_of=date(2000, 1, 1))
            assert not_then.value.status == 404
            assert isinstance(not_then.value, e.NotFound)
            with pytest.raises(e.NotFound):
                await agent.read(id=uuid4())
            # every page read is itself audited: bound the walk (until now) or it follows the log
            until = datetime.now(UTC)
            records = [r async for r in auditor.iter_audit(until=until, limit=1)]
            assert {"write", "search", "read"} <= {r.op for r in records}
            assert len(records) == len({r.position for r in records})
            assert all(r.time <= until for r in records)
            writes = [r async for r in auditor.iter_audit(op="write", limit=1)]
            assert [(r.op, r.outcome, r.actor) for r in writes] == [("write", "ok", "bot")]

    anyio.run(scenario)


def test_the_review_queues_findings_decisions_and_proposals(
    module_env: dict[str, str], served: Served
) -> None:
    """A finding resolved, an automatic decision overturned, proposals edited, approved and
    rejected, each through its method, each list iterated."""
    _server, base, _agent_key = served
    with Runtime(Settings.from_env(module_env), follow=False) as runtime:
        seeded = seed_review_queues(runtime)
        other = runtime.consolidation.consolidate(
            "acme/eng", runtime.ledger.head_position(), "client-test"
        ).drafted
    owner_key = cli_key(module_env, "acme", "olga", "owner")
    with Client(base, owner_key) as owner:
        assert [f.id for f in owner.findings().items] == [seeded.finding]
        assert [f.id for f in owner.iter_findings(status="all")] == [seeded.finding]
        resolved = owner.resolve_finding(finding_id=seeded.finding, decision="both_valid", reason="both hold")
        assert (resolved.id, resolved.status, resolved.decision) == (seeded.finding, "resolved", "both_valid")
        assert owner.findings().items == []
        assert [d.id for d in owner.iter_decisions()] == [seeded.decision]
        overturned = owner.overturn_decision(decision_id=seeded.decision, reason="the older one was right")
        assert (overturned.id, overturned.status) == (seeded.decision, "overturned")
        assert [d.status for d in owner.decisions(status="overturned").items] == ["overturned"]
        pending = [p.id for p in owner.iter_proposals()]
        assert seeded.proposal in pending
        edited = owner.edit_proposal(
            proposal_id=seeded.proposal, content="Staging is rebuilt every Sunday night"
        )
        assert edited.content == "Staging is rebuilt every Sunday night"
        assert edited.proposal.status == "pending_review"
        approved = owner.approve_proposal(proposal_id=seeded.proposal)
        assert (approved.proposal.status, approved.proposal.document_id is not None) == ("approved", True)
        for proposal_id in [p for p in pending if p != seeded.proposal] + list(other):
            assert owner.reject_proposal(proposal_id=proposal_id).proposal.status == "rejected"
        with pytest.raises(e.NotFound):
            owner.approve_proposal(proposal_id=uuid4())
