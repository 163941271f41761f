"""``memwarden reembed``: give every memory a vector of the configured embedder's model, then
switch the search index to it (domain/services/reembed.py). Run it after changing
``MEMWARDEN_EMBEDDER`` on an existing ledger; until it has finished, search keeps using the
old model's vectors (and embeds queries and new memories by the old model)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

import msgspec

from memwarden.api.cli.knowledge import OPERATOR
from memwarden.domain.model.errors import DomainError

if TYPE_CHECKING:  # the service only when the command runs (api/cli/main.py)
    from memwarden.domain.services.reembed import ReembedReport


class ReembedSummary(msgspec.Struct, frozen=True, kw_only=True):
    report: ReembedReport
    seconds: float


def cmd_reembed(args: argparse.Namespace) -> int:
    began = time.monotonic()
    from memwarden.api.cli.progress import ProgressBar  # noqa: PLC0415 - rich, only when the command runs
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it
    from memwarden.domain.services.reembed import DEFAULT_BATCH  # noqa: PLC0415

    with Runtime(follow=False) as runtime:
        service = runtime.reembed
        try:
            bar = ProgressBar("reembed", service.missing(), sys.stderr, unit=" memories/s")
            report = service.run(OPERATOR, args.batch or DEFAULT_BATCH, bar.update)
            bar.finish()
        except DomainError as error:
            sys.stderr.write(f"\nreembed stopped ({error.code}): {error.detail}; re-run to resume\n")
            return 1
    summary = ReembedSummary(report=report, seconds=round(time.monotonic() - began, 3))
    if args.json:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    else:
        sys.stdout.write(summary_text(summary) + "\n")
    return 0 if report.serving == report.model else 1


def summary_text(summary: ReembedSummary) -> str:
    r = summary.report
    done = f"{r.reembedded} memories re-embedded with {r.model} ({r.dimensions} dimensions) in {summary.seconds:.1f}s"
    if r.adopted:
        return f"{done}; the search index serves {r.model} from here on"
    if r.serving == r.model:
        return f"{done}; the search index serves {r.model}"
    return f"{done}; {r.missing} still lack one: the search index keeps serving {r.serving}; re-run to finish"


def register(sub: Any) -> None:
    """``memwarden reembed``; called by api/cli/main.py."""
    parser = sub.add_parser(
        "reembed", help="embed every memory by the configured embedder, then switch search to it"
    )
    parser.add_argument(
        "--batch", type=_batch_size, help="memories per batch (default: the reembed service's)"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=cmd_reembed)


def _batch_size(text: str) -> int:
    value = int(text)
    if not 0 < value <= 4096:
        raise argparse.ArgumentTypeError("between 1 and 4096")
    return value
