"""The console's review seed writes contradicting pairs that must be stored, not superseded by
the write's synchronous band, and then found by the autopilot: their cosine under the tests'
hashing embedder must lie between the two thresholds, whatever gets projected first."""

from __future__ import annotations

import pytest

from memwarden.domain.embedding.hashing import HashEmbedder
from memwarden.domain.model.autopilot import MIN_COSINE, SUPERSEDE_MIN_COSINE
from memwarden.domain.model.judging import RulesJudge, Statement
from tests.e2e.review_seed import OPS_CONTRADICTION, TEAM_CONTRADICTION


@pytest.mark.parametrize("pair", [TEAM_CONTRADICTION, OPS_CONTRADICTION])
def test_a_seeded_pair_is_left_to_the_autopilot_and_it_finds_the_contradiction(pair: tuple[str, str]) -> None:
    vectors = HashEmbedder().embed(list(pair))
    cosine = float(vectors[0] @ vectors[1])
    assert MIN_COSINE <= cosine < SUPERSEDE_MIN_COSINE
    assert RulesJudge().judge(Statement(content=pair[0]), Statement(content=pair[1])).contradicts
