"""The witness against the other ways an operator can rewrite the log and re-sign it with the
server's own key — two records swapped, the newest records cut off — each refused as a fork
with both notes as evidence; and a witness whose state file is damaged stops rather than
starting over (it would cosign whatever it is shown next)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.cli.witness import Fork, Witness, make_key, witness_once
from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden_client.proofs import Checkpoint, ProofError, VerifierKey
from tests.e2e.api_helpers import Api


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    return Witness("witness.test/w2", make_key(tmp_path / "witness.pem"))


@pytest.fixture
def served(settings: Settings, witness: Witness) -> Iterator[Api]:
    configured = msgspec.structs.replace(settings, witness_keys=(witness.vkey.encode(),))
    with Runtime(configured) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def _write(api: Api, key: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        answer = api.mem(key, "write", {"content": f"Release {i} ships on a Thursday"})
        assert answer.status_code == 200, answer.text


def _checkpoint(api: Api, auditor: str) -> int:
    made = api.call(auditor, "/v1/compliance/ledger/checkpoint")
    assert made.status_code == 200, made.text
    return int(made.json()["size"])


def _cosigned_once(served: Api, witness: Witness, state: Path) -> tuple[str, str, VerifierKey, int]:
    auditor = served.key("acme", "audrey", "auditor")
    agent = served.key("acme/eng", "bot", "agent")
    served.client.headers["Authorization"] = f"Bearer {auditor}"
    _write(served, agent, 6)
    size = _checkpoint(served, auditor)
    log_key = VerifierKey.parse(served.runtime.ledger.vkey)
    assert witness_once(served.client, witness, log_key, state) == f"cosigned {size}"
    return auditor, agent, log_key, size


def _assert_fork_with_evidence(
    served: Api, witness: Witness, log_key: VerifierKey, state: Path, size: int
) -> None:
    with pytest.raises(Fork, match="not consistent"):
        witness_once(served.client, witness, log_key, state)
    evidence = json.loads(state.with_suffix(".fork.json").read_text())
    assert Checkpoint.verify(evidence["cosigned"], log_key).size == size
    Checkpoint.verify(evidence["offered"], log_key)  # the server's own signature, on the fork
    assert json.loads(state.read_text())["size"] == size  # nothing new was cosigned


def test_two_records_swapped_and_re_signed_are_a_fork(served: Api, witness: Witness, tmp_path: Path) -> None:
    state = tmp_path / "w2.state.json"
    auditor, agent, log_key, size = _cosigned_once(served, witness, state)
    with served.runtime.ledger.datastore.get_connection() as conn:
        first, second = (
            row["notification_id"]
            for row in conn.execute(
                "SELECT notification_id FROM memwarden.events WHERE topic = 'AuditRecorded'"
                " ORDER BY notification_id LIMIT 2"
            ).fetchall()
        )
        conn.execute(
            "UPDATE memwarden.events e SET state = o.state FROM memwarden.events o"
            " WHERE (e.notification_id, o.notification_id) IN ((%s, %s), (%s, %s))",
            (first, second, second, first),
        )
    Rebuilder(served.runtime.reads.runner).rebuild("merkle")
    _write(served, agent, 2, start=6)
    _checkpoint(served, auditor)
    _assert_fork_with_evidence(served, witness, log_key, state, size)


def test_the_newest_records_cut_off_and_re_signed_are_a_fork(
    served: Api, witness: Witness, tmp_path: Path
) -> None:
    state = tmp_path / "w2.state.json"
    auditor, _, log_key, size = _cosigned_once(served, witness, state)
    cut = size - 3
    with served.runtime.ledger.datastore.get_connection() as conn:
        conn.execute("DELETE FROM memwarden.ledger_chain WHERE position > %s", (cut,))
        conn.execute("DELETE FROM memwarden.events WHERE notification_id > %s", (cut,))
    Rebuilder(served.runtime.reads.runner).rebuild("merkle")
    assert _checkpoint(served, auditor) == cut
    _assert_fork_with_evidence(served, witness, log_key, state, size)


def test_a_damaged_state_file_stops_the_witness(served: Api, witness: Witness, tmp_path: Path) -> None:
    state = tmp_path / "w2.state.json"
    auditor, agent, log_key, _ = _cosigned_once(served, witness, state)
    state.write_text('{"size": 9, "ro')  # a crash mid-write, as the old code could leave it
    _write(served, agent, 1, start=6)
    _checkpoint(served, auditor)
    with pytest.raises(ProofError, match="unreadable"):
        witness_once(served.client, witness, log_key, state)
    assert not list(tmp_path.glob("*.partial"))
