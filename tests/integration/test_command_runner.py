"""The command runner on a real ledger: a stream conflict re-decides on fresh state and
only the attempt that commits leaves its audit record; spent attempts end in
TooMuchContention with the caches invalidated once; refusals and failures are audited.

The assertions are the runner's contract (tests/unit/ledger_contract.py), which the unit
tests run on the in-memory ledger too."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memwarden.bootstrap.core import open_core
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.settings import Settings
from tests.unit.ledger_contract import RunnerContract


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Ledger]:
    with open_core(settings, embedder=None) as opened:
        yield opened.ledger


class TestCommandRunner(RunnerContract):
    pass
