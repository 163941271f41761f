"""``memwarden bench …``: the benchmarks live beside the product in the source checkout
(``benchmarks/``), not in the wheel. An installed wheel has the command and says where the
benchmarks are; a checkout (an editable install) runs them."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[2]
"""The folder that holds ``api/`` in a source checkout (in a wheel: the ``memwarden`` package)."""


def benchmarks_in_checkout() -> Any | None:
    """The checkout's ``benchmarks.commands`` module, or None where memwarden was installed
    from a wheel. Only the checkout's own folder is looked in, so a different distribution's
    top-level ``benchmarks`` package is never taken for ours."""
    if not (CHECKOUT / "benchmarks" / "commands.py").is_file():
        return None
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    return importlib.import_module("benchmarks.commands")


def _no_benchmarks(_args: argparse.Namespace) -> int:
    sys.stderr.write(
        "memwarden bench runs from a source checkout: the benchmarks are in its benchmarks/ folder,"
        " which the wheel does not ship (pip install -e . from the checkout).\n"
    )
    return 2


def register(sub: Any) -> None:
    """The ``bench`` group, with the checkout's benchmarks as its subcommands when there are any."""
    parser = sub.add_parser("bench", help="benchmarks, each with its reference (from a source checkout)")
    commands = benchmarks_in_checkout()
    if commands is None:
        parser.set_defaults(handler=_no_benchmarks)
        return
    commands.register(parser.add_subparsers(dest="bench_command", required=True))
