"""memwarden_client against a real ``memwarden serve`` process: every syscall and the
admin, compliance and ops routes, sync and async, cursor iteration, retries honouring
``Retry-After``, and one exception class per error code.

The tests share one served process (``module_server``); each works in a tenant of its own."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import anyio
import pytest

from memwarden_client import AsyncClient, Client, Retry
from memwarden_client import errors as e
from memwarden_client import requests as q
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
    member_key = owner.call(q.CreateKey(target=f"{tenant}/eng", actor="dana", role="member")).key
    auditor = owner.call(q.CreateKey(target=tenant, actor="audrey", role="auditor"))
    assert {k.actor for k in owner.call(q.ListKeys())} >= {"bot", "dana", "audrey", "ops"}
    policy = owner.call(
        q.PutNamespacePolicy(namespace=tenant, directives=(q.DirectiveSpec(id="tone", text="Be brief."),))
    )
    assert policy.version >= 1
    assert owner.call(q.GetNamespacePolicy(namespace=tenant)).directives[0].id == "tone"
    return member_key, auditor.key


def _syscalls(base: str, owner: Client, agent: Client, member_key: str, tenant: str) -> UUID:
    """Every agent syscall; returns the id of the first memory written."""
    stored = agent.call(q.Write(content="The on-call rotation changes every Monday at 09:00"))
    assert stored.outcome == "stored"
    assert stored.id is not None
    again = agent.call(q.Write(content="The on-call rotation changes every Monday at 09:00"))
    assert again.outcome == "deduplicated"
    batch = agent.call(
        q.WriteBatch(items=[q.WriteItem(content="Staging lives in eu-west-1"), q.WriteItem(content="")])
    )
    assert [r.outcome for r in batch.results] == ["stored", "rejected"]
    ticket = agent.call(q.WriteAsync(content="Release notes go to #releases")).ticket
    deadline = time.monotonic() + 30
    while (status := agent.call(q.WriteStatus(ticket=ticket))).state in {"pending", "running"}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status.state == "done"
    memory = agent.call(q.Read(id=stored.id))
    assert memory.content == "The on-call rotation changes every Monday at 09:00"
    assert memory.namespace == f"{tenant}/eng"
    found = agent.call(q.Search(query="on-call rotation", k=3))
    assert found.results[0].id == stored.id
    capsule = agent.call(q.Assemble(budget_tokens=300, task_hint="on-call"))
    assert capsule.receipt.merkle_root
    assert any("on-call" in b.content for b in capsule.blocks)
    fault = agent.call(q.Fault(question="When does the on-call rotation change?"))
    assert fault.hit is True
    assert agent.call(q.GetHistory(id=stored.id)).versions[0].id == stored.id
    assert agent.call(q.Pin(id=stored.id)).pinned is True
    assert agent.call(q.Unpin(id=stored.id)).pinned is False
    stats = agent.call(q.GetStats())
    assert stats.namespace == f"{tenant}/eng"
    assert stats.current == 3
    directives = agent.call(q.GetPolicy()).directives
    assert [(d.id, d.acknowledged) for d in directives] == [("tone", False)]
    assert agent.call(q.AckPolicy(directive_id="tone")).acknowledged is True
    with Client(base, member_key) as member:
        assert member.call(q.Verify(id=stored.id, supports=True)).trust_tier == "verified"
    share = owner.call(q.Share(id=stored.id, with_namespace=f"{tenant}/sales"))
    assert share.share_id
    return stored.id


def _compliance_routes(
    base: str, auditor_key: str, owner: Client, agent: Client, stored_id: UUID, tenant: str
) -> None:
    with Client(base, auditor_key) as compliance:
        checkpoint = compliance.call(q.MakeCheckpoint())
        check = compliance.call(q.VerifyLedger(checkpoint=checkpoint))
        assert check.ok is True
        assert check.checked >= checkpoint.position
        second = compliance.call(q.MakeCheckpoint())
        kept = list(compliance.iterate(q.Checkpoints(limit=1)))  # one per page
        assert kept.index(second) < kept.index(checkpoint)  # newest first
        assert compliance.call(q.Checkpoints()).checkpoints == kept
        records = list(compliance.iterate(q.Audit(limit=3)))
        assert len(records) > 6  # several pages
        assert [r.position for r in records] == sorted({r.position for r in records})
        assert {"write", "search", "assemble"} <= {r.op for r in records}
        writes = list(compliance.iterate(q.Audit(op="write", outcome="ok", limit=2)))
        assert {r.actor for r in writes} == {"bot"}
        believed = list(
            compliance.iterate(
                q.AsOf(as_of=datetime.now(UTC) + timedelta(seconds=1), target=f"{tenant}/eng", limit=1)
            )
        )
        assert {m.content for m in believed} >= {"Staging lives in eu-west-1"}

        forgotten = owner.call(q.Forget(ids=(stored_id,), reason="test erasure"))
        assert forgotten.erased == 1
        certificate = compliance.call(q.GetCertificate(certificate_id=forgotten.certificate.id))
        assert certificate == forgotten.certificate
        assert compliance.call(q.VerifyCertificate(certificate=certificate)).valid is True
        forged = q.VerifyCertificate(certificate=msgspec_replace(certificate, count=7))
        assert compliance.call(forged).valid is False
    assert agent.call(q.Read(id=stored_id)).content is None


def _ops_routes(base: str, owner: Client, member_key: str) -> None:
    """Projections, disputes and key revocation."""
    projections = owner.call(q.ListProjections())
    assert projections.projections
    name = projections.projections[0].name
    rebuilt = owner.call(q.RebuildProjection(name=name, verify=True))
    assert rebuilt.name == name
    assert owner.call(q.ListDisputes()) == []
    with pytest.raises(e.NotFound):
        owner.call(q.ResolveDispute(dispute_id=uuid4(), decision="keep_old"))
    assert owner.call(q.RevokeKey(key_id=member_key.split("_")[1])).revoked is True
    with pytest.raises(e.Unauthenticated), Client(base, member_key, retry=ONCE) as revoked:
        revoked.call(q.GetStats())


def msgspec_replace(struct: q.r.Certificate, **changes: object) -> q.r.Certificate:
    import msgspec  # noqa: PLC0415

    return msgspec.structs.replace(struct, **changes)


def test_one_exception_class_per_error_code(served: Served, env: dict[str, str], tenant: str) -> None:
    _server, base, agent_key = served
    owner_key = cli_key(env, tenant, "ops", "owner")
    admin_key = cli_key(env, f"{tenant}/eng", "lead", "admin")
    with Client(base, agent_key, retry=ONCE) as agent, Client(base, owner_key, retry=ONCE) as owner:
        with pytest.raises(e.InvalidRequest) as invalid:
            agent.call(q.Write(content="nul \x00 byte"))
        assert invalid.value.status == 400
        assert "content" in invalid.value.detail
        with pytest.raises(e.ProvenanceNotAllowed):
            agent.call(q.Write(content="I say so", provenance=q.ProvenanceClaim(source="manual")))
        with pytest.raises(e.Forbidden):
            agent.call(q.CreateKey(target=f"{tenant}/eng", actor="x", role="agent"))
        with Client(base, admin_key, retry=ONCE) as admin, pytest.raises(e.OutsideSubtree):
            admin.call(q.CreateKey(target=f"{tenant}/sales", actor="x", role="agent"))
        with pytest.raises(e.NotFound) as missing:
            agent.call(q.Read(id=uuid4()))
        assert missing.value.status == 404
        with pytest.raises(e.VersionConflict):
            owner.call(
                q.PutNamespacePolicy(namespace=f"{tenant}/eng", forbid_secrets=True, expected_version=41)
            )
        with pytest.raises(e.TooLarge):
            agent.call(q.Write(content="x" * 1_100_000))
        with pytest.raises(e.Unauthenticated), Client(base, "mw_0000_nope", retry=ONCE) as stranger:
            stranger.call(q.GetStats())
        owner.call(q.PutNamespacePolicy(namespace=tenant, suspended=True))
        with pytest.raises(e.TenantSuspended):
            agent.call(q.GetStats())
        owner.call(q.PutNamespacePolicy(namespace=tenant, suspended=False))
        assert agent.call(q.GetStats()).namespace == f"{tenant}/eng"
    waits: list[float] = []
    with (
        pytest.raises(e.Unavailable) as down,
        Client(
            "http://127.0.0.1:9", agent_key, retry=Retry(attempts=3, backoff=0.01), sleep=waits.append
        ) as nowhere,
    ):
        nowhere.call(q.GetStats())
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
        owner.call(q.PutNamespacePolicy(namespace=tenant, rate_limit_per_minute=20))
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with Client(base, agent_key, retry=ONCE) as hasty:
        told: e.RateLimited | None = None
        for _ in range(200):
            try:
                hasty.call(q.GetStats())
            except e.RateLimited as error:
                told = error
                break
        assert told is not None, "20 a minute never ran out"
        assert told.status == 429
        assert told.retry_after is not None
        assert told.retry_after >= 1
    with Client(base, agent_key, retry=Retry(attempts=3), sleep=sleep) as patient:
        assert patient.call(q.GetStats()).namespace == f"{tenant}/eng"
    assert waits
    assert waits[0] >= 1  # Retry-After, not the 0.25 s backoff


def test_the_async_client(served: Served, env: dict[str, str], tenant: str) -> None:
    _server, base, agent_key = served
    auditor_key = cli_key(env, tenant, "audrey", "auditor")

    async def scenario() -> None:
        async with AsyncClient(base, agent_key) as agent, AsyncClient(base, auditor_key) as auditor:
            written = await agent.call(q.Write(content="The VPN gateway is vpn.acme.example"))
            assert written.outcome == "stored"
            found = await agent.call(q.Search(query="VPN gateway"))
            assert found.results[0].id == written.id
            with pytest.raises(e.NotFound):
                await agent.call(q.Read(id=uuid4()))
            # every page read is itself audited: bound the walk (until now) or it follows the log
            until = datetime.now(UTC)
            records = [r async for r in auditor.iterate(q.Audit(until=until, limit=1))]
            assert {"write", "search", "read"} <= {r.op for r in records}
            assert len(records) == len({r.position for r in records})
            assert all(r.time <= until for r in records)
            writes = [r async for r in auditor.iterate(q.Audit(op="write", limit=1))]
            assert [(r.op, r.outcome, r.actor) for r in writes] == [("write", "ok", "bot")]

    anyio.run(scenario)
