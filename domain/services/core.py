"""The command side, opened: database (embedded or configured), ledger, services."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from memwarden.domain.embedding import Embedder, embedder_from_env
from memwarden.domain.extraction import extractor_from_settings
from memwarden.domain.ledger.app import Ledger, StreamConflict, ledger_env
from memwarden.domain.ledger.audit_spool import AuditSpool
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer, resolve_database
from memwarden.domain.ledger.keys import KeyEncryptionKey, SigningKey
from memwarden.domain.services.erasure import ErasureService
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import ClaimIds, MemoryService
from memwarden.domain.settings import Settings

PrepareDatabase = Callable[[ConnectionParams, bool], None]
"""What start-up does to the schema before the ledger opens, given the database and whether
it is the embedded default: the composition root passes ``bootstrap.migrate.prepare_database``
(migrate the embedded default, refuse a configured database that lacks migrations)."""


class Core:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | str | None = "from-env",
        *,
        prepare: PrepareDatabase | None = None,
        warm_models: bool = True,
    ) -> None:
        """``embedder``: by default the one ``MEMWARDEN_EMBEDDER`` names (offline MiniLM).
        ``prepare``: run on the database before the ledger opens (None: the schema is
        taken as it is, e.g. a test database migrated by its fixture). ``warm_models``: a
        bundled model loads in a background thread from now (a process that serves
        searches), else at its first use (a process that may never embed)."""
        self.settings = settings
        self.embedder: Embedder | None = (
            embedder_from_env(background=warm_models, lazy=not warm_models, lanes=settings.model_lanes)
            if isinstance(embedder, str)
            else embedder
        )
        self.params, self.server = resolve_database(settings)
        try:
            if prepare is not None:
                prepare(self.params, self.server is not None)
            self.ledger = Ledger(
                ledger_env(self.params, settings.pool_size, settings.db_timeout_seconds),
                KeyEncryptionKey.load(settings),
                SigningKey.load(settings),
                chains=settings.ledger_chains,
                statement_timeout_seconds=settings.statement_timeout_seconds,
                origin=settings.log_origin,
            )
        except BaseException:
            self._stop_server()
            raise
        self.ledger.audit_spool = AuditSpool(
            settings.data_dir / "audit-spool",
            self.ledger.append_spooled,
            lambda error: isinstance(error, StreamConflict),
            settings.audit_spool_max_bytes,
        )
        self.ledger.audit_spool.start_if_pending()
        self.governance = GovernanceService(self.ledger, settings.max_content_bytes)
        self.memory = MemoryService(
            self.ledger,
            ClaimIds(self.ledger.secret("claim-ids")),
            policy_for=self.governance.write_policy,
            embedder=self.embedder,
            extractor=extractor_from_settings(settings),
        )
        governance = self.governance
        self.erasure = ErasureService(
            self.ledger,
            self.memory.streams,
            members_forget_own=lambda namespace: governance.effective_policy(namespace).members_forget_own,
        )

    @property
    def connection(self) -> ConnectionParams:
        return self.params

    def close(self) -> None:
        if self.ledger.audit_spool is not None:
            self.ledger.audit_spool.close()
        self.ledger.close()
        self._stop_server()

    def _stop_server(self) -> None:
        server: EmbeddedServer | None = self.server
        if server is not None:
            server.stop()

    def __enter__(self) -> Core:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
