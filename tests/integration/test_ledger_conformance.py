"""The in-memory ledger's contracts (tests/unit/ledger_contract.py) on the PostgreSQL
ledger: the port and the memory service pass the same assertions on both (the command
runner's: tests/integration/test_command_runner.py), so the in-memory ledger the unit
tests run on cannot drift from the real one."""

from __future__ import annotations

import pytest

from memwarden.bootstrap.core import Core
from memwarden.domain.ledger.app import Ledger
from tests.unit.ledger_contract import PortContract, WriteServiceContract


@pytest.fixture
def ledger(core: Core) -> Ledger:
    return core.ledger


class TestPort(PortContract):
    pass


class TestWriteService(WriteServiceContract):
    pass
