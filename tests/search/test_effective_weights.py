"""effective_weights: one unit (convex, summing to 1, dense first) for every fusion method, while RRF's
arithmetic keeps the request weights as given (a fresh user's finding 8)."""

from __future__ import annotations

import math

import pytest
from hybrid_memory.fusion import FUSION_METHODS
from hybrid_memory.models import convex_weights

QUERY = "HTTP 504 PostgreSQL connection pool"


@pytest.mark.parametrize("fusion", list(FUSION_METHODS))
def test_every_method_reports_convex_weights_dense_first(memory, fusion):
    response = memory.search(QUERY, top_k=4, fusion=fusion, dense_weight=3, sparse_weight=1)
    weights = response.effective_weights
    assert list(weights) == ["dense", "sparse"]
    assert math.fsum(weights.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(w >= 0 for w in weights.values())
    if fusion in ("rrf", "rrf_guard", "dbsf", "tm2c2", "zscore", "zscore_guard"):  # no per-query adaptation
        assert weights == {"dense": 0.75, "sparse": 0.25}


def test_rrf_scores_use_the_request_weights_not_the_reported_ones(memory):
    response = memory.search(QUERY, top_k=6, fusion="rrf", dense_weight=3, sparse_weight=1, rrf_k_constant=60)
    assert response.effective_weights == {"dense": 0.75, "sparse": 0.25}
    both = [r for r in response.results if r.sparse_rank and r.dense_rank]
    assert both, "the query must have a chunk found by both engines"
    for r in response.results:
        expected = (3.0 / (60 + r.dense_rank) if r.dense_rank else 0.0) + (
            1.0 / (60 + r.sparse_rank) if r.sparse_rank else 0.0
        )
        assert r.rrf_score == pytest.approx(expected, rel=1e-12)
    # defaults (1, 1): reported 0.5 / 0.5, scored 1 / (60 + rank) per engine
    first = memory.search(QUERY, top_k=1, fusion="rrf").results[0]
    assert memory.search(QUERY, top_k=1, fusion="rrf").effective_weights == {"dense": 0.5, "sparse": 0.5}
    assert first.rrf_score == pytest.approx(
        sum(1.0 / (60 + rank) for rank in (first.sparse_rank, first.dense_rank) if rank), rel=1e-12
    )


def test_convex_weights_rule():
    assert convex_weights({"sparse": 1.0, "dense": 3.0}) == {"dense": 0.75, "sparse": 0.25}
    assert list(convex_weights({"zeta": 1.0, "sparse": 1.0, "dense": 2.0})) == ["dense", "sparse", "zeta"]
    assert convex_weights({"sparse": 0.0, "dense": 0.0}) == {"dense": 0.0, "sparse": 0.0}  # no engine ran
    already = {"sparse": 0.3133906399855941, "dense": 0.686609360014406}  # sums to exactly 1.0: kept bit for bit
    assert math.fsum(already.values()) == 1.0 and convex_weights(already) == already
    assert convex_weights({"sparse": 2.0, "dense": 0.0}) == {"dense": 0.0, "sparse": 1.0}
