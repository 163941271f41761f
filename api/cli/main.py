"""The `memwarden` command line: the same operations, talking to the database directly."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from memwarden.api.cli.bench import register as register_bench_commands
from memwarden.api.cli.erasure import register as register_erasure_commands
from memwarden.api.cli.importer import register as register_import_command
from memwarden.api.cli.knowledge import register as register_knowledge_commands
from memwarden.api.cli.migrate import register as register_migrate_command
from memwarden.api.cli.proof import register as register_proof_commands
from memwarden.api.cli.reembed import register as register_reembed_command
from memwarden.api.cli.timetravel import register as register_time_commands
from memwarden.api.cli.witness import register as register_witness_command
from memwarden.api.mcp.command import register as register_mcp_command
from memwarden.domain.model.trust import SOURCE_RANKS
from memwarden.workers.cli import register_worker_command

# Every command's code is imported by the command that runs it, never here: building the
# parser (``memwarden --help``) must not load the database driver, numpy or the web stack.
# tests/e2e/test_cli_startup.py holds this to a list of modules.
if TYPE_CHECKING:
    from memwarden.domain.model.identity import Identity

Handler = Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        import msgspec  # noqa: PLC0415 - see the note on imports above

        sys.stdout.write(msgspec.json.encode(data).decode() + "\n")
    else:
        sys.stdout.write(text + "\n")


def cmd_demo(_args: argparse.Namespace) -> int:
    from memwarden.api.cli.demo import demo_settings, run_demo  # noqa: PLC0415 - only this command needs it
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it
    from memwarden.domain.settings import Settings  # noqa: PLC0415

    with demo_settings(Settings.from_env()) as settings, Runtime(settings) as runtime:
        facts = run_demo(runtime)
    ok = facts["report"].ok and not facts["tampered"].ok
    sys.stdout.write("\ndemo complete.\n" if ok else "\ndemo FAILED.\n")
    return 0 if ok else 1


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    import msgspec  # noqa: PLC0415 - see the note on imports above

    from memwarden.domain.ledger.checkpoints import Checkpoint, InvalidCheckpoint  # noqa: PLC0415

    checkpoint = None
    if args.checkpoint:
        try:
            checkpoint = msgspec.json.decode(Path(args.checkpoint).read_bytes(), type=Checkpoint)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
            sys.stderr.write(f"cannot read checkpoint {args.checkpoint}: {error}\n")
            return 2
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        try:
            report = runtime.ledger.verify(checkpoint)
        except InvalidCheckpoint as error:
            sys.stderr.write(f"checkpoint refused: {error}\n")
            return 1
    tenants = (
        f"; {report.tenant_chains} tenant chains, {report.tenant_events} events"
        if report.tenant_chains
        else ""
    )
    if report.ok:
        text = f"ok: {report.checked} events; head {report.head_position} {report.head_hash}{tenants}"
    elif report.first_bad_position is None:  # the single chain holds; a tenant chain does not
        text = (
            f"FAILED: tenant {report.first_bad_tenant!r}, first bad tenant position"
            f" {report.first_bad_tenant_position} ({report.problem})"
        )
    else:
        text = f"FAILED: first bad position {report.first_bad_position} ({report.problem})"
        if report.first_bad_tenant is not None:
            text += f"; tenant {report.first_bad_tenant!r} from tenant position {report.first_bad_tenant_position}"
    _emit(args, report, text)
    return 0 if report.ok else 1


def cmd_ledger_checkpoint(_args: argparse.Namespace) -> int:
    import msgspec  # noqa: PLC0415 - see the note on imports above

    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        checkpoint = runtime.ledger.checkpoint(runtime.reads.tree.root)
    sys.stdout.write(msgspec.json.encode(checkpoint).decode() + "\n")
    return 0


def cmd_projections_status(args: argparse.Namespace) -> int:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        statuses = runtime.reads.runner.status()
    lines = [
        f"{s.name:20} position {s.position:>10} lag {s.lag:>8}"
        + (f"  STOPPED at {s.stopped_at}: {s.error}" if s.error else "")
        for s in statuses
    ]
    _emit(args, statuses, "\n".join(lines))
    return 0 if all(s.error is None for s in statuses) else 1


OPERATOR = "operator@cli"


def _operator(namespace: str) -> Identity:
    """The CLI runs with direct database access: an owner of the target's tenant."""
    from memwarden.domain.model.identity import Identity  # noqa: PLC0415 - see the note on imports above
    from memwarden.domain.model.namespaces import tenant_of  # noqa: PLC0415

    return Identity(tenant_of(namespace), OPERATOR, "owner")


