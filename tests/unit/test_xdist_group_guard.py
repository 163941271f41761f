"""The guard in tests/conftest.py: under ``--dist loadgroup`` a test whose id lacks its group's
suffix fails at set-up (pytest-xdist's group was dropped), and nothing else is touched."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import pytest_runtest_setup


@dataclass
class FakeItem:
    """What the guard reads of a test: its id, its ``xdist_group`` marks and the run's options."""

    nodeid: str
    groups: list[str] = field(default_factory=list)
    loadgroup: bool = True
    config: Any = None

    def __post_init__(self) -> None:
        self.config = SimpleNamespace(option=SimpleNamespace(loadgroup=self.loadgroup))

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        assert name == "xdist_group"
        return [pytest.mark.xdist_group(group).mark for group in self.groups]


def set_up(item: FakeItem) -> None:
    pytest_runtest_setup(cast(pytest.Item, item))


def test_a_grouped_test_renamed_by_xdist_runs() -> None:
    set_up(FakeItem("tests/e2e/test_x.py::test_y@timed", ["timed"]))


def test_a_grouped_test_whose_rename_was_dropped_fails() -> None:
    with pytest.raises(pytest.fail.Exception, match="ignores this test's xdist_group"):
        set_up(FakeItem("tests/e2e/test_x.py::test_y", ["timed"]))


def test_a_test_in_two_groups_carries_both_names_sorted() -> None:
    set_up(FakeItem("t.py::test_y@a_b", ["b", "a"]))
    with pytest.raises(pytest.fail.Exception):
        set_up(FakeItem("t.py::test_y@b_a", ["b", "a"]))


def test_ungrouped_tests_and_runs_without_loadgroup_are_left_alone() -> None:
    set_up(FakeItem("t.py::test_y"))
    set_up(FakeItem("t.py::test_y", ["timed"], loadgroup=False))
