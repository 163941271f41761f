"""One progress bar for every long command (import, rebuild, snapshots, benchmarks).

On a terminal it is ``rich``'s progress bar, redrawn in place; anywhere else (a log, a
pipe, CI) a plain line is written at every tenth of the work, so a log never gets one
endless carriage-return line. Either way the rate is the work done since the bar began
over the time since it began: a bar that begins after some work (a resumed import) or
whose first report comes after a first batch (a rebuild's stages) never counts work it did
not time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TaskProgressColumn, TextColumn

PLAIN_STEP = 0.1
"""Off a terminal, a line at every tenth of the total."""
WIDTH = 30
REDRAW_SECONDS = 0.1
"""On a terminal, at most this often: a redraw costs, and ten a second is plenty."""


class ProgressBar:
    """``label [#####.....] done/total share rate/s ETA``."""

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO | None = None,
        start: int = 0,
        unit: str = "/s",
        began: float | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.start = start
        self.done = start
        self.unit = unit
        self.began = time.monotonic() if began is None else began
        self.terminal = self.stream.isatty()
        self._step = max(1, int(total * PLAIN_STEP))
        self._next_line = start + self._step
        self._drawn = 0.0
        self._finished = False
        self._live: Progress | None = None
        self._task: TaskID | None = None
        if self.terminal:
            self._live = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=WIDTH),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"),
                console=Console(file=self.stream, force_terminal=True),
                auto_refresh=False,
                transient=False,
            )
            self._task = self._live.add_task(label, total=total, completed=start, rate=self.speed_text())
            self._live.start()

    def advance(self, count: int) -> None:
        self.update(self.done + count)

    def update(self, done: int) -> None:
        """The work done so far is ``done`` (of ``total``)."""
        self.done = done
        if self._live is not None and self._task is not None:
            now = time.monotonic()
            if now - self._drawn >= REDRAW_SECONDS or done >= self.total:
                self._drawn = now
                self._live.update(self._task, completed=done, rate=self.speed_text())
                self._live.refresh()
        elif done >= self._next_line or done >= self.total:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            while self._next_line <= done:
                self._next_line += self._step
        if done >= self.total:
            self.finish()

    def rate(self) -> float:
        """Work per second since the bar began (the work it started with not counted)."""
        elapsed = time.monotonic() - self.began
        return (self.done - self.start) / elapsed if elapsed > 0 else 0.0

    def speed_text(self) -> str:
        rate = self.rate()
        left = max(0, self.total - self.done)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        return f"{rate:,.1f}{self.unit} ETA {eta}"

    def line(self) -> str:
        share = min(1.0, self.done / self.total) if self.total else 1.0
        filled = int(share * WIDTH)
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"{self.label} [{bar}] {self.done}/{self.total} {share:.0%} {self.speed_text()}"

    def finish(self) -> None:
        """Stop a redrawn bar (once), leaving its last state; a plain stream needs nothing."""
        if self._live is not None and not self._finished:
            self._live.stop()
        self._finished = True


def staged_progress(label: str = "", stream: TextIO | None = None) -> Callable[[str, int, int], None]:
    """A ``(name, position, head)`` callback, as rebuilds and snapshots report: one bar per
    name, labelled ``label name``. A stage reports only after its first batch, so its bar
    is timed from the previous report (or from this call): the first batch is timed too."""
    bars: dict[str, ProgressBar] = {}
    last = time.monotonic()

    def show(name: str, position: int, head: int) -> None:
        nonlocal last
        bar = bars.get(name)
        if bar is None or bar.total != head:
            start = bar.done if bar is not None else 0
            bar = bars[name] = ProgressBar(
                f"{label} {name}".strip(), head, stream, start=start, unit=" ev/s", began=last
            )
        bar.update(position)
        last = time.monotonic()

    return show
