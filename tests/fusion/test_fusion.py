"""Fusion functions: hand-computed scores for weighted RRF, DBSF, TM2C2, z-score fusion, confidence weights and
the identifier guard; 1-based ranks, id identity, tie-breaking, purity; every named method on one input."""

import dataclasses
import math

import pytest
from hybrid_memory import InvalidRequestError, reciprocal_rank_fusion
from hybrid_memory.fusion import (
    DEFAULT_FUSION,
    FUSION_METHODS,
    FusionInput,
    apply_identifier_guard,
    confidence_weights,
    dbsf,
    distribution_normalize,
    fuse,
    rank_by_score,
    theoretical_min_max,
    tm2c2,
    top_outlier,
    zscore_fusion,
)


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
    assert fused == pytest.approx(
        {
            "a": 0.4 / 61 + 0.6 / 62,
            "b": 0.4 / 62,
            "c": 0.4 / 63 + 0.6 / 61,
        }
    )


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
    # the same id in two runs is one document with two ranks; two ids are two documents
    same = reciprocal_rank_fusion({"sparse": ["id-1"], "dense": ["id-1"]}, rrf_k=60)
    assert [(h.doc_id, h.ranks) for h in same] == [("id-1", {"sparse": 1, "dense": 1})]
    assert same[0].score == pytest.approx(2 / 61)
    apart = reciprocal_rank_fusion({"sparse": ["id-1"], "dense": ["id-2"]}, rrf_k=60)
    assert [(h.doc_id, h.score) for h in apart] == [("id-1", pytest.approx(1 / 61)), ("id-2", pytest.approx(1 / 61))]


def test_identical_texts_under_two_ids_stay_two_results():
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory(embedder=HashingEmbedder(32)) as memory:
        memory.add(
            [
                {"chunk_id": "twin-b", "text": "disk full on db-prod-3"},
                {"chunk_id": "twin-a", "text": "disk full on db-prod-3"},
                {"chunk_id": "other", "text": "certificate expired on api-gw"},
            ]
        )  # ("certificate expired"
        # alone hashes to an all-zero vector in 32 dimensions: no dense evidence, so the dense engine skips it)
        for fusion in ("rrf", "adaptive"):
            results = memory.search("disk full db-prod-3", top_k=3, fusion=fusion).results
            assert [r.chunk_id for r in results] == ["twin-a", "twin-b", "other"]
            assert [(r.sparse_rank, r.dense_rank) for r in results[:2]] == [(1, 1), (2, 2)]
            assert results[0].sparse_score == results[1].sparse_score and results[2].sparse_rank is None


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


# -- score-based methods -----------------------------------------------------------------------------


def test_rank_by_score_orders_by_score_then_key():
    assert rank_by_score({"b": 1.0, "a": 1.0, "c": 2.0}) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]
    assert rank_by_score({"b": 1.0, "a": 1.0, "c": 2.0}, top_k=2) == [("c", 2.0), ("a", 1.0)]


def test_theoretical_min_max_uses_the_bound_not_the_observed_minimum():
    assert theoretical_min_max({"a": 3.0, "b": 1.0}, 0.0) == pytest.approx({"a": 1.0, "b": 1 / 3})
    # cosines: (s + 1) / (max + 1)
    assert theoretical_min_max({"a": 0.5, "b": 0.0}, -1.0) == pytest.approx({"a": 1.0, "b": 1 / 1.5})
    # a flat list stays flat (min-max over observed scores would stretch 0.50 / 0.49 to 1 / 0)
    flat = theoretical_min_max({"a": 0.50, "b": 0.49}, -1.0)
    assert flat["b"] == pytest.approx(1.49 / 1.5)
    assert theoretical_min_max({"a": 0.0}, 0.0) == {"a": 0.0}


def test_tm2c2_is_the_convex_combination():
    scores = {"sparse": {"a": 3.0, "b": 1.0}, "dense": {"a": 0.0, "b": 0.5}}
    bounds = {"sparse": 0.0, "dense": -1.0}
    equal = tm2c2(scores, {"sparse": 1.0, "dense": 1.0}, bounds)
    assert equal == pytest.approx({"a": 0.5 * 1.0 + 0.5 * (1 / 1.5), "b": 0.5 * (1 / 3) + 0.5 * 1.0})
    weighted = tm2c2(scores, {"sparse": 0.4, "dense": 0.6}, bounds)
    assert weighted == pytest.approx({"a": 0.4 + 0.6 / 1.5, "b": 0.4 / 3 + 0.6})
    # a key only one engine scored gets 0 from the other
    assert tm2c2({"sparse": {"a": 2.0}, "dense": {"b": 0.0}}, {"sparse": 1, "dense": 1}, bounds) == pytest.approx(
        {"a": 0.5, "b": 0.5}
    )
    with pytest.raises(ValueError, match="weight"):
        tm2c2(scores, {"sparse": 0.0, "dense": 0.0}, bounds)


