"""The witness against the other ways an operator can rewrite the log and re-sign it with the
server's own key — two records swapped, the newest records cut off — each refused as a fork
with both notes as evidence; and a witness whose state file is damaged stops rather than
starting over (it would cosign whatever it is shown next)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwarden.api.cli.witness import Witness, witness_once
from memwarden.projections.rebuild import Rebuilder
from memwarden_client.proofs import ProofError
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


def test_two_records_swapped_and_re_signed_are_a_fork(served: Api, witness: Witness, tmp_path: Path) -> None:
    state = tmp_path / "w2.state.json"
    watched = cosigned_once(served, witness, state)
    auditor, agent = watched.auditor, watched.agent
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
    write_facts(served, agent, 2, start=6)
    make_checkpoint(served, auditor)
    assert_fork_with_evidence(served, witness, watched, state)


def test_the_newest_records_cut_off_and_re_signed_are_a_fork(
    served: Api, witness: Witness, tmp_path: Path
) -> None:
    state = tmp_path / "w2.state.json"
    watched = cosigned_once(served, witness, state)
    auditor, size = watched.auditor, int(watched.first["size"])
    cut = size - 3
    with served.runtime.ledger.datastore.get_connection() as conn:
        conn.execute("DELETE FROM memwarden.ledger_chain WHERE position > %s", (cut,))
        conn.execute("DELETE FROM memwarden.events WHERE notification_id > %s", (cut,))
    Rebuilder(served.runtime.reads.runner).rebuild("merkle")
    assert make_checkpoint(served, auditor)["size"] == cut
    assert_fork_with_evidence(served, witness, watched, state)


def test_a_damaged_state_file_stops_the_witness(served: Api, witness: Witness, tmp_path: Path) -> None:
    state = tmp_path / "w2.state.json"
    watched = cosigned_once(served, witness, state)
    auditor, agent, log_key = watched.auditor, watched.agent, watched.log_key
    state.write_text('{"size": 9, "ro')  # a crash mid-write, as the old code could leave it
    write_facts(served, agent, 1, start=6)
    make_checkpoint(served, auditor)
    with pytest.raises(ProofError, match="unreadable"):
        witness_once(served.client, witness, log_key, state)
    assert not list(tmp_path.glob("*.partial"))
