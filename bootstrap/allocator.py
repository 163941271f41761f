"""What the long-running processes (``serve``, its projector, ``worker``) ask of glibc's malloc.

glibc keeps what a process frees for its next allocations: inside each arena, only the top
of the heap goes back to the system, so the freed middle stays resident. Two things made the
served processes grow after start for memory they no longer used: onnxruntime loading a
model (the int8 weights turned into fp32 ones, the graph's temporaries freed) and every
batch of model activations, database rows and JSON bodies since. And each thread that
allocates gets an arena of its own, up to eight per core, each keeping its own freed memory.

So each process, as it starts (before its threads do), bounds the arenas (``ARENAS``), and
a thread gives the free pages of every arena back to the system (``malloc_trim``) once the
memory free inside them has grown by ``TRIM_GROWTH_MB`` over its lowest since the last trim
(``mallinfo2``): within a second of a model load, a write batch or a pass freeing what it
used, and never while the process is idle. Anywhere else than glibc (2.33 or later, on
Linux), both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

from memwarden.domain.background import Background

ARENAS = 2
"""malloc arenas per process: the threads of a process mostly wait for the GIL, the database
or a model, so they seldom allocate at the same moment; more arenas only keep more freed
memory apart."""
TRIM_CHECK_SECONDS = 1.0
"""How often the trimming thread looks at the free memory of the arenas."""
TRIM_GROWTH_MB = 16
"""Free memory, over its lowest since the last trim, that calls for a trim: memory freed and
reused in between was touched again, so it counts from the lowest point, not from the trim."""
M_ARENA_MAX = -8
"""mallopt's parameter number for the arena limit (glibc's malloc.h)."""


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc() -> Any | None:
    """glibc, if this process runs on it (with ``mallopt``, ``malloc_trim`` and ``mallinfo2``),
    else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _ = libc.mallopt, libc.malloc_trim, libc.mallinfo2
    except (OSError, AttributeError):
        return None
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallinfo2.restype = MallInfo2
    return libc


def bound_arenas(arenas: int = ARENAS) -> bool:
    """Cap the malloc arenas of this process; call it before threads start (an arena that
    exists stays). False where there is no glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Give the free pages of every arena back to the system; whether any were."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def free_in_arenas() -> int:
    """Bytes free inside the malloc arenas (given back or not); 0 where there is no glibc."""
    libc = _glibc()
    return 0 if libc is None else int(libc.mallinfo2().fordblks)


class Trimmer(Background):
    """``malloc_trim`` whenever the arenas' free memory has grown by ``growth_mb`` over its
    lowest since the last trim, looked at every ``every`` seconds until stopped (nothing
    where there is no glibc). The first look trims what start-up left."""

    def __init__(self, every: float = TRIM_CHECK_SECONDS, growth_mb: float = TRIM_GROWTH_MB) -> None:
        super().__init__("malloc-trim", join_seconds=1)
        self.every = every
        self.growth = int(growth_mb * 2**20)
        self.trims = 0
        self._libc = _glibc()

    def start(self) -> bool:
        return self._libc is not None and super().start()

    def _run(self) -> None:
        libc = self._libc
        lowest = -self.growth
        while libc is not None and not self._stop.wait(self.every):
            free = int(libc.mallinfo2().fordblks)
            lowest = min(lowest, free)
            if free - lowest >= self.growth:
                libc.malloc_trim(0)
                self.trims += 1
                lowest = free


def lean_process() -> Trimmer:
    """What a long-running process does first: bound its arenas, start trimming."""
    bound_arenas()
    trimmer = Trimmer()
    trimmer.start()
    return trimmer
