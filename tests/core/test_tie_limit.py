"""A tie at an engine's candidate cut is broken by key, reading at most TIE_DEPTH_LIMIT hits of the engine."""

import numpy as np

from hybrid_memory.engines import Query
from hybrid_memory.searcher import TIE_DEPTH_LIMIT, HybridSearcher


class TiedEngine:
    """n documents: id 0 scores 2.0, ids 1..n-1 all score 1.0 (a query part every chunk holds equally)."""

    def __init__(self, n):
        self.n, self.asked = n, []

    def search(self, query, k, allowed):
        self.asked.append(k)
        return [(i, 2.0 if i == 0 else 1.0) for i in range(min(k, self.n))]

    def score(self, query, ids):
        return np.array([(2.0 if i == 0 else 1.0) if i < self.n else np.nan for i in ids.tolist()])


def keys(ids):  # keys sort in reverse of the engine's order: the tie-break by key must pick high ids
    return {i: f"d{999_999 - i:06d}" for i in ids}


def search(engine, top_k, depth):
    searcher = HybridSearcher({"sparse": engine}, keys)
    result = searcher.search(Query("inc"), top_k=top_k, depth=depth, weights={"sparse": 1.0}, fusion="rrf")
    return [hit.doc_id for hit in result.hits]


def test_a_huge_tie_reads_at_most_the_limit_and_still_does_not_depend_on_top_k():
    engine = TiedEngine(100_000)
    top1 = search(engine, top_k=1, depth=2)
    assert engine.asked == [3, 6, 12, 24, 48, 96, 192, 384, 512]  # doubling, capped at 512, not 100,000
    top4 = search(engine, top_k=4, depth=8)
    assert top1 == [0] and top4[0] == 0
    # the tied hits read are ids 1..511; by key the highest ids come first
    assert top4 == [0, 511, 510, 509]


def test_a_tie_within_the_limit_is_broken_exactly_by_key():
    engine = TiedEngine(300)  # ids 1..299 tied, all read
    assert search(engine, top_k=3, depth=4) == [0, 299, 298]
    assert engine.asked[-1] == 320 and TIE_DEPTH_LIMIT == 512
