"""The vectorised bm25s build gives bit-identical scores to bm25s's own index()."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest
from hybrid_memory.engines.bm25.build import build_bm25s, lucene_scores


@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (1.2, 0.3), (0.9, 1.0)])
def test_same_matrix_as_bm25s_index(k1, b):
    rng = np.random.default_rng(5)
    vocab = {"": 0, **{f"w{i}": i + 1 for i in range(300)}}
    ranks = np.arange(1, 301, dtype=np.float64)
    p = ranks**-1.1 / (ranks**-1.1).sum()
    docs = [(rng.choice(300, size=int(rng.integers(1, 40)), p=p) + 1).astype(np.int32) for _ in range(500)]
    docs.append(np.array([0], dtype=np.int32))  # an empty document: bm25s's "" token
    ours = build_bm25s(docs, vocab, k1=k1, b=b)
    reference = bm25s.BM25(k1=k1, b=b, method="lucene")
    reference.index(([d.tolist() for d in docs], dict(vocab)), show_progress=False)
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(ours.scores[key], reference.scores[key]), key
    assert ours.scores["data"].dtype == np.float32
    assert ours.scores["num_docs"] == reference.scores["num_docs"] == 501
    assert ours.vocab_dict == reference.vocab_dict
    query = [vocab["w3"], vocab["w40"], vocab["w250"]]
    assert np.array_equal(ours.get_scores_from_ids(query), reference.get_scores_from_ids(query))


def test_hand_computed_lucene_score():
    # two documents: [a, a, b] and [b]; N = 2, avgdl = 2
    scores = lucene_scores(np.array([1, 1, 2, 2], np.int32), np.array([3, 1]), 3, 1.5, 0.75)
    idf_a = np.float32(np.log(1 + (2 - 1 + 0.5) / (1 + 0.5)))
    idf_b = np.float32(np.log(1 + (2 - 2 + 0.5) / (2 + 0.5)))
    a_doc0 = idf_a * 2 / (1.5 * (0.25 + 0.75 * 3 / 2) + 2)
    b_doc0 = idf_b * 1 / (1.5 * (0.25 + 0.75 * 3 / 2) + 1)
    b_doc1 = idf_b * 1 / (1.5 * (0.25 + 0.75 * 1 / 2) + 1)
    assert scores["indptr"].tolist() == [0, 0, 1, 3]
    assert scores["indices"].tolist() == [0, 0, 1]
    assert np.allclose(scores["data"], [a_doc0, b_doc0, b_doc1], rtol=1e-6)


def test_lengths_must_match_tokens():
    with pytest.raises(ValueError, match="add up to 2"):
        lucene_scores(np.array([1, 2, 3], np.int32), np.array([1, 1]), 4, 1.5, 0.75)