def cmd_keys_create(args: argparse.Namespace) -> int:
    from memwarden.domain.model.errors import DomainError  # noqa: PLC0415 - see the note on imports above
    from memwarden.domain.model.keys import IssueKey  # noqa: PLC0415
    from memwarden.domain.model.namespaces import validate_namespace  # noqa: PLC0415

    command = IssueKey(
        target=args.namespace, actor=args.actor, role=args.role, max_provenance=args.max_provenance
    )
    try:
        validate_namespace(args.namespace)
        from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

        with Runtime(follow=False) as runtime:
            issued = runtime.core.governance.issue_key(_operator(args.namespace), command)
    except DomainError as error:
        sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
        return 1
    if args.json:
        _emit(args, {"key_id": issued.key_id, "key": issued.key}, "")
    else:
        sys.stdout.write(
            f"key {issued.key_id} for {args.actor} ({args.role}) in {args.namespace}; shown once:\n"
        )
        sys.stdout.write(issued.key + "\n")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from memwarden.domain.model.errors import DomainError  # noqa: PLC0415 - see the note on imports above
    from memwarden.domain.model.text import storable_text_problem  # noqa: PLC0415

    problem = storable_text_problem(args.key_id)
    if problem is not None:  # no key id holds one; and the lookup could not even send it
        sys.stderr.write(f"refused: KEY_ID {problem}\n")
        return 1
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        governance = runtime.core.governance
        key = governance.key(args.key_id)
        if key is None:
            sys.stderr.write(f"no such key {args.key_id}\n")
            return 1
        try:
            governance.revoke_key(_operator(key.namespace), args.key_id)
        except DomainError as error:
            sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
            return 1
    _emit(args, {"revoked": True, "key_id": args.key_id}, f"revoked {args.key_id}")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from memwarden.domain.model.errors import DomainError  # noqa: PLC0415 - see the note on imports above
    from memwarden.domain.model.namespaces import validate_namespace  # noqa: PLC0415

    try:
        if args.namespace:
            validate_namespace(args.namespace)
    except DomainError as error:
        sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
        return 1
    from memwarden.api.cli.keys import keys_listed  # noqa: PLC0415 - see the note on imports above

    keys = keys_listed(args.namespace)
    lines = [
        f"{k.key_id}  {k.role:8} {k.actor:24} {k.namespace}" + ("  REVOKED" if k.revoked else "")
        for k in keys
    ]
    _emit(args, keys, "\n".join(lines) or "no keys")
    return 0


def _say(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def cmd_serve(args: argparse.Namespace) -> int:
    """The API; by default with a projector process beside it (see workers/projector.py)."""
    from memwarden.api.cli.listening import announce_when_listening  # noqa: PLC0415 - only this command needs it
    from memwarden.api.cli.migrate import check_configured_database  # noqa: PLC0415
    from memwarden.api.http.serving import serve_http  # noqa: PLC0415
    from memwarden.bootstrap.allocator import lean_process  # noqa: PLC0415
    from memwarden.domain.settings import Settings, environment_with  # noqa: PLC0415
    from memwarden.workers.cli import serve_autopilot  # noqa: PLC0415
    from memwarden.workers.projector import ProjectorProcess  # noqa: PLC0415

    configured = Settings.from_env()
    # Several API processes agree on buckets and last writes through Redis.
    if args.workers > 1 and configured.redis_url is None:
        sys.stderr.write(
            "memwarden serve: --workers above 1 needs REDIS_URL: the API processes share each key's"
            " rate limit and last write there\n"
        )
        return 2
    if args.workers > 1 and configured.shared_state not in (None, "redis"):
        sys.stderr.write(
            "memwarden serve: --workers above 1 needs MEMWARDEN_SHARED_STATE=redis: each process"
            " would keep its own rate limits and know only its own writes\n"
        )
        return 2
    trimmer = lean_process()  # before any thread starts
    # What every API process (uvicorn's workers included) runs with, passed on explicitly.
    environment = environment_with(_serve_choices(args))
    settings = Settings.from_env(environment)
    check_configured_database(settings)  # before any child process starts on it
    projector = ProjectorProcess() if args.projector == "process" else None
    autopilot = serve_autopilot(settings)
    announce_when_listening(args.host, args.port, args.workers, _say)
    # uvicorn re-raises the SIGTERM it caught once it has shut down; with the default
    # handler that kills this process before the ``finally`` stops the projector.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        return serve_http(
            settings,
            environment,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
        )
    finally:
        if projector is not None:
            projector.stop()
        if autopilot is not None:
            autopilot.stop()
        trimmer.stop()


