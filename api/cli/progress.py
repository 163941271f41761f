"""One progress bar for every long command (import, rebuild, snapshots, benchmarks).

On a terminal the line is redrawn in place; anywhere else (a log, a pipe, CI) a plain line
is written at every tenth of the work, so a log never gets one endless carriage-return line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

PLAIN_STEP = 0.1
"""Off a terminal, a line at every tenth of the total."""
WIDTH = 30


class ProgressBar:
    """``label [#####.....] done/total share rate/s ETA``."""

    def __init__(
        self, label: str, total: int, stream: TextIO | None = None, start: int = 0, unit: str = "/s"
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.start = start
        self.done = start
        self.unit = unit
        self.began = time.monotonic()
        self.terminal = self.stream.isatty()
        self._step = max(1, int(total * PLAIN_STEP))
        self._next_line = start + self._step
        self._drawn = 0.0
        self._finished = False

    def advance(self, count: int) -> None:
        self.update(self.done + count)

    def update(self, done: int) -> None:
        """The work done so far is ``done`` (of ``total``)."""
        self.done = done
        if self.terminal:
            now = time.monotonic()
            if now - self._drawn >= 0.1 or done >= self.total:  # a redraw costs; five a second is plenty
                self._drawn = now
                self.stream.write("\r" + self.line())
                self.stream.flush()
        elif done >= self._next_line or done >= self.total:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            while self._next_line <= done:
                self._next_line += self._step
        if done >= self.total:
            self.finish()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.began, 1e-9)
        rate = (self.done - self.start) / elapsed
        left = max(0, self.total - self.done)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        share = min(1.0, self.done / self.total) if self.total else 1.0
        filled = int(share * WIDTH)
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"{self.label} [{bar}] {self.done}/{self.total} {share:.0%} {rate:,.1f}{self.unit} ETA {eta}"

    def finish(self) -> None:
        """End a redrawn line (once); a plain stream needs nothing."""
        if self.terminal and not self._finished:
            self.stream.write("\n")
            self.stream.flush()
        self._finished = True


def staged_progress(label: str = "", stream: TextIO | None = None) -> Callable[[str, int, int], None]:
    """A ``(name, position, head)`` callback, as rebuilds and snapshots report: one bar per
    name, labelled ``label name``."""
    bars: dict[str, ProgressBar] = {}

    def show(name: str, position: int, head: int) -> None:
        bar = bars.get(name)
        if bar is None or bar.total != head:
            bar = bars[name] = ProgressBar(f"{label} {name}".strip(), head, stream, unit=" ev/s")
        bar.update(position)

    return show
