"""Checkpoints as signed notes and the witnesses that cosign them: a checkpoint note verifies
with the client alone and its root proves any position; a witness cosigns only what is
consistent with what it cosigned before, its cosignature is kept and listed beside the
checkpoint; a history rewritten and re-signed with the server's own key is refused as a fork,
with both notes kept as evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memwarden.api.cli.witness import Witness, make_key, witness_once
from memwarden.projections.rebuild import Rebuilder
from memwarden_client.proofs import Checkpoint, Note, VerifierKey, cosignature_time, verify_inclusion
from tests.e2e.api_helpers import Api
from tests.e2e.witnessing import (
    assert_fork_with_evidence,
    cosigned_once,
    make_checkpoint,
    served,
    witness,
    write_facts,
)

__all__ = ["served", "witness"]  # the fixtures this module uses


def test_a_checkpoint_is_a_signed_note_whose_root_proves_any_position(served: Api) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    write_facts(served, served.key("acme/eng", "bot", "agent"), 5)
    made = make_checkpoint(served, auditor)
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
    state = tmp_path / "witness.state.json"
    watched = cosigned_once(served, witness, state, facts=4)
    assert witness_once(served.client, witness, watched.log_key, state).startswith("nothing new")
    write_facts(served, watched.agent, 7, start=4)
    second = make_checkpoint(served, watched.auditor)
    assert witness_once(served.client, witness, watched.log_key, state) == f"cosigned {second['size']}"

    listed = served.call(watched.auditor, "/v1/compliance/checkpoints", method="GET").json()
    items = listed["items"]
    newest = Checkpoint.verify(items[0]["note"], watched.log_key)
    assert cosignature_time(newest, witness.vkey) > 0
    assert json.loads(state.read_text())["size"] == second["size"]


def test_the_server_keeps_only_cosignatures_of_known_witnesses(served: Api, tmp_path: Path) -> None:
    auditor = served.key("acme", "audrey", "auditor")
    write_facts(served, served.key("acme/eng", "bot", "agent"), 2)
    made = make_checkpoint(served, auditor)
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
    state = tmp_path / "witness.state.json"
    watched = cosigned_once(served, witness, state)

    # the operator edits an early record, rebuilds the tree over the edited ledger, and goes on
    with served.runtime.ledger.datastore.get_connection() as conn:
        conn.execute(
            "UPDATE memwarden.events SET state = convert_to(replace(convert_from(state, 'UTF8'), '\"ok\"', '\"miss\"'), 'UTF8')"
            " WHERE notification_id = (SELECT min(notification_id) FROM memwarden.events"
            " WHERE topic = 'AuditRecorded' AND convert_from(state, 'UTF8') LIKE '%\"ok\"%')"
        )
    Rebuilder(served.runtime.reads.runner).rebuild("merkle")
    write_facts(served, watched.agent, 3, start=6)
    make_checkpoint(served, watched.auditor)  # signed with the server's own key: the note itself verifies

    evidence = assert_fork_with_evidence(served, witness, watched, state)
    assert Checkpoint.verify(evidence["offered"], watched.log_key).size > int(watched.first["size"])