def test_distribution_normalize_is_mean_plus_minus_three_sigma():
    # mean 2, sample std 1: phi = (s - (2 - 3)) / 6
    assert distribution_normalize({"a": 1.0, "b": 2.0, "c": 3.0}) == pytest.approx({"a": 2 / 6, "b": 3 / 6, "c": 4 / 6})
    assert distribution_normalize({"a": 1.0}) == {"a": 0.5}
    assert distribution_normalize({"a": 9.0}, reference=[1.0, 2.0, 3.0]) == pytest.approx({"a": 10 / 6})
    assert distribution_normalize({"a": 9.0}, reference=[1.0, 2.0, 3.0], clip=True) == {"a": 1.0}


def test_dbsf_adds_normalised_scores():
    scores = {"sparse": {"a": 1.0, "b": 2.0, "c": 3.0}, "dense": {"c": 0.2, "d": 0.4}}
    low, span = 0.3 - 3 * 0.02**0.5, 6 * 0.02**0.5  # dense: mean 0.3, sample std sqrt(0.02)
    fused = dbsf(scores, {"sparse": 1.0, "dense": 1.0})
    assert fused == pytest.approx({"a": 2 / 6, "b": 3 / 6, "c": 4 / 6 + (0.2 - low) / span, "d": (0.4 - low) / span})
    assert [k for k, _ in rank_by_score(fused)] == ["c", "d", "b", "a"]


def test_zscore_fusion_standardises_each_engine_over_the_candidates():
    scores = {"sparse": {"a": 4.0, "b": 2.0, "c": 0.0}, "dense": {"a": 0.1, "b": 0.3, "c": 0.2}}
    # sparse: mean 2, population std sqrt(8/3); dense: mean 0.2, std sqrt(0.02/3)
    zs, zd = (8 / 3) ** 0.5, (0.02 / 3) ** 0.5
    fused = zscore_fusion(scores, {"sparse": 1.0, "dense": 1.0})
    assert fused == pytest.approx({"a": 0.5 * (2 / zs) + 0.5 * (-0.1 / zd), "b": 0.5 * 0.1 / zd, "c": 0.5 * (-2 / zs)})
    assert [k for k, _ in rank_by_score(fused)] == ["b", "a", "c"]
    heavy_sparse = zscore_fusion(scores, {"sparse": 3.0, "dense": 1.0})
    assert [k for k, _ in rank_by_score(heavy_sparse)] == ["a", "b", "c"]
    assert zscore_fusion({"sparse": {"a": 1.0, "b": 1.0}}, {"sparse": 1.0}) == {"a": 0.0, "b": 0.0}


def test_top_outlier_and_confidence_weights():
    assert top_outlier([4.0, 3.0, 2.0, 1.0]) == pytest.approx(2 / (2 / 3) ** 0.5)
    assert top_outlier([5.0, 1.0, 1.0]) == 10.0  # flat tail: capped
    assert top_outlier([5.0, 1.0]) == 0.0  # too short to judge
    weights = confidence_weights({"sparse": [4.0, 3.0, 2.0, 1.0], "dense": []}, {"sparse": 0.4, "dense": 0.6})
    assert weights == pytest.approx({"sparse": 0.4 * (1 + 2 / (2 / 3) ** 0.5), "dense": 0.0})
    assert confidence_weights({"sparse": [4.0, 3.0, 2.0, 1.0]}, {"sparse": 0.0}) == {"sparse": 0.0}


def test_identifier_guard_puts_holders_first_and_keeps_order_inside_groups():
    guarded = apply_identifier_guard({"a": 0.9, "b": 0.5, "c": 0.2, "d": -0.3}, {"c": 1, "d": 2})
    # min -0.3, max 0.9: second term (f + 0.3) / 2.4
    assert guarded == pytest.approx({"a": 1.2 / 2.4, "b": 0.8 / 2.4, "c": 1 + 0.5 / 2.4, "d": 2.0})
    assert [k for k, _ in rank_by_score(guarded)] == ["d", "c", "a", "b"]
    assert apply_identifier_guard({"a": 1.0, "b": 2.0}, {}) == {"a": 1.0, "b": 2.0}


