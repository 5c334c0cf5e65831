"""A tie at an engine's candidate cut is broken by key, reading at most TIE_DEPTH_LIMIT hits of the engine."""

import numpy as np
from hybrid_memory.search.engine import Query
from hybrid_memory.search.searcher import TIE_DEPTH_LIMIT, HybridSearcher


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
    assert engine.asked == [3, 6, 512]  # twice the depth, then the limit at once: 512, not 100,000
    top4 = search(engine, top_k=4, depth=8)
    assert top1 == [0] and top4[0] == 0
    # the tied hits read are ids 1..511; by key the highest ids come first
    assert top4 == [0, 511, 510, 509]


def test_a_tie_within_the_limit_is_broken_exactly_by_key():
    engine = TiedEngine(300)  # ids 1..299 tied, all read
    assert search(engine, top_k=3, depth=4) == [0, 299, 298]
    assert engine.asked == [5, 10, 512] and TIE_DEPTH_LIMIT == 512  # the engine holds 300: all read in one


def test_a_small_tie_ends_at_twice_the_depth():
    """A tie of a few documents at the cut (prose) costs one more read at twice the depth, not the limit."""

    class SmallTie(TiedEngine):
        def search(self, query, k, allowed):  # ids 0..9 score 10 - i, but ids 3, 4, 5 tie at 7.0
            self.asked.append(k)
            return [(i, 7.0 if 3 <= i <= 5 else 10.0 - i) for i in range(min(k, self.n))]

    engine = SmallTie(10)
    searcher = HybridSearcher({"sparse": engine}, keys)
    result = searcher.search(Query("inc"), top_k=4, depth=4, weights={"sparse": 1.0}, fusion="rrf")
    assert engine.asked == [5, 10]
    assert [hit.doc_id for hit in result.hits] == [0, 1, 2, 5]  # of the tied 3, 4, 5 the highest id sorts first by key
