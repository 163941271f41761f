"""CLI commands of time travel and operators' projections: ``asof``, ``projections
rebuild``, ``replay snapshot``. Registered by api/cli/main.py."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from memwarden.domain.model.asof import AsOfAnswer, AsOfMemory
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.model.scopes import Subtree
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import quote_text
from memwarden.domain.model.times import parse_time_text

if TYPE_CHECKING:  # the read models and the database driver only when a command runs (api/cli/main.py)
    from memwarden.bootstrap.runtime import Runtime


def parse_time(text: str) -> datetime:
    """``now``, or the forms HTTP accepts (``parse_time_text``: RFC 3339 with a zone, or a
    date meaning midnight UTC, within years 1-9999 in UTC)."""
    try:
        return parse_time_text(text, now=datetime.now(UTC))
    except ValueError as error:
        msg = f"{quote_text(text)} {error}"
        raise argparse.ArgumentTypeError(msg) from None


def _memory_line(m: AsOfMemory) -> str:
    until = f"{m.valid_to:%Y-%m-%d}" if m.valid_to else ""
    valid = f"{m.valid_from:%Y-%m-%d}..{until}"
    return f"{m.id}  {m.namespace:20} {m.trust_tier:9} valid {valid:22} {m.content!r}"


def _answer_text(answer: AsOfAnswer) -> str:
    head = (
        f"as known at {answer.as_of.isoformat()} (ledger position {answer.position}),"
        f" true at {answer.valid_at.isoformat()}, by {answer.engine}: {len(answer.memories)} memories"
    )
    return "\n".join([head, *(_memory_line(m) for m in answer.memories)])


def cmd_asof(args: argparse.Namespace) -> int:
    from memwarden.projections.timeline.service import AsOfQuestion  # noqa: PLC0415 - see api/cli/main.py

    try:
        scope: tuple[str, ...] | Subtree | None = (
            Subtree(validate_namespace(args.namespace)) if args.namespace else None
        )
        check_storable(args.query, "--query")
    except DomainError as error:
        sys.stderr.write(f"refused: {error.detail}\n")
        return 2
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        travel = runtime.reads.time_travel
        if scope is None:  # the operator: every namespace the ledger knows
            runtime.reads.wait_for(runtime.ledger.head_position())
            scope = tuple(known_namespaces(runtime))
        question = AsOfQuestion(
            scope=scope, as_of=args.time, valid_at=args.valid_at, query=args.query, limit=args.limit
        )
        if args.verify:
            check = travel.verify(question, snapshots=not args.no_snapshots)
            if args.json:
                sys.stdout.write(msgspec.json.encode(check).decode() + "\n")
            elif check.ok:
                sys.stdout.write(_answer_text(check.sql) + "\n")
                sys.stdout.write(
                    f"verified: SQL and replay agree ({len(check.sql.memories)} memories,"
                    f" position {check.sql.position})\n"
                )
            else:
                sys.stdout.write("DIFFERENCES between SQL and replay:\n")
                sys.stdout.write("\n".join(f"  {d}" for d in check.differences) + "\n")
            if not check.ok:
                sys.stderr.write(f"asof --verify FAILED: {len(check.differences)} differences\n")
            return 0 if check.ok else 1
        if args.replay:
            answer = travel.replay(question, snapshots=not args.no_snapshots)
        else:
            answer = travel.sql(question)
    if args.json:
        sys.stdout.write(msgspec.json.encode(answer).decode() + "\n")
    else:
        sys.stdout.write(_answer_text(answer) + "\n")
    return 0


def known_namespaces(runtime: Runtime) -> list[str]:
    from psycopg.sql import SQL, Identifier  # noqa: PLC0415 - see api/cli/main.py on imports

    with runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            SQL("SELECT DISTINCT namespace FROM {}.memory_timeline ORDER BY namespace").format(
                Identifier(runtime.ledger.schema)
            )
        ).fetchall()
    return [row["namespace"] for row in rows]


def cmd_projections_rebuild(args: argparse.Namespace) -> int:
    from memwarden.api.cli.progress import staged_progress  # noqa: PLC0415 - see api/cli/main.py on imports
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it
    from memwarden.projections.rebuild import Rebuilder, RebuildFailed  # noqa: PLC0415

    with Runtime(follow=False) as runtime:
        rebuilder = Rebuilder(runtime.reads.runner)
        names = [args.name] if args.name else [p.name for p in runtime.reads.runner.projections]
        unknown = [n for n in names if n not in {p.name for p in runtime.reads.runner.projections}]
        if unknown:
            sys.stderr.write(f"no such projection: {', '.join(unknown)}\n")
            return 2
        reports = []
        failed = False
        for name in names:
            try:
                report = rebuilder.rebuild(
                    name, verify=args.verify, switch=not args.no_switch, progress=staged_progress()
                )
            except RebuildFailed as error:
                sys.stderr.write(f"\nFAILED: {error}; the live model was left as it was\n")
                failed = True
                continue
            reports.append(report)
            if not args.json:
                sys.stdout.write(
                    f"{report.name}: {report.events} events in {report.seconds:.1f}s"
                    f" ({report.events_per_second:,.0f} ev/s, set-up and switch included)"
                    f" to position {report.position};"
                    f" {'switched' if report.switched else 'not switched'}\n"
                )
                if report.verified:
                    if report.differences:
                        sys.stdout.write(f"  DIFFERENCES from the live model ({len(report.differences)}):\n")
                        sys.stdout.write("\n".join(f"  {d}" for d in report.differences) + "\n")
                    else:
                        sys.stdout.write("  verified: the rebuilt model equals the live one\n")
    if args.json:
        sys.stdout.write(msgspec.json.encode(reports).decode() + "\n")
    differ = any(r.differences for r in reports)
    return 1 if failed or differ else 0


def cmd_replay_snapshot(args: argparse.Namespace) -> int:
    from memwarden.api.cli.progress import staged_progress  # noqa: PLC0415 - see api/cli/main.py on imports
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        replayer = runtime.reads.time_travel.replayer
        if args.drop:
            replayer.drop_snapshots()
        started = time.perf_counter()
        bar = staged_progress()
        saved = replayer.take_snapshots(args.every, lambda p, h: bar("snapshots", p, h))
        seconds = time.perf_counter() - started
        rows = replayer.snapshots()
    listing = [{"position": p, "high_at": a, "memories": m, "bytes": b} for p, a, m, b in rows]
    if args.json:
        sys.stdout.write(
            msgspec.json.encode({"saved": saved, "seconds": seconds, "snapshots": listing}).decode() + "\n"
        )
    else:
        sys.stdout.write(f"saved {len(saved)} snapshots in {seconds:.1f}s\n")
        for p, a, m, b in rows:
            sys.stdout.write(f"  position {p:>10}  up to {a.isoformat()}  {m} memories  {b / 1e6:.1f} MB\n")
    return 0


if TYPE_CHECKING:
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Subcommands, projections: Subcommands) -> None:
    asof = sub.add_parser("asof", help="what the system believed at TIME (by SQL, by replay, or both)")
    asof.add_argument("time", type=parse_time, help="as known at (ISO-8601 with zone, a date, or 'now')")
    asof.add_argument("--valid-at", type=parse_time, help="true in the world at (default: TIME)")
    asof.add_argument(
        "--namespace", help="this namespace and its subtree, as POST asof (default: every namespace)"
    )
    asof.add_argument("--query", help="only memories whose content has every term")
    asof.add_argument("--limit", type=int)
    asof.add_argument("--replay", action="store_true", help="answer by replaying the ledger")
    asof.add_argument("--verify", action="store_true", help="both engines; non-zero exit on any difference")
    asof.add_argument("--no-snapshots", action="store_true", help="replay from position zero")
    asof.add_argument("--json", action="store_true")
    asof.set_defaults(handler=cmd_asof)

    rebuild = projections.add_parser("rebuild", help="rebuild from position zero, then switch atomically")
    rebuild.add_argument("name", nargs="?", help="one projection (default: all)")
    rebuild.add_argument(
        "--verify", action="store_true", help="compare with the live model, report differences"
    )
    rebuild.add_argument(
        "--no-switch", action="store_true", help="build (and verify) only; keep the live model"
    )
    rebuild.add_argument("--json", action="store_true")
    rebuild.set_defaults(handler=cmd_projections_rebuild)

    replay = sub.add_parser("replay", help="replay snapshots").add_subparsers(
        dest="replay_command", required=True
    )
    snapshot = replay.add_parser("snapshot", help="save state snapshots every N events for as-of replays")
    snapshot.add_argument("--every", type=int, default=100_000)
    snapshot.add_argument("--drop", action="store_true", help="drop existing snapshots first")
    snapshot.add_argument("--json", action="store_true")
    snapshot.set_defaults(handler=cmd_replay_snapshot)


def register_time_bench(bench: Subcommands, handler: Callable[[argparse.Namespace], int]) -> None:
    time_bench = bench.add_parser(
        "time", help="as-of by SQL and by replay, rebuild vs raw read, on a big ledger"
    )
    time_bench.add_argument("--events", type=int, default=1_000_000, help="size of the generated ledger")
    time_bench.add_argument("--queries", type=int, default=300, help="as-of queries timed by SQL")
    time_bench.add_argument("--snapshot-every", type=int, default=100_000)
    time_bench.add_argument("--json", action="store_true")
    time_bench.set_defaults(handler=handler)
