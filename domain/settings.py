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


def _projector(value: str) -> str:
    if value not in PROJECTORS:
        msg = f"MEMWARDEN_PROJECTOR must be one of {', '.join(PROJECTORS)}, not {value!r}"
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
    projector: str = "thread"
    """Where an API process's read models are projected: ``thread`` (a background thread of
    the process) or ``external`` (another process, e.g. ``memwarden project``; this one only
    watches how far the read models are, and a reader that must wait catches up itself
    when nothing else projects)."""

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
            projector=_projector(values.get("MEMWARDEN_PROJECTOR") or "thread"),
        )

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"
