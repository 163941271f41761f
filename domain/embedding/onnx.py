"""Pinned ONNX text encoders, run in-process with onnxruntime on the CPU.

What every offline model here shares: its files come from an installed Python package (or
ship inside memwarden), each is pinned by SHA-256 and checked before anything is loaded
from it (the bytes that were checked are the bytes that are loaded), nothing is ever
downloaded, and onnxruntime's telemetry is off (it would otherwise write a device id under
``~/.cache/Microsoft``). :class:`OnnxEncoder` tokenizes, pads per batch and runs the graph;
the sentence embedders (``minilm``, ``bge``) pool its ``last_hidden_state`` and the
cross-encoder (``rerank``) reads its ``logits``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from memwarden.domain.embedding.base import (
    EmbedderUnavailable,
    Matrix,
    ModelFileRejected,
    check_texts,
    normalize_rows,
)
from memwarden.domain.settings import default_model_lanes


@dataclass(frozen=True)
class PinnedFile:
    """A file inside an installed package (``package`` + ``relative``) or at ``path``."""

    sha256: str
    distribution: str
    """What to ``pip install`` when the package is missing (pinned version)."""
    package: str | None = None
    relative: str = ""
    path: Path | None = None

    def locate(self) -> Path:
        if self.path is not None:
            return self.path
        if self.package is None:
            raise ValueError("a pinned file needs a package or a path")
        return packaged_file(self.package, self.relative, self.distribution)


@dataclass(frozen=True)
class ModelSpec:
    """One offline model: its files, shape, and how its output becomes a vector."""

    model_id: str
    """Stored beside every vector the model makes: vectors of two models never mix."""
    model: PinnedFile
    tokenizer: PinnedFile
    max_tokens: int
    dimensions: int = 0
    pooling: Literal["mean", "cls"] = "mean"
    output: str = "last_hidden_state"


def packaged_file(package: str, relative: str, distribution: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelFileRejected(
            package,
            f"the package {package!r} is not installed, so its {relative} cannot be found "
            f"(install it: pip install {distribution})",
        )
    return Path(locations[0]) / relative


def onnxruntime_without_telemetry() -> Any:
    """onnxruntime, imported with its telemetry off.

    Its native library writes a device id and an event store under ``~/.cache/Microsoft``
    as it is imported, unless ``ORT_DISABLE_TELEMETRY`` is set by then; turning events off
    afterwards (``disable_telemetry_events``) does not undo that. Both are done, so the
    events stay off even when something else imported onnxruntime first.
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"
    import onnxruntime  # noqa: PLC0415 -- heavy; only a model that is used loads it

    onnxruntime.disable_telemetry_events()
    return onnxruntime


# (resolved path, device, inode, size, mtime_ns) -> the SHA-256 that file had when it was read.
_verified: dict[tuple[str, int, int, int, int], str] = {}
_verified_lock = threading.Lock()