def _serve_choices(args: argparse.Namespace) -> dict[str, str]:
    """The settings ``serve``'s flags choose: where the read models are projected, the log
    level (the app's loggers follow uvicorn's), and Redis shared state for several workers."""
    chosen = {
        "MEMWARDEN_PROJECTOR": "thread" if args.projector == "thread" else "external",
        "MEMWARDEN_LOG_LEVEL": args.log_level,
    }
    if args.workers > 1:
        chosen["MEMWARDEN_SHARED_STATE"] = "redis"
    return chosen


def _exit_on_signal(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def cmd_project(args: argparse.Namespace) -> int:
    from memwarden.workers.projector import run_projector  # noqa: PLC0415

    return run_projector(exit_with_parent=args.exit_with_parent)


def build_parser() -> argparse.ArgumentParser:
    """Every command: the ones of this module, then each command group's ``register``."""
    parser = argparse.ArgumentParser(prog="memwarden", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the guided tour on the embedded default")
    demo.set_defaults(handler=cmd_demo)
    _ledger_commands(sub)
    projections = _projection_commands(sub)
    register_time_commands(sub, projections)
    register_bench_commands(sub)
    keys = _key_commands(sub)
    _serve_commands(sub)
    register_migrate_command(sub)
    register_erasure_commands(sub, keys)
    register_knowledge_commands(sub)
    register_import_command(sub)
    register_reembed_command(sub)
    register_mcp_command(sub)
    register_proof_commands(sub)
    register_witness_command(sub)
    register_worker_command(sub)
    show_defaults(parser)
    return parser


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""A group of subcommands, as ``add_subparsers`` returns it."""


def _ledger_commands(sub: Commands) -> None:
    ledger = sub.add_parser("ledger", help="verify or checkpoint the hash chain").add_subparsers(
        dest="ledger_command", required=True
    )
    verify = ledger.add_parser("verify", help="recompute the chain; exit 0 when it holds")
    verify.add_argument("--checkpoint", help="a checkpoint JSON file to verify against")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_ledger_verify)
    checkpoint = ledger.add_parser("checkpoint", help="print a signed checkpoint of the head")
    checkpoint.add_argument("--json", action="store_true")
    checkpoint.set_defaults(handler=cmd_ledger_checkpoint)


def _projection_commands(sub: Commands) -> Commands:
    projections = sub.add_parser("projections", help="read models").add_subparsers(
        dest="projections_command", required=True
    )
    status = projections.add_parser("status", help="each projection's position and lag")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_projections_status)
    return projections


def _key_commands(sub: Commands) -> Commands:
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="mint a key; prints it alone on the last line")
    create.add_argument("namespace")
    create.add_argument("actor")
    create.add_argument("role", choices=["agent", "member", "auditor", "admin", "owner"])
    create.add_argument(
        "--max-provenance",
        choices=list(SOURCE_RANKS),
        help="the highest provenance the key may claim (default: conversation for agents, manual for people)",
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=cmd_keys_create)
    revoke = keys.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")
    revoke.add_argument("--json", action="store_true")
    revoke.set_defaults(handler=cmd_keys_revoke)
    listing = keys.add_parser("list", help="keys (no secrets)")
    listing.add_argument("--namespace", help="only this subtree")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_keys_list)
    return keys


def _serve_commands(sub: Commands) -> None:
    serve = sub.add_parser("serve", help="the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="warning")
    serve.add_argument(
        "--projector",
        choices=["process", "thread", "external"],
        default="process",
        help="project the read models in a child process (default), in a thread of each API "
        "process, or not at all (another process runs `memwarden project`)",
    )
    serve.set_defaults(handler=cmd_serve)
    project = sub.add_parser("project", help="follow the ledger into the read models until stopped")
    project.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    project.set_defaults(handler=cmd_project)


class DefaultsShown(argparse.HelpFormatter):
    """Like argparse's ArgumentDefaultsHelpFormatter, but silent where there is no default
    worth naming (None, a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every command's ``--help`` names each option's default, whoever registered it."""
    parser.formatter_class = DefaultsShown
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                show_defaults(child)
        elif not action.help and action.default not in (None, False, argparse.SUPPRESS):
            action.help = "(default: %(default)s)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except Exception as error:
        # Imported only now: a command that reached the database has loaded it already.
        from memwarden.bootstrap.migrate import MigrationError  # noqa: PLC0415

        if not isinstance(error, MigrationError):
            raise
        # a configured database nobody migrated (or a changed migration)
        sys.stderr.write(f"memwarden {args.command}: {error}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
