"""One progress bar: plain lines at every tenth off a terminal (no carriage returns in a
log), one redrawn line on a terminal, and one bar per stage for rebuild-style callbacks."""

from __future__ import annotations

import io
import time

from hypothesis import given
from hypothesis import strategies as st

from memwarden.api.cli.progress import ProgressBar, staged_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_plain_line_at_every_tenth_and_no_carriage_return() -> None:
    log = io.StringIO()
    bar = ProgressBar("import", 100, log)
    for _ in range(50):
        bar.advance(2)
    bar.finish()
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 10
    assert lines[0].startswith("import [###")
    assert " 10/100 10% " in lines[0]
    assert " 100/100 100% " in lines[-1]


def test_a_resumed_bar_counts_its_rate_from_where_it_started() -> None:
    log = io.StringIO()
    bar = ProgressBar("import", 10, log, start=6)
    bar.advance(4)
    lines = log.getvalue().splitlines()
    assert len(lines) == 1  # 6 -> 10 crosses one tenth mark only at the end
    assert " 10/10 100% " in lines[0]
    assert bar.done - bar.start == 4


def test_on_a_terminal_rich_draws_the_bar_and_ends_it_once() -> None:
    screen = Terminal()
    bar = ProgressBar("rebuild", 3, screen)
    bar.update(3)
    bar.finish()
    bar.finish()
    text = screen.getvalue()
    assert "rebuild" in text
    assert "3/3" in text
    assert "\x1b[" in text  # drawn in place by rich, not as plain lines
    assert text.count("3/3") >= 1


def test_a_stage_first_reported_after_its_first_batch_is_timed_from_its_start() -> None:
    """A rebuild reports only after a batch: the bar is timed from the stage's start, so
    its first rate is the batch over the time it took (it once printed millions a second)."""
    log = io.StringIO()
    show = staged_progress("rebuild", log)
    time.sleep(0.05)
    show("memory_objects", 67, 67)
    rate = float(log.getvalue().split("100% ")[1].split(" ev/s")[0].replace(",", ""))
    assert 0 < rate <= 67 / 0.05


@given(st.integers(0, 1000), st.integers(1, 1000))
def test_the_rate_counts_only_the_work_since_the_bar_began(start: int, work: int) -> None:
    bar = ProgressBar("import", start + work, io.StringIO(), start=start, began=time.monotonic() - 2.0)
    bar.advance(work)
    assert work / 2.5 <= bar.rate() <= work / 2.0


def test_staged_progress_keeps_one_bar_per_stage() -> None:
    log = io.StringIO()
    show = staged_progress("rebuild", log)
    for position in (5, 10):
        show("audit", position, 10)
    show("keys", 4, 4)
    lines = log.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines] == ["rebuild audit", "rebuild audit", "rebuild keys"]
    assert lines[-1].endswith("ETA 0s")
