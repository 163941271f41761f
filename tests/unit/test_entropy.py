from __future__ import annotations

import os
import threading

from memwarden.domain.ledger.entropy import CHUNK, new_uuid, random_bytes


def test_no_byte_of_the_buffer_is_handed_out_twice() -> None:
    pieces = [random_bytes(12) for _ in range(3 * CHUNK // 12)]
    assert all(len(p) == 12 for p in pieces)
    assert len(set(pieces)) == len(pieces)


def test_large_requests_and_uuids() -> None:
    assert len(random_bytes(CHUNK + 1)) == CHUNK + 1
    ids = {new_uuid() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(u.version == 4 for u in ids)


def test_threads_get_different_bytes() -> None:
    seen: list[bytes] = []

    def take() -> None:
        seen.append(random_bytes(32))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 8


def test_a_forked_child_does_not_repeat_its_parents_bytes() -> None:
    random_bytes(1)  # fill this thread's buffer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send what it would hand out next, then leave at once
        os.write(write, random_bytes(32))
        os._exit(0)
    os.close(write)
    child = os.read(read, 32)
    os.waitpid(pid, 0)
    assert child != random_bytes(32)