def _input(**overrides):
    data = {
        "runs": {"sparse": ["a", "b", "c"], "dense": ["c", "d", "a"]},
        "scores": {
            "sparse": {"a": 6.0, "b": 3.0, "c": 1.0, "d": 0.0},
            "dense": {"c": 0.8, "d": 0.6, "a": 0.5, "b": 0.1},
        },
        "priors": {"sparse": 1.0, "dense": 1.0},
        "lower_bounds": {"sparse": 0.0, "dense": -1.0},
        "rrf_k": 60.0,
        "identifier_matches": {},
    }
    data.update(overrides)
    return FusionInput(**data)


def test_every_named_method_on_one_input():
    inp = _input()
    order = {name: [k for k, _ in rank_by_score(fuse(name, inp).scores)] for name in FUSION_METHODS}
    # rrf: a = 1/61 + 1/63, c = 1/63 + 1/61 tie -> a first by key; then d (1/62) and b (1/62) -> b, d
    assert order["rrf"] == ["a", "c", "b", "d"]
    assert fuse("rrf", inp).scores["a"] == pytest.approx(1 / 61 + 1 / 63)
    # tm2c2: a = .5 * 6/6 + .5 * 1.5/1.8, c = .5 * 1/6 + .5 * 1
    assert fuse("tm2c2", inp).scores == pytest.approx(
        {"a": 0.5 + 0.5 * 1.5 / 1.8, "b": 0.25 + 0.5 * 1.1 / 1.8, "c": 0.5 / 6 + 0.5, "d": 0.5 * 1.6 / 1.8}
    )
    assert order["tm2c2"] == ["a", "c", "b", "d"]
    assert fuse("tm2c2", inp).weights == {"sparse": 0.5, "dense": 0.5}
    assert order["zscore"] == order["adaptive"] == ["a", "c", "d", "b"]
    assert DEFAULT_FUSION == "adaptive"
    # the guard moves the holder of a rare identifier up whatever the engines say
    guarded = _input(identifier_matches={"b": 1})
    assert [k for k, _ in rank_by_score(fuse("adaptive", guarded).scores)] == ["b", "a", "c", "d"]
    assert [k for k, _ in rank_by_score(fuse("rrf_guard", guarded).scores)] == ["b", "a", "c", "d"]


def test_a_weight_of_zero_leaves_an_engine_out_of_every_method():
    inp = _input(priors={"sparse": 1.0, "dense": 0.0})
    for name in FUSION_METHODS:
        outcome = fuse(name, inp)
        assert outcome.weights.get("dense", 0.0) == 0.0, name
        # only the sparse engine's opinion counts: its own order among its candidates
        ranked = [k for k, _ in rank_by_score(outcome.scores)]
        assert [k for k in ranked if k in ("a", "b", "c")] == ["a", "b", "c"], name


def test_rrf_table_is_the_arithmetic_of_reciprocal_rank_fusion_bit_for_bit():
    from hybrid_memory.fusion import rrf_table

    runs = {"sparse": ["a", "b", "a", "c"], "dense": ["c", "a"], "empty": []}
    weights = {"sparse": 0.4, "dense": 0.6, "empty": 0.0}
    scores, ranks = rrf_table(runs, weights, 60)
    assert scores == {"a": 0.4 / 61 + 0.6 / 62, "b": 0.4 / 62, "c": 0.4 / 63 + 0.6 / 61}  # exact, same order of sums
    assert ranks == {"a": {"sparse": 1, "dense": 2}, "b": {"sparse": 2}, "c": {"sparse": 3, "dense": 1}}
    assert {h.doc_id: h.score for h in reciprocal_rank_fusion(runs, weights, rrf_k=60)} == scores
    # only the rows asked for (the searcher's returned hits), the same values
    assert rrf_table(runs, weights, 60, keys={"c", "z"}) == (
        {"c": 0.4 / 63 + 0.6 / 61},
        {"c": {"sparse": 3, "dense": 1}},
    )
    with pytest.raises(InvalidRequestError, match="rrf_k"):
        rrf_table(runs, weights, -1, validate=True)


