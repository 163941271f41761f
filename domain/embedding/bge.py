"""bge-small-en-v1.5 (int8 ONNX), run in-process with onnxruntime: offline, 384 dimensions.

BAAI's English retrieval model (MIT licence), shipped inside memwarden's wheel
(``assets/bge_small_en/``: model and tokenizer, with the model's licence and a NOTICE naming
where the int8 files came from), each pinned here by SHA-256 and checked before it is loaded
(``domain/embedding/onnx.py``).

Pipeline, as the model's authors configure it: WordPiece tokens (lowercased, truncated to
512), the transformer's ``last_hidden_state``, the [CLS] token's row, L2 normalisation.
Queries are embedded as they are, without BGE's optional retrieval instruction: it moved
recall by no more than noise (docs/design-figures.md, Embedding), and without it a memory and
a query are embedded alike (the cache serves both).
"""

from __future__ import annotations

from pathlib import Path

from memwarden.domain.embedding.onnx import ModelSpec, OnnxSentenceEmbedder, PinnedFile, Shared

MODEL_ID = "bge-small-en-v1.5-int8"
DIMENSIONS = 384
MAX_TOKENS = 512
FOLDER = Path(__file__).parent / "assets" / "bge_small_en"
MODEL_SHA256 = "68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743"
TOKENIZER_SHA256 = "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66"

BGE_SMALL = ModelSpec(
    model_id=MODEL_ID,
    model=PinnedFile(MODEL_SHA256, "memwarden", path=FOLDER / "model.onnx"),
    tokenizer=PinnedFile(TOKENIZER_SHA256, "memwarden", path=FOLDER / "tokenizer.json"),
    max_tokens=MAX_TOKENS,
    dimensions=DIMENSIONS,
    pooling="cls",
)


def bge_small(batch_size: int = 64, threads: int | None = None) -> OnnxSentenceEmbedder:
    """A new bge-small-en-v1.5 embedder (the files checked against their pins first)."""
    return OnnxSentenceEmbedder(BGE_SMALL, batch_size=batch_size, threads=threads)


shared_bge_small: Shared[OnnxSentenceEmbedder] = Shared(bge_small)
"""The process-wide bge-small-en-v1.5 embedder, made on first use; thread-safe."""
