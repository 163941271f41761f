"""What every route is for, in the OpenAPI document (``summary`` and ``description``), with
the roles that may call it. One table, keyed by the route's op (health routes by path), so
the routes stay thin; ``describe_routes`` fails loudly when a route has no entry, and
docs/reference.md is generated from the result (``python -m api.http.reference``)."""

from __future__ import annotations

from litestar import Litestar
from litestar.enums import HttpMethod
from litestar.openapi.spec import Operation
from litestar.routes import HTTPRoute

from memwarden.api.http.routing import syscall_of

ROUTES: dict[str, tuple[str, str]] = {
    "write": (
        "Write one memory",
        "Stores `content` as a memory in the caller's namespace after verification (empty, too large, "
        "low-information, a forbidden secret and unstorable text are rejected with reasons), "
        "classification, deduplication and deterministic supersedence on the slot "
        "(`subject`+`attribute`). The outcome is `stored`, `deduplicated`, `superseded`, `disputed` "
        "(it contradicts a more trusted memory: quarantined until a reviewer decides) or `rejected`. "
        "An unslotted statement the judge finds contradicting a close current memory of the namespace "
        "is settled by the namespace's `conflict_review` dial, as the autopilot would: an automatic "
        "settlement is a decision (`decisions`, overturnable), a contradiction left to a person a "
        "finding (`findings`), both in the write's own append. "
        "`async: true` queues it and answers 202 with a ticket for `write_status`.",
    ),
    "write_batch": (
        "Write up to 256 memories",
        "Each item is a `write` body, decided in order against the state the earlier items left, "
        "all appended in one transaction with one audit record. A bad item is `rejected` with its "
        "reasons and the others go in; a malformed batch is a 400 for all of it.",
    ),
    "write_status": (
        "The state of a queued write",
        "`pending`, `running`, `done` (with the write's result) or `failed`, for a ticket of the "
        "caller's own `async` write.",
    ),
    "read": (
        "Read one memory",
        "The memory by `id` if the caller may see it (its namespace, an ancestor, or shared with "
        "it); `content` is null once erased. `as_of` answers what was believed then, `valid_at` "
        "what held in the world then. A memory the caller may not see is a 404, like a missing one.",
    ),
    "search": (
        "Search current memories",
        "Hybrid retrieval (vector and lexical lanes, merged) over the memories the caller may see; "
        "`k` results within an optional `token_budget`, filtered by `tags`/`selectors`, or as known "
        "at `as_of` / true at `valid_at`. `degraded` says a lane was unavailable (e.g. lexical only).",
    ),
    "assemble": (
        "Assemble a working set",
        "A capsule of blocks within `budget_tokens`: policy directives first (at most 35% of the "
        "budget), then pins, recently used memories and relevance to `task_hint`. A block that does "
        "not fit is skipped, never cut. The receipt (Merkle root over the blocks, ledger position, "
        "signature) goes on the ledger, so what the agent saw can be proven later.",
    ),
    "fault": (
        "Ask what the working set could not answer",
        "Scores the `question` against memories (L2, accepted at 0.35) and then published knowledge "
        "(L3, at 0.15); the answer says which tier answered, or that it was a miss. Audited.",
    ),
    "history": (
        "A memory's corrections and successions",
        "The supersedence chain of the memory, both directions, each version with its times, "
        "status and the reason it was superseded.",
    ),
    "verify": (
        "Countersign a memory",
        "An actor other than its writer supports or refutes the memory; a supported memory becomes "
        "`verified`. The writer cannot verify its own memory (403).",
    ),
    "pin": ("Pin a memory", "Assemble includes a pinned memory in the caller's working sets while it fits."),
    "unpin": ("Unpin a memory", "Undoes `pin`."),
    "stats": (
        "Counts for the caller's namespace",
        "Current, disputed, retired and erased memories, shares and pins, open disputes, fault hit "
        "rate, how far the read models lag behind the ledger, and who runs the background passes "
        "(`passes`): `consuming` is false when no worker consumes them.",
    ),
    "policy": (
        "The effective policy",
        "The policy in force for the caller's namespace (its own settings over its ancestors') and "
        "the directives the caller must follow, each with whether it acknowledged it.",
    ),
    "policy_ack": ("Acknowledge a directive", "Records that the caller read the directive `directive_id`."),
    "share": (
        "Share a memory with another namespace",
        "Makes the memory visible to the namespace `with` (in the caller's tenant).",
    ),
    "forget": (
        "Erase memories (crypto-shredding)",
        "Erases the memories named by `ids`, about a `subject`, or in a `subtree` below the caller "
        "(downward only), with a `reason`: their data keys are destroyed, every read model drops "
        "them, and a signed deletion certificate is returned. The hash chain still verifies.",
    ),
    "admin.keys.create": (
        "Mint an API key",
        "A key for `actor` with `role` in the namespace `target` (within the caller's subtree; a role "
        "above the caller's is refused). The key is shown once.",
    ),
    "admin.keys.revoke": ("Revoke an API key", "The key stops authenticating at once."),
    "admin.keys.list": ("List API keys", "Keys in the caller's subtree, without secrets."),
    "admin.policies.get": (
        "A namespace's own policy",
        "The settings the namespace sets itself (null: inherited), its version, and the effective policy.",
    ),
    "admin.policies.put": (
        "Set a namespace's own policy",
        "Replaces the namespace's own policy whole (conflict review dial, forbid secrets, rate limit, "
        "directives, driver, suspended). `expected_version` makes it conditional (409 on mismatch).",
    ),
    "admin.disputes.list": (
        "List disputes",
        "Disputes in the caller's subtree (optionally by `status`): a quarantined memory and the "
        "more trusted incumbent it contradicts.",
    ),
    "resolve_dispute": (
        "Resolve a dispute",
        "`uphold_new` (the new memory becomes active and supersedes the incumbent), `keep_old` (the "
        "new one is retired, the reason kept), `edit` (a corrected memory is written with `manual` "
        "provenance) or `both_valid` (both active: not a contradiction).",
    ),
    "admin.findings.list": (
        "List findings",
        "Contradictions the conflict autopilot found and left for a person (the namespace's "
        "`conflict_review` dial, or a memory of an ancestor namespace), in the caller's subtree; "
        "`status` is `open` (default), `resolved` or `all`.",
    ),
    "resolve_finding": (
        "Resolve a finding",
        "`keep_a` or `keep_b` (the other memory is retired by the reviewer), `both_valid` (not a "
        "contradiction; both stay) or `dismiss` (nothing changes). Audited; `reason` is kept.",
    ),
    "admin.decisions.list": (
        "List automatic decisions",
        "Contradictions the conflict autopilot settled by itself (higher trust wins, equal trust "
        "the newer), in the caller's subtree; `status` is `settled`, `overturned` or `all` (default).",
    ),
    "overturn_decision": (
        "Overturn an automatic decision",
        "The memory that lost is written again and supersedes the winner; the ledger is not "
        "rewritten, and the reversal and its `reason` are audited.",
    ),
    "admin.proposals.list": (
        "List consolidation proposals",
        "Canonical statements the consolidation pass drafted from clusters of memories "
        "(near-duplicates, a slot's history), each with its sources, in the caller's subtree; "
        "`status` is `pending_review` (default), `approved`, `rejected` or `all`.",
    ),
    "approve_proposal": (
        "Approve a proposal",
        "Publishes the proposal's text (as drafted or as edited) as an immutable L3 knowledge "
        "version with `consolidation` provenance, which `fault` can answer from. Nothing is "
        "published without this step.",
    ),
    "edit_proposal": (
        "Edit a proposal",
        "Replaces the text a later approval publishes (`content`); the proposal stays `pending_review`.",
    ),
    "reject_proposal": ("Reject a proposal", "The proposal is closed for good; nothing is published."),
    "compliance.asof": (
        "What was believed at a time",
        "The memories as known at `as_of` (and true at `valid_at`, default `as_of`) in the subtree of "
        "`target` (default: the caller's namespace), with the ledger position that time maps to. "
        "Paged by `cursor`.",
    ),
    "compliance.audit": (
        "The audit log",
        "Audit records in the caller's subtree, in ledger order, filtered by time, actor, op and "
        "outcome; paged by `cursor`. A walk reads the log as it stood at its first page, so the "
        "audit records of its own page reads never extend it.",
    ),
    "compliance.ledger.verify": (
        "Verify the hash chain",
        "Recomputes the chain (optionally against a signed checkpoint) and names the first bad "
        "position if anything before the head was changed, removed or reordered.",
    ),
    "compliance.ledger.checkpoint": (
        "Sign a checkpoint",
        "The ledger head (position, hash, time) signed with ed25519, verifiable offline.",
    ),
    "compliance.checkpoints": (
        "The signed checkpoints",
        "The checkpoints the ledger has signed (periodically and on demand), newest first; paged by "
        "`cursor`. Each is `{position, hash, time, key_id, signature}` as `ledger/checkpoint` made "
        "it, and can be given to `ledger/verify` to prove the chain still reaches that head.",
    ),
    "compliance.proofs.inclusion": (
        "Prove one ledger position",
        "The RFC 6962 inclusion proof of ledger `position` (leaf `position - 1`) in the Merkle tree of "
        "the first `size` events: its leaf hash, the root of that tree and the audit path, base64. "
        "`memwarden_client.proofs.verify_inclusion` checks it offline against a signed checkpoint's root.",
    ),
    "compliance.proofs.consistency": (
        "Prove the ledger was only appended to",
        "The RFC 6962 consistency proof that the tree of `from` events is a prefix of the tree of `to` "
        "events, with both roots, base64: what a witness checks before it cosigns a new checkpoint.",
    ),
    "prove": (
        "Prove a ledger position, ready to check offline",
        "For compliance roles: the RFC 6962 inclusion proof of `position` against the signed-note "
        "checkpoint of tree `size` (default: the newest), with that checkpoint and the log's verifier "
        "key, in one answer that `memwarden_client.proofs` checks with no server.",
    ),
    "compliance.checkpoints.cosign": (
        "Keep a witness's cosignature",
        "A C2SP `tlog-cosignature` line (Ed25519) over the signed-note checkpoint of tree `size`, from a "
        "witness whose verifier key the server is configured with (`MEMWARDEN_WITNESS_KEYS`); checked, "
        "then kept beside the checkpoint and listed with it. `memwarden witness` posts them.",
    ),
    "compliance.certificates.get": ("A deletion certificate", "The signed certificate of an erasure, by id."),
    "compliance.certificates.verify": (
        "Verify a deletion certificate",
        "Checks the certificate's signature and that the erasure it describes is on the ledger.",
    ),
    "ops.projections": ("Projection status", "Each read model's ledger position and lag."),
    "ops.projections.rebuild": (
        "Rebuild a projection",
        "Replays the ledger into a fresh copy of the read model and switches to it; `verify` compares "
        "it with the current one first.",
    ),
    "/healthz": ("Liveness", "The process is up."),
    "/readyz": (
        "Readiness",
        "The ledger is reachable and the projections are within lag (else 503). With `REDIS_URL` set"
        " and no worker consuming the background passes, still 200 but `status` is `degraded`.",
    ),
    "/metrics": ("Metrics", "Prometheus text."),
}
PUBLIC = "Public: no API key."
SAME_NAME = (
    "write", "write_batch", "write_status", "read", "search", "assemble", "fault", "history",
    "verify", "pin", "unpin", "stats", "policy", "policy_ack", "share", "forget",
    "resolve_dispute", "resolve_finding", "overturn_decision",
    "approve_proposal", "edit_proposal", "reject_proposal", "prove",
)  # fmt: skip
"""Ops that are already a method's name."""
OPERATION_IDS: dict[str, str] = {
    **{name: name for name in SAME_NAME},
    "admin.keys.create": "create_key",
    "admin.keys.revoke": "revoke_key",
    "admin.keys.list": "keys",
    "admin.policies.get": "namespace_policy",
    "admin.policies.put": "put_namespace_policy",
    "admin.disputes.list": "disputes",
    "admin.findings.list": "findings",
    "admin.decisions.list": "decisions",
    "admin.proposals.list": "proposals",
    "compliance.asof": "as_of",
    "compliance.audit": "audit",
    "compliance.ledger.verify": "verify_ledger",
    "compliance.ledger.checkpoint": "make_checkpoint",
    "compliance.checkpoints": "checkpoints",
    "compliance.certificates.get": "certificate",
    "compliance.certificates.verify": "verify_certificate",
    "compliance.proofs.inclusion": "inclusion_proof",
    "compliance.proofs.consistency": "consistency_proof",
    "compliance.checkpoints.cosign": "cosign_checkpoint",
    "ops.projections": "projections",
    "ops.projections.rebuild": "rebuild_projection",
    "/healthz": "healthz",
    "/readyz": "readyz",
    "/metrics": "metrics",
}
"""Each operation's ``operationId``: snake_case, the name of its method on the Python client
(``memwarden_client``: ``client.history(id=…)``), and of its request struct in PascalCase
(``History``). A ``HEAD`` twin of a ``GET`` is ``<id>_head``."""


