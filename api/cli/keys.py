"""``memwarden keys list``: the keys read model as it stands once it reflects the ledger head.

Usually it does already (``serve``'s projector follows the ledger): then the listing is two
queries on one connection, and the command loads neither the ledger's runtime nor any model
code. Only when the keys projection is behind does it open a runtime and catch the read
models up, as every reader does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import psycopg
from psycopg.rows import dict_row

from memwarden.bootstrap.migrate import prepare_database
from memwarden.domain.ledger.chain import chain_head
from memwarden.domain.ledger.database import ConnectionParams, resolve_database
from memwarden.domain.settings import SCHEMA, Settings
from memwarden.projections.governance.views import KEYS_PROJECTION, KeyView, key_tenants, list_keys
from memwarden.projections.listing import MAX_LIMIT, Listed, ListQuery, every
from memwarden.projections.tracking import Tracking, projected_channel


def keys_listed(namespace: str | None, settings: Settings | None = None) -> list[KeyView]:
    """Every key of ``namespace``'s subtree (of every tenant without one), issued first."""
    settings = settings or Settings.from_env()
    params, server = resolve_database(settings)
    try:
        prepare_database(params, server is not None)
        listed = _if_current(params, settings, namespace)
        # The server stays joined meanwhile: the runtime finds it running.
        return listed if listed is not None else _after_catching_up(settings, namespace)
    finally:
        if server is not None:
            server.stop()


def _if_current(params: ConnectionParams, settings: Settings, namespace: str | None) -> list[KeyView] | None:
    """The keys, if the keys projection has reached the ledger head; else None."""
    timeout = max(1, round(settings.db_timeout_seconds))
    with psycopg.connect(
        params.conninfo(), autocommit=True, connect_timeout=timeout, row_factory=dict_row
    ) as conn:
        tracked = Tracking(SCHEMA, projected_channel(SCHEMA)).position_of(conn, KEYS_PROJECTION)
        if tracked < chain_head(conn, SCHEMA)[0]:
            return None
        roots = [namespace] if namespace else key_tenants(conn, SCHEMA)
        return _every_key(roots, lambda root, asked: list_keys(conn, SCHEMA, root, asked))


def _every_key(roots: list[str], read: Callable[[str, ListQuery], Listed[KeyView]]) -> list[KeyView]:
    """Every key of each root's subtree, page after page."""
    return [k for root in roots for k in every(functools.partial(read, root), ListQuery(limit=MAX_LIMIT))]


def _after_catching_up(settings: Settings, namespace: str | None) -> list[KeyView]:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - the whole runtime, only when behind

    with Runtime(settings, follow=False) as runtime:
        runtime.reads.runner.catch_up()
        with runtime.ledger.datastore.get_connection() as conn:
            roots = [namespace] if namespace else key_tenants(conn, SCHEMA)
        return _every_key(roots, runtime.reads.keys)
