"""A deletion certificate proven offline: ``memwarden proof certificate`` writes the inclusion
of its ErasureCertified event with the event's record, and ``proof verify`` checks, with the
client alone, that the signed tree holds that record and that it is exactly the certificate in
hand. An edited certificate, an edited record and a record of another position each fail; the
erased memory's own leaf still proves and reads as its (sealed) write."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from memwarden.api.cli.main import main
from memwarden.domain.settings import Settings
from memwarden_client.proofs import ProofError, verify_inclusion
from memwarden_client.records import check_certificate, record_of
from tests.e2e.api_helpers import Api


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Settings:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    return settings


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _forget_one(api: Api) -> tuple[dict[str, object], str]:
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme", "boss", "admin")
    ids = [
        api.mem(agent, "write", {"content": f"Fact {i} about the release train"}).json()["id"]
        for i in range(3)
    ]
    answer = api.call(admin, "/v1/mem/forget", {"ids": [ids[0]], "reason": "subject asked"})
    assert answer.status_code == 200, answer.text
    api.settle()
    return answer.json()["certificate"], ids[0]


def _verify(capsys: pytest.CaptureFixture[str], path: Path, log_key: str) -> tuple[int, str, str]:
    return _run(capsys, "proof", "verify", str(path), "--log-key", log_key)


def test_a_certificate_proves_offline_and_any_edit_fails(
    api: Api, cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certificate, _ = _forget_one(api)
    (tmp_path / "certificate.json").write_text(json.dumps({"certificate": certificate}))
    code, log_key, _ = _run(capsys, "proof", "vkey")
    assert code == 0
    log_key = log_key.strip()

    code, out, err = _run(capsys, "proof", "certificate", str(tmp_path / "certificate.json"))
    assert code == 0, err
    proof = json.loads(out)
    assert proof["certificate"] == certificate
    good = tmp_path / "proof.json"
    good.write_text(json.dumps(proof))
    code, out, err = _verify(capsys, good, log_key)
    assert code == 0, err
    assert "ErasureCertified event" in out
    assert f"deletion certificate {certificate['id']}" in out

    edited = {**proof, "certificate": {**certificate, "reason": "routine cleanup"}}
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    code, _, err = _verify(capsys, tmp_path / "edited.json", log_key)
    assert code == 1
    assert "differs from the one the ledger recorded" in err

    record = bytearray(base64.b64decode(proof["record"]))
    record[-5] ^= 0x01
    forged = {**proof, "record": base64.b64encode(bytes(record)).decode()}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, _, err = _verify(capsys, tmp_path / "forged.json", log_key)
    assert code == 1
    assert "not the proven leaf" in err

    code, out, err = _run(capsys, "proof", "inclusion", "1")
    assert code == 0, err
    other = json.loads(out)
    swapped = {**proof, "record": other["record"]}  # a real record, of another position
    (tmp_path / "swapped.json").write_text(json.dumps(swapped))
    code, _, err = _verify(capsys, tmp_path / "swapped.json", log_key)
    assert code == 1
    assert "not the proven leaf" in err
    moved = {**other, "certificate": certificate}  # a valid proof of position 1, not of the certificate
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    code, _, err = _verify(capsys, tmp_path / "moved.json", log_key)
    assert code == 1
    assert "not a certified erasure" in err


def test_the_erased_memorys_write_still_proves_and_reads_as_its_sealed_event(
    api: Api, cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, erased_id = _forget_one(api)
    with api.runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            "SELECT notification_id FROM memwarden.events WHERE originator_id = %s ORDER BY originator_version LIMIT 1",
            (erased_id,),
        ).fetchone()
    code, out, err = _run(capsys, "proof", "inclusion", str(row["notification_id"]))
    assert code == 0, err
    path = tmp_path / "write.json"
    path.write_text(out)
    code, out, err = _run(capsys, "proof", "verify", str(path))
    assert code == 0, err
    assert f"stream {erased_id}, version 1" in out
    assert "Fact 0" not in base64.b64decode(json.loads(path.read_text())["record"]).decode(errors="replace")


def test_an_unknown_certificate_has_no_proof(
    api: Api, cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certificate, _ = _forget_one(api)
    other = {**certificate, "id": "00000000-0000-4000-8000-000000000000"}
    (tmp_path / "other.json").write_text(json.dumps(other))
    code, _, err = _run(capsys, "proof", "certificate", str(tmp_path / "other.json"))
    assert code == 1
    assert "holds no certificate" in err


def test_the_http_inclusion_carries_the_record_that_binds_the_certificate(api: Api) -> None:
    certificate, _ = _forget_one(api)
    auditor = api.key("acme", "audrey", "auditor")
    with api.runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            "SELECT notification_id FROM memwarden.events WHERE originator_id = %s AND topic = 'ErasureCertified'",
            (certificate["id"],),
        ).fetchone()
    position = int(row["notification_id"])
    size = api.runtime.ledger.head_position()
    answer = api.call(
        auditor,
        "/v1/compliance/proofs/inclusion",
        method="GET",
        params={"position": position, "size": size},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    verify_inclusion(
        body["leaf_index"],
        size,
        base64.b64decode(body["leaf_hash"]),
        [base64.b64decode(p) for p in body["proof"]],
        base64.b64decode(body["root"]),
    )
    record = record_of(body)
    assert (record.position, record.type) == (position, "ErasureCertified")
    check_certificate(record, certificate)
    with pytest.raises(ProofError):
        check_certificate(record, {**certificate, "requester": "mallory"})
