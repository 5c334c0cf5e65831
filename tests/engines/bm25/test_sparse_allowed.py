"""The three ways BM25 scores the main segment give the same scores, to the bit.

* the full pass: one ``bincount`` over every main document;
* the union of the query's columns (``_MainHits``, when they are short: ``UNION_ENTRY_COST``);
* the allowed documents only, under a selective filter (``ALLOWED_ROW_COST``): a binary search of each query
  term's column per allowed document.

These tests compare them with the full pass (forced by infinite costs) in the mixed state: a main segment, a
delta segment, documents removed from both, and allowed sets holding live, removed, delta and unknown ids.
"""

import math
import zlib

import numpy as np
import pytest
from hybrid_memory.engines.bm25 import index as sparse
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.engines.rowset import RowSet

WORDS = [f"w{i}" for i in range(60)]


def _corpus(rng, n):
    # Zipf-like: low word numbers are common, high ones rare
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)), p=weights)) for _ in range(n)]


@pytest.fixture(scope="module")
def index():
    rng = np.random.default_rng(7)
    main_docs = _corpus(rng, 2000)
    for i in range(100, 110):
        main_docs[i] += " zzrare"  # a term in 10 of 2000 documents: its column is short
    delta_docs = _corpus(rng, 40) + ["w59 w59 only-in-delta"]
    idx = BM25Index(compact_min=100_000)
    idx.build(list(range(1, 2001)), main_docs)
    idx.add(list(range(3001, 3001 + len(delta_docs))), delta_docs)
    idx.remove([5, 17, 18, 999, 3002, 3010])
    return idx


def _full(monkeypatch):
    monkeypatch.setattr(sparse, "ALLOWED_ROW_COST", math.inf)
    monkeypatch.setattr(sparse, "UNION_ENTRY_COST", math.inf)


QUERIES = ["w3 w40", "zzrare w58", "w0", "w1 w1 w55", "w59 only-in-delta", "w12 w33 w44 w58", "w2 nothing-here"]


@pytest.mark.parametrize("query", QUERIES)
def test_filtered_search_and_scores_equal_the_full_pass(index, monkeypatch, query):
    rng = np.random.default_rng(zlib.crc32(query.encode()))
    pools = [np.arange(1, 2001), np.arange(3001, 3042), np.array([5, 17, 18, 999, 3002, 3010, 2500, 9999])]
    checked = 0
    for size in (1, 3, 10, 40, 120):
        picks = np.concatenate([rng.choice(pool, size=min(size, len(pool)), replace=False) for pool in pools])
        allowed = RowSet(picks)
        direct_cache: dict = {}
        got = index.search(query, 10, allowed, cache=direct_cache)
        # scores of allowed ids (what the searcher asks for the dense engine's candidates), then of outside ids
        inside = np.sort(rng.choice(allowed.ids, size=min(15, len(allowed)), replace=False))
        outside = np.array([2, 4, 6, 3001, 77777], dtype=np.int64)
        got_inside = index.score(query, inside, cache=direct_cache)
        got_outside = index.score(query, outside, cache=direct_cache)
        took_direct = "bm25_allowed" in direct_cache
        with monkeypatch.context() as patch:
            _full(patch)
            full_cache: dict = {}
            expected = index.search(query, 10, allowed, cache=full_cache)
            assert "bm25_allowed" not in full_cache
            expected_inside = index.score(query, inside, cache=full_cache)
            expected_outside = index.score(query, outside, cache=full_cache)
        assert got == expected
        np.testing.assert_array_equal(got_inside, expected_inside)
        np.testing.assert_array_equal(got_outside, expected_outside)
        checked += took_direct
    assert checked >= 3  # the small sets took the direct path (the test compares something)


def test_an_allowed_set_of_delta_documents_only(index, monkeypatch):
    allowed = RowSet(np.array([3001, 3003, 3041, 3002]))  # 3002 was removed
    cache: dict = {}
    got = index.search("w59 w1", 10, allowed, cache=cache)
    scores = index.score("w59 w1", np.array([3041, 3003, 3002]), cache=cache)
    assert "bm25_allowed" in cache and "bm25" not in cache  # a removed allowed id is nan without the full pass
    with monkeypatch.context() as patch:
        _full(patch)
        full_cache: dict = {}
        assert index.search("w59 w1", 10, allowed, cache=full_cache) == got
        np.testing.assert_array_equal(index.score("w59 w1", np.array([3041, 3003, 3002]), cache=full_cache), scores)
    assert got[0][0] == 3041 and np.isnan(scores[2])