def read_pinned(path: Path, expected_sha256: str) -> bytes:
    """The file's bytes, after checking their SHA-256 against the pin.

    A file already hashed in this process, and unchanged since (same inode, size and
    modification time), is not hashed again. Raises :class:`ModelFileRejected`.
    """
    try:
        with path.open("rb") as file:
            stat = os.fstat(file.fileno())
            data = file.read()
    except FileNotFoundError:
        raise ModelFileRejected(
            str(path),
            f"{path}: missing (expected a file with sha256 {expected_sha256})",
            expected=expected_sha256,
        ) from None
    except OSError as exc:
        raise ModelFileRejected(
            str(path),
            f"{path}: cannot be read ({exc}); expected sha256 {expected_sha256}",
            expected=expected_sha256,
        ) from exc
    key = (str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        actual = _verified.get(key)
    if actual is None:
        actual = hashlib.sha256(data).hexdigest()
        if len(data) == stat.st_size:  # not changed while it was being read
            with _verified_lock:
                _verified[key] = actual
    if actual != expected_sha256:
        raise ModelFileRejected(
            str(path),
            f"{path}: sha256 mismatch: expected {expected_sha256}, actual {actual} "
            f"({len(data)} bytes); refusing to load it",
            expected=expected_sha256,
            actual=actual,
        )
    return data


T = TypeVar("T")


class Shared(Generic[T]):
    """One instance per process, made by ``make`` on first use; thread-safe. The options of
    the call that makes it (``lanes``) are the instance's; later calls' are not used."""

    def __init__(self, make: Callable[..., T]) -> None:
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    @property
    def made(self) -> bool:
        """Whether the instance exists yet (nothing is made by asking)."""
        return self._value is not None

    def __call__(self, **options: Any) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._make(**options)
        return self._value


Encoded = tuple[list[int], list[int]]
"""A text's (or a text pair's) token ids and token type ids."""


class OnnxEncoder:
    """A pinned ONNX graph and its tokenizer, on the CPU. Thread-safe.

    ``model_path`` and ``tokenizer_path`` default to the spec's files; any other path must
    hold the same bytes (the digests are pinned, not the paths). ``threads`` (the setting
    ``model_lanes``; default ``default_model_lanes``) is the number of inference sessions,
    each with ``session_threads`` threads: ``run`` takes a free one, so that many batches run
    at once (``by_length`` hands them out). ``spin=True`` lets idle inference threads busy-wait.
    """

    def __init__(
        self,
        spec: ModelSpec,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        max_tokens: int | None = None,
        spin: bool = False,
    ) -> None:
        limit = spec.max_tokens if max_tokens is None else max_tokens
        if not 2 <= limit <= 512:
            raise ValueError("max_tokens must be between 2 and 512 (the model's positions)")
        model_file = Path(model_path) if model_path is not None else spec.model.locate()
        tokenizer_file = Path(tokenizer_path) if tokenizer_path is not None else spec.tokenizer.locate()
        # Both files are checked before either is loaded.
        model_bytes = read_pinned(model_file, spec.model.sha256)
        tokenizer_bytes = read_pinned(tokenizer_file, spec.tokenizer.sha256)

        onnxruntime = onnxruntime_without_telemetry()
        from tokenizers import Tokenizer  # noqa: PLC0415 -- heavy, as onnxruntime

        tokenizer = Tokenizer.from_str(tokenizer_bytes.decode("utf-8"))
        tokenizer.no_padding()  # pad per batch instead, to the longest text in it
        tokenizer.enable_truncation(limit)
        self._tokenizer = tokenizer

        self.lanes = threads or default_model_lanes(os.cpu_count())
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = session_threads(self.lanes, os.cpu_count())
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Idle inference threads sleep instead of spinning: the API, the workers and
        # PostgreSQL share the cores, and under contention spinning costs more than it saves.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        # No memory arena: onnxruntime's arena keeps every session's largest batch's
        # activations for the life of the process (a served process grew by hundreds of MB
        # after its first write batches), and without it the same batches ran as fast
        # (docs/design-figures.md, Embedding).
        options.enable_cpu_mem_arena = False
        sessions = [
            onnxruntime.InferenceSession(
                model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
            )
            for _ in range(self.lanes)
        ]
        self._input_names = frozenset(node.name for node in sessions[0].get_inputs())
        self._sessions: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in sessions:
            self._sessions.put(session)
        self.spec = spec
        self.model_path = model_file
        self.tokenizer_path = tokenizer_file

    def encode(self, text: str, pair: str | None = None) -> Encoded:
        try:
            encoding = self._tokenizer.encode(text, pair)
        except TypeError:  # lone surrogates are not valid text for the tokenizer
            encoding = self._tokenizer.encode(_valid(text), None if pair is None else _valid(pair))
        return list(encoding.ids), list(encoding.type_ids)

    def run(self, batch: Sequence[Encoded]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The spec's output for a batch, and the attention mask it was run with."""
        width = max(len(ids) for ids, _ in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, (ids, type_ids) in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            types[row, : len(ids)] = type_ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = types
        session = self._sessions.get()
        try:
            (out,) = session.run([self.spec.output], feeds)
        except Exception as exc:  # onnxruntime's errors share no base class
            raise EmbedderUnavailable(f"{self.spec.model_id}: inference failed: {exc}") from exc
        finally:
            self._sessions.put(session)
        values = np.asarray(out, dtype=np.float32)
        if not np.all(np.isfinite(values)):
            raise EmbedderUnavailable(f"{self.spec.model_id}: inference produced values that are not finite")
        return values, mask


def session_threads(lanes: int, cores: int | None) -> int:
    """Each lane's threads: the cores shared out among the lanes, at most ``MAX_SESSION_THREADS``.
    Two one-thread sessions embed a little faster than one session of two threads, but each
    session holds its own copy of the weights: one two-thread session is the smaller process
    (docs/design-figures.md, Embedding)."""
    return max(1, min(MAX_SESSION_THREADS, (cores or 1) // lanes))


MAX_SESSION_THREADS = 4
"""The most threads one session gets: a session's threads wait for each other at every
operator (docs/design-figures.md, Embedding), so a bigger machine is better used by more
lanes (``MEMWARDEN_MODEL_LANES``)."""


def _valid(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


LENGTH_SPREAD = 1.05
"""A batch of :func:`by_length` holds texts at most this much (plus two tokens) longer than
its shortest."""
TOKENS_PER_BATCH = 2048
"""...and at most this many tokens, padding counted."""


def by_length(
    encoded: Sequence[Encoded],
    batch_size: int,
    run: Callable[[list[Encoded]], Matrix],
    rows: Matrix,
    *,
    even: bool = False,
    lanes: int = 1,
) -> Matrix:
    """``rows[i] = run(...)[j]`` for every encoded text, run in batches of similar length,
    up to ``lanes`` batches at once (``run`` must be thread-safe then); ``rows`` is filled
    in place and returned.

    ``even``: a batch (at most ``batch_size`` texts) also ends where the next text is over
    ``LENGTH_SPREAD`` longer than its shortest or would take it past ``TOKENS_PER_BATCH``.
    Every text of a batch is padded to its longest, and attention costs the square of that
    length, so on a mixed window (a write batch of 256 turns) fixed-size batches of the sorted
    texts spent a large share of the model's CPU on padding in their long tail; a few more,
    smaller calls cost far less (docs/design-figures.md, Embedding)."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    chunks: list[list[int]] = []
    start = 0
    while start < len(order):
        end = _batch_end(encoded, order, start, batch_size) if even else min(start + batch_size, len(order))
        chunks.append(order[start:end])
        start = end
    pending = iter(chunks)
    taking = threading.Lock()
    failures: list[Exception] = []

    def lane() -> None:
        while not failures:
            with taking:
                chunk = next(pending, None)
            if chunk is None:
                return
            try:
                rows[chunk] = run([encoded[i] for i in chunk])
            except Exception as error:  # noqa: BLE001 - handed to the caller below
                failures.append(error)

    helpers = [threading.Thread(target=lane, daemon=True) for _ in range(min(lanes, len(chunks)) - 1)]
    for helper in helpers:
        helper.start()
    lane()
    for helper in helpers:
        helper.join()
    if failures:
        raise failures[0]
    return rows


def _batch_end(encoded: Sequence[Encoded], order: Sequence[int], start: int, batch_size: int) -> int:
    """Where the even batch that starts at ``order[start]`` ends (exclusive)."""
    longest_allowed = len(encoded[order[start]][0]) * LENGTH_SPREAD + 2
    end = start + 1
    while end < len(order) and end - start < batch_size:
        length = len(encoded[order[end]][0])
        if length > longest_allowed or (end - start + 1) * length > TOKENS_PER_BATCH:
            break
        end += 1
    return end


class OnnxSentenceEmbedder:
    """A sentence embedder over :class:`OnnxEncoder`: the spec's pooling, then L2 norm.

    Up to ``batch_size`` texts of nearly the same length run at once (``by_length``, even).
    Thread-safe.
    """

    def __init__(
        self,
        spec: ModelSpec,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 64,
        max_tokens: int | None = None,
        spin: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if spec.dimensions < 1:
            raise ValueError(f"{spec.model_id}: a sentence embedder needs its dimensions")
        self._encoder = OnnxEncoder(
            spec, model_path, tokenizer_path, threads=threads, max_tokens=max_tokens, spin=spin
        )
        self._spec = spec
        self._batch_size = batch_size
        self.model_path = self._encoder.model_path
        self.tokenizer_path = self._encoder.tokenizer_path

    @property
    def model_id(self) -> str:
        return self._spec.model_id

    @property
    def dimensions(self) -> int:
        return self._spec.dimensions

    def token_count(self, text: str) -> int:
        """Tokens the model sees for ``text``, with [CLS] and [SEP], after truncation."""
        return len(self._encoder.encode(text)[0])

    def embed(self, texts: Sequence[str]) -> Matrix:
        check_texts(texts)
        rows = np.empty((len(texts), self._spec.dimensions), dtype=np.float32)
        if not texts:
            return rows
        encoded = [self._encoder.encode(t) for t in texts]
        return by_length(encoded, self._batch_size, self._pooled, rows, even=True, lanes=self._encoder.lanes)

    def _pooled(self, batch: list[Encoded]) -> Matrix:
        hidden, mask = self._encoder.run(batch)
        if self._spec.pooling == "cls":
            return normalize_rows(hidden[:, 0, :])
        return mean_pool(hidden, mask)


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Matrix:
    weights = mask.astype(np.float32)
    summed = np.einsum("bsd,bs->bd", hidden, weights)
    counts = np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    return normalize_rows(summed / counts)
