"""Configuration from the environment, shared by every side (API, workers, CLI)."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

SCHEMA = "memwarden"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memwarden"


PROJECTORS = ("thread", "external")
RERANK_WHEN = ("adaptive", "always")
"""When search reranks: where its lanes disagree (projections/search/drivers.py
``LanesDisagree``), or on every search."""
RERANK_AGREEMENT = 0.2
"""The share of their best k that the lanes must hold in common for ``adaptive`` to skip
the reranker (the trade-off it picks: docs/benchmarks.md, issue 27)."""
RERANK_MAX_TOKENS = 128
"""The tokens of a (query, memory) pair the cross-encoder reads: the longer of the two
(nearly always the memory) is cut to fit. Its time grows with the tokens it reads, so a
long memory would cost a search as much as several short ones; a pair that fits (most turns
of a conversation with a question) is read whole, its score unchanged."""
MIN_RERANK_TOKENS, MAX_RERANK_TOKENS = 16, 512
JUDGES = ("rules", "openai", "none")
DRAFTERS = ("extractive", "openai")
TICKET_RUNNERS = ("thread", "queue")
SHARED_STATES = ("process", "redis")
LEDGER_CHAINS = ("global", "tenant")
LOG_FORMATS = ("text", "json")
AUDIT_SPOOL_MAX_BYTES = 64 * 1024 * 1024


def default_model_lanes(cores: int | None) -> int:
    """Inference sessions per bundled model when ``MEMWARDEN_MODEL_LANES`` is unset: one up
    to three cores, two from four. A lane runs one batch at a time, on the cores shared out
    among the lanes, and holds its own copy of the model's weights as onnxruntime optimizes
    them: on a small machine one lane on both cores is the smaller process for nearly the
    same speed (docs/design-figures.md, Embedding)."""
    return max(1, min(2, (cores or 1) // 2))


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        msg = f"{name} must be one of {', '.join(choices)}, not {value!r}"
        raise ValueError(msg)
    return value


def _chosen(name: str, values: Mapping[str, str], choices: tuple[str, ...]) -> str | None:
    """``values[name]`` if it is one of ``choices``; None when unset or blank."""
    value = (values.get(name) or "").strip()
    return _one_of(name, value, choices) if value else None


def environment_with(chosen: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``chosen`` over it: what a child process is started
    with when a command passes settings on to it (never by changing our own environment)."""
    return {**os.environ, **chosen}


def _share(name: str, values: Mapping[str, str], default: float) -> float:
    """``values[name]``: a share in (0, 1], ``default`` when unset."""
    share = positive_number(values, name, float)
    if share is not None and share > 1:
        raise ValueError(f"{name} must be at most 1, got {share:g}")
    return default if share is None else share


