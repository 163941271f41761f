"""Embedding plumbing without a model: hashing, the vector bytes, the cache, the factory,
and the OpenAI-compatible client against a real HTTP server on the loopback interface."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import pytest

from memwarden.domain.embedding import (
    CachingEmbedder,
    Embedder,
    EmbedderUnavailable,
    HashEmbedder,
    OpenAIEmbedder,
    embed_one,
    embedder_from_settings,
    normalize_rows,
    uncached,
    vector_from_bytes,
    vector_to_bytes,
)
from memwarden.domain.settings import Settings
from tests.local_http import Handler, LocalServer, send

# -- hashing ------------------------------------------------------------------------------


def test_hash_embedder_is_deterministic_across_instances() -> None:
    texts = ["Dana moved to Lisbon in May.", "The build server runs on Debian."]
    first = HashEmbedder().embed(texts)
    second = HashEmbedder().embed(texts)
    assert first.dtype == np.float32
    assert first.shape == (2, 384)
    np.testing.assert_array_equal(first, second)
    assert not np.allclose(first[0], first[1])


@pytest.mark.parametrize("text", ["", "!!!", "a", "Dana moved to Lisbon in May.", "Straße ΣΊΣΥΦΟΣ 東京"])
def test_hash_embedder_rows_have_unit_length(text: str) -> None:
    row = embed_one(HashEmbedder(dimensions=64), text)
    assert row.shape == (64,)
    assert np.isfinite(row).all()
    assert np.linalg.norm(row) == pytest.approx(1.0, abs=1e-6)


def test_hash_embedder_similar_texts_are_closer_than_unrelated_ones() -> None:
    embedder = HashEmbedder()
    base, near, far = embedder.embed(
        ["Dana moved to Lisbon in May", "dana moves to lisbon in may", "The build server runs on Debian"]
    )
    assert float(base @ near) > 0.6
    assert float(base @ near) > float(base @ far) + 0.4


def test_hash_embedder_is_case_insensitive_and_tracks_dimensions() -> None:
    embedder = HashEmbedder(dimensions=32)
    lower, upper = embedder.embed(["dana lives in lisbon", "DANA LIVES IN LISBON"])
    np.testing.assert_array_equal(lower, upper)
    assert embedder.dimensions == 32
    assert embedder.model_id == "feature-hash-v1-32"
    assert isinstance(embedder, Embedder)
    with pytest.raises(ValueError):
        HashEmbedder(dimensions=0)


def test_normalize_rows_leaves_zero_rows_zero() -> None:
    rows = normalize_rows([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, 0.0]])
    assert rows.dtype == np.float32


# -- vector bytes -------------------------------------------------------------------------


def test_vector_bytes_round_trip_within_float16_precision() -> None:
    vector = HashEmbedder().embed(["round trip"])[0]
    data = vector_to_bytes(vector)
    assert len(data) == 2 * 384
    back = vector_from_bytes(data)
    assert back.dtype == np.float32
    assert back.shape == (384,)
    np.testing.assert_allclose(back, vector, atol=1e-3)
    assert float(back @ vector) == pytest.approx(1.0, abs=1e-3)


def test_vector_bytes_are_little_endian_float16() -> None:
    assert vector_to_bytes([1.0, -2.0]) == np.array([1.0, -2.0], dtype="<f2").tobytes()
    assert vector_to_bytes([1.0]) == b"\x00\x3c"


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [1e6], [float("nan")]])
def test_vector_to_bytes_rejects_what_float16_cannot_hold(bad: Any) -> None:
    with pytest.raises(ValueError):
        vector_to_bytes(bad)


@pytest.mark.parametrize("bad", [b"", b"\x00\x3c\x00"])
def test_vector_from_bytes_rejects_odd_or_empty_input(bad: bytes) -> None:
    with pytest.raises(ValueError):
        vector_from_bytes(bad)


# -- cache --------------------------------------------------------------------------------


class CountingEmbedder:
    def __init__(self) -> None:
        self.inner = HashEmbedder(dimensions=16)
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return "counting"

    @property
    def dimensions(self) -> int:
        return 16

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def test_caching_embedder_asks_once_per_distinct_text() -> None:
    inner = CountingEmbedder()
    cache = CachingEmbedder(inner)
    first = cache.embed(["a", "b", "a"])
    second = cache.embed(["b", "c", "a"])
    assert inner.calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_array_equal(second[0], first[1])
    np.testing.assert_array_equal(second[2], first[0])
    np.testing.assert_array_equal(second, inner.inner.embed(["b", "c", "a"]))
    assert (cache.model_id, cache.dimensions) == ("counting", 16)
    assert cache.embed([]).shape == (0, 16)


def test_caching_embedder_keeps_no_text_and_writes_go_past_it() -> None:
    inner = CountingEmbedder()
    cache = CachingEmbedder(inner)
    cache.embed(["Dana's diagnosis"])
    kept = repr(vars(cache))
    assert "diagnosis" not in kept  # keyed by a digest: the text cannot be read back
    assert uncached(cache) is inner
    assert uncached(inner) is inner
    uncached(cache).embed(["a memory's own text"])
    assert len(cache) == 1


def test_caching_embedder_evicts_the_least_recently_used() -> None:
    inner = CountingEmbedder()
    cache = CachingEmbedder(inner, capacity=2)
    cache.embed(["a"])
    cache.embed(["b"])
    cache.embed(["a"])  # a is now more recent than b
    cache.embed(["c"])  # evicts b
    assert len(cache) == 2
    cache.embed(["a"])
    cache.embed(["b"])
    assert inner.calls == [["a"], ["b"], ["c"], ["b"]]


def test_caching_embedder_returns_rows_callers_cannot_corrupt() -> None:
    cache = CachingEmbedder(CountingEmbedder())
    rows = cache.embed(["a"])
    rows[0, :] = 0.0
    assert np.linalg.norm(cache.embed(["a"])[0]) == pytest.approx(1.0, abs=1e-6)


def test_caching_embedder_under_threads() -> None:
    inner = CountingEmbedder()
    cache = CachingEmbedder(inner, capacity=8)
    texts = [f"text {i}" for i in range(20)]
    expected = inner.inner.embed(texts)
    failures: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            picked = rng.choice(len(texts), size=3)
            got = cache.embed([texts[i] for i in picked])
            if not np.array_equal(got, expected[picked]):
                failures.append(f"seed {seed}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(cache) <= 8


def test_caching_embedder_passes_on_failures() -> None:
    class Down:
        model_id = "down"
        dimensions = 3

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            raise EmbedderUnavailable("down")

    cache = CachingEmbedder(Down())
    with pytest.raises(EmbedderUnavailable):
        cache.embed(["x"])
    assert len(cache) == 0


# -- OpenAI-compatible client against a local HTTP server ---------------------------------


def fake_vector(text: str, dimensions: int = 8) -> list[float]:
    """An unnormalised, text-dependent vector, as a server might return."""
    return [
        float(len(text) + 1),
        *(float((ord(text[0]) if text else 7) % (k + 2)) for k in range(dimensions - 1)),
    ]


def embeddings_api(dimensions: int = 8, *, reverse: bool = True) -> Handler:
    def respond(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(text, dimensions)}
            for i, text in enumerate(body["input"])
        ]
        if reverse:  # the API does not promise order; the client must sort by index
            data.reverse()
        payload = {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1}}
        send(handler, 200, json.dumps(payload).encode())

    return respond


@pytest.fixture
def api() -> Iterator[LocalServer]:
    with LocalServer(embeddings_api()) as server:
        yield server


def test_openai_embedder_posts_and_normalises_in_index_order(api: LocalServer) -> None:
    embedder = OpenAIEmbedder(api.url + "/", "test-embed", api_key="sk-test", dimensions=8)
    rows = embedder.embed(["Dana", "moved", ""])
    assert rows.dtype == np.float32
    assert rows.shape == (3, 8)
    expected = normalize_rows([fake_vector("Dana"), fake_vector("moved"), fake_vector(" ")])
    np.testing.assert_allclose(rows, expected, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-6)
    ((path, headers, body),) = api.requests
    assert path == "/v1/embeddings"
    assert body == {"model": "test-embed", "input": ["Dana", "moved", " "]}
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["Content-Type"] == "application/json"
    assert embedder.model_id == "test-embed"
    assert "sk-test" not in repr(embedder)


def test_openai_embedder_learns_dimensions_from_the_first_response() -> None:
    with LocalServer(embeddings_api(dimensions=5)) as server:
        embedder = OpenAIEmbedder(server.url, "m")
        assert embedder.embed([]).shape == (0, 0)
        assert server.requests == []
        assert embedder.dimensions == 5  # probes the server
        assert len(server.requests) == 1
        assert embedder.embed(["x", "y"]).shape == (2, 5)
        assert "Authorization" not in server.requests[-1][1]


def test_openai_embedder_rejects_a_width_other_than_configured() -> None:
    with (
        LocalServer(embeddings_api(dimensions=5)) as server,
        pytest.raises(EmbedderUnavailable, match="expected 8 dimensions, got 5"),
    ):
        OpenAIEmbedder(server.url, "m", dimensions=8).embed(["x"])


def test_openai_embedder_splits_large_batches(api: LocalServer) -> None:
    texts = [f"t{i}" for i in range(300)]
    rows = OpenAIEmbedder(api.url, "m").embed(texts)
    assert rows.shape == (300, 8)
    assert [len(body["input"]) for _, _, body in api.requests] == [128, 128, 44]
    np.testing.assert_allclose(rows[299], normalize_rows([fake_vector("t299")])[0], rtol=1e-6)


def test_openai_embedder_http_500_is_unavailable() -> None:
    def fail(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, 500, b'{"error": "model not loaded"}')

    with LocalServer(fail) as server, pytest.raises(EmbedderUnavailable, match=r"HTTP 500.*model not loaded"):
        OpenAIEmbedder(server.url, "m").embed(["x"])


def test_openai_embedder_does_not_follow_redirects() -> None:
    def redirect(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        handler.send_response(302)
        handler.send_header("Location", "http://127.0.0.1:9/elsewhere")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with LocalServer(redirect) as server:
        with pytest.raises(EmbedderUnavailable, match="HTTP 302"):
            OpenAIEmbedder(server.url, "m", api_key="sk-secret").embed(["x"])
        assert len(server.requests) == 1


def test_openai_embedder_timeout_is_unavailable() -> None:
    release = threading.Event()

    def stall(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        release.wait(5)

    with LocalServer(stall) as server:
        try:
            with pytest.raises(EmbedderUnavailable, match=r"(?i)timed? ?out"):
                OpenAIEmbedder(server.url, "m", timeout=0.3).embed(["x"])
        finally:
            release.set()


def test_openai_embedder_refused_connection_is_unavailable() -> None:
    with socket.socket() as probe:  # a port that nothing listens on once this socket closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EmbedderUnavailable, match=r"(?i)refused"):
        OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", timeout=2).embed(["x"])


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"data": [{"index": 0, "embedding": [1.0, 2.0]}',  # truncated
        b'{"result": []}',  # no data
        b'{"data": [{"index": 0, "embedding": "AAAA"}]}',  # base64, not asked for
        b'{"data": [{"index": 1, "embedding": [1.0, 2.0]}]}',  # wrong index
        b'{"data": []}',  # too few
        b'{"data": [{"index": 0, "embedding": [0.0, 0.0]}]}',  # zero vector
        b'{"data": [{"index": 0, "embedding": []}]}',
        b'{"data": [{"index": 0, "embedding": [1e400, 1.0]}]}',  # overflows
    ],
)
def test_openai_embedder_malformed_response_is_unavailable(payload: bytes) -> None:
    def reply(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, 200, payload)

    with LocalServer(reply) as server, pytest.raises(EmbedderUnavailable):
        OpenAIEmbedder(server.url, "m").embed(["x"])


def test_openai_embedder_mismatched_widths_in_one_response_are_unavailable() -> None:
    def reply(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        data = [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [1.0, 2.0, 3.0]}]
        send(handler, 200, json.dumps({"data": data}).encode())

    with LocalServer(reply) as server, pytest.raises(EmbedderUnavailable, match="differing"):
        OpenAIEmbedder(server.url, "m").embed(["x", "y"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ftp://example.invalid", "m"), "http"),
        (("127.0.0.1:8080", "m"), "http"),
        (("http://127.0.0.1:8080", ""), "model"),
    ],
)
def test_openai_embedder_rejects_bad_settings(args: tuple[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenAIEmbedder(*args)


# -- factory ------------------------------------------------------------------------------


def test_factory_none_means_no_embedder() -> None:
    assert embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "none"})) is None
    assert embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": " None "})) is None


def test_factory_hash() -> None:
    embedder = embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "hash"}))
    assert isinstance(embedder, HashEmbedder)
    assert embedder.dimensions == 384


def test_factory_openai_is_cached_and_configured(api: LocalServer) -> None:
    embedder = embedder_from_settings(
        Settings.from_env(
            {
                "MEMWARDEN_EMBEDDER": "openai",
                "MEMWARDEN_EMBEDDER_URL": api.url,
                "MEMWARDEN_EMBEDDER_MODEL": "nomic-embed",
                "MEMWARDEN_EMBEDDER_API_KEY": "sk-env",
                "MEMWARDEN_EMBEDDER_DIMENSIONS": "8",
                "MEMWARDEN_EMBEDDER_TIMEOUT": "2.5",
            }
        )
    )
    assert isinstance(embedder, CachingEmbedder)
    assert isinstance(embedder.inner, OpenAIEmbedder)
    assert embedder.inner.timeout == 2.5
    assert (embedder.model_id, embedder.dimensions) == ("nomic-embed", 8)
    embedder.embed(["q"])
    embedder.embed(["q"])
    assert len(api.requests) == 1
    assert api.requests[0][1]["Authorization"] == "Bearer sk-env"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMWARDEN_EMBEDDER": "bert"}, "not one of minilm, bge, openai, hash, hash-<dimensions>, none"),
        ({"MEMWARDEN_EMBEDDER": "openai", "MEMWARDEN_EMBEDDER_MODEL": "m"}, "MEMWARDEN_EMBEDDER_URL"),
        (
            {"MEMWARDEN_EMBEDDER": "openai", "MEMWARDEN_EMBEDDER_URL": "http://127.0.0.1:1/v1"},
            "MEMWARDEN_EMBEDDER_MODEL",
        ),
        (
            {
                "MEMWARDEN_EMBEDDER": "openai",
                "MEMWARDEN_EMBEDDER_URL": "http://127.0.0.1:1/v1",
                "MEMWARDEN_EMBEDDER_MODEL": "m",
                "MEMWARDEN_EMBEDDER_DIMENSIONS": "many",
            },
            "MEMWARDEN_EMBEDDER_DIMENSIONS",
        ),
        (
            {
                "MEMWARDEN_EMBEDDER": "openai",
                "MEMWARDEN_EMBEDDER_URL": "http://127.0.0.1:1/v1",
                "MEMWARDEN_EMBEDDER_MODEL": "m",
                "MEMWARDEN_EMBEDDER_TIMEOUT": "0",
            },
            "MEMWARDEN_EMBEDDER_TIMEOUT",
        ),
        (
            {
                "MEMWARDEN_EMBEDDER": "openai",
                "MEMWARDEN_EMBEDDER_URL": "localhost:8080",
                "MEMWARDEN_EMBEDDER_MODEL": "m",
            },
            "http",
        ),
    ],
)
def test_factory_errors_are_clear(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        embedder_from_settings(Settings.from_env(env))


def test_the_settings_read_the_embedder_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    assert isinstance(embedder_from_settings(Settings.from_env()), HashEmbedder)
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "none")
    assert embedder_from_settings(Settings.from_env()) is None
