"""A process loads a model only when it runs it: the projector, a worker and a CLI command
build a runtime whose models wait for their first use; an API process warms them."""

from __future__ import annotations

import os
import threading

import msgspec
import numpy as np
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import embedder_from_settings
from memwarden.domain.embedding.base import CachingEmbedder
from memwarden.domain.embedding.batching import BatchingEmbedder
from memwarden.domain.embedding.factory import WarmingModel
from memwarden.domain.embedding.minilm import MiniLMEmbedder
from memwarden.domain.embedding.onnx import MAX_SESSION_THREADS, Shared, session_threads
from memwarden.domain.embedding.rerank import CrossEncoder, WarmingCrossEncoder, reranker_from_settings
from memwarden.domain.settings import Settings, default_model_lanes

WARMING = ("rerank-warm", "warm-")


def _warming_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(WARMING)}


def test_a_lazy_cross_encoder_loads_at_its_first_score_only() -> None:
    shared: Shared[CrossEncoder] = Shared(CrossEncoder)
    reranker = WarmingCrossEncoder(warm=False, shared=shared)
    assert not reranker.loaded
    assert not shared.made
    scores = reranker.score("who adopted a dog?", ["Dana adopted a beagle.", "The rent is due."])
    assert reranker.loaded
    assert shared.made
    assert scores[0] > scores[1]


def test_the_lazy_setting_starts_no_load() -> None:
    before = _warming_threads()
    reranker, _depth = reranker_from_settings(Settings.from_env({"MEMWARDEN_RERANK": "ms-marco"}), lazy=True)
    embedder = embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "minilm"}), lazy=True)
    assert isinstance(reranker, WarmingCrossEncoder)
    assert isinstance(embedder, CachingEmbedder)
    assert isinstance(embedder.inner, BatchingEmbedder)
    assert isinstance(embedder.inner.inner, WarmingModel)
    assert _warming_threads() - before == set()


@pytest.mark.minilm
def test_a_lazy_embedder_answers_as_the_model() -> None:
    embedder = embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "minilm"}), lazy=True)
    assert embedder is not None
    np.testing.assert_allclose(embedder.embed(["Dana"]), MiniLMEmbedder().embed(["Dana"]), atol=1e-6)


@pytest.mark.minilm
def test_a_cli_runtime_starts_no_model_load(settings: Settings) -> None:
    """What ``memwarden keys list``, the projector and a worker build: no warming thread,
    so a command that neither embeds nor reranks neither loads nor waits for a model."""
    before = _warming_threads()
    with Runtime(msgspec.structs.replace(settings, rerank="ms-marco"), follow=False):
        assert _warming_threads() - before == set()


def test_the_lanes_setting_defaults_to_the_cores_and_is_read_once() -> None:
    assert [default_model_lanes(cores) for cores in (None, 1, 2, 3, 4, 16)] == [1, 1, 1, 1, 2, 2]
    assert [session_threads(lanes, cores) for lanes, cores in ((1, 2), (2, 2), (1, 1), (2, 4), (1, 64))] == [
        2,
        1,
        1,
        2,
        MAX_SESSION_THREADS,
    ]
    assert Settings.from_env({"MEMWARDEN_MODEL_LANES": "3"}).model_lanes == 3
    assert Settings.from_env({}).model_lanes == default_model_lanes(os.cpu_count())
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="MEMWARDEN_MODEL_LANES"):
            Settings.from_env({"MEMWARDEN_MODEL_LANES": bad})


def test_a_model_loads_with_the_lanes_of_the_call_that_loads_it() -> None:
    shared: Shared[CrossEncoder] = Shared(CrossEncoder)
    reranker = WarmingCrossEncoder(warm=False, shared=shared, lanes=1)
    reranker.score("who adopted a dog?", ["Dana adopted a beagle."])
    assert shared().lanes == 1
    assert shared(threads=2).lanes == 1  # one instance per process: later options are not used