def test_log_evidence_and_the_adaptive_default_by_hand():
    from hybrid_memory.fusion import log_evidence

    e = math.e
    assert log_evidence({"a": e - 1, "b": 0.0, "c": e**2 - 1, "d": -0.5}) == pytest.approx(
        {"a": 1, "b": 0, "c": 2, "d": 0}
    )
    # sparse list [c, a] (b cross-scored 0), dense list [a, b, c]; log scale gives sparse z (0, -k, +k) for
    # (a, b, c) with k = sqrt(3/2); dense z (+k, 0, -k). Confidence: the sparse list ran out at 2 of the
    # longest list's 3, so it is continued with b's exact BM25 score 0: [e^2 - 1, e - 1, 0], whose tail has
    # mean and std (e - 1) / 2, so top_outlier = (e^2 - 1) / ((e - 1) / 2) - 1 = 2e + 1 and the weight 2e + 2;
    # the dense tail 0.3, 0.1 has mean 0.2, std 0.1: top_outlier 3, weight 4. alphas: s = (2e + 2) / (2e + 6),
    # d = 4 / (2e + 6). f: a = d k, b = -s k, c = (s - d) k; rescaled over [b, a] (span (s + d) k = k):
    # a 1, b 0, c = 2s - d = 4e / (2e + 6) = 2e / (e + 3).
    # (the values of adaptive_v1, the default until issue 36: the default now mixes these weights toward the
    # priors when the tops agree, tests/fusion/test_fusion_agreement.py)
    inp = FusionInput(
        runs={"sparse": ["c", "a"], "dense": ["a", "b", "c"]},
        scores={"sparse": {"c": e**2 - 1, "a": e - 1, "b": 0.0}, "dense": {"a": 0.5, "b": 0.3, "c": 0.1}},
        priors={"sparse": 1.0, "dense": 1.0},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
    )
    out = fuse("adaptive_v1", inp)
    s, d = (2 * e + 2) / (2 * e + 6), 4 / (2 * e + 6)
    assert out.weights == pytest.approx({"sparse": s, "dense": d})
    assert out.scores == pytest.approx({"a": 1.0, "b": 0.0, "c": 2 * e / (e + 3)})
    # the guard puts the exact-match holder c first (1 + (s - d + s) / 2), a and b keep their order:
    # a = (d + s) / 2 = 1/2, b = 0; rescaled over [0, 1 + e / (e + 3)]: a = (e + 3) / (2 (2e + 3)), b = 0
    guarded = fuse("adaptive_v1", dataclasses.replace(inp, identifier_matches={"c": 1}))
    assert rank_by_score(guarded.scores) == [("c", 1.0), ("a", pytest.approx((e + 3) / (2 * (2 * e + 3)))), ("b", 0.0)]


def test_a_list_that_ran_out_is_continued_with_its_exact_scores_for_the_confidence():
    # BM25 found one chunk (x); dense returned three. x's list, continued with the other candidates' exact
    # BM25 scores (0: they hold no query term; w's nan, a chunk BM25 does not hold, is skipped), is
    # [2, 0, 0]: a flat tail under a positive top, top_outlier 10 (the cap), weight 11. Dense: tail 0.3, 0.1,
    # top_outlier 3, weight 4. Read as "too short to judge" (weight 1), x ranked last; now first.
    inp = FusionInput(
        runs={"sparse": ["x"], "dense": ["y", "z", "x"]},
        scores={"sparse": {"x": 2.0, "y": 0.0, "z": 0.0, "w": math.nan}, "dense": {"y": 0.5, "z": 0.3, "x": 0.1}},
        priors={"sparse": 1.0, "dense": 1.0},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
    )
    out = fuse("adaptive", inp)
    assert out.weights == pytest.approx({"sparse": 11 / 15, "dense": 4 / 15})
    # log scale: sparse z (x, y, z) = (sqrt 2, -1/sqrt 2, -1/sqrt 2); dense z = (-sqrt 1.5, sqrt 1.5, 0)
    r2, r15 = math.sqrt(2), math.sqrt(1.5)
    f = {"x": 11 / 15 * r2 - 4 / 15 * r15, "y": -11 / 15 / r2 + 4 / 15 * r15, "z": -11 / 15 / r2}
    low, span = f["z"], f["x"] - f["z"]
    assert out.scores == pytest.approx({k: (v - low) / span for k, v in f.items()})
    assert [k for k, _ in rank_by_score(out.scores)] == ["x", "y", "z"]
    # the list as it came, 1 score: top_outlier 0 (unchanged rule), so without the continuation sparse weighs 1
    assert top_outlier([2.0]) == 0.0


