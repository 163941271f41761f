"""The tool catalog: one tool per syscall (``POST /v1/mem/<name>``), its input schema made
from the route's body struct, and a description written for a model. Identity never
appears in a schema: the API key decides who the caller is."""

from __future__ import annotations

import functools
from typing import Any

import mcp_types as types
import msgspec

from memwarden.api.http.routes.erasure import ForgetBody
from memwarden.api.http.routes.proofs import ProveBody
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
)


class Tool(msgspec.Struct, frozen=True):
    name: str
    body: type[msgspec.Struct] | None
    description: str

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
    ),
    Tool(
        "write_batch",
        WriteBatchBody,
        "Remember up to 256 things at once: `items` are `write` bodies, decided in order and stored "
        "together; each gets its own result (a bad item is rejected alone)." + _WHO,
    ),
    Tool(
        "write_status",
        TicketBody,
        "The state (pending, running, done, failed) and result of a write sent with `async: true`, "
        "by its `ticket`.",
    ),
    Tool(
        "read",
        ReadBody,
        "One memory by `id`, with its status, trust tier, validity and provenance. Give `as_of` "
        "(what was believed then) and/or `valid_at` (what held in the world then) to look back in "
        "time. A memory you may not see reads as not found.",
    ),
    Tool(
        "search",
        SearchBody,
        "Find current memories you may see that match `query` (meaning and words both), best "
        "first; `k` results (default 10), optionally within a `token_budget`, filtered by `tags` "
        "or `selectors`, or as known at `as_of` / true at `valid_at`.",
    ),
    Tool(
        "assemble",
        AssembleBody,
        "Build your working set for a task within `budget_tokens`: policy directives first, then "
        "pinned, recently used and relevant memories (give `task_hint`). Blocks that do not fit "
        "are skipped, never cut; the answer carries a signed receipt of what you were shown.",
    ),
    Tool(
        "fault",
        FaultBody,
        "Ask the `question` your working set could not answer: the answer is the memories (L2) or "
        "published knowledge (L3) that answer it, or a miss (`hit: false`).",
    ),
    Tool(
        "history",
        IdBody,
        "A memory's chain of corrections and successions, both directions, with times and reasons.",
    ),
    Tool(
        "verify",
        VerifyBody,
        "Countersign someone else's memory by `id`: `supports: true` if it is right, false if it "
        "is wrong, with an optional `note`. Your own writes cannot be verified by you.",
    ),
    Tool(
        "pin",
        IdBody,
        "Pin a memory by `id` so every working set you assemble includes it while it fits.",
    ),
    Tool(
        "unpin",
        IdBody,
        "Unpin a memory by `id`: assemble no longer includes it just because it was pinned.",
    ),
    Tool(
        "stats",
        None,
        "Counts for your namespace: current, disputed, retired and erased memories, open disputes, "
        "fault hit rate and how far the read models lag behind the ledger.",
    ),
    Tool(
        "policy",
        None,
        "The policy in force for your namespace and its ancestors, and the directives you must "
        "follow (each with whether you acknowledged it).",
    ),
    Tool(
        "policy_ack",
        AckBody,
        "Acknowledge a policy directive (from the `policy` tool) by its `directive_id`: you have "
        "read it and will follow it.",
    ),
    Tool(
        "share",
        ShareBody,
        "Share a memory by `id` with another namespace of your organization (`with`). Admins and "
        "owners only.",
    ),
    Tool(
        "forget",
        ForgetBody,
        "Erase for good, with a `reason`: the memories by `ids`, every memory about a `subject`, or "
        "a `subtree` below your namespace. Returns the count and a signed deletion certificate. "
        "Members, admins and owners only; it cannot be undone.",
    ),
    Tool(
        "prove",
        ProveBody,
        "For auditors: prove that ledger `position` (a deletion certificate's, an audit record's, a "
        "receipt's) is in the log, against the signed checkpoint of tree `size` (default: the newest). "
        "The answer holds the inclusion proof, the signed checkpoint note and the log's verifier key, "
        "to check offline with memwarden_client.proofs (RFC 6962).",
    ),
)
BY_NAME = {tool.name: tool for tool in TOOLS}
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def input_schema(body: type[msgspec.Struct] | None) -> dict[str, Any]:
    """The body's JSON schema with the body itself at the root (its nested types stay in
    ``$defs``, where the ``#/$defs/…`` references still point)."""
    if body is None:
        return dict(_NO_ARGUMENTS)
    generated = msgspec.json.schema(body)
    defs: dict[str, Any] = generated.get("$defs", {})
    name = str(generated["$ref"]).rsplit("/", 1)[-1]
    root = dict(defs.pop(name))
    for developer_note in ("title", "description"):  # the tool's description speaks to the model
        root.pop(developer_note, None)
    if defs:
        root["$defs"] = defs
    return root


@functools.cache
def listing() -> tuple[types.Tool, ...]:
    """The catalog, made once (``tools/list`` answers it)."""
    return tuple(
        types.Tool(name=tool.name, description=tool.description, input_schema=input_schema(tool.body))
        for tool in TOOLS
    )


def no_header_parameters(_name: str) -> None:
    """The schema the current protocol checks ``Mcp-Param-*`` headers against: none of our
    tools declares a header parameter, so there is nothing to check (``None`` tells the SDK
    so, instead of it walking the tool's schema on every call)."""
