"""Numbered migrations: a database made by the code before them (commit b8b96e5, the fixture
``fixtures/b8b96e5.sql``) is adopted without losing a row; migrating is idempotent and safe
from several processes at once; a configured database nobody migrated is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.migrate import (
    LOCK_KEY,
    MIGRATIONS_DIR,
    MigrationError,
    SchemaNotMigrated,
    available,
    migrate,
    pending,
)
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding.hashing import HashEmbedder
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.merkle import appended, leaf_hash
from memwarden.domain.model.merkle_tiles import grown
from memwarden.domain.settings import Settings
from memwarden.projections.reads import default_projections
from tests.conftest import url_of
from tests.processes import REPO_ROOT, wait_until

FIXTURES = Path(__file__).with_name("fixtures")
OLD_DUMP = FIXTURES / "b8b96e5.sql"
OLD_KEYS = json.loads((FIXTURES / "b8b96e5.keys.json").read_text())
OLD_EVENTS = 19
LABELS = [
    "0001_ledger",
    "0002_read_models",
    "0003_workers",
    "0004_checkpoints",
    "0005_tenant_chains",
    "0006_proposal_fallback",
    "0007_reembedding",
    "0008_cheaper_sequencing",
    "0009_key_provenance",
    "0010_merkle_tree",
    "0011_tenant_trees",
    "0012_finding_groups",
    "0013_list_order",
    "0014_merkle_tiles",
]
HALF_DONE = f"{len(LABELS) + 1:04d}_half_done"
"""A migration after the last one (gaps are refused)."""
AGENT = Identity("acme/eng", "agent-1", "agent")


@contextmanager
def unmigrated_database(server: ConnectionParams) -> Iterator[ConnectionParams]:
    """A database of its own that nothing has migrated, dropped after."""
    name = f"mw_bare_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(SQL("CREATE DATABASE {}").format(Identifier(name)))
    try:
        yield server.with_dbname(name)
    finally:
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            conn.execute(SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(name)))


@pytest.fixture
def bare(pg_server: ConnectionParams) -> Iterator[ConnectionParams]:
    with unmigrated_database(pg_server) as params:
        yield params


@pytest.fixture
def bare_twin(pg_server: ConnectionParams) -> Iterator[ConnectionParams]:
    """Another one, to compare with."""
    with unmigrated_database(pg_server) as params:
        yield params


@pytest.fixture
def old(bare: ConnectionParams) -> ConnectionParams:
    """The bare database, restored from the dump of one the pre-migration code made."""
    with psycopg.connect(bare.conninfo(), autocommit=True) as conn:
        conn.execute(OLD_DUMP.read_bytes())
    return bare


def old_settings(tmp_path: Path, params: ConnectionParams) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=url_of(params),
        kek_b64=OLD_KEYS["kek_b64"],
        signing_key_pem=OLD_KEYS["signing_key_pem"],
        pool_size=4,
        embedder="hash",
        rerank="none",
    )


ADDED_COLUMNS = ["tenant", "tenant_position", "max_provenance", "size", "note", "tree", "group_id"]
"""Columns later migrations add to existing tables (0005: events; 0009: api_keys; 0010 and 0011:
checkpoints; 0012: findings); NULL on adopted rows, but a finding's group, which 0012 fills."""


def rows_of(params: ConnectionParams) -> dict[str, tuple[int, str]]:
    """Each table's row count and a digest of all its rows (the columns later migrations
    add left out, so an adopted row digests as it did)."""
    with psycopg.connect(params.conninfo()) as conn:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'memwarden'"
                " AND tablename <> 'schema_migrations' ORDER BY 1"
            )
        ]
        found: dict[str, tuple[int, str]] = {}
        for table in tables:
            row = conn.execute(
                SQL(
                    "SELECT count(*), md5(coalesce(string_agg(y.t, E'\\n' ORDER BY y.t), ''))"
                    " FROM (SELECT (to_jsonb(x) - %s::text[])::text AS t FROM memwarden.{} x) y"
                ).format(Identifier(table)),
                (ADDED_COLUMNS,),
            ).fetchone()
            assert row is not None
            found[table] = (int(row[0]), str(row[1]))
    return found