def test_surprise_factor_by_hand():
    from hybrid_memory.fusion import surprise_factor

    # softplus(S) = ln(1 + e^S): ln 2 at chance level, about S for a clear top, > 0 below chance
    assert surprise_factor(0.0) == pytest.approx(math.log(2), rel=1e-15)
    assert surprise_factor(9.0) == pytest.approx(math.log(1 + math.exp(9.0)), rel=1e-15)
    assert surprise_factor(-3.0) == pytest.approx(math.log(1 + math.exp(-3.0)), rel=1e-15)
    assert surprise_factor(800.0) == 800.0  # no overflow of e^S
    assert surprise_factor(-30.0) == pytest.approx(math.exp(-30.0), rel=1e-9) and surprise_factor(-30.0) > 0
    assert surprise_factor(-800.0) == 0.0  # e^S underflows
    assert surprise_factor(math.nan) == 1.0  # not judged


def test_the_default_calibrates_each_weight_by_its_surprise():
    # the input of test_log_evidence_and_the_adaptive_default_by_hand (confidence weights sparse 2e + 2, dense 4,
    # which the calibrated weights replace). Surprises: sparse S = 3, dense S = -1 (its top is what chance gives
    # among the documents): weights prior x ln(1 + e^3) and prior x ln(1 + e^-1), then made convex.
    # adaptive_v1 (the default until issue 36), whose calibrated weights the default starts from
    e = math.e
    inp = FusionInput(
        runs={"sparse": ["c", "a"], "dense": ["a", "b", "c"]},
        scores={"sparse": {"c": e**2 - 1, "a": e - 1, "b": 0.0}, "dense": {"a": 0.5, "b": 0.3, "c": 0.1}},
        priors={"sparse": 1.0, "dense": 1.0},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
        surprise={"sparse": 3.0, "dense": -1.0},
    )
    ws = 1.0 * math.log(1 + math.exp(3.0))
    wd = 1.0 * math.log(1 + math.exp(-1.0))
    out = fuse("adaptive_v1", inp)
    s, d = ws / (ws + wd), wd / (ws + wd)
    assert out.weights == pytest.approx({"sparse": s, "dense": d})
    # z-scores as in that test, (a, b, c): sparse (0, -k, +k), dense (+k, 0, -k); f = (d k, -s k, (s - d) k);
    # s > d here, so c is first: rescaled over [b, c] (span (2 s - d) k): a = (d + s) / (2 s - d), c = 1, b = 0
    assert out.scores == pytest.approx({"a": (d + s) / (2 * s - d), "b": 0.0, "c": 1.0})
    assert [k for k, _ in rank_by_score(out.scores)] == ["c", "a", "b"]
    # the request weights are priors: 0.4 / 0.6 multiply the evidence before the weights are made convex
    weighted = fuse("adaptive_v1", dataclasses.replace(inp, priors={"sparse": 0.4, "dense": 0.6}))
    assert weighted.weights == pytest.approx(
        {"sparse": 0.4 * ws / (0.4 * ws + 0.6 * wd), "dense": 0.6 * wd / (0.4 * ws + 0.6 * wd)}
    )
    # without surprises (an engine that cannot tell, e.g. on Qdrant) the default is adaptive_uncalibrated exactly
    plain = dataclasses.replace(inp, surprise={})
    assert (
        dataclasses.replace(fuse("adaptive_v1", plain), calibrated=None)
        == fuse("adaptive_uncalibrated", plain)
        == fuse("adaptive_uncalibrated", inp)
    )
    assert fuse("adaptive_v1", plain).calibrated is False and fuse("adaptive_v1", inp).calibrated is True
    assert fuse("adaptive_v1", plain).weights == pytest.approx(
        {"sparse": (2 * e + 2) / (2 * e + 6), "dense": 4 / (2 * e + 6)}
    )
    # one engine judged and the other not (a flat dense list, no corpus moments): no engine is calibrated
    half = dataclasses.replace(inp, surprise={"sparse": 3.0})
    assert dataclasses.replace(fuse("adaptive_v1", half), calibrated=None) == fuse("adaptive_uncalibrated", inp)
    assert fuse("adaptive_v1", half).calibrated is False
