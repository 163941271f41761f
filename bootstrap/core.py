"""The command side as the composition root builds it: the database (embedded or configured,
its schema prepared as start-up does), the ledger on it, and the services that need no read
model. ``Runtime`` builds on the same pieces; tests and benchmarks open a ``Core`` alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from memwarden.bootstrap.migrate import prepare_database
from memwarden.domain.embedding import Embedder, embedder_from_settings
from memwarden.domain.extraction import extractor_from_settings
from memwarden.domain.ledger.app import Ledger, ledger_env
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer, resolve_database
from memwarden.domain.ledger.keys import KeyEncryptionKey, SigningKey
from memwarden.domain.ports import ErasureLookup
from memwarden.domain.services.band import SynchronousBand
from memwarden.domain.services.claims import ClaimIds
from memwarden.domain.services.erasure import ErasureService
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.streams import Streams
from memwarden.domain.settings import Settings

FROM_SETTINGS = "from-settings"
"""``open_core``'s default embedder: the one the settings name."""


def configured_embedder(settings: Settings, *, warm: bool) -> Embedder | None:
    """The embedder the settings name. ``warm``: a bundled model loads in a background
    thread from now (a process that serves searches), else at its first use."""
    return embedder_from_settings(settings, background=warm, lazy=not warm)


@dataclass(frozen=True)
class Storage:
    """The database a process runs on and the ledger opened on it."""

    params: ConnectionParams
    server: EmbeddedServer | None
    ledger: Ledger

    def close(self) -> None:
        self.ledger.close()
        _stop(self.server)


def open_storage(settings: Settings) -> Storage:
    """The database (the embedded default started, or the configured one), its schema
    prepared (the embedded default migrated, a configured one checked), the ledger opened
    and its audit spool draining what an earlier process left."""
    params, server = resolve_database(settings)
    try:
        prepare_database(params, server is not None)
        ledger = Ledger(
            ledger_env(params, settings.pool_size, settings.db_timeout_seconds),
            KeyEncryptionKey.load(settings),
            SigningKey.load(settings),
            chains=settings.ledger_chains,
            statement_timeout_seconds=settings.statement_timeout_seconds,
            origin=settings.log_origin,
            spool_directory=settings.data_dir / "audit-spool",
            spool_max_bytes=settings.audit_spool_max_bytes,
        )
    except BaseException:
        _stop(server)
        raise
    assert ledger.audit_spool is not None  # given its directory above
    ledger.audit_spool.start_if_pending()
    return Storage(params, server, ledger)


def _stop(server: EmbeddedServer | None) -> None:
    if server is not None:
        server.stop()


@dataclass(frozen=True)
class ReadSide:
    """What the command side's services take from the read models, when a process has
    them: the synchronous band (made on the services' stream cache), the embedder of the
    model the search index serves, and the erasure lookup."""

    band: Callable[[Streams], SynchronousBand | None]
    serving_embedder: Callable[[], Embedder | None]
    erasure_lookup: ErasureLookup


@dataclass(frozen=True)
class Core:
    """The command side: settings, the configured embedder, the database and ledger, the
    governance, memory and erasure services."""

    settings: Settings
    embedder: Embedder | None
    storage: Storage
    governance: GovernanceService
    memory: MemoryService
    erasure: ErasureService

    @property
    def ledger(self) -> Ledger:
        return self.storage.ledger

    @property
    def params(self) -> ConnectionParams:
        return self.storage.params

    @property
    def server(self) -> EmbeddedServer | None:
        return self.storage.server

    def close(self) -> None:
        self.storage.close()

    def __enter__(self) -> Core:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def command_side(
    settings: Settings, storage: Storage, embedder: Embedder | None, reads: ReadSide | None = None
) -> Core:
    """The services of the command side on ``storage``, wired to ``reads`` when given."""
    ledger = storage.ledger
    governance = GovernanceService(ledger, settings.max_content_bytes)
    streams = Streams(ledger)
    memory = MemoryService(
        ledger,
        ClaimIds(ledger.secret("claim-ids")),
        policy_for=governance.write_policy,
        embedder=embedder,
        extractor=extractor_from_settings(settings),
        streams=streams,
        band=reads.band(streams) if reads is not None else None,
        serving_embedder=reads.serving_embedder if reads is not None else None,
    )
    erasure = ErasureService(
        ledger,
        streams,
        members_forget_own=lambda namespace: governance.effective_policy(namespace).members_forget_own,
        lookup=reads.erasure_lookup if reads is not None else None,
    )
    return Core(settings, embedder, storage, governance, memory, erasure)


def open_core(settings: Settings, embedder: Embedder | str | None = FROM_SETTINGS) -> Core:
    """The command side alone, opened as a process opens it (its schema prepared the same
    way): for the tests and benchmarks of the write side. ``embedder``: by default the
    one the settings name, loaded at its first use."""
    chosen = configured_embedder(settings, warm=False) if isinstance(embedder, str) else embedder
    storage = open_storage(settings)
    try:
        return command_side(settings, storage, chosen)
    except BaseException:
        storage.close()
        raise
