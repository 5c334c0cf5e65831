"""The default fusion's per-query pieces (issue 36): agreement of the engines' tops, discounted by chance, weights
mixed toward the request's by it, and the whole-query rule for plain words."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.fusion import FusionInput, fuse, rank_by_score
from hybrid_memory.fusion.agreement import chance_free, mix_weights, top_agreement


def test_top_agreement_is_the_shared_share_of_the_tops():
    runs = {"sparse": ["a", "b", "c", "d"], "dense": ["b", "e", "a", "f"]}
    # k defaults to half the longest list (4 -> 2): {a, b} & {b, e} = {b}
    assert top_agreement(runs) == 0.5
    assert top_agreement(runs, 4) == 0.5  # {a, b, c, d} & {b, e, a, f} = {a, b}
    assert top_agreement(runs, 1) == 0.0
    assert top_agreement({"sparse": ["a", "b", "c"], "dense": ["a", "b", "c"]}) == 1.0  # k = 2, both shared
    # an empty list has no say; one list alone agrees with nothing
    assert top_agreement({"sparse": ["a"], "dense": []}) == 0.0
    # three engines: the mean over the pairs, k = 1: (1 + 0 + 0) / 3
    assert top_agreement({"x": ["a", "b"], "y": ["a", "c"], "z": ["c", "a"]}) == pytest.approx(1 / 3)


def test_mix_weights_moves_toward_the_priors_by_the_squared_agreement():
    calibrated = {"sparse": 0.8, "dense": 0.2}
    # a = 1/2: share 1/4 of the convex priors (1/2, 1/2): 0.75 x 0.8 + 0.25 x 0.5, 0.75 x 0.2 + 0.25 x 0.5
    assert mix_weights(calibrated, {"sparse": 1.0, "dense": 1.0}, 0.5) == pytest.approx(
        {"sparse": 0.725, "dense": 0.275}
    )
    # full agreement: the priors made convex (0.4 / 0.6); none: the calibrated weights unchanged
    assert mix_weights(calibrated, {"sparse": 0.4, "dense": 0.6}, 1.0) == pytest.approx({"sparse": 0.4, "dense": 0.6})
    assert mix_weights(calibrated, {"sparse": 1.0, "dense": 1.0}, 0.0) == calibrated


E = math.e
BY_HAND = FusionInput(  # the input of test_fusion.py's by-hand tests of the v1 default
    runs={"sparse": ["c", "a"], "dense": ["a", "b", "c"]},
    scores={"sparse": {"c": E**2 - 1, "a": E - 1, "b": 0.0}, "dense": {"a": 0.5, "b": 0.3, "c": 0.1}},
    priors={"sparse": 1.0, "dense": 1.0},
    lower_bounds={"sparse": 0.0, "dense": -1.0},
    surprise={"sparse": 3.0, "dense": -1.0},
)


def test_chance_free_is_the_probability_the_top_is_not_chance():
    assert chance_free(0.0) == 0.5
    assert chance_free(3.0) == pytest.approx(1 / (1 + math.exp(-3.0)), rel=1e-15)
    assert chance_free(-1.0) == pytest.approx(1 / (1 + math.e), rel=1e-15)
    assert chance_free(-800.0) == 0.0 and chance_free(800.0) == 1.0  # no overflow either way
    assert chance_free(math.nan) == 1.0


def test_the_default_mixes_the_calibrated_weights_toward_the_priors_when_the_tops_agree():
    # calibrated (adaptive_v1): ln(1 + e^3) and ln(1 + e^-1) made convex. Tops (k = 2): {c, a} & {a, b} = {a}:
    # share of shared tops 1/2, discounted by the chance of the weaker top, 1 / (1 + e^1) (dense, S = -1):
    # a = 1 / (2 (1 + e)); s = (1 - a^2) s0 + a^2 / 2, d likewise
    ws, wd = math.log1p(math.exp(3.0)), math.log1p(math.exp(-1.0))
    s0, d0 = ws / (ws + wd), wd / (ws + wd)
    share = (1 / (2 * (1 + E))) ** 2
    s, d = (1 - share) * s0 + share / 2, (1 - share) * d0 + share / 2
    out = fuse("adaptive", BY_HAND)
    assert out.weights == pytest.approx({"sparse": s, "dense": d})
    assert fuse("adaptive_v1", BY_HAND).weights == pytest.approx({"sparse": s0, "dense": d0})
    # log-BM25 z (a, b, c) = (0, -k, k), dense z = (k, 0, -k): f = (d k, -s k, (s - d) k), s > d: c first;
    # rescaled over [b, c]: a = (d + s) / (2 s - d)
    assert out.scores == pytest.approx({"a": (d + s) / (2 * s - d), "b": 0.0, "c": 1.0})
    assert out.calibrated is True
    # without surprises (the uncalibrated fallback) the agreement is not discounted: share 1/4 of the priors
    plain = dataclasses.replace(BY_HAND, surprise={})
    u = fuse("adaptive_v1", plain).weights
    assert fuse("adaptive", plain).weights == pytest.approx({n: 0.75 * w + 0.125 for n, w in u.items()})


def test_the_default_keeps_the_calibrated_weights_when_the_query_names_something():
    ws, wd = math.log1p(math.exp(3.0)), math.log1p(math.exp(-1.0))
    named = dataclasses.replace(BY_HAND, identifier_matches={"b": 1})
    assert fuse("adaptive", named).weights == pytest.approx({"sparse": ws / (ws + wd), "dense": wd / (ws + wd)})
    assert [k for k, _ in rank_by_score(fuse("adaptive", named).scores)] == ["b", "c", "a"]


def test_holders_of_a_rare_name_keep_the_calibrated_order():
    # a one-identifier query: BM25's surprise is at most 0 (here -1), the dense one's 3. b and c hold the name; the
    # guard puts them first and, as adaptive_v1, orders them by the calibrated fusion (the request's weights there
    # cost robustness to a weak embedding: see fuse_adaptive), so the default and adaptive_v1 agree exactly
    inp = dataclasses.replace(BY_HAND, surprise={"sparse": -1.0, "dense": 3.0}, identifier_matches={"b": 1, "c": 1})
    assert fuse("adaptive", inp) == fuse("adaptive_v1", inp)
    assert [k for k, _ in rank_by_score(fuse("adaptive", inp).scores)] == ["b", "c", "a"]


def test_a_plain_word_query_counts_as_quoted_only_where_one_candidate_holds_it():
    index = BM25Index(compact_min=10_000)
    texts = [
        "tenant upload rejected twice",
        "tenant upload rejected again",
        "a tenant quota",
        "E4012 tenant upload rejected",
        "E4012 tenant upload rejected again",
        "cache eviction",
    ]
    index.build(list(range(len(texts))), texts)
    ids = np.arange(len(texts))
    # plain words held in order by four candidates (0, 1, 3, 4): a common phrase, no guard; held by one: counted
    assert index.exact_matches("tenant upload rejected", ids, max_df=4).tolist() == [0, 0, 0, 0, 0, 0]
    assert index.exact_matches("tenant upload rejected", np.array([0, 2, 5]), max_df=4).tolist() == [1, 0, 0]
    # with an identifier the query names something: both in-order holders count, 1 (rare E4012) + 1 + 1
    assert index.exact_matches("E4012 tenant upload rejected", ids, max_df=4).tolist() == [0, 0, 0, 3, 3, 0]
