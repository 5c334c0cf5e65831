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
    return fdata.EvalSet("tiny", chunks, {"q1": "alpha beta1 gamma delta"}, {"q1": {"c1": 1}}, {"q1": "all"},
                         doc_vectors=vectors, query_vectors={"q1": np.ones(4, dtype=np.float32) / 2})


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
    assert no_classes["sparse alone"] == {"ndcg@10": 0.5, "margin": pytest.approx(-0.1), "worst_class_margin": None,
                                          "worst_class": None}
