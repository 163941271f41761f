"""The tool catalog: one tool per syscall (``POST /v1/mem/<name>``), its input schema made
from the route's body struct, a description written for a model, and the MCP annotations
(read-only, destructive, idempotent) a client uses to decide what to confirm with a person.
Identity never appears in a schema: the API key decides who the caller is.

``tools/list`` offers a caller only the tools its role may call. The roles are the routes'
own (the ``Syscall`` on each route handler), read here, never restated: the gate that refuses
a call is the one source, and the listing only spares an agent tools it would be refused."""

from __future__ import annotations

import functools
from typing import Any

import mcp_types as types
import msgspec
from litestar import Controller
from litestar.handlers import HTTPRouteHandler

from memwarden.api.http.routes.erasure import ErasureController, ForgetBody
from memwarden.api.http.routes.mem import MemController
from memwarden.api.http.routes.proofs import ProveBody, ProveController
from memwarden.api.http.routing import syscall_of
from memwarden.api.http.schemas import (
    AckBody,
    AssembleBody,
    FaultBody,
    IdBody,
    ReadBody,
    SearchBody,
    ShareBody,
    TicketBody,
    VerifyBody,
    WriteBatchBody,
    WriteBody,
    WriteItemBody,
)


class Hints(msgspec.Struct, frozen=True, kw_only=True):
    """MCP's tool annotations. ``read_only``: it changes nothing a caller can see (an audit
    record aside); ``destructive``: what it changes cannot be had back; ``idempotent``: a
    second identical call changes nothing more."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


READS = Hints(read_only=True, idempotent=True)
WRITES = Hints()
TOGGLES = Hints(idempotent=True)


class Tool(msgspec.Struct, frozen=True):
    name: str
    body: type[msgspec.Struct] | None
    description: str
    hints: Hints = WRITES

    @property
    def path(self) -> str:
        return f"/v1/mem/{self.name}"


_WHO = " Who you are (namespace, actor, role) comes from your API key; never pass it."

TOOLS: tuple[Tool, ...] = (
    Tool(
        "write",
        WriteBody,
        "Remember one thing: a fact, preference, episode, pointer or instruction, as `content`. "
        "Optionally give it a slot (`subject` + `attribute` + `value`) so a later write to the same "
        "slot supersedes it, `event_time`/`valid_from` for when it holds, and `provenance.source` "
        "(conversation unless you know better). The answer's `outcome` says what happened: stored, "
        "deduplicated (you knew it already), superseded (it replaced an older fact), disputed "
        "(it contradicts a more trusted fact; a person will review it) or rejected (with reasons)." + _WHO,
        WRITES,
    ),
    Tool(
        "write_batch",
        WriteBatchBody,
        "Remember up to 256 things at once: `items` are `write` bodies, decided in order and stored "
        "together; each gets its own result (a bad item is rejected alone)." + _WHO,
        WRITES,
    ),
    Tool(
        "write_status",
        TicketBody,
        "The state (pending, running, done, failed) and result of a write sent with `async: true`, "
        "by its `ticket`.",
        READS,
    ),
    Tool(
        "read",
        ReadBody,
        "One memory by `id`, with its status, trust tier, validity and provenance. Give `as_of` "
        "(what was believed then) and/or `valid_at` (what held in the world then) to look back in "
        "time: `now`, an RFC 3339 time with a zone, or a date; the answer is the same memory as it "
        "stood then, with the instants added. A memory that was not recorded yet or did not hold "
        "then is the error `not_valid_then`; one you may not see reads as not found.",
        READS,
    ),
    Tool(
        "search",
        SearchBody,
        "Find current memories you may see that match `query` (meaning and words both), best "
        "first; `k` results (default 10), optionally within a `token_budget`, filtered by `tags` "
        "or `selectors`, or as known at `as_of` / true at `valid_at`.",
        READS,
    ),
    Tool(
        "assemble",
        AssembleBody,
        "Build your working set for a task within `budget_tokens`: policy directives first, then "
        "pinned, recently used and relevant memories (give `task_hint`). Blocks that do not fit "
        "are skipped, never cut; the answer carries a signed receipt of what you were shown.",
        WRITES,
    ),
    Tool(
        "fault",
        FaultBody,
        "Ask the `question` your working set could not answer: the answer is the memories (L2) or "
        "published knowledge (L3) that answer it, or a miss (`hit: false`).",
        WRITES,
    ),
    Tool(
        "history",
        IdBody,
        "A memory's chain of corrections and successions, both directions, with times and reasons.",
        READS,
    ),
    Tool(
        "verify",
        VerifyBody,
        "Countersign someone else's memory by `id`: `supports: true` if it is right, false if it "
        "is wrong, with an optional `note`. Your own writes cannot be verified by you.",
        WRITES,
    ),
    Tool(
        "pin",
        IdBody,
        "Pin a memory by `id` so every working set you assemble includes it while it fits.",
        TOGGLES,
    ),
    Tool(
        "unpin",
        IdBody,
        "Unpin a memory by `id`: assemble no longer includes it just because it was pinned.",
        TOGGLES,
    ),
    Tool(
        "stats",
        None,
        "Counts for your namespace: current, disputed, retired and erased memories, open disputes, "
        "fault hit rate and how far the read models lag behind the ledger.",
        READS,
    ),
    Tool(
        "policy",
        None,
        "The policy in force for your namespace and its ancestors, and the directives you must "
        "follow (each with whether you acknowledged it).",
        READS,
    ),
    Tool(
        "policy_ack",
        AckBody,
        "Acknowledge a policy directive (from the `policy` tool) by its `directive_id`: you have "
        "read it and will follow it.",
        TOGGLES,
    ),
    Tool(
        "share",
        ShareBody,
        "Share a memory by `id` with another namespace of your organization (`with`). Admins and "
        "owners only.",
        TOGGLES,
    ),
    Tool(
        "forget",
        ForgetBody,
        "Erase for good, with a `reason`: the memories by `ids`, every memory about a `subject`, or "
        "a `subtree` below your namespace. Returns the count and a signed deletion certificate. "
        "Members, admins and owners only; it cannot be undone.",
        Hints(destructive=True, idempotent=True),
    ),
    Tool(
        "prove",
        ProveBody,
        "For auditors: prove that ledger `position` (a deletion certificate's, an audit record's, a "
        "receipt's) is in the log, against the signed checkpoint of tree `size` (default: the newest). "
        "The answer holds the inclusion proof, the signed checkpoint note and the log's verifier key, "
        "to check offline with memwarden_client.proofs (RFC 6962).",
        READS,
    ),
)
BY_NAME = {tool.name: tool for tool in TOOLS}
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
ROUTE_CONTROLLERS: tuple[type[Controller], ...] = (MemController, ErasureController, ProveController)


@functools.cache
def tool_roles() -> dict[str, frozenset[str]]:
    """Who may call each tool: its route's ``Syscall.roles``. A tool without a route fails
    here, at the first listing, not at a call."""
    roles: dict[str, frozenset[str]] = {}
    for controller in ROUTE_CONTROLLERS:
        for handler in vars(controller).values():
            call = syscall_of(handler) if isinstance(handler, HTTPRouteHandler) else None
            if call is not None:
                roles[call.name] = call.roles
    missing = set(BY_NAME) - set(roles)
    if missing:
        raise LookupError(f"MCP tools without a route: {sorted(missing)}")
    return {name: roles[name] for name in BY_NAME}


def _root(body: type[msgspec.Struct]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body's schema and its ``$defs`` (the body itself taken out of them)."""
    generated = msgspec.json.schema(body)
    defs: dict[str, Any] = generated.get("$defs", {})
    name = str(generated["$ref"]).rsplit("/", 1)[-1]
    return dict(defs.pop(name)), defs


