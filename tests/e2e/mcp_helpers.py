"""An app served by uvicorn on loopback in a thread (MCP's client speaks real HTTP), and the
official ``mcp`` client connected to its ``/mcp`` with a key."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from tests.processes import free_port


@contextmanager
def served_app(runtime: Runtime) -> Iterator[str]:
    """``create_app(runtime)`` under uvicorn on a free loopback port; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(create_app(runtime=runtime), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the app did not come up")
        time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


@asynccontextmanager
async def mcp_client(base: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


def payload(result: types.CallToolResult) -> Any:
    """A tool result's JSON (its text block, which is the API's answer or error)."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return json.loads(block.text)