def schema_of(
    params: ConnectionParams, schema: str = "memwarden", tables: set[str] | None = None
) -> dict[str, Any]:
    """What the catalog says of a schema's tables (columns, defaults, options), indexes,
    constraints, functions and types; the schema's name is left out of the definitions.
    The configured embedder's HNSW index is a start-up matter, not a migration's."""
    with psycopg.connect(params.conninfo()) as conn:
        columns = conn.execute(
            "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
            " pg_get_expr(d.adbin, d.adrelid), c.reloptions::text"
            " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, replace(indexdef, %s, '') FROM pg_indexes"
            " WHERE schemaname = %s AND indexname NOT LIKE 'search_docs_hnsw_%%' ORDER BY 1, 2",
            (f"{schema}.", schema),
        ).fetchall()
        constraints = conn.execute(
            "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k"
            " JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        routines = conn.execute(
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        types = conn.execute(
            "SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
            " WHERE n.nspname = %s AND t.typtype = 'c' AND t.typrelid IN"
            " (SELECT oid FROM pg_class WHERE relkind = 'c') ORDER BY 1",
            (schema,),
        ).fetchall()
    keep = (lambda table: True) if tables is None else (lambda table: table in tables)
    return {
        "columns": [r for r in columns if keep(r[0])],
        "indexes": [r for r in indexes if keep(r[0])],
        "constraints": [r for r in constraints if keep(r[0])],
        "routines": routines if tables is None else [],
        "types": types if tables is None else [],
    }


def recorded(params: ConnectionParams) -> list[tuple[int, str]]:
    with psycopg.connect(params.conninfo()) as conn:
        return [
            (int(r[0]), str(r[1]))
            for r in conn.execute("SELECT version, name FROM memwarden.schema_migrations ORDER BY 1")
        ]


# -- the upgrade ---------------------------------------------------------------------------


def test_a_database_made_before_migrations_is_adopted_without_losing_a_row(
    old: ConnectionParams, bare_twin: ConnectionParams, tmp_path: Path
) -> None:
    before = rows_of(old)
    assert before["events"][0] == OLD_EVENTS
    assert before["memory_objects"][0] == 4
    assert all(count > 0 for table, (count, _) in before.items() if table in {"ledger_chain", "search_docs"})
    assert pending(old) == available()  # nothing recorded yet

    report = migrate(old)

    assert report.baseline
    assert report.applied == LABELS
    assert report.version == len(LABELS)
    after = rows_of(old)
    assert {table: after.get(table) for table in before} == before, "a row changed, appeared or went missing"
    assert all(
        count == 0 for table, (count, _) in after.items() if table not in before and table != "search_serving"
    ), "a new table has rows"
    with psycopg.connect(old.conninfo()) as conn:
        serving = conn.execute(
            "SELECT model, dimensions, adopted_position FROM memwarden.search_serving"
        ).fetchall()
        first = conn.execute(
            "SELECT model, vector_dims(embedding) FROM memwarden.search_docs WHERE kind = 'memory'"
            " AND model IS NOT NULL ORDER BY position LIMIT 1"
        ).fetchone()
    assert first is not None
    assert serving == [(*first, None)], "the served model is the one the index was written with"
    with psycopg.connect(old.conninfo()) as conn:
        tenanted = conn.execute("SELECT count(*) FROM memwarden.events WHERE tenant IS NOT NULL").fetchone()
    assert tenanted == (0,), "an adopted event is on no tenant chain"
    assert recorded(old) == [(number, label[5:]) for number, label in enumerate(LABELS, start=1)]
    # the adopted schema is exactly the one a fresh database gets
    migrate(bare_twin)
    assert schema_of(old) == schema_of(bare_twin)

    with Runtime(old_settings(tmp_path, old), follow=False) as runtime:
        report_chain = runtime.ledger.verify()
        assert report_chain.ok, report_chain.problem
        assert report_chain.checked == OLD_EVENTS
        porto = _memory_id(old, "Dana lives in Porto")
        state = runtime.memory.memory(porto)
        assert state is not None
        assert state.content == "Dana lives in Porto"  # its data key, sealed by the old code, opens
        written = runtime.memory.write(AGENT, WriteMemory(content="Written after the upgrade"))
        assert runtime.reads.runner.catch_up() == written.position
        assert runtime.reads.read(AGENT, written.id or uuid.UUID(int=0)) is not None
        assert runtime.ledger.verify().checked == written.position


def _memory_id(params: ConnectionParams, content: str) -> uuid.UUID:
    with psycopg.connect(params.conninfo()) as conn:
        row = conn.execute(
            "SELECT id FROM memwarden.memory_objects WHERE content = %s", (content,)
        ).fetchone()
    assert row is not None
    found: uuid.UUID = row[0]
    return found


# -- idempotence, failures, history ------------------------------------------------------------


def test_migrate_is_idempotent(bare: ConnectionParams) -> None:
    first = migrate(bare)
    assert first.applied == LABELS
    assert not first.baseline
    schema = schema_of(bare)
    again = migrate(bare)
    assert again.applied == []
    assert again.version == len(LABELS)
    assert schema_of(bare) == schema
    assert pending(bare) == []


def test_a_failing_migration_leaves_nothing_and_the_ones_before_stay(
    bare: ConnectionParams, tmp_path: Path
) -> None:
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    (directory / f"{HALF_DONE}.sql").write_text(
        "CREATE TABLE memwarden.half_done (id int);\nSELECT 1 / 0;\n", encoding="utf-8"
    )
    with pytest.raises(MigrationError, match=f"{HALF_DONE} failed"):
        migrate(bare, directory)
    assert [v for v, _ in recorded(bare)] == list(range(1, len(LABELS) + 1))
    with psycopg.connect(bare.conninfo()) as conn:
        row = conn.execute("SELECT to_regclass('memwarden.half_done')").fetchone()
    assert row is not None
    assert row[0] is None, "the failed migration's table stayed"
    (directory / f"{HALF_DONE}.sql").write_text(
        "CREATE TABLE memwarden.half_done (id int);\n", encoding="utf-8"
    )
    assert migrate(bare, directory).applied == [HALF_DONE]


def test_a_migration_changed_after_it_was_applied_is_refused(bare: ConnectionParams, tmp_path: Path) -> None:
    migrate(bare)
    directory = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, directory)
    with (directory / "0003_workers.sql").open("a", encoding="utf-8") as handle:
        handle.write("\nCREATE TABLE memwarden.sneaked_in (id int);\n")
    with pytest.raises(MigrationError, match="0003_workers was changed"):
        migrate(bare, directory)
    with pytest.raises(MigrationError, match="0003_workers was changed"):
        pending(bare, directory)


