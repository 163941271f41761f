"""The ``memwarden mcp`` command (api/mcp/stdio.py is the server it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memwarden.domain.model.keys import parse_key
from memwarden.domain.settings import Settings

KEY_VARIABLE = "MEMWARDEN_API_KEY"
URL_VARIABLE = "MEMWARDEN_URL"


def cmd_mcp(_args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    key = settings.api_key or ""
    if parse_key(key) is None:
        sys.stderr.write(f"memwarden mcp: set {KEY_VARIABLE} to an API key (mw_…)\n")
        return 2
    import anyio  # noqa: PLC0415 - the MCP server only when this command runs

    from memwarden.api.mcp.stdio import serve_stdio  # noqa: PLC0415

    anyio.run(serve_stdio, key, settings)
    return 0


def register(sub: Any) -> None:
    """``memwarden mcp``; called by api/cli/main.py."""
    parser = sub.add_parser(
        "mcp",
        help=f"MCP over stdio: key from ${KEY_VARIABLE}, server ${URL_VARIABLE} or the local database",
        description=f"MCP over stdio, one tool per syscall. The API key is ${KEY_VARIABLE} (required); "
        f"tool calls go to the memwarden serve at ${URL_VARIABLE} when set, else to the local database "
        "(DATABASE_URL or the embedded default in MEMWARDEN_DATA_DIR). Stdout carries the protocol only.",
    )
    parser.set_defaults(handler=cmd_mcp)