def roles_line(roles: frozenset[str] | None) -> str:
    order = ("agent", "member", "auditor", "admin", "owner")
    return PUBLIC if roles is None else "Roles: " + ", ".join(r for r in order if r in roles) + "."


def describe_routes(app: Litestar) -> None:
    """Give every documented operation its summary and description (with its roles)."""
    paths = app.openapi_schema.paths or {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or route.path_format not in paths:
            continue
        item = paths[route.path_format]
        for handler in route.route_handlers:
            if handler.http_methods <= {HttpMethod.OPTIONS}:
                continue  # Litestar's own CORS preflight handler: not documented
            call = syscall_of(handler)
            key = call.name if call is not None else route.path_format
            if key not in ROUTES:
                raise KeyError(f"no description for route {route.path_format} ({key})")
            if key not in OPERATION_IDS:
                raise KeyError(f"no operationId for route {route.path_format} ({key})")
            summary, description = ROUTES[key]
            roles = call.roles if call is not None else None
            for method in handler.http_methods:
                operation: Operation | None = getattr(item, method.lower(), None)
                if operation is None or method == HttpMethod.OPTIONS:
                    continue
                operation.summary = summary
                operation.operation_id = OPERATION_IDS[key] + ("_head" if method == HttpMethod.HEAD else "")
                operation.description = f"{description}\n\n{roles_line(roles)}"
