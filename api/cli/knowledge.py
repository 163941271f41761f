"""CLI commands of L3 knowledge: ``knowledge load DIR``. Registered by api/cli/main.py.

The command runs against the database directly, as the other local commands do: the
operator acts as an owner of the tenant of ``--namespace`` (``operator@cli``), or as the
owner ``ACTOR`` of ``NAMESPACE`` given with ``--as NAMESPACE/ACTOR``, so the ledger and
the audit records name who published.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from memwarden.domain.model.errors import DomainError, InvalidRequest
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import check_actor_name
from memwarden.domain.model.namespaces import tenant_of, validate_namespace
from memwarden.domain.model.storable import check_storable

if TYPE_CHECKING:  # the services and the models only when the command runs (api/cli/main.py)
    from memwarden.domain.services.knowledge import KnowledgeLoadResult

OPERATOR = "operator@cli"


def publisher(namespace: str | None, acting_as: str | None) -> tuple[Identity, str]:
    """(who publishes, where documents land) from ``--namespace`` and ``--as``."""
    if acting_as is not None:
        check_storable(acting_as, "--as")
        where, _, actor = acting_as.rpartition("/")
        if not where:
            raise InvalidRequest(f"--as {acting_as!r}: give NAMESPACE/ACTOR, e.g. acme/eng/dana")
        try:
            check_actor_name(actor)  # the rule of key actors: these writes are audited under it
        except InvalidRequest as error:
            raise InvalidRequest(f"--as {acting_as!r}: {error}") from error
        identity = Identity(validate_namespace(where), actor, "owner")
        return identity, validate_namespace(namespace or where)
    if namespace is None:
        raise InvalidRequest("give --namespace (where the documents go) or --as NAMESPACE/ACTOR")
    return Identity(tenant_of(validate_namespace(namespace)), OPERATOR, "owner"), namespace


def result_line(result: KnowledgeLoadResult) -> str:
    from memwarden.domain.services.knowledge import chunk_count  # noqa: PLC0415 - see api/cli/main.py

    name = f"{result.namespace}/{result.slug}" if result.namespace and result.slug else result.path
    if result.outcome == "published":
        lexical = "" if result.embedded else ", lexical only: embedding unavailable"
        return f"published v{result.version} {name} ({chunk_count(result.chunks)}{lexical})"
    if result.outcome == "unchanged":
        return f"unchanged v{result.version} {name}"
    return f"rejected {result.path}: {result.detail.removeprefix(result.path + ': ')}"


def cmd_knowledge_load(args: argparse.Namespace) -> int:
    import msgspec  # noqa: PLC0415 - see api/cli/main.py on imports

    from memwarden.domain.embedding import ModelFileRejected, embedder_from_settings  # noqa: PLC0415
    from memwarden.domain.settings import Settings  # noqa: PLC0415

    settings = Settings.from_env()
    try:
        identity, namespace = publisher(args.namespace, args.acting_as)
        # the model loads now (MEMWARDEN_EMBEDDER; default: the bundled MiniLM): a bad one is
        # refused here, before anything is published without its vectors
        embedder_from_settings(settings)
    except DomainError as error:
        sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
        return 2
    except (ValueError, ModelFileRejected) as error:
        sys.stderr.write(f"no embedder: {error}\n(set MEMWARDEN_EMBEDDER=none to load lexical-only)\n")
        return 2
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(settings, follow=False) as runtime:
        try:
            results = runtime.knowledge.load_directory(identity, Path(args.directory), namespace)
        except DomainError as error:
            sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
            return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(results).decode() + "\n")
    elif results:
        sys.stdout.write("\n".join(result_line(r) for r in results) + "\n")
    else:
        sys.stdout.write(f"no *.md files under {args.directory}\n")
    return 1 if any(r.outcome == "rejected" for r in results) else 0


if TYPE_CHECKING:
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: Subcommands) -> None:
    knowledge = sub.add_parser("knowledge", help="L3 knowledge documents").add_subparsers(
        dest="knowledge_command", required=True
    )
    load = knowledge.add_parser(
        "load",
        help="publish the *.md files of a directory as versioned knowledge; non-zero exit if any is rejected",
    )
    load.add_argument("directory", help="read recursively; hidden directories are skipped")
    load.add_argument("--namespace", help="where documents go (front matter may name a namespace below it)")
    load.add_argument(
        "--as",
        dest="acting_as",
        metavar="NAMESPACE/ACTOR",
        help="publish as this owner (default: operator@cli, owner of the tenant of --namespace)",
    )
    load.add_argument("--json", action="store_true")
    load.set_defaults(handler=cmd_knowledge_load)
