"""The pinned bge-small-en-v1.5 embedder and ms-marco cross-encoder (files shipped in
memwarden's wheel): meaning, shape, the pins, and the settings that select them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memwarden.domain.embedding import ModelFileRejected, embedder_from_settings
from memwarden.domain.embedding.bge import BGE_SMALL, MODEL_ID, shared_bge_small
from memwarden.domain.embedding.onnx import LENGTH_SPREAD, ModelSpec, OnnxSentenceEmbedder, read_pinned
from memwarden.domain.embedding.rerank import (
    MS_MARCO,
    CrossEncoder,
    reranker_from_settings,
    shared_cross_encoder,
)
from memwarden.domain.settings import RERANK_MAX_TOKENS, Settings

pytestmark = pytest.mark.models


def tampered_copy(source: Path, target: Path, offset: int) -> Path:
    data = bytearray(source.read_bytes())
    data[offset] ^= 0x01
    target.write_bytes(bytes(data))
    return target


def test_bge_ranks_by_meaning() -> None:
    fact, question, unrelated = shared_bge_small().embed(
        ["Dana moved to Lisbon in May.", "Where does Dana live now?", "The build server runs on Debian."]
    )
    assert float(fact @ question) > float(fact @ unrelated) + 0.2
    assert float(fact @ question) > float(question @ unrelated) + 0.2


def test_bge_rows_are_unit_length_and_independent_of_the_batch() -> None:
    texts = ["short", "a somewhat longer sentence about the deploy freeze on Friday", "x " * 600]
    together = shared_bge_small().embed(texts)
    assert together.shape == (3, 384)
    assert together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    alone = np.stack([shared_bge_small().embed([t])[0] for t in texts])
    # The int8 graph quantizes activations per batch, so a row moves a little with its
    # batch-mates (as MiniLM's does); padding itself is masked out.
    assert np.all(np.sum(together * alone, axis=1) > 0.98)
    assert shared_bge_small().token_count("x " * 600) == 512  # truncated to the model's positions


def test_the_setting_selects_bge_behind_the_cache() -> None:
    embedder = embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "bge"}))
    assert embedder is not None
    assert (embedder.model_id, embedder.dimensions) == (MODEL_ID, 384)
    assert np.allclose(embedder.embed(["hello"]), shared_bge_small().embed(["hello"]))


@pytest.mark.parametrize("spec", [BGE_SMALL, MS_MARCO], ids=["bge", "ms-marco"])
def test_pinned_files_are_the_installed_ones(spec: ModelSpec) -> None:
    assert read_pinned(spec.model.locate(), spec.model.sha256)[:1]
    assert read_pinned(spec.tokenizer.locate(), spec.tokenizer.sha256)[:1] == b"{"


def test_a_tampered_bge_model_is_rejected(tmp_path: Path) -> None:
    source = BGE_SMALL.model.locate()
    model = tampered_copy(source, tmp_path / "model.onnx", source.stat().st_size // 2)
    with pytest.raises(ModelFileRejected) as caught:
        OnnxSentenceEmbedder(BGE_SMALL, model_path=model)
    assert BGE_SMALL.model.sha256 in str(caught.value)
    assert caught.value.actual not in (None, BGE_SMALL.model.sha256)


def test_a_tampered_cross_encoder_tokenizer_is_rejected(tmp_path: Path) -> None:
    tokenizer = tampered_copy(MS_MARCO.tokenizer.locate(), tmp_path / "tokenizer.json", 1000)
    with pytest.raises(ModelFileRejected, match="sha256 mismatch") as caught:
        CrossEncoder(tokenizer_path=tokenizer)
    assert caught.value.path == str(tokenizer)


def test_a_capped_cross_encoder_reads_only_the_first_tokens_of_a_long_memory() -> None:
    capped = CrossEncoder(threads=1, max_tokens=32)
    whole = CrossEncoder(threads=1)
    query = "Which city did Dana move to?"
    head = (
        "Dana wrote a long letter about the garden, the weather, the neighbours' dog, the price"
        " of bread, her cousin's wedding, the broken fence and the book club's last meeting,"
    )
    endings = (" and then she moved to Lisbon last spring.", " and the roses were in bloom again.")
    cut = capped.score(query, [head + e for e in endings])
    read = whole.score(query, [head + e for e in endings])
    assert cut[0] == pytest.approx(cut[1], abs=1e-4)  # the endings lie past the cap
    assert read[0] > read[1] + 1.0  # the whole pair sees where Dana moved
    short = ["Dana moved to Lisbon last spring."]  # fits the cap: read whole, same score
    assert capped.score(query, short)[0] == pytest.approx(whole.score(query, short)[0], abs=1e-4)


def test_the_rerank_settings() -> None:
    assert reranker_from_settings(Settings.from_env({})) == (shared_cross_encoder(), None)  # the default
    assert Settings.from_env({}).rerank_max_tokens == RERANK_MAX_TOKENS
    assert Settings.from_env({"MEMWARDEN_RERANK_MAX_TOKENS": "64"}).rerank_max_tokens == 64
    assert reranker_from_settings(Settings.from_env({"MEMWARDEN_RERANK": " None "})) == (None, None)
    reranker, depth = reranker_from_settings(
        Settings.from_env({"MEMWARDEN_RERANK": "ms-marco", "MEMWARDEN_RERANK_DEPTH": "12"})
    )
    assert reranker is shared_cross_encoder()
    assert depth == 12


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMWARDEN_RERANK": "cohere"}, "not one of none, ms-marco"),
        ({"MEMWARDEN_RERANK": "ms-marco", "MEMWARDEN_RERANK_DEPTH": "0"}, "must be positive"),
        ({"MEMWARDEN_RERANK": "ms-marco", "MEMWARDEN_RERANK_DEPTH": "many"}, "not a number"),
        ({"MEMWARDEN_RERANK": "ms-marco", "MEMWARDEN_RERANK_DEPTH": "101"}, "at most 100"),
        ({"MEMWARDEN_RERANK_MAX_TOKENS": "8"}, "MEMWARDEN_RERANK_MAX_TOKENS must be from 16 to 512"),
        ({"MEMWARDEN_RERANK_MAX_TOKENS": "513"}, "MEMWARDEN_RERANK_MAX_TOKENS must be from 16 to 512"),
        ({"MEMWARDEN_RERANK_MAX_TOKENS": "-1"}, "must be positive"),
    ],
)
def test_bad_rerank_settings_are_refused_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reranker_from_settings(Settings.from_env(env))


def test_the_cross_encoder_batches_pairs_of_nearly_the_same_length() -> None:
    encoder = CrossEncoder(threads=1)
    widths: list[list[int]] = []
    run = encoder._encoder.run

    def recorded(batch: list[tuple[list[int], list[int]]]) -> object:
        widths.append(sorted(len(ids) for ids, _ in batch))
        return run(batch)

    encoder._encoder.run = recorded  # type: ignore[method-assign]
    passages = [" ".join(["word"] * n) for n in (3, 40, 5, 60, 4, 45, 6, 80)]
    logits = encoder.score("which word?", passages)
    assert logits.shape == (len(passages),)
    assert sorted(w for batch in widths for w in batch) == sorted(
        len(encoder._encoder.encode("which word?", p)[0]) for p in passages
    )
    for batch in widths:  # no short pair padded to a long one's width
        assert batch[-1] <= batch[0] * LENGTH_SPREAD + 2, widths
