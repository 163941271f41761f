"""The hybrid driver's arithmetic: lane fusion and the score lent to write-order neighbours."""

from __future__ import annotations

from uuid import UUID

import pytest

from benchmarks.locomo import KS
from memwarden.projections.search.drivers import candidates_for, merge, with_context
from memwarden.projections.search.view import Hit

A, B, C, D = (UUID(int=i) for i in range(1, 5))


def test_merge_weighs_each_normalized_lane() -> None:
    vector = [Hit(A, 0.9), Hit(B, 0.5)]
    lexical = [Hit(B, 12.0), Hit(C, 2.0)]
    merged = {h.ref: h.score for h in merge([(0.4, vector), (0.6, lexical)])}
    assert merged == pytest.approx({A: 0.4, B: 0.6, C: 0.0})


def test_a_neighbour_gets_a_share_of_the_hit_beside_it() -> None:
    hits = [Hit(A, 1.0), Hit(B, 0.2)]
    lent = with_context(hits, [(A, C, 1), (A, D, 2)], weight=0.5)
    assert [(h.ref, h.score) for h in lent] == [(A, 1.0), (C, 0.5), (D, 0.25), (B, 0.2)]


def test_a_hit_keeps_its_own_score_and_adds_what_it_is_lent() -> None:
    hits = [Hit(A, 1.0), Hit(B, 0.4)]
    lent = {h.ref: h.score for h in with_context(hits, [(A, B, 1), (B, A, 1)], weight=0.5)}
    assert lent == pytest.approx({A: 1.2, B: 0.9})


def test_two_hits_at_the_same_distance_lend_the_better_score_once() -> None:
    """Before and after at distance 1 count as one lender (the better); distances add up."""
    hits = [Hit(A, 1.0), Hit(B, 0.6), Hit(D, 0.8)]
    lent = {h.ref: h.score for h in with_context(hits, [(A, C, 1), (B, C, 1), (D, C, 2)], weight=0.5)}
    assert lent[C] == pytest.approx(0.5 * 1.0 + 0.25 * 0.8)


def test_no_neighbours_leaves_the_ranking_as_it_was() -> None:
    hits = [Hit(A, 1.0), Hit(B, 0.4)]
    assert with_context(hits, [], weight=0.5) == hits


def test_every_k_the_locomo_bench_scores_ranks_the_same_candidates() -> None:
    """bench locomo searches once at its largest k and scores the smaller ones from the head:
    sound only while each k's candidate depth is the same."""
    assert len({candidates_for(k) for k in KS}) == 1
