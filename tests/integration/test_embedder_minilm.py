"""The real all-MiniLM-L6-v2 int8 model: meaning, shape, batching, and the file pins."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from memwarden.domain.embedding import (
    BatchingEmbedder,
    CachingEmbedder,
    MiniLMEmbedder,
    ModelFileRejected,
    embed_one,
    embedder_from_settings,
    shared_minilm,
)
from memwarden.domain.embedding.factory import WarmingModel
from memwarden.domain.embedding.minilm import (
    MODEL_SHA256,
    TOKENIZER_SHA256,
    default_model_path,
    default_tokenizer_path,
    read_pinned,
)
from memwarden.domain.settings import Settings

pytestmark = pytest.mark.minilm


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return shared_minilm()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_semantic_sanity(minilm: MiniLMEmbedder) -> None:
    fact, question, unrelated = minilm.embed(
        ["Dana moved to Lisbon in May.", "Where does Dana live now?", "The build server runs on Debian."]
    )
    assert cosine(fact, question) > cosine(fact, unrelated) + 0.3
    assert cosine(fact, question) > cosine(question, unrelated) + 0.3


@pytest.mark.parametrize(
    ("first", "second", "score"),
    [  # all-MiniLM-L6-v2 (float32) scores published in the sentence-transformers documentation
        ("The cat sits outside", "The dog plays in the garden", 0.2838),
        ("A man is playing guitar", "A woman watches TV", -0.0327),
        ("The new movie is awesome", "The new movie is so great", 0.8939),
    ],
)
def test_scores_match_the_float32_model(
    minilm: MiniLMEmbedder, first: str, second: str, score: float
) -> None:
    a, b = minilm.embed([first, second])
    assert cosine(a, b) == pytest.approx(score, abs=0.01)


@pytest.mark.parametrize(
    ("query", "near", "far"),
    [
        (
            "How do I reset my password?",
            "Steps to recover a forgotten login credential",
            "Quarterly revenue grew 8%",
        ),
        ("The cat sat on the mat.", "A kitten is resting on the rug.", "Interest rates rose again."),
        (
            "Deploy failed: disk full on the CI runner",
            "The build machine ran out of storage",
            "Lunch is at noon",
        ),
    ],
)
def test_paraphrases_are_closer_than_unrelated_texts(
    minilm: MiniLMEmbedder, query: str, near: str, far: str
) -> None:
    q, n, f = minilm.embed([query, near, far])
    assert cosine(q, n) > cosine(q, f) + 0.2


def test_shape_dtype_and_unit_rows(minilm: MiniLMEmbedder) -> None:
    texts = [
        "",
        " ",
        "a",
        "Dana moved to Lisbon in May.",
        "ünïcödé ΣΊΣΥΦΟΣ 東京 🙂",
        "x\ud800y",
        "word " * 1000,
    ]
    rows = minilm.embed(texts)
    assert rows.dtype == np.float32
    assert rows.shape == (len(texts), 384)
    assert np.isfinite(rows).all()
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)
    assert (minilm.model_id, minilm.dimensions) == ("all-MiniLM-L6-v2-int8", 384)
    assert embed_one(minilm, "Dana").shape == (384,)


def test_long_texts_are_truncated_to_256_tokens(minilm: MiniLMEmbedder) -> None:
    assert minilm.token_count("word " * 1000) == 256
    assert minilm.token_count("") == 2  # [CLS] [SEP]
    head = "Dana moved to Lisbon in May. " * 40  # past 256 tokens already
    a, b = minilm.embed([head, head + "The build server runs on Debian. " * 40])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_batch_equals_one_by_one(minilm: MiniLMEmbedder) -> None:
    texts = [
        "Dana moved to Lisbon in May.",
        "hi",
        "",
        "The quarterly budget review was postponed twice because of the holidays and a flu outbreak.",
        "Where does Dana live now?",
        *(f"note number {i} about project {i % 7}" for i in range(40)),  # more than one batch
    ]
    batch = minilm.embed(texts)
    single = np.stack([embed_one(minilm, text) for text in texts])
    np.testing.assert_allclose(batch, single, atol=1e-4)


def test_texts_are_deterministic_and_distinct(minilm: MiniLMEmbedder) -> None:
    first = minilm.embed(["alpha", "beta"])
    second = MiniLMEmbedder().embed(["alpha", "beta"])
    np.testing.assert_allclose(first, second, atol=1e-6)
    assert cosine(first[0], first[1]) < 0.99


def test_shared_instance_and_factory_default(minilm: MiniLMEmbedder) -> None:
    assert shared_minilm() is minilm
    embedder = embedder_from_settings(Settings.from_env({}))
    assert isinstance(embedder, CachingEmbedder)
    assert isinstance(embedder.inner, BatchingEmbedder)  # concurrent callers share model calls
    assert embedder.inner.inner is minilm
    assert embedder.model_id == "all-MiniLM-L6-v2-int8"
    np.testing.assert_allclose(embedder.embed(["Dana"]), minilm.embed(["Dana"]), atol=1e-6)


# -- pins ---------------------------------------------------------------------------------


def tampered_copy(source: Path, target: Path, offset: int) -> Path:
    shutil.copyfile(source, target)
    data = bytearray(target.read_bytes())
    data[offset] ^= 0x01
    target.write_bytes(bytes(data))
    return target


def test_pinned_files_are_the_installed_ones() -> None:
    assert read_pinned(default_model_path(), MODEL_SHA256)[:1]
    assert read_pinned(default_tokenizer_path(), TOKENIZER_SHA256)[:1] == b"{"


def test_an_untampered_copy_elsewhere_loads(tmp_path: Path) -> None:
    model = tmp_path / "copy.onnx"
    shutil.copyfile(default_model_path(), model)
    embedder = MiniLMEmbedder(model_path=model)
    assert embedder.embed(["ok"]).shape == (1, 384)


def test_tampered_model_is_rejected(tmp_path: Path) -> None:
    size = default_model_path().stat().st_size
    model = tampered_copy(default_model_path(), tmp_path / "model.onnx", size // 2)
    with pytest.raises(ModelFileRejected) as caught:
        MiniLMEmbedder(model_path=model)
    message = str(caught.value)
    assert str(model) in message
    assert MODEL_SHA256 in message
    assert caught.value.actual is not None
    assert caught.value.actual != MODEL_SHA256
    assert caught.value.actual in message


def test_tampered_tokenizer_is_rejected(tmp_path: Path) -> None:
    tokenizer = tampered_copy(default_tokenizer_path(), tmp_path / "tokenizer.json", 1000)
    with pytest.raises(ModelFileRejected) as caught:
        MiniLMEmbedder(tokenizer_path=tokenizer)
    assert str(tokenizer) in str(caught.value)
    assert TOKENIZER_SHA256 in str(caught.value)
    assert caught.value.path == str(tokenizer)


def test_a_file_changed_after_it_was_verified_is_hashed_again(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    shutil.copyfile(default_tokenizer_path(), tokenizer)
    assert MiniLMEmbedder(tokenizer_path=tokenizer).embed(["ok"]).shape == (1, 384)
    # Replaced the way an installer replaces files: same path and size, new contents.
    tampered_copy(default_tokenizer_path(), tmp_path / "new.json", 2000).replace(tokenizer)
    with pytest.raises(ModelFileRejected, match="sha256 mismatch"):
        MiniLMEmbedder(tokenizer_path=tokenizer)


@pytest.mark.parametrize("which", ["model_path", "tokenizer_path"])
def test_missing_file_is_rejected(tmp_path: Path, which: str) -> None:
    missing = tmp_path / "nowhere" / "file"
    with pytest.raises(ModelFileRejected, match="missing") as caught:
        MiniLMEmbedder(**{which: missing})
    assert str(missing) in str(caught.value)
    assert caught.value.path == str(missing)


def test_a_model_loading_in_the_background_answers_as_the_model(minilm: MiniLMEmbedder) -> None:
    """What a starting process gets (``background=True``): the id and dimensions at once,
    the model's own vectors once it has loaded."""
    embedder = embedder_from_settings(Settings.from_env({}), background=True)
    assert isinstance(embedder, CachingEmbedder)
    assert isinstance(embedder.inner, BatchingEmbedder)
    assert isinstance(embedder.inner.inner, WarmingModel)
    assert (embedder.model_id, embedder.dimensions) == (minilm.model_id, minilm.dimensions)
    np.testing.assert_allclose(embedder.embed(["Dana"]), minilm.embed(["Dana"]), atol=1e-6)
