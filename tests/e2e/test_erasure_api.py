"""Erasure end to end: the forget syscall, the certificate routes, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Settings:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    return settings


def test_forget_over_http_then_read_and_certificates(api: Api) -> None:
    admin = api.key("acme/eng", "alice", "admin")
    agent = api.key("acme/eng", "bot", "agent")
    auditor = api.key("acme/eng", "audrey", "auditor")
    outsider = api.key("acme/sales", "sam", "auditor")
    written = api.mem(
        agent,
        "write",
        {
            "content": "Dana's phone is on the third floor desk",
            "subject": "Dana",
            "attribute": "desk",
            "value": "third floor",
        },
    ).json()
    kept = api.mem(agent, "write", {"content": "The release train leaves every Tuesday"}).json()

    refused = api.mem(agent, "forget", {"subject": "dana", "reason": "request"})
    assert refused.status_code == 403
    assert (
        api.mem(admin, "forget", {"subject": "dana", "ids": [written["id"]], "reason": "x"}).status_code
        == 400
    )
    assert api.mem(admin, "forget", {"subtree": "..", "reason": "x"}).status_code == 403
    assert (
        api.mem(admin, "forget", {"subject": "dana", "reason": "x", "namespace": "acme"}).status_code == 400
    )

    response = api.mem(admin, "forget", {"subject": "stakeholder:dana", "reason": "GDPR request 7"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["erased"] == 1
    certificate = body["certificate"]
    assert certificate["erased_ids"] == [written["id"]]
    assert certificate["count"] == 1
    assert certificate["reason"] == "GDPR request 7"

    read = api.mem(agent, "read", {"id": written["id"]}).json()
    assert read["status"] == "erased"
    assert read["content"] is None
    assert read["subject"] is None
    assert api.mem(agent, "read", {"id": kept["id"]}).json()["content"].startswith("The release train")

    got = api.call(auditor, f"/v1/compliance/certificates/{certificate['id']}", method="GET")
    assert got.status_code == 200
    assert got.json() == certificate
    assert (
        api.call(outsider, f"/v1/compliance/certificates/{certificate['id']}", method="GET").status_code
        == 404
    )
    assert (
        api.call(agent, f"/v1/compliance/certificates/{certificate['id']}", method="GET").status_code == 403
    )

    verified = api.call(auditor, "/v1/compliance/certificates/verify", certificate)
    assert verified.status_code == 200
    assert verified.json()["valid"] is True
    forged = api.call(
        auditor, "/v1/compliance/certificates/verify", {**certificate, "count": 0, "erased_ids": []}
    )
    assert forged.json()["valid"] is False
    altered = api.call(auditor, "/v1/compliance/certificates/verify", {**certificate, "reason": "other"})
    assert altered.json()["valid"] is False

    ops = [
        (r.op, r.outcome) for r in api.audit_records() if isinstance(r, AuditRecorded) and "forget" in r.op
    ]
    assert ("forget", "ok") in ops
    assert ("forget", "denied") in ops
    assert api.runtime.ledger.verify().ok


def test_forget_a_subtree_over_http_erases_its_knowledge_documents(api: Api) -> None:
    from memwarden.domain.model.identity import Identity  # noqa: PLC0415
    from memwarden.domain.services.knowledge import KnowledgeService  # noqa: PLC0415
    from tests.unit.builders import EXPENSE_POLICY  # noqa: PLC0415

    core = api.runtime.core
    knowledge = KnowledgeService(core.ledger, core.embedder, core.governance.write_policy)
    owner = Identity("acme", "olga", "owner")
    inside = knowledge.publish(owner, EXPENSE_POLICY, "expenses.md", "acme/eng/finance")
    beside = knowledge.publish(owner, EXPENSE_POLICY, "expenses.md", "acme/engineering")
    assert inside.document_id is not None
    admin = api.key("acme/eng", "alice", "admin")
    auditor = api.key("acme/eng", "audrey", "auditor")
    api.settle()

    response = api.mem(admin, "forget", {"subtree": ".", "reason": "team dissolved"})
    assert response.status_code == 200, response.text
    body = response.json()
    certificate = body["certificate"]
    assert certificate["erased_documents"] == [str(inside.document_id)]
    assert certificate["erased_ids"] == []
    assert body["erased"] == certificate["count"] == 1
    assert knowledge.current(inside.document_id).erased  # type: ignore[union-attr]
    assert beside.document_id is not None
    assert not knowledge.current(beside.document_id).erased  # type: ignore[union-attr]

    verified = api.call(auditor, "/v1/compliance/certificates/verify", certificate)
    assert verified.json()["valid"] is True
    hidden = {**certificate, "erased_documents": [], "count": 0}
    assert api.call(auditor, "/v1/compliance/certificates/verify", hidden).json()["valid"] is False

    # an id that names no memory nor document (here: an audit record) is a clear 404
    record = next(r for r in api.audit_records() if r.op == "forget")
    missing = api.mem(admin, "forget", {"ids": [str(record.record_id)], "reason": "x"})
    assert missing.status_code == 404, missing.text
    assert api.runtime.ledger.verify().ok


def test_cli_certificates_verify_and_rotate_kek(
    cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memwarden.domain.model.commands import WriteMemory  # noqa: PLC0415
    from memwarden.domain.model.erasure import Forget  # noqa: PLC0415
    from memwarden.domain.model.identity import Identity  # noqa: PLC0415

    admin = Identity("acme/eng", "alice", "admin")
    with Runtime(cli_env, follow=False) as runtime:
        written = runtime.memory.write(admin, WriteMemory(content="Kim's visitor badge expires in March"))
        kept = runtime.memory.write(admin, WriteMemory(content="The wiki moved to the new server rack"))
        assert written.id is not None
        assert kept.id is not None
        result = runtime.core.erasure.forget(admin, Forget(ids=(written.id,), reason="ticket 9"))
    good = tmp_path / "certificate.json"
    good.write_text(json.dumps({"erased": 1, "certificate": json.loads(_encode(result.certificate))}))
    assert main(["certificates", "verify", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    data = json.loads(_encode(result.certificate))
    data["requester"] = "mallory"
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(data))
    assert main(["certificates", "verify", str(bad), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["valid"] is False

    old_key = (cli_env.keys_dir / "kek.key").read_bytes()
    assert main(["keys", "rotate-kek", "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["data_keys"] == 1  # the erased memory has no key left to rewrap
    assert (cli_env.keys_dir / "kek.key").read_bytes() != old_key
    assert main(["certificates", "verify", str(good)]) == 0  # signatures do not depend on the KEK
    with Runtime(cli_env, follow=False) as runtime:
        state = runtime.memory.memory(kept.id)
        assert state is not None
        assert state.content == "The wiki moved to the new server rack"


def _encode(value: object) -> str:
    import msgspec  # noqa: PLC0415

    return msgspec.json.encode(value).decode()
