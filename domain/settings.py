"""Configuration from the environment, shared by every side (API, workers, CLI)."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

SCHEMA = "memwarden"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memwarden"


PROJECTORS = ("thread", "external")
SHARED_STATES = ("process", "redis")


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        msg = f"{name} must be one of {', '.join(choices)}, not {value!r}"
        raise ValueError(msg)
    return value


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    data_dir: Path
    database_url: str | None = None
    kek_b64: str | None = None
    signing_key_pem: str | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"
    max_content_bytes: int = 16_384
    read_wait_seconds: float = 5.0
    pool_size: int = 8
    db_timeout_seconds: float = 3.0
    """How long a request waits for a database connection (and a connection attempt for
    the server) before it fails with 503 ``unavailable``."""
    projector: str = "thread"
    """Where an API process's read models are projected: ``thread`` (a background thread of
    the process) or ``external`` (another process, e.g. ``memwarden project``; this one only
    watches how far the read models are, and a reader that must wait catches up itself
    when nothing else projects)."""
    shared_state: str = "process"
    """Where the API keeps each key's rate-limit bucket and last write: ``process`` (one API
    process) or ``redis`` (several: ``serve --workers N``, several machines)."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        values = dict(os.environ if env is None else env)
        data_dir = Path(values.get("MEMWARDEN_DATA_DIR") or default_data_dir()).expanduser()
        return cls(
            data_dir=data_dir.resolve(),
            database_url=values.get("DATABASE_URL") or None,
            kek_b64=values.get("MEMWARDEN_KEK") or None,
            signing_key_pem=values.get("MEMWARDEN_SIGNING_KEY") or None,
            redis_url=values.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
            max_content_bytes=int(values.get("MEMWARDEN_MAX_CONTENT_BYTES") or 16_384),
            read_wait_seconds=float(values.get("MEMWARDEN_READ_WAIT_SECONDS") or 5.0),
            pool_size=int(values.get("MEMWARDEN_POOL_SIZE") or 8),
            db_timeout_seconds=float(values.get("MEMWARDEN_DB_TIMEOUT_SECONDS") or 3.0),
            projector=_one_of(
                "MEMWARDEN_PROJECTOR", values.get("MEMWARDEN_PROJECTOR") or "thread", PROJECTORS
            ),
            shared_state=_one_of(
                "MEMWARDEN_SHARED_STATE", values.get("MEMWARDEN_SHARED_STATE") or "process", SHARED_STATES
            ),
        )

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"
