"""The MCP server (the official ``mcp`` package's low-level ``Server``): ``tools/list``
answers the catalog of api/mcp/tools.py, ``tools/call`` sends the syscall through
``Syscalls`` and turns its HTTP answer into a tool result. An error answer is a tool
error (``isError``) carrying the API's ``{"error", "detail"}``, never a protocol crash."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import mcp_types as types
import msgspec
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from memwarden.api.mcp.syscalls import Reply, Syscalls
from memwarden.api.mcp.tools import BY_NAME, listing, no_header_parameters

SERVER_NAME = "memwarden"
INSTRUCTIONS = (
    "memwarden is your governed long-term memory. Write what you learn (write), look it up "
    "(search, read), build a working set for a task (assemble) and ask what it could not answer "
    "(fault). Your API key decides who you are and what you may see; no tool takes a namespace, "
    "actor or role."
)
Authorization = Callable[[ServerRequestContext[Any, Any]], str]
"""The ``Authorization`` header a tool call is made with (its HTTP request's, or the
stdio server's key)."""
RoleOf = Callable[[ServerRequestContext[Any, Any]], str | None]
"""The role of the key a request carries (None: unknown here, every tool is listed and the
gate refuses what the role may not call)."""


def every_role(_ctx: ServerRequestContext[Any, Any]) -> str | None:
    return None


class ToolAnswer(msgspec.Struct, frozen=True):
    """A tool call's outcome, before it is shaped for a wire: its text, structured content
    and whether it is an error."""

    text: str
    structured: dict[str, Any]
    is_error: bool

    def result(self) -> types.CallToolResult:
        """As the SDK's result type (the SDK's own path validates and serializes it)."""
        return types.CallToolResult(
            content=[types.TextContent(text=self.text)],
            structured_content=self.structured,
            is_error=self.is_error,
        )

    def wire(self) -> dict[str, Any]:
        """As the result's JSON members (what the SDK puts on the wire for ``result()``)."""
        return {
            "content": [{"type": "text", "text": self.text}],
            "structuredContent": self.structured,
            "isError": self.is_error,
        }


def tool_error(code: str, detail: str, retry_after: str | None = None) -> ToolAnswer:
    error: dict[str, Any] = {"error": code, "detail": detail}
    if retry_after is not None:
        error["retry_after"] = retry_after
    return ToolAnswer(json.dumps(error), error, is_error=True)


def tool_answer(reply: Reply) -> ToolAnswer:
    """The syscall's answer as a tool result: the JSON body as text and as structured content."""
    try:
        decoded = msgspec.json.decode(reply.body) if reply.body else {}
    except msgspec.DecodeError:
        decoded = None
    if reply.status >= 400:
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            return tool_error(decoded["error"], str(decoded.get("detail", "")), reply.retry_after)
        return tool_error("unavailable", f"the API answered HTTP {reply.status}", reply.retry_after)
    structured = decoded if isinstance(decoded, dict) else {"result": decoded}
    return ToolAnswer(reply.body.decode("utf-8", "replace"), structured, is_error=False)


def encode_arguments(arguments: dict[str, Any] | None) -> bytes | None:
    """The arguments as the request body. ASCII-escaped, so a lone surrogate reaches the
    gate as ``\\ud800`` and is refused there, naming its field; ``None`` when they cannot
    be JSON at all (nested past the interpreter's recursion limit)."""
    try:
        return json.dumps(arguments or {}, ensure_ascii=True, allow_nan=False).encode("ascii")
    except (ValueError, RecursionError, TypeError):
        return None


async def call_tool(
    syscalls: Syscalls, name: str, arguments: dict[str, Any] | None, authorization: str
) -> ToolAnswer:
    """One tool call: its syscall, sent with the caller's ``Authorization``."""
    tool = BY_NAME.get(name)
    if tool is None:
        return tool_error("invalid_request", f"no tool named {name[:64]!r}")
    body = encode_arguments(arguments)
    if body is None:
        return tool_error("invalid_request", "the arguments are not a JSON object this API can read")
    try:
        reply = await syscalls.post(tool.path, body, authorization)
    except httpx.HTTPError as error:
        return tool_error("unavailable", f"the memwarden API cannot be reached ({type(error).__name__})")
    return tool_answer(reply)


def build_server(
    syscalls: Syscalls, authorization: Authorization, role_of: RoleOf = every_role
) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(listing(role_of(ctx))))

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        answer = await call_tool(syscalls, params.name, params.arguments, authorization(ctx))
        return answer.result()

    server: Server[Any] = Server(
        SERVER_NAME,
        version="0.1.0",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=no_header_parameters,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )
    server.middleware = []  # the SDK's default OpenTelemetry span per message: nothing exports it here
    return server
