"""The command runner and the memory service on the in-memory ledger: fast unit tests that
need no database (the contracts in tests/unit/ledger_contract.py, which
tests/integration/test_ledger_conformance.py runs on the PostgreSQL ledger too); and what
only the in-memory ledger's own chain shows: a stored state changed is found."""

from __future__ import annotations

from uuid import uuid4

import pytest

from memwarden.domain.ledger.in_memory import InMemoryLedger
from tests.unit.ledger_contract import PortContract, RunnerContract, WriteServiceContract, audit


@pytest.fixture
def ledger() -> InMemoryLedger:
    return InMemoryLedger()


class TestPort(PortContract):
    pass


class TestCommandRunner(RunnerContract):
    pass


class TestWriteService(WriteServiceContract):
    pass


def test_a_changed_state_breaks_the_chain_at_its_position(ledger: InMemoryLedger) -> None:
    ledger.append([audit(uuid4()), audit(uuid4()), audit(uuid4())], tenant="acme")
    (second,) = ledger.read(1, 1)
    assert second.row is not None
    ledger.tamper(2, second.row.state.replace(b'"detail":"x"', b'"detail":"y"'))
    report = ledger.verify()
    assert (report.ok, report.first_bad_position, report.problem) == (False, 2, "hash mismatch")
