"""What the witness tests share: a served API that knows one witness's key, writes and
checkpoints made over it, a witness that has cosigned once, and what a refused fork leaves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.cli.witness import Fork, Witness, make_key, witness_once
from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from memwarden_client.proofs import Checkpoint, VerifierKey
from tests.e2e.api_helpers import Api


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    return Witness("witness.test/w1", make_key(tmp_path / "witness.pem"))


@pytest.fixture
def served(settings: Settings, witness: Witness) -> Iterator[Api]:
    """The API over a runtime that keeps ``witness``'s cosignatures."""
    configured = msgspec.structs.replace(settings, witness_keys=(witness.vkey.encode(),))
    with Runtime(configured) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def write_facts(api: Api, key: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        answer = api.mem(key, "write", {"content": f"Deploy window number {i} is on a Tuesday"})
        assert answer.status_code == 200, answer.text


def make_checkpoint(api: Api, auditor: str) -> dict[str, Any]:
    made = api.call(auditor, "/v1/compliance/ledger/checkpoint")
    assert made.status_code == 200, made.text
    body: dict[str, Any] = made.json()
    return body


class Watched(NamedTuple):
    """A log a witness has cosigned once: its keys, the log's verifier key, that checkpoint."""

    auditor: str
    agent: str
    log_key: VerifierKey
    first: dict[str, Any]


def cosigned_once(served: Api, witness: Witness, state: Path, facts: int = 6) -> Watched:
    """``facts`` writes, a checkpoint, and the witness's first round over it (the auditor's key
    on the client, as the witness uses it)."""
    auditor = served.key("acme", "audrey", "auditor")
    agent = served.key("acme/eng", "bot", "agent")
    served.client.headers["Authorization"] = f"Bearer {auditor}"
    write_facts(served, agent, facts)
    first = make_checkpoint(served, auditor)
    log_key = VerifierKey.parse(served.runtime.ledger.vkey)
    assert witness_once(served.client, witness, log_key, state) == f"cosigned {first['size']}"
    return Watched(auditor, agent, log_key, first)


def assert_fork_with_evidence(served: Api, witness: Witness, watched: Watched, state: Path) -> dict[str, Any]:
    """The witness refuses the newest checkpoint as a fork, keeps both notes, cosigns nothing;
    the evidence it wrote."""
    with pytest.raises(Fork, match="not consistent"):
        witness_once(served.client, witness, watched.log_key, state)
    evidence: dict[str, Any] = json.loads(state.with_suffix(".fork.json").read_text())
    assert Checkpoint.verify(evidence["cosigned"], watched.log_key).size == watched.first["size"]
    Checkpoint.verify(evidence["offered"], watched.log_key)  # the server's own signature, on the fork
    assert json.loads(state.read_text())["size"] == watched.first["size"]  # nothing new was cosigned
    return evidence
