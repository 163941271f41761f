"""Audit records the ledger could not take, kept on local disk until it can.

A database that answers but takes no writes (read only, a full disk, a role without write
rights) still serves reads, and an outage still refuses calls: both must be on the record
of who saw what. Such a record goes to this process's spool file (one JSON line, fsynced
before the answer goes out) and a background thread appends it to the ledger once the
ledger takes writes again. A record carries its id, so appending it twice (a crash
between the append and the spool's truncation) is a stream conflict that is skipped,
never a second record.

Each process owns one file (``<uuid>.jsonl``) under an exclusive ``flock`` held while it
lives; a file nobody holds was left by a process that died, and the next spool to start
in the same directory drains it. When the spool cannot keep a record (full, unwritable)
``keep`` raises and the caller refuses the call: a read is never served off the record.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

import msgspec

from memwarden.domain.background import Background
from memwarden.domain.model.events import AuditRecorded

log = logging.getLogger(__name__)

DRAIN_SECONDS = 2.0
"""How often the drainer tries the ledger again while records wait."""

AppendRecord = Callable[[AuditRecorded], None]
"""Appends one spooled record to the ledger; raises when the ledger takes no writes."""
IsAlreadyOnLedger = Callable[[Exception], bool]
"""Whether an append's failure means the record is on the ledger already."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AuditRecorded)


class SpoolFull(OSError):
    """The spool holds its maximum; the record is not kept."""


class AuditSpool(Background):
    """The spool, and its drainer: a background thread that runs while records wait."""

    def __init__(
        self,
        directory: Path,
        append: AppendRecord,
        already_on_ledger: IsAlreadyOnLedger,
        max_bytes: int,
        drain_seconds: float = DRAIN_SECONDS,
    ) -> None:
        super().__init__("audit-spool")
        self.directory = directory
        self.append = append
        self.already_on_ledger = already_on_ledger
        self.max_bytes = max_bytes
        self.drain_seconds = drain_seconds
        self.path = directory / f"{uuid.uuid4()}.jsonl"
        self._file: IO[bytes] | None = None
        self._lock = threading.Lock()
        # Drains take turns: one that overtook another emptied the file under it, and records
        # of the same length kept after that would then be emptied by the first, unappended.
        self._draining = threading.Lock()
        self.kept = 0
        self.appended = 0

    # -- keeping ------------------------------------------------------------------------

    def keep(self, record: AuditRecorded) -> None:
        """Keep ``record`` durably (written and fsynced) and make sure a drainer runs.
        Raises ``OSError`` (``SpoolFull`` included) when it cannot."""
        line = _encoder.encode(record) + b"\n"
        with self._lock:
            spool = self._own_file()
            if spool.tell() + len(line) > self.max_bytes:
                raise SpoolFull(f"the audit spool holds its maximum of {self.max_bytes} bytes")
            spool.write(line)
            spool.flush()
            os.fsync(spool.fileno())
            self.kept += 1
        self._start_drainer()

    def _own_file(self) -> IO[bytes]:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            spool = self.path.open("ab")
            fcntl.flock(spool.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._file = spool
        return self._file

    # -- draining -----------------------------------------------------------------------

    def pending_files(self) -> list[Path]:
        """This process's file when it holds records, and every file no process holds."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob("*.jsonl") if p != self.path or _size(p) > 0)

    def drain(self) -> bool:
        """Append what every pending file holds; True when nothing is left to append."""
        with self._draining:
            drained = [
                self._drain_own() if p == self.path else self._drain_orphan(p) for p in self.pending_files()
            ]
        return all(drained)

    def _drain_own(self) -> bool:
        """Appends outside the lock (a ledger that is away must not hold up ``keep``); the
        file is emptied only when every record is in and none was added meanwhile."""
        with self._lock:
            if self._file is None:
                return True
            data = self.path.read_bytes()
        if not self._append_lines(data):
            return False
        with self._lock:
            if self._file is None or self._file.tell() != len(data):
                return self._file is None
            self._file.seek(0)
            self._file.truncate()
        return True

    def _drain_orphan(self, path: Path) -> bool:
        """A file whose process died: drained under its lock, removed once all is appended."""
        try:
            orphan = path.open("rb")
        except FileNotFoundError:
            return True  # another spool drained and removed it
        with orphan:
            try:
                fcntl.flock(orphan.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True  # a live process's own file: it drains it
            if not self._append_lines(orphan.read()):
                return False
            path.unlink(missing_ok=True)
            return True

    def _append_lines(self, data: bytes) -> bool:
        """Append each record in ``data`` in order; False when the ledger refused one (the
        file stays as it is: what went in before it is skipped by id next time). A torn
        last line (the process died while writing it, before the call was answered) is
        dropped."""
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                record = _decoder.decode(line)
            except msgspec.DecodeError:
                log.warning("dropping an unreadable line of the audit spool (%d bytes)", len(line))
                continue
            try:
                self.append(record)
            except Exception as error:  # noqa: BLE001 - tried again at the next drain
                if not self.already_on_ledger(error):
                    return False
            else:
                self.appended += 1
        return True

    def _start_drainer(self) -> None:
        with self._lock:
            self.start()

    def start_if_pending(self) -> None:
        """At start-up: drain what dead processes left, if anything."""
        if self.pending_files():
            self._start_drainer()

    def _run(self) -> None:
        """Every ``drain_seconds`` (first after one: the ledger refused a moment ago), until
        nothing is left."""
        while not self._stop.wait(self.drain_seconds):
            try:
                if self.drain():
                    with self._lock:
                        if self._file is None or self._file.tell() == 0:
                            self._thread = None
                            return
            except Exception:
                log.exception("the audit spool could not be drained; trying again")

    def close(self) -> None:
        """Stop the drainer; records not yet appended stay in the file for the next start."""
        self.stop()
        with self._lock:
            if self._file is not None:
                empty = self._file.tell() == 0
                self._file.close()
                self._file = None
                if empty:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