def input_schema(body: type[msgspec.Struct] | None) -> dict[str, Any]:
    """The body's JSON schema with the body itself at the root (its nested types stay in
    ``$defs``, where the ``#/$defs/…`` references still point). A batch's items are typed
    as the write body they are (the route reads them one by one, so its struct says only
    "objects")."""
    if body is None:
        return dict(_NO_ARGUMENTS)
    root, defs = _root(body)
    for developer_note in ("title", "description"):  # the tool's description speaks to the model
        root.pop(developer_note, None)
    if body is WriteBatchBody:
        item, item_defs = _root(WriteItemBody)
        item["properties"] = {k: v for k, v in item["properties"].items() if k != "async"}
        defs = {**defs, **item_defs, "WriteItem": item}
        root["properties"]["items"] = {**root["properties"]["items"], "items": {"$ref": "#/$defs/WriteItem"}}
    if defs:
        root["$defs"] = defs
    return root


def tool_annotations(hints: Hints) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=False,  # memwarden's own memory: nothing outside it is touched
    )


@functools.cache
def listing(role: str | None = None) -> tuple[types.Tool, ...]:
    """The catalog for a caller of ``role`` (None: every tool), made once per role
    (``tools/list`` answers it)."""
    roles = tool_roles()
    return tuple(
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=input_schema(tool.body),
            annotations=tool_annotations(tool.hints),
        )
        for tool in TOOLS
        if role is None or role in roles[tool.name]
    )


def no_header_parameters(_name: str) -> None:
    """The schema the current protocol checks ``Mcp-Param-*`` headers against: none of our
    tools declares a header parameter, so there is nothing to check (``None`` tells the SDK
    so, instead of it walking the tool's schema on every call)."""