def positive_number(values: Mapping[str, str], name: str, kind: type[int] | type[float]) -> float | None:
    """``values[name]`` as a positive ``kind``, or None when unset or blank; ``ValueError``
    naming the variable when it is not one."""
    raw = (values.get(name) or "").strip()
    if not raw:
        return None
    try:
        number = kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return number


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    data_dir: Path
    database_url: str | None = None
    kek_b64: str | None = None
    signing_key_pem: str | None = None
    redis_url: str | None = None
    """``REDIS_URL``: the Dramatiq broker of ``memwarden worker`` and the shared state of
    several API processes. None (unset): ``memwarden serve`` runs the passes itself and no
    Redis is ever probed, so a Redis that happens to answer on the default port (another
    program's) never swallows them."""
    max_content_bytes: int = 16_384
    read_wait_seconds: float = 5.0
    pool_size: int = 8
    db_timeout_seconds: float = 3.0
    """How long a request waits for a database connection (and a connection attempt for
    the server) before it fails with 503 ``unavailable``."""
    api_key: str | None = None
    """``MEMWARDEN_API_KEY``: the key a client-side command (the witness, MCP over stdio) calls with."""
    log_vkey: str | None = None
    """``MEMWARDEN_LOG_VKEY``: the verifier key of the log a witness watches (its ``--log-key``)."""
    log_origin: str | None = None
    """The transparency log's origin (first line of every checkpoint note, the name of its
    key); None: ``memwarden.local/`` and a digest of the signing key, stable with the key."""
    witness_keys: tuple[str, ...] = ()
    """Verifier keys (C2SP vkeys, Ed25519 cosignature type) of the witnesses whose
    cosignatures the server keeps beside its checkpoints."""
    statement_timeout_seconds: float = 60.0
    """The longest one statement of the service's pooled connections may run before the server
    cancels it (PostgreSQL's ``statement_timeout``): a runaway query frees its connection."""
    metrics_token: str | None = None
    """The bearer token of a full ``/metrics`` scrape (every tenant's series); without it,
    ``/metrics`` answers only a tenant's auditor, admin or owner key, with its tenant's series."""
    request_deadline_seconds: float = 10.0
    """How long any HTTP request may wait on anything (a connection, a statement, a commit)
    before its caller gets 503 ``unavailable`` with ``Retry-After``: a frozen database or a
    network black hole never hangs callers."""
    projector: str = "thread"
    """Where an API process's read models are projected: ``thread`` (a background thread of
    the process) or ``external`` (another process, e.g. ``memwarden project``; this one only
    watches how far the read models are, and a reader that must wait catches up itself
    when nothing else projects)."""
    shared_state: str | None = None
    """Where the API keeps each key's rate-limit bucket and last write: ``process`` (one API
    process) or ``redis`` (several: several machines; ``serve --workers N`` chooses it when
    ``MEMWARDEN_SHARED_STATE`` is unset, None)."""
    extractor_url: str | None = None
    """The base URL of an OpenAI-compatible API whose ``chat/completions`` splits a write
    into facts (docs/architecture.md section 4, step 2); None: every write is stored verbatim."""
    extractor_model: str = ""
    extractor_api_key: str | None = None
    extractor_timeout: float = 10.0
    """Seconds for the connect and for each read of one extraction."""
    extractor_max_input_chars: int = 16_384
    """Longer content is not sent to the extractor: it is stored verbatim (``over_budget``)."""
    extractor_max_facts: int = 32
    """An answer with more facts is not used: the content is stored verbatim (``over_budget``)."""
    judge: str = "rules"
    """The conflict autopilot's judge: ``rules`` (built in), ``openai`` (``judge_url``,
    ``judge_model``) or ``none`` (every memory is recorded ``judge_unavailable``)."""
    judge_url: str | None = None
    judge_model: str = ""
    judge_api_key: str | None = None
    drafter: str = "extractive"
    """Consolidation's drafter: ``extractive`` (built in) or ``openai`` (``drafter_url``,
    ``drafter_model``; a failure or a bad answer falls back to the extractive one)."""
    drafter_url: str | None = None
    drafter_model: str = ""
    drafter_api_key: str | None = None
    tickets: str = "thread"
    """Who runs the async write tickets: ``thread`` (a thread of each API process) or
    ``queue`` (the ``write_ticket`` actor of ``memwarden worker``, each ticket sent to it
    once committed; the default of ``from_env`` when ``REDIS_URL`` is set)."""
    ticket_stale_seconds: float = 60.0
    """A ticket claimed this long ago and not finished (its claimant died) is claimed again."""
    lease_seconds: float = 30.0
    """How long a worker pass's lease lasts without an append (each append renews it)."""
    autopilot_sweep_seconds: float = 60.0
    """How often, and after how long, a dispatching worker hands the autopilot again the
    current memories no pass has judged (a judge that was away, messages lost with Redis)."""
    consolidation_pause_seconds: float = 30.0
    """Consolidation's dispatcher sends at most one batch of namespaces this often: a pass
    looks at a namespace's newest 500 memories, so a busy namespace gets one per pause."""
    checkpoint_every_events: int = 1_000
    checkpoint_every_seconds: float = 600.0
    """The periodic checkpoint pass signs the head once this many events followed the last
    checkpoint, or this many seconds passed and anything was appended meanwhile."""
    ledger_chains: str = "global"
    """``global``: one hash chain and one append lock for every tenant. ``tenant``: each
    tenant's appends also form a chain of their own and lock only that tenant's head, so
    tenants never wait on each other's appends; a short second transaction then gives them
    their global positions (deploy/SCALE.md §3)."""
    audit_spool_max_bytes: int = AUDIT_SPOOL_MAX_BYTES
    """The most a process keeps on disk of the audit records the ledger could not take (a
    database that takes no writes); past it, the calls they record are refused."""
    worker_heartbeat_seconds: float = 60.0
    """After this long without a heartbeat a worker process counts as dead, and the
    messages it had taken go back to the queue."""
    worker_stale_seconds: float = 60.0
    """When passes go to Redis: after this long with no worker heartbeat, or with messages
    queued and no worker having consumed one, ``/readyz``, ``stats`` and ``/metrics`` say
    that nobody runs the passes."""
    model_lanes: int = 2
    """``MEMWARDEN_MODEL_LANES``: inference sessions of each bundled model in a process that
    runs it (the embedder, the cross-encoder); default :func:`default_model_lanes`."""
    log_level: str = "warning"
    """The API process's logging level (``memwarden serve --log-level``)."""
    rerank_when: str = "adaptive"
    """``MEMWARDEN_RERANK_WHEN``: ``adaptive`` (rerank the searches whose lanes disagree) or
    ``always`` (every search; the reranker itself is ``MEMWARDEN_RERANK``)."""
    rerank_agreement: float = RERANK_AGREEMENT
    """``MEMWARDEN_RERANK_AGREEMENT``: with ``adaptive``, the share (0-1] of the lanes' best
    k they must share for a search to skip the reranker: higher reranks more searches."""
    server_timing: bool = False
    """``MEMWARDEN_SERVER_TIMING=1``: a search answers with a ``Server-Timing`` header, its
    time stage by stage (``memwarden bench search --profile`` reads it). Off by default: it
    tells a caller how long each part of the service took."""
    log_format: str = "text"
    """``MEMWARDEN_LOG_FORMAT``: ``text`` (one readable line per record) or ``json`` (one
    JSON object per line, the fields of a worker's pass line as keys)."""
    embedder: str = "minilm"
    """``MEMWARDEN_EMBEDDER``: ``minilm`` (the bundled model), ``bge``, ``openai``
    (``embedder_url``, ``embedder_model``), ``hash`` or ``hash-<dimensions>`` (tests), ``none``
    (no vectors: search is lexical only); domain/embedding/factory.py makes it."""
    embedder_url: str | None = None
    embedder_model: str = ""
    embedder_api_key: str | None = None
    embedder_dimensions: int | None = None
    embedder_timeout: float = 5.0
    """Seconds for one call of an ``openai`` embedder."""
    rerank: str = "ms-marco"
    """``MEMWARDEN_RERANK``: the hybrid driver's reranking stage, ``ms-marco`` or ``none``."""
    rerank_depth: int | None = None
    """``MEMWARDEN_RERANK_DEPTH``: how many of the hybrid driver's best it reorders (None:
    the driver's default)."""
    rerank_max_tokens: int = RERANK_MAX_TOKENS
    """``MEMWARDEN_RERANK_MAX_TOKENS``: the tokens of a (query, memory) pair the cross-encoder
    reads, from 16 to 512 (the model's positions); the longer of the two is cut to fit."""
    mcp_url: str | None = None
    """``MEMWARDEN_URL``: the API ``memwarden mcp`` (stdio) calls; None: it opens the
    deployment in its own process."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        values = dict(os.environ if env is None else env)
        data_dir = Path(values.get("MEMWARDEN_DATA_DIR") or default_data_dir()).expanduser()
        return cls(
            data_dir=data_dir.resolve(),
            database_url=values.get("DATABASE_URL") or None,
            kek_b64=values.get("MEMWARDEN_KEK") or None,
            signing_key_pem=values.get("MEMWARDEN_SIGNING_KEY") or None,
            redis_url=(values.get("REDIS_URL") or "").strip() or None,
            max_content_bytes=int(values.get("MEMWARDEN_MAX_CONTENT_BYTES") or 16_384),
            read_wait_seconds=float(values.get("MEMWARDEN_READ_WAIT_SECONDS") or 5.0),
            pool_size=int(values.get("MEMWARDEN_POOL_SIZE") or 8),
            model_lanes=int(
                positive_number(values, "MEMWARDEN_MODEL_LANES", int) or default_model_lanes(os.cpu_count())
            ),
            db_timeout_seconds=positive_number(values, "MEMWARDEN_DB_TIMEOUT_SECONDS", float) or 3.0,
            metrics_token=values.get("MEMWARDEN_METRICS_TOKEN") or None,
            log_origin=values.get("MEMWARDEN_LOG_ORIGIN") or None,
            api_key=(values.get("MEMWARDEN_API_KEY") or "").strip() or None,
            log_vkey=(values.get("MEMWARDEN_LOG_VKEY") or "").strip() or None,
            witness_keys=tuple(k for k in (values.get("MEMWARDEN_WITNESS_KEYS") or "").split() if k),
            statement_timeout_seconds=positive_number(values, "MEMWARDEN_STATEMENT_TIMEOUT_SECONDS", float)
            or 60.0,
            request_deadline_seconds=positive_number(values, "MEMWARDEN_REQUEST_DEADLINE_SECONDS", float)
            or 10.0,
            projector=_one_of(
                "MEMWARDEN_PROJECTOR", values.get("MEMWARDEN_PROJECTOR") or "thread", PROJECTORS
            ),
            shared_state=_chosen("MEMWARDEN_SHARED_STATE", values, SHARED_STATES),
            ledger_chains=_one_of(
                "MEMWARDEN_LEDGER_CHAINS", values.get("MEMWARDEN_LEDGER_CHAINS") or "global", LEDGER_CHAINS
            ),
            **_extractor(values),
            judge=_one_of("MEMWARDEN_JUDGE", values.get("MEMWARDEN_JUDGE") or "rules", JUDGES),
            judge_url=(values.get("MEMWARDEN_JUDGE_URL") or "").strip() or None,
            judge_model=(values.get("MEMWARDEN_JUDGE_MODEL") or "").strip(),
            judge_api_key=values.get("MEMWARDEN_JUDGE_API_KEY") or None,
            **_drafter(values),
            **_tickets(values),
            lease_seconds=positive_number(values, "MEMWARDEN_LEASE_SECONDS", float) or 30.0,
            rerank_when=_one_of(
                "MEMWARDEN_RERANK_WHEN",
                (values.get("MEMWARDEN_RERANK_WHEN") or "adaptive").strip().lower(),
                RERANK_WHEN,
            ),
            rerank_agreement=_share("MEMWARDEN_RERANK_AGREEMENT", values, RERANK_AGREEMENT),
            server_timing=(values.get("MEMWARDEN_SERVER_TIMING") or "").strip().lower()
            in ("1", "true", "yes"),
            log_level=(values.get("MEMWARDEN_LOG_LEVEL") or "warning").strip().lower(),
            log_format=_one_of(
                "MEMWARDEN_LOG_FORMAT",
                (values.get("MEMWARDEN_LOG_FORMAT") or "text").strip().lower(),
                LOG_FORMATS,
            ),
            worker_stale_seconds=positive_number(values, "MEMWARDEN_WORKER_STALE_SECONDS", float) or 60.0,
            worker_heartbeat_seconds=positive_number(values, "MEMWARDEN_WORKER_HEARTBEAT_SECONDS", float)
            or 60.0,
            autopilot_sweep_seconds=positive_number(values, "MEMWARDEN_AUTOPILOT_SWEEP_SECONDS", float)
            or 60.0,
            consolidation_pause_seconds=positive_number(
                values, "MEMWARDEN_CONSOLIDATION_PAUSE_SECONDS", float
            )
            or 30.0,
            checkpoint_every_events=int(
                positive_number(values, "MEMWARDEN_CHECKPOINT_EVERY_EVENTS", int) or 1_000
            ),
            checkpoint_every_seconds=positive_number(values, "MEMWARDEN_CHECKPOINT_EVERY_SECONDS", float)
            or 600.0,
            audit_spool_max_bytes=int(
                positive_number(values, "MEMWARDEN_AUDIT_SPOOL_MAX_BYTES", int) or AUDIT_SPOOL_MAX_BYTES
            ),
            mcp_url=(values.get("MEMWARDEN_URL") or "").strip() or None,
            **_models(values),
        )

    def __post_init__(self) -> None:
        if self.redis_url is None and self.shared_state == "redis":
            raise ValueError(
                "MEMWARDEN_SHARED_STATE=redis needs REDIS_URL, the Redis the API processes share"
            )
        if self.redis_url is None and self.tickets == "queue":
            raise ValueError("MEMWARDEN_TICKETS=queue needs REDIS_URL, the Redis of `memwarden worker`")

    @property
    def passes_on_redis(self) -> bool:
        """Do the passes go to ``memwarden worker`` through Redis (``REDIS_URL`` set), or
        does ``memwarden serve`` run them itself?"""
        return self.redis_url is not None

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"


def _extractor(values: Mapping[str, str]) -> dict[str, Any]:
    """The ``extractor_*`` settings; the model is required once a URL is given."""
    url = (values.get("MEMWARDEN_EXTRACTOR_URL") or "").strip() or None
    model = (values.get("MEMWARDEN_EXTRACTOR_MODEL") or "").strip()
    if url is not None and not model:
        raise ValueError("MEMWARDEN_EXTRACTOR_URL needs MEMWARDEN_EXTRACTOR_MODEL, the model name to ask for")
    found: dict[str, Any] = {
        "extractor_url": url,
        "extractor_model": model,
        "extractor_api_key": values.get("MEMWARDEN_EXTRACTOR_API_KEY") or None,
    }
    timeout = positive_number(values, "MEMWARDEN_EXTRACTOR_TIMEOUT", float)
    if timeout is not None:
        found["extractor_timeout"] = timeout
    for field, name in (
        ("extractor_max_input_chars", "MEMWARDEN_EXTRACTOR_MAX_INPUT_CHARS"),
        ("extractor_max_facts", "MEMWARDEN_EXTRACTOR_MAX_FACTS"),
    ):
        number = positive_number(values, name, int)
        if number is not None:
            found[field] = int(number)
    return found


def _drafter(values: Mapping[str, str]) -> dict[str, Any]:
    """The ``drafter_*`` settings, in the judge's style."""
    return {
        "drafter": _one_of("MEMWARDEN_DRAFTER", values.get("MEMWARDEN_DRAFTER") or "extractive", DRAFTERS),
        "drafter_url": (values.get("MEMWARDEN_DRAFTER_URL") or "").strip() or None,
        "drafter_model": (values.get("MEMWARDEN_DRAFTER_MODEL") or "").strip(),
        "drafter_api_key": values.get("MEMWARDEN_DRAFTER_API_KEY") or None,
    }