def test_migration_files_are_numbered_without_gaps(tmp_path: Path) -> None:
    (tmp_path / "0001_first.sql").write_text("SELECT 1;", encoding="utf-8")
    (tmp_path / "0003_third.sql").write_text("SELECT 1;", encoding="utf-8")
    with pytest.raises(MigrationError, match="without gaps"):
        available(tmp_path)
    (tmp_path / "2_bad name.sql").write_text("SELECT 1;", encoding="utf-8")
    with pytest.raises(MigrationError, match=r"NNNN_name\.sql"):
        available(tmp_path)


# -- several processes ---------------------------------------------------------------------------


def _cli_env(params: ConnectionParams, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = url_of(params)
    env["MEMWARDEN_DATA_DIR"] = str(tmp_path / "home")
    env["MEMWARDEN_EMBEDDER"] = "hash"
    return env


def _cli(env: dict[str, str] | None, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``memwarden ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def _waiting_for_the_lock(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()
    return int(row[0]) if row else 0


def test_two_processes_migrating_at_once_apply_each_migration_once(
    bare: ConnectionParams, tmp_path: Path
) -> None:
    env = _cli_env(bare, tmp_path)
    with psycopg.connect(bare.conninfo(), autocommit=True) as holder:
        # both processes are made to wait for the lock, so they contend for certain
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (LOCK_KEY,))
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "memwarden.api.cli.main", "migrate", "--json"],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            wait_until(lambda: _waiting_for_the_lock(holder) == 2, 120)
        finally:
            holder.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
        outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    reports = sorted((json.loads(out) for out, _ in outputs), key=lambda r: len(r["applied"]))
    assert reports[0]["applied"] == []
    assert reports[1]["applied"] == LABELS
    assert all(r["version"] == len(LABELS) for r in reports)
    assert recorded(bare) == [(number, label[5:]) for number, label in enumerate(LABELS, start=1)]


# -- refusal -----------------------------------------------------------------------------------


def test_an_unmigrated_database_url_is_refused_with_the_command_that_fixes_it(
    old: ConnectionParams, tmp_path: Path
) -> None:
    settings = old_settings(tmp_path, old)
    with pytest.raises(SchemaNotMigrated, match="run `memwarden migrate`"):
        Runtime(settings, follow=False)
    env = _cli_env(old, tmp_path)
    env["MEMWARDEN_KEK"] = OLD_KEYS["kek_b64"]
    env["MEMWARDEN_SIGNING_KEY"] = OLD_KEYS["signing_key_pem"]
    for command in (["serve", "--port", "0"], ["ledger", "verify"]):
        done = _cli(env, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "run `memwarden migrate`" in done.stderr
        assert "0001_ledger" in done.stderr
        assert "Traceback" not in done.stderr
    assert not _has_table(old, "schema_migrations"), "a refused start wrote to the database"
    # the command it names fixes it
    migrated = _cli(env, "migrate", check=True)
    assert "made before migrations" in migrated.stdout
    assert "applied 0003_workers" in migrated.stdout
    verified = _cli(env, "ledger", "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"ok: {OLD_EVENTS} events")


def _has_table(params: ConnectionParams, table: str) -> bool:
    with psycopg.connect(params.conninfo()) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"memwarden.{table}",)).fetchone()
    return bool(row and row[0])


def test_migrate_help_names_what_it_does() -> None:
    done = _cli(None, "migrate", "--help", check=True)
    assert "pending schema migrations" in done.stdout
    assert "--json" in done.stdout


# -- the rebuild's tables ----------------------------------------------------------------------


def test_each_projections_rebuild_tables_match_the_migrated_ones(database: ConnectionParams) -> None:
    """A rebuild swaps in tables made by the projection's ``create``: they must be the live
    ones the migrations made, column for column, index for index."""
    shadow = "mw_shadow_check"
    with psycopg.connect(database.conninfo()) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as curs:
        curs.execute(SQL("CREATE SCHEMA {}").format(Identifier(shadow)))
        for projection in default_projections(HashEmbedder()):
            projection.create(curs, shadow)
        conn.commit()
    owned = {table for p in default_projections(None) for table in p.tables}
    live = schema_of(database, "memwarden", owned)
    rebuilt = schema_of(database, shadow, owned)
    assert live["columns"], "no live tables found"
    assert {r[0] for r in live["columns"]} == owned
    assert rebuilt == live


def test_migrate_against_a_database_that_is_not_there_says_so(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgresql://postgres@/memwarden?host={tmp_path}&port=5432"
    done = _cli(env, "migrate")
    assert done.returncode == 1
    assert "cannot reach the database 'memwarden'" in done.stderr
    assert "Traceback" not in done.stderr


# -- 0014: the tree's nodes become tiles ---------------------------------------------------------


def test_the_stored_tree_nodes_become_the_tiles_the_projection_would_write(
    bare: ConnectionParams, tmp_path: Path
) -> None:
    """A database whose tree 0010 and 0011 stored node by node gets, from 0014, exactly the
    tiles growing the tree from zero gives (so proofs and a rebuild's ``--verify`` agree)."""
    directory = tmp_path / "migrations"
    directory.mkdir()
    for migration in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if migration.name < "0012":
            shutil.copy(migration, directory)
    migrate(bare, directory)
    trees = {
        None: [leaf_hash(b"ledger %d" % i) for i in range(700)],
        "acme": [leaf_hash(b"acme %d" % i) for i in range(37)],
    }
    with psycopg.connect(bare.conninfo()) as conn:
        for tenant, leaves in trees.items():
            nodes: dict[tuple[int, int], bytes] = {}
            for index, leaf in enumerate(leaves):
                nodes.update(appended(index, leaf, nodes.__getitem__))
            rows = [(tenant, level, index, digest) for (level, index), digest in nodes.items()]
            if tenant is None:
                conn.cursor().executemany(
                    "INSERT INTO memwarden.merkle_nodes (level, idx, hash) VALUES (%s, %s, %s)",
                    [r[1:] for r in rows],
                )
            else:
                conn.cursor().executemany(
                    "INSERT INTO memwarden.merkle_tenant_nodes (tenant, level, idx, hash) VALUES (%s, %s, %s, %s)",
                    rows,
                )
    shutil.copytree(MIGRATIONS_DIR, directory, dirs_exist_ok=True)
    assert migrate(bare, directory).applied == LABELS[11:]
    with psycopg.connect(bare.conninfo()) as conn:
        ledger = {
            (r[0], r[1]): bytes(r[2])
            for r in conn.execute("SELECT level, idx, hashes FROM memwarden.merkle_tiles")
        }
        tenant = {
            (r[0], r[1]): bytes(r[2])
            for r in conn.execute(
                "SELECT level, idx, hashes FROM memwarden.merkle_tenant_tiles WHERE tenant = 'acme'"
            )
        }
        gone = conn.execute(
            "SELECT to_regclass('memwarden.merkle_nodes'), to_regclass('memwarden.merkle_tenant_nodes')"
        ).fetchone()
    assert ledger == grown(0, {}, trees[None])
    assert tenant == grown(0, {}, trees["acme"])
    assert gone == (None, None)
