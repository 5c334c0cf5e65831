"""The pure pieces of benchmarks/fusion_robustness.py: how a weak engine is made, and the margins read."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _fusion_data as fdata
import fusion_robustness as robust


def _set() -> fdata.EvalSet:
    vectors = np.eye(3, 4, dtype=np.float32)  # three unit vectors
    chunks = [{"chunk_id": f"c{i}", "text": f"alpha beta{i} gamma"} for i in range(3)]
    return fdata.EvalSet(
        "tiny",
        chunks,
        {"q1": "alpha beta1 gamma delta"},
        {"q1": {"c1": 1}},
        {"q1": "all"},
        doc_vectors=vectors,
        query_vectors={"q1": np.ones(4, dtype=np.float32) / 2},
    )


def test_dense_noise_mixes_unit_noise_and_keeps_queries() -> None:
    data = _set()
    same = robust.dense_noise(data, 0.0)
    np.testing.assert_allclose(same.doc_vectors, data.doc_vectors, rtol=0, atol=1e-7)
    mixed = robust.dense_noise(data, 0.75)
    assert mixed.doc_vectors.dtype == np.float32 and mixed.doc_vectors.shape == (3, 4)
    np.testing.assert_allclose(np.linalg.norm(mixed.doc_vectors, axis=1), np.ones(3), rtol=1e-6)
    # the noise of a level is fixed by the level alone
    np.testing.assert_array_equal(mixed.doc_vectors, robust.dense_noise(data, 0.75).doc_vectors)
    assert not np.allclose(mixed.doc_vectors, data.doc_vectors)
    assert mixed.query_vectors is data.query_vectors and data.doc_vectors[0, 0] == 1.0  # the input is untouched


def test_sparse_noise_keeps_all_tokens_at_keep_1_and_adds_words() -> None:
    data = _set()
    kept = robust.sparse_noise(data, 1.0, 0, ["zeta"])
    assert sorted(kept.queries["q1"].split()) == ["alpha", "beta1", "delta", "gamma"]
    padded = robust.sparse_noise(data, 1.0, 2, ["zeta"])
    assert sorted(padded.queries["q1"].split()) == ["alpha", "beta1", "delta", "gamma", "zeta", "zeta"]
    assert robust.sparse_noise(data, 0.0, 0, ["zeta"]).queries == {"q1": "the"}  # nothing left: a stop word
    assert data.queries == {"q1": "alpha beta1 gamma delta"} and padded.query_vectors is data.query_vectors


def test_documents_as_queries_reverses_queries_chunks_vectors_and_judgements() -> None:
    data = _set()
    data.queries["q2"] = "beta0"
    data.query_vectors["q2"] = np.array([0, 0, 0, 1], dtype=np.float32)
    data.qrels = {"q1": {"c1": 2, "c2": 0}, "q2": {"c1": 1, "c0": 1}}
    data.query_class = {"q1": "all", "q2": "all"}
    data.query_filter = {"q2": {"kind": "x"}}
    out = robust.documents_as_queries(data)
    assert [c["chunk_id"] for c in out.chunks] == ["q:q1", "q:q2"] and out.chunks[1]["text"] == "beta0"
    assert out.qrels == {"c1": {"q:q1": 2, "q:q2": 1}, "c0": {"q:q2": 1}}  # grade 0 (c2) judged not relevant: left out
    assert out.queries == {"c1": "alpha beta1 gamma", "c0": "alpha beta0 gamma"}
    np.testing.assert_array_equal(out.doc_vectors, np.stack([data.query_vectors["q1"], data.query_vectors["q2"]]))
    np.testing.assert_array_equal(out.query_vectors["c0"], data.doc_vectors[0])
    assert out.query_class == {"c1": "all", "c0": "all"} and out.query_filter == {}
    assert [c["chunk_id"] for c in data.chunks] == ["c0", "c1", "c2"] and data.query_filter  # the input is untouched


def test_margins_against_the_better_engine_overall_and_by_class() -> None:
    metrics = {
        "sparse alone": {"ndcg@10": 0.50, "ndcg@10:a": 0.60, "ndcg@10:b": 0.40},
        "dense alone": {"ndcg@10": 0.40, "ndcg@10:a": 0.30, "ndcg@10:b": 0.50},
        "fused": {"ndcg@10": 0.55, "ndcg@10:a": 0.58, "ndcg@10:b": 0.52},
    }
    m = robust.margins(metrics)
    assert m["fused"]["margin"] == pytest.approx(0.05)
    assert m["fused"]["worst_class"] == "a" and m["fused"]["worst_class_margin"] == pytest.approx(-0.02)
    assert m["dense alone"]["margin"] == pytest.approx(-0.10)
    assert m["dense alone"]["worst_class"] == "a" and m["dense alone"]["worst_class_margin"] == pytest.approx(-0.30)
    no_classes = robust.margins({"sparse alone": {"ndcg@10": 0.5}, "dense alone": {"ndcg@10": 0.6}})
    assert no_classes["sparse alone"] == {
        "ndcg@10": 0.5,
        "margin": pytest.approx(-0.1),
        "worst_class_margin": None,
        "worst_class": None,
    }


def test_chance_excess_by_hand() -> None:
    trial = __import__("dense_calibration_trial")
    q = np.array([1.0, 0.0], dtype=np.float32)
    mu, sigma = np.zeros(2), np.diag([0.25, 1.0])
    # z = (1.0 - 0) / sqrt(0.25) = 2; sqrt(2 ln e^2) = 2; so the top is exactly where chance puts the maximum
    assert trial.chance_excess(q, 1.0, mu, sigma, int(round(np.exp(2.0)))) == pytest.approx(
        2.0 - np.sqrt(2 * np.log(7))
    )
    assert trial.chance_excess(q, 1.5, mu, sigma, 2) == pytest.approx(3.0 - np.sqrt(2 * np.log(2)))
    assert trial.chance_excess(q, 1.0, mu, np.zeros((2, 2)), 100) == float("inf")  # no spread: not judged
    assert trial.H["clip(e + 1)"](-0.25) == 0.75 and trial.H["clip(e + 1)"](0.5) == 1.0
    assert trial.H["logistic(2e)"](0.0) == 0.5


def test_calibrated_default_with_factor_1_orders_as_the_default() -> None:
    from hybrid_memory.fusion import FusionInput
    from hybrid_memory.fusion.methods import fuse_adaptive

    trial = __import__("dense_calibration_trial")
    inp = FusionInput(
        runs={"sparse": ["a", "b", "c"], "dense": ["d", "c", "a"]},
        scores={"sparse": {"a": 9.0, "b": 4.0, "c": 2.0, "d": 0.0}, "dense": {"d": 0.8, "c": 0.5, "a": 0.1, "b": 0.05}},
        priors={"sparse": 1.0, "dense": 1.0},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
    )
    order = lambda scores: sorted(scores, key=lambda k: (-scores[k], k))  # noqa: E731
    # by hand: top_outlier 6 (BM25) and 2.5 (dense), so alphas 2/3 and 1/3; z of log(1 + BM25) a 1.250, b 0.425,
    # c -0.184, d -1.491; z of the cosines a -0.855, b -1.018, c 0.448, d 1.426; fused a 0.548, c 0.027,
    # b -0.056, d -0.519
    fused = trial.calibrated(inp, 1.0)
    assert [round(fused[k], 3) for k in "acbd"] == [0.548, 0.027, -0.056, -0.519]
    assert order(fused) == order(fuse_adaptive(inp).scores) == ["a", "c", "b", "d"]
    assert order(trial.calibrated(inp, 0.0)) == ["a", "b", "c", "d"]  # dense weighs nothing: BM25's order


def test_cross_excess_by_hand() -> None:
    from hybrid_memory.fusion import FusionInput

    trial = __import__("dense_calibration_trial")
    e3 = float(np.expm1(3.0))  # a BM25 score whose log(1 + s) is 3
    inp = FusionInput(
        runs={"sparse": ["a", "b"], "dense": ["c", "d", "f"]},
        scores={
            "sparse": {"a": e3, "b": 1.0, "c": 0.0, "d": float(np.expm1(1.0)), "f": 0.0},
            "dense": {"c": 0.6, "d": 0.5, "f": 0.4, "a": 0.1, "b": 0.2},
        },
        priors={"sparse": 1.0, "dense": 1.0},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
    )
    chance = np.sqrt(2 * np.log(100))
    # BM25 against dense's candidates c, d, f: log(1 + s) 0, 1, 0 -> mean 1/3, std sqrt(2/9); top log(1 + a) = 3
    assert trial.cross_excess(inp, "sparse", 100) == pytest.approx((3 - 1 / 3) / np.sqrt(2 / 9) - chance)
    # dense against BM25's candidates it did not return: a 0.1, b 0.2 -> only 2, too few to judge
    assert trial.cross_excess(inp, "dense", 100) is None
    flat = FusionInput(
        runs={"sparse": ["a"], "dense": ["b", "c", "d"]},
        scores={"sparse": {"a": 2.0, "b": 0.0, "c": 0.0, "d": 0.0}, "dense": {"b": 0.3, "a": 0.1}},
        priors={},
        lower_bounds={"sparse": 0.0, "dense": -1.0},
    )
    assert trial.cross_excess(flat, "sparse", 10) == float("inf")  # b, c, d score alike: not judged
    # calibrated() with per-engine factors: BM25 weighing nothing leaves dense's order
    order = lambda scores: sorted(scores, key=lambda k: (-scores[k], k))  # noqa: E731
    assert order(trial.calibrated(inp, {"sparse": 0.0}))[:3] == ["c", "d", "f"]


def test_surprises_by_hand() -> None:
    from scipy.stats import norm

    trial = __import__("dense_calibration_trial")
    q = np.array([1.0, 0.0], dtype=np.float32)
    mu, sigma = np.zeros(2), np.diag([0.25, 1.0])
    # z = (1.0 - 0) / 0.5 = 2: chance puts 100 x P(Z > 2) = 2.275 of 100 documents there
    assert trial.dense_surprise(q, 1.0, mu, sigma, 100) == pytest.approx(-np.log(100 * norm.sf(2.0)))
    assert trial.dense_surprise(q, 1.0, mu, np.zeros((2, 2)), 100) == float("inf")
    # two held terms in 10 and 1 of 1000 documents, 50 allowed: 50 x 0.01 x 0.001 = 0.0005 expected by chance
    df = {"pool": 10, "e504": 1, "the": 900}
    assert trial.sparse_surprise({"pool", "e504"}, df, 1000, 50) == pytest.approx(-np.log(50 * 0.01 * 0.001))
    assert trial.sparse_surprise({"the"}, df, 1000, 1000) == pytest.approx(-np.log(900))  # a common word: < 0
    assert trial.sparse_surprise(set(), df, 1000, 50) is None
    assert trial.SURPRISE_H["sqrt"](9.0) == 3.0 and trial.SURPRISE_H["identity"](2.5) == 2.5
