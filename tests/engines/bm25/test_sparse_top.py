"""BM25's candidate cut: the top k by score then id, ties at the cut resolved without sorting the tie."""

import numpy as np
import pytest
from hybrid_memory.engines.bm25 import index as sparse
from hybrid_memory.engines.bm25.index import BM25Index


def _brute(ids, scores, k):
    return np.lexsort((ids, -scores))[:k]


@pytest.mark.parametrize("k", [1, 5, 21, 200])
def test_top_equals_a_full_sort_with_ties_at_the_cut(k):
    rng = np.random.default_rng(k)
    ids = np.sort(rng.choice(10_000, size=3_000, replace=False)).astype(np.int64)
    scores = rng.choice([0.5, 1.0, 1.5, 2.0], size=3_000).astype(np.float64)  # every score ties hundreds
    cache: dict = {}
    got = BM25Index._top(ids, scores, k, cache)
    assert got.tolist() == _brute(ids, scores, k).tolist()
    # the tie made the first ask order TIE_PREFIX x k documents; deeper asks read them
    assert len(cache["bm25_top"][1]) == min(len(ids), k * sparse.TIE_PREFIX)
    for deeper in (2 * k, 4 * k, 8 * k):
        assert BM25Index._top(ids, scores, deeper, cache).tolist() == _brute(ids, scores, deeper).tolist()


def test_no_tie_keeps_exactly_k_and_a_new_array_is_not_served_from_the_cache():
    ids = np.arange(1, 101, dtype=np.int64)
    scores = np.linspace(10.0, 1.0, 100)
    cache: dict = {}
    assert BM25Index._top(ids, scores, 3, cache).tolist() == [0, 1, 2]
    assert len(cache["bm25_top"][1]) == 3
    other = ids.copy()
    reversed_scores = scores[::-1].copy()
    assert BM25Index._top(other, reversed_scores, 3, cache).tolist() == [99, 98, 97]


def test_a_term_every_document_holds_ranks_ties_by_id():
    index = BM25Index(compact_min=100_000)
    docs = ["inc-0000001 rare words"] + [f"inc-{i:07d} filler text" for i in range(2, 3001)]
    index.build(list(range(1, 3001)), docs)
    hits = index.search("INC-0000001", 21, cache={})
    assert hits[0][0] == 1
    # the other 20: "inc" alone, equal length and equal scores, so the smallest ids
    assert [doc for doc, _ in hits[1:]] == list(range(2, 22))
    assert len({score for _, score in hits[1:]}) == 1
