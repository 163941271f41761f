"""bootstrap/allocator.py: a long-running process bounds glibc's malloc arenas before its
threads start and gives freed pages back to the system; ``serve``, the projector and
``worker`` each do so before anything else."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap import allocator

glibc = pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")

ARENAS_PROBE = """
import ctypes, os, re, sys, tempfile, threading
from memwarden.bootstrap.allocator import bound_arenas
if sys.argv[1] == "bound":
    assert bound_arenas(2)
barrier = threading.Barrier(9)
kept = []

def allocate():
    kept.append([bytes(4096) for _ in range(64)])  # malloc'd (over pymalloc's 512 bytes)
    barrier.wait()

threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
barrier.wait()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
handle = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, handle)
libc.fclose(handle)
print(len(re.findall('<heap nr=', open(path).read())))
"""

TRIM_PROBE = """
import sys
from memwarden.bootstrap.allocator import trim

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

chunks = [bytearray(100_000) for _ in range(2000)]  # under the mmap threshold: on the heap
del chunks[::2]  # half freed, between live ones: nothing at the top of the heap to give back
before = rss_mb()
assert trim()
print(before - rss_mb())
"""


TRIMMER_PROBE = """
import time
from memwarden.bootstrap.allocator import Trimmer

trimmer = Trimmer(every=0.05, growth_mb=16)
assert trimmer.start()
time.sleep(0.3)  # its first look trims what start-up left
idle = trimmer.trims
time.sleep(0.3)
assert trimmer.trims == idle, "an idle process is not trimmed again"
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

chunks = [bytearray(100_000) for _ in range(2000)]
time.sleep(0.3)  # growth of memory in use calls for no trim
assert trimmer.trims == idle, "live memory is not trimmed"
del chunks[::2]
grown = rss_mb()
deadline = time.monotonic() + 10
while trimmer.trims == idle and time.monotonic() < deadline:
    time.sleep(0.05)
trimmer.stop()
print(trimmer.trims - idle, grown - rss_mb())
"""


def _probe(source: str, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", source, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@glibc
def test_bound_arenas_caps_what_threads_get() -> None:
    assert int(_probe(ARENAS_PROBE, "bound")) <= 2
    assert int(_probe(ARENAS_PROBE, "unbound")) > 2  # the check can fail: each thread gets one


@glibc
def test_trim_gives_freed_pages_back() -> None:
    assert float(_probe(TRIM_PROBE)) > 50  # of the 100 MB freed between live chunks


@glibc
def test_the_trimmer_trims_after_growth_only() -> None:
    trims, freed_mb = _probe(TRIMMER_PROBE).split()
    assert int(trims) >= 1
    assert float(freed_mb) > 50


class Started(Exception):
    """What the patched ``lean_process`` raises: the command called it."""


def _refuse() -> allocator.Trimmer:
    raise Started


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["serve"], "memwarden.bootstrap.allocator"),
        (["worker"], "memwarden.bootstrap.allocator"),
        (["project"], "memwarden.workers.projector"),
    ],
    ids=["serve", "worker", "project"],
)
def test_each_long_running_command_starts_lean(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], where: str
) -> None:
    """Before its runtime, its models or any thread: the arena bound holds only for arenas
    not made yet."""
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # a worker gets past its checks
    monkeypatch.setattr("memwarden.workers.actors.redis_reachable", lambda _settings: True)
    monkeypatch.setattr(f"{where}.lean_process", _refuse)
    with pytest.raises(Started):
        main(argv)


def test_the_trimmer_stops() -> None:
    trimmer = allocator.Trimmer(every=0.01)
    started = trimmer.start()
    assert started == (allocator._glibc() is not None)
    trimmer.stop()
    assert not trimmer.running
