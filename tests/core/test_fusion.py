"""Weighted RRF: hand-computed scores, 1-based ranks, id identity, tie-breaking, purity."""

import math

import pytest

from hybrid_memory import InvalidRequestError, reciprocal_rank_fusion


def test_rank_one_and_rank_three_give_the_documented_score():
    fused = reciprocal_rank_fusion({"sparse": ["a", "x", "y"], "dense": ["z", "w", "a"]}, rrf_k=60)
    top = fused[0]
    assert top.doc_id == "a"
    assert top.score == pytest.approx(1 / 61 + 1 / 63, abs=1e-15)
    assert round(top.score, 4) == 0.0323
    assert top.ranks == {"sparse": 1, "dense": 3}


def test_every_score_matches_the_formula():
    runs = {"sparse": ["a", "b", "c"], "dense": ["c", "a"]}
    fused = {h.doc_id: h.score for h in reciprocal_rank_fusion(runs, {"sparse": 0.4, "dense": 0.6}, rrf_k=60)}
    assert fused == pytest.approx({
        "a": 0.4 / 61 + 0.6 / 62,
        "b": 0.4 / 62,
        "c": 0.4 / 63 + 0.6 / 61,
    })


def test_changing_weights_changes_the_order():
    runs = {"sparse": ["a", "b"], "dense": ["b", "a"]}
    sparse_heavy = [h.doc_id for h in reciprocal_rank_fusion(runs, {"sparse": 0.7, "dense": 0.3})]
    dense_heavy = [h.doc_id for h in reciprocal_rank_fusion(runs, {"sparse": 0.3, "dense": 0.7})]
    assert sparse_heavy == ["a", "b"]
    assert dense_heavy == ["b", "a"]


def test_ties_are_broken_by_id_and_top_k_cuts():
    runs = {"sparse": ["b", "a"], "dense": ["a", "b"]}
    fused = reciprocal_rank_fusion(runs, rrf_k=60)
    assert [h.doc_id for h in fused] == ["a", "b"]
    assert fused[0].score == fused[1].score == pytest.approx(1 / 61 + 1 / 62)
    assert [h.doc_id for h in reciprocal_rank_fusion(runs, top_k=1)] == ["a"]


def test_repeated_id_counts_once_at_its_best_rank():
    fused = reciprocal_rank_fusion({"sparse": ["a", "a", "b"]}, rrf_k=0)
    assert {h.doc_id: h.score for h in fused} == {"a": 1.0, "b": 0.5}


def test_identity_is_the_id_not_the_text():
    # two different ids are two documents even if an adapter would see equal texts
    fused = reciprocal_rank_fusion({"sparse": ["id-1"], "dense": ["id-2"]})
    assert sorted(h.doc_id for h in fused) == ["id-1", "id-2"]


def test_zero_weight_run_contributes_nothing_but_ranks_are_kept():
    fused = reciprocal_rank_fusion({"sparse": ["a"], "dense": ["b"]}, {"sparse": 1.0, "dense": 0.0})
    assert [(h.doc_id, h.score) for h in fused] == [("a", pytest.approx(1 / 61))]


def test_inputs_are_not_mutated():
    runs = {"sparse": ["a", "b"], "dense": ["b"]}
    weights = {"sparse": 1.0, "dense": 2.0}
    reciprocal_rank_fusion(runs, weights)
    assert runs == {"sparse": ["a", "b"], "dense": ["b"]}
    assert weights == {"sparse": 1.0, "dense": 2.0}


def test_empty_runs_fuse_to_nothing():
    assert reciprocal_rank_fusion({"sparse": [], "dense": []}) == []


@pytest.mark.parametrize(
    ("weights", "rrf_k", "top_k", "message"),
    [
        ({"sparse": -1.0}, 60, None, "finite number >= 0"),
        ({"sparse": math.nan}, 60, None, "finite number >= 0"),
        ({"sparse": math.inf}, 60, None, "finite number >= 0"),
        ({"sparse": 0.0, "dense": 0.0}, 60, None, "all weights are 0"),
        ({"other": 1.0}, 60, None, "not given"),
        (None, -1, None, "rrf_k"),
        (None, 60, 0, "top_k"),
    ],
)
def test_bad_parameters_are_clear_errors(weights, rrf_k, top_k, message):
    with pytest.raises(InvalidRequestError, match=message):
        reciprocal_rank_fusion({"sparse": ["a"], "dense": ["b"]}, weights, rrf_k=rrf_k, top_k=top_k)