def _models(values: Mapping[str, str]) -> dict[str, Any]:
    """The embedder's and the reranker's settings; the factories check the choices (an
    ``openai`` embedder's number settings are read only when it is the one chosen)."""
    embedder = (values.get("MEMWARDEN_EMBEDDER") or "minilm").strip().lower()
    found: dict[str, Any] = {
        "embedder": embedder,
        "embedder_url": (values.get("MEMWARDEN_EMBEDDER_URL") or "").strip() or None,
        "embedder_model": (values.get("MEMWARDEN_EMBEDDER_MODEL") or "").strip(),
        "embedder_api_key": values.get("MEMWARDEN_EMBEDDER_API_KEY") or None,
        "rerank": (values.get("MEMWARDEN_RERANK") or "ms-marco").strip().lower(),
    }
    depth = positive_number(values, "MEMWARDEN_RERANK_DEPTH", int)
    if depth is not None:
        found["rerank_depth"] = int(depth)
    tokens = positive_number(values, "MEMWARDEN_RERANK_MAX_TOKENS", int)
    if tokens is not None:
        if not MIN_RERANK_TOKENS <= tokens <= MAX_RERANK_TOKENS:
            raise ValueError(
                f"MEMWARDEN_RERANK_MAX_TOKENS must be from {MIN_RERANK_TOKENS} to {MAX_RERANK_TOKENS}, got {int(tokens)}"
            )
        found["rerank_max_tokens"] = int(tokens)
    if embedder == "openai":
        dimensions = positive_number(values, "MEMWARDEN_EMBEDDER_DIMENSIONS", int)
        timeout = positive_number(values, "MEMWARDEN_EMBEDDER_TIMEOUT", float)
        found["embedder_dimensions"] = int(dimensions) if dimensions is not None else None
        found["embedder_timeout"] = timeout if timeout is not None else 5.0
    return found


def _tickets(values: Mapping[str, str]) -> dict[str, Any]:
    """Who runs the tickets: ``MEMWARDEN_TICKETS``, by default the workers' actor when
    ``REDIS_URL`` is set (``memwarden worker`` runs the passes then), else this process."""
    redis_url = (values.get("REDIS_URL") or "").strip()
    default = "queue" if redis_url else "thread"
    return {
        "tickets": _one_of("MEMWARDEN_TICKETS", values.get("MEMWARDEN_TICKETS") or default, TICKET_RUNNERS),
        "ticket_stale_seconds": positive_number(values, "MEMWARDEN_TICKET_STALE_SECONDS", float) or 60.0,
    }


def deployment_key(settings: Settings) -> str:
    """The Redis key prefix of one deployment (its database), so several can share a Redis:
    the API's shared state and the workers' queues."""
    database = settings.database_url or str(settings.data_dir)
    return f"memwarden:{SCHEMA}:{hashlib.sha256(database.encode()).hexdigest()[:16]}"
