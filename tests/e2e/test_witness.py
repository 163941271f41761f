"""Checkpoints as signed notes and the witnesses that cosign them: a checkpoint note verifies
with the client alone and its root proves any position; a witness cosigns only what is
consistent with what it cosigned before, its cosignature is kept and listed beside the
checkpoint; a history rewritten and re-signed with the server's own key is refused as a fork,
with both notes kept as evidence."""

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
from memwarden_client.proofs import Checkpoint, Note, VerifierKey, cosignature_time, verify_inclusion
from tests.e2e.api_helpers import Api


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    return Witness("witness.test/w1", make_key(tmp_path / "witness.pem"))


@pytest.fixture
def served(settings: Settings, witness: Witness) -> Iterator[Api]:
    configured = msgspec.structs.replace(settings, witness_keys=(witness.vkey.encode(),))
    with Runtime(configured) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def _write(api: Api, key: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert (
            api.mem(key, "write", {"content": f"Deploy window number {i} is on a Tuesday"}).status_code == 200
        )


def _checkpoint(api: Api, auditor: str) -> dict[str, object]:
    made = api.call(auditor, "/v1/compliance/ledger/checkpoint")
    assert made.status_code == 200, made.text
    body: dict[str, object] = made.json()
    return body


def test_a_checkpoint_is_a_signed_note_whose_root_proves_any_position(served: Api) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    _write(served, served.key("acme/eng", "bot", "agent"), 5)
    made = _checkpoint(served, auditor)
    log_key = VerifierKey.parse(served.runtime.ledger.vkey)
    checkpoint = Checkpoint.verify(str(made["note"]), log_key)
    assert checkpoint.size == made["size"] == made["position"]
    assert checkpoint.extensions[0].startswith(f"memwarden-chain {made['position']} {made['hash']}")
    proof = served.runtime.reads.tree.inclusion(2, checkpoint.size)
    verify_inclusion(1, checkpoint.size, proof.leaf_hash, proof.proof, checkpoint.root)
    other = VerifierKey.parse(
        Witness(
            "memwarden.local/other", make_key(Path(served.runtime.settings.data_dir) / "o.pem")
        ).vkey.encode()
    )
    with pytest.raises(ValueError, match="no signature"):
        Note.parse(str(made["note"])).verified_by(other)


def test_a_witness_cosigns_consistent_checkpoints_and_the_server_lists_them(
    served: Api, witness: Witness, tmp_path: Path
) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    agent = served.key("acme/eng", "bot", "agent")
    log_key = VerifierKey.parse(served.runtime.ledger.vkey)
    state = tmp_path / "witness.state.json"
    served.client.headers["Authorization"] = f"Bearer {auditor}"
    _write(served, agent, 4)
    first = _checkpoint(served, auditor)
    assert witness_once(served.client, witness, log_key, state) == f"cosigned {first['size']}"
    assert witness_once(served.client, witness, log_key, state).startswith("nothing new")
    _write(served, agent, 7, start=4)
    second = _checkpoint(served, auditor)
    assert witness_once(served.client, witness, log_key, state) == f"cosigned {second['size']}"

    listed = served.call(auditor, "/v1/compliance/checkpoints", method="GET").json()
    items = listed.get("items", listed.get("checkpoints"))
    newest = Checkpoint.verify(items[0]["note"], log_key)
    assert cosignature_time(newest, witness.vkey) > 0
    assert json.loads(state.read_text())["size"] == second["size"]


def test_the_server_keeps_only_cosignatures_of_known_witnesses(served: Api, tmp_path: Path) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    _write(served, served.key("acme/eng", "bot", "agent"), 2)
    made = _checkpoint(served, auditor)
    checkpoint = Checkpoint.verify(str(made["note"]), VerifierKey.parse(served.runtime.ledger.vkey))
    stranger = Witness("witness.test/stranger", make_key(tmp_path / "stranger.pem"))
    refused = served.call(
        auditor,
        f"/v1/compliance/checkpoints/{made['size']}/cosignatures",
        {"cosignature": stranger.cosign(checkpoint, 1_700_000_000)},
    )
    assert refused.status_code == 403, refused.text
    garbage = served.call(
        auditor, f"/v1/compliance/checkpoints/{made['size']}/cosignatures", {"cosignature": "\u2014 x AAAA"}
    )
    assert garbage.status_code == 400, garbage.text


def test_a_rewritten_history_re_signed_by_the_server_is_refused_as_a_fork(
    served: Api, witness: Witness, tmp_path: Path
) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    agent = served.key("acme/eng", "bot", "agent")
    log_key = VerifierKey.parse(served.runtime.ledger.vkey)
    state = tmp_path / "witness.state.json"
    served.client.headers["Authorization"] = f"Bearer {auditor}"
    _write(served, agent, 6)
    first = _checkpoint(served, auditor)
    assert witness_once(served.client, witness, log_key, state) == f"cosigned {first['size']}"

    # the operator edits an early record, rebuilds the tree over the edited ledger, and goes on
    with served.runtime.ledger.datastore.get_connection() as conn:
        conn.execute(
            "UPDATE memwarden.events SET state = convert_to(replace(convert_from(state, 'UTF8'), '\"ok\"', '\"miss\"'), 'UTF8')"
            " WHERE notification_id = (SELECT min(notification_id) FROM memwarden.events"
            " WHERE topic = 'AuditRecorded' AND convert_from(state, 'UTF8') LIKE '%\"ok\"%')"
        )
    Rebuilder(served.runtime.reads.runner).rebuild("merkle")
    _write(served, agent, 3, start=6)
    _checkpoint(served, auditor)  # signed with the server's own key: the note itself verifies

    with pytest.raises(Fork, match="not consistent"):
        witness_once(served.client, witness, log_key, state)
    evidence = json.loads(state.with_suffix(".fork.json").read_text())
    assert Checkpoint.verify(evidence["cosigned"], log_key).size == first["size"]
    assert Checkpoint.verify(evidence["offered"], log_key).size > int(str(first["size"]))