def test_the_row_cost_rule_picks_the_path(index):
    tokens = index._terms("w3 w40", None).tokens
    with index._lock:
        columns = index._columns(tokens, None)
    entries = sum(end - begin for begin, end, _ in columns)
    touched = min(len(index._main_ids) + entries, entries * sparse.UNION_ENTRY_COST)
    assert index._pass_cost(columns)[0] == touched
    limit = touched // (len(columns) * sparse.ALLOWED_ROW_COST)  # the largest set scored directly
    ids = np.arange(1, 2001)
    below, above = RowSet(ids[:limit]), RowSet(ids[: limit + 1])
    cache_below: dict = {}
    cache_above: dict = {}
    index.search("w3 w40", 10, below, cache=cache_below)
    index.search("w3 w40", 10, above, cache=cache_above)
    assert "bm25_allowed" in cache_below and "bm25" not in cache_below
    assert "bm25" in cache_above and "bm25_allowed" not in cache_above


def test_hand_computed_scores_of_one_allowed_document():
    index = BM25Index(compact_min=100_000)
    docs = ["alpha beta", "alpha", "gamma"] + ["filler text"] * 97
    index.build(list(range(1, 101)), docs)
    cache: dict = {}
    hits = index.search("alpha beta", 5, RowSet([1]), cache=cache)
    assert "bm25_allowed" in cache
    # Lucene BM25, k1 1.5, b 0.75, N 100; avgdl = (2 + 1 + 1 + 97 * 2) / 100 = 1.98, |d| = 2
    avgdl = 198 / 100
    norm = 1.5 * (0.25 + 0.75 * 2 / avgdl)
    idf_alpha = math.log(1 + (100 - 2 + 0.5) / (2 + 0.5))
    idf_beta = math.log(1 + (100 - 1 + 0.5) / (1 + 0.5))
    alpha = float(np.float32(np.float32(idf_alpha) * (1 / (norm + 1))))
    beta = float(np.float32(np.float32(idf_beta) * (1 / (norm + 1))))
    assert hits == [(1, pytest.approx(alpha + beta, rel=1e-6))]
    assert index.score("alpha beta", np.array([1]), cache=cache).tolist() == [hits[0][1]]


@pytest.mark.parametrize("query", QUERIES)
def test_the_union_of_the_columns_equals_the_full_pass(index, monkeypatch, query):
    rng = np.random.default_rng(zlib.crc32(query.encode()) + 1)
    probes = np.array([1, 2, 5, 17, 999, 1500, 2000, 2500, 3001, 3002, 3041, 77777], dtype=np.int64)
    for allowed in (None, RowSet(rng.choice(np.arange(1, 3042), size=900, replace=False))):
        results = []
        for union in (0, math.inf):  # always the union, never
            with monkeypatch.context() as patch:
                patch.setattr(sparse, "ALLOWED_ROW_COST", math.inf)
                patch.setattr(sparse, "UNION_ENTRY_COST", union)
                cache: dict = {}
                hits = index.search(query, 10, allowed, cache=cache)
                scores = index.score(query, probes, cache=cache)
                held = cache.get("bm25")
                form = None if held is None or held[1] is None else type(held[1]).__name__
                results.append((hits, scores, form))
        (hits_u, scores_u, form_u), (hits_f, scores_f, form_f) = results
        assert hits_u == hits_f
        np.testing.assert_array_equal(scores_u, scores_f)
        if form_f is not None:  # some query term is in the main segment
            assert (form_u, form_f) == ("_MainHits", "ndarray")


def test_the_union_form_is_picked_for_short_columns(index):
    # "zzrare" is in 10 documents: its column is short, so the union costs less than a pass over 2000 documents
    tokens = index._terms("zzrare", None).tokens
    with index._lock:
        columns = index._columns(tokens, None)
        entries = columns[0][1] - columns[0][0]
        assert entries * sparse.UNION_ENTRY_COST <= len(index._main_ids) + entries
        assert isinstance(index._score_main(tokens), sparse._MainHits)
        common = index._columns(index._terms("w0", None).tokens, None)
        assert (common[0][1] - common[0][0]) * sparse.UNION_ENTRY_COST > len(index._main_ids)
        assert isinstance(index._score_main(index._terms("w0", None).tokens), np.ndarray)
