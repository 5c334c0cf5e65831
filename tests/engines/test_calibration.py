"""The surprise of an engine's top hit against chance (hybrid_memory.engines.calibration), hand-computed, and the exact corpus
moments behind the dense one: identical bits under any order of adds and removes, across saves, reopens and a
rebuild."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.engines.calibration import QUANTUM, VectorMoments, gaussian_surprise, term_surprise
from hybrid_memory.engines.dense.index import FaissIndex
from hybrid_memory.search.engine import Query, RowSet, SparseEngine


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# -- the two formulas ---------------------------------------------------------------------------------------------
def test_term_surprise_by_hand():
    # -(ln 50 + ln(2/100) + ln(5/100)) = -ln(50 * 10 / 10000) = ln 20
    assert term_surprise([2, 5], 100, 50) == pytest.approx(math.log(20), abs=1e-12)
    # one token held by df documents of all N: -(ln N + ln(df / N)) = -ln df, 0 for a token only the top holds
    assert term_surprise([1], 1000, 1000) == pytest.approx(0.0, abs=1e-12)
    assert term_surprise([4], 1000, 1000) == pytest.approx(-math.log(4), abs=1e-12)
    assert term_surprise([], 1000, 1000) is None


def test_gaussian_surprise_by_hand():
    # z = (0.5 - 0.1) / sqrt(0.04) = 2; Phi_c(2) = erfc(2 / sqrt 2) / 2 = 0.022750131948179195
    expected = -(math.log(100) + math.log(0.022750131948179195))
    assert gaussian_surprise(0.5, 0.1, 0.04, 100) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(-0.8219859, abs=1e-6)
    # far in the tail, where Phi_c underflows a float: log_ndtr stays exact (-z^2/2 - ln z - ln sqrt(2 pi) - ...)
    far = gaussian_surprise(1.0, 0.0, 1e-4, 1)  # z = 100
    assert far == pytest.approx(5000 + math.log(100) + 0.5 * math.log(2 * math.pi), rel=1e-6)
    assert gaussian_surprise(0.5, 0.1, 0.0, 100) is None


# -- exact moments ------------------------------------------------------------------------------------------------
def test_moments_are_the_grid_moments_and_exact_under_any_order():
    rng = np.random.default_rng(7)
    vectors = _unit(rng.standard_normal((300, 16)))
    grid = np.rint(vectors.astype(np.float64) / QUANTUM)
    one = VectorMoments(16)
    one.add(vectors)
    other = VectorMoments(16)  # another order, with a detour: add 50 extra, remove them again
    other.add(vectors[200:])
    other.add(vectors[:50])
    extra = _unit(rng.standard_normal((50, 16)))
    other.add(extra)
    other.remove(extra)
    other.add(vectors[50:200])
    single = VectorMoments(16)  # one row at a time: the in-place rank-1 path
    for row in vectors:
        single.add(row[None, :])
    single.remove(vectors[:5])
    single.add(vectors[:5])
    assert one.count == other.count == single.count == 300
    assert np.array_equal(one.to_array(), other.to_array())  # bit-identical
    assert np.array_equal(one.to_array(), single.to_array())
    assert np.array_equal(one.to_array()[0], grid.sum(axis=0))
    assert np.array_equal(one.to_array()[1:], grid.T @ grid)
    q = vectors[3]
    mean, variance = one.chance(q)
    products = (grid * QUANTUM) @ q.astype(np.float64)
    assert mean == pytest.approx(products.mean(), abs=1e-7)
    assert variance == pytest.approx(products.var(), rel=1e-4)


def test_moments_skip_all_zero_rows_and_need_two_vectors():
    moments = VectorMoments(3)
    moments.add(np.array([[0, 0, 0], [1, 0, 0]], dtype=np.float32))
    assert moments.count == 1 and moments.chance(np.array([1, 0, 0], dtype=np.float32)) is None
    moments.add(np.array([[0, 1, 0]], dtype=np.float32))
    mean, variance = moments.chance(np.array([1, 0, 0], dtype=np.float32))
    assert (mean, variance) == (0.5, 0.25)  # products 1 and 0


def test_moments_refuse_a_damaged_array():
    moments = VectorMoments(2)
    with pytest.raises(ValueError, match="integer sums"):
        moments.load_array(np.array([[0.5, 0], [0, 0], [0, 0]]), 1)
    with pytest.raises(ValueError, match=r"float64 \(3, 2\)"):
        moments.load_array(np.zeros((2, 2)), 1)


def test_faiss_index_moments_follow_writes_and_survive_save_and_reopen(tmp_path, caplog):
    rng = np.random.default_rng(3)
    vectors = _unit(rng.standard_normal((40, 8)))
    index = FaissIndex(8)
    index.add(np.arange(40), vectors)
    index.remove([5, 6, 7])
    index.add([100], vectors[:1])
    fresh = FaissIndex(8)  # the same live vectors, added in one go
    fresh.add(
        np.concatenate([np.delete(np.arange(40), [5, 6, 7]), [100]]),
        np.concatenate([np.delete(vectors, [5, 6, 7], axis=0), vectors[:1]]),
    )
    assert np.array_equal(index._moments.to_array(), fresh._moments.to_array())
    q = vectors[9]
    assert index.surprise(q, 0.9) == fresh.surprise(q, 0.9)
    index.save(tmp_path / "saved")
    reopened = FaissIndex(8)
    assert reopened.load(tmp_path / "saved")
    assert reopened._moments.count == 38
    assert np.array_equal(reopened._moments.to_array(), index._moments.to_array())
    # a damaged moments file: counted afresh from the vectors, with a warning, the same bits
    np.save(tmp_path / "saved" / "moments.npy", np.full((9, 8), 0.5))
    damaged = FaissIndex(8)
    assert damaged.load(tmp_path / "saved")
    assert np.array_equal(damaged._moments.to_array(), index._moments.to_array())
    assert any(
        "corpus moments" in r.getMessage() and "counting them from the vectors" in r.getMessage()
        for r in caplog.records
    )
    # a save written before the moments existed: likewise
    (tmp_path / "saved" / "moments.npy").unlink()
    older = FaissIndex(8)
    assert older.load(tmp_path / "saved")
    assert np.array_equal(older._moments.to_array(), index._moments.to_array())
    # n: the documents the query may return (the allowed set), else the live vectors
    mean, variance = index._moments.chance(q)
    assert index.surprise(q, 0.9, 10) == gaussian_surprise(0.9, mean, variance, 10)
    assert index.surprise(q, 0.9) == gaussian_surprise(0.9, mean, variance, 38)


# -- BM25's top hit -----------------------------------------------------------------------------------------------
def _bm25(main_texts: list[str], delta_texts: list[str], step: int = 1) -> BM25Index:
    index = BM25Index()
    index.build([i * step for i in range(len(main_texts))], main_texts)
    index.add(list(range(100, 100 + len(delta_texts))), delta_texts)
    return index


@pytest.mark.parametrize("cached", [True, False], ids=["token-cache", "no-token-cache"])  # an older save kept none
@pytest.mark.parametrize("step", [1, 10_000], ids=["dense-ids", "sparse-ids"])  # the id map, or binary search
@pytest.mark.parametrize("split", [4, 2, 0], ids=["all-main", "main+delta", "all-delta"])
def test_bm25_surprise_by_hand_in_every_segment_state(split, step, cached):
    from hybrid_memory.engines.bm25.token_cache import TokenCache

    texts = ["alpha beta", "alpha gamma", "delta epsilon", "zeta eta"]
    index = _bm25(texts[:split], texts[split:], step)
    if not cached:
        index._tokens = TokenCache()
    if split:
        assert (index._main_pos_of is None) == (step > 1)  # both look-ups of the top's main position are run
    doc = 0 if split > 0 else 100  # "alpha beta"
    # the top holds alpha (df 2) and beta (df 1) of N = 4: -(ln 4 + ln(2/4) + ln(1/4)) = ln 2
    assert index.surprise("alpha beta", doc) == pytest.approx(math.log(2), abs=1e-12)
    # among 2 allowed documents: -(ln 2 + ln(2/4) + ln(1/4)) = ln 4
    assert index.surprise("alpha beta", doc, 2) == pytest.approx(math.log(4), abs=1e-12)
    # tokens the top does not hold do not count; a document holding none gives None
    assert index.surprise("beta omega", doc) == pytest.approx(0.0, abs=1e-12)  # -(ln 4 + ln(1/4))
    other = 3 * step if split > 3 else 100 + 3 - split
    assert index.surprise("alpha beta", other) is None
    assert index.surprise("alpha beta", 999) is None and index.surprise("alpha beta", 10**9) is None


def test_bm25_surprise_after_removal_uses_the_scoring_statistics():
    index = _bm25(["alpha beta", "alpha gamma", "delta epsilon", "zeta eta"], [])
    index.remove([1])
    # a removed main document still counts in df (alpha 2) and N (4) until compaction, as in BM25's idf, while the
    # default n is the 3 live documents: -(ln 3 + ln(2/4) + ln(1/4)) = ln(8/3)
    assert index.surprise("alpha beta", 0) == pytest.approx(math.log(8 / 3), abs=1e-12)
    assert index.surprise("alpha beta", 1) is None  # removed


def test_sparse_engine_surprise_counts_the_allowed_set():
    index = _bm25(["alpha beta", "alpha gamma", "delta epsilon", "zeta eta"], [])
    engine = SparseEngine(index)
    query = Query("alpha beta")
    hits = engine.search(query, 3, None)
    assert hits[0][0] == 0
    assert engine.surprise(query, hits, None) == pytest.approx(math.log(2), abs=1e-12)
    allowed = RowSet([0, 1])
    assert engine.surprise(query, engine.search(query, 3, allowed), allowed) == pytest.approx(math.log(4), abs=1e-12)
    assert engine.surprise(query, [], None) is None


# -- through the searcher -----------------------------------------------------------------------------------------
def test_the_default_reads_each_engines_surprise_and_rrf_does_not():
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.search.searcher import SURPRISE

    texts = [
        "kafka consumer lag alert",
        "broker restart",
        "postgres vacuum stalled",
        "redis eviction storm",
        "nginx 504 gateway timeout",
        "kafka lag dashboard",
    ]
    with HybridMemory(embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(texts)])
        weights = {"sparse": 1.0, "dense": 1.0}
        query = Query("kafka lag", np.asarray(memory.embedder.embed_query("kafka lag"), dtype=np.float32))
        got = memory._searcher.candidates(query, top_k=3, depth=6, weights=weights, fusion="adaptive")
        runs = got.runs
        top_sparse, top_dense = got.id_of[runs["sparse"].keys[0]], got.id_of[runs["dense"].keys[0]]
        vector = query.vector
        assert got.input.surprise == {
            "sparse": memory.backend.sparse.surprise("kafka lag", top_sparse),
            "dense": memory.backend.dense.surprise(vector, runs["dense"].scores[runs["dense"].keys[0]]),
        }
        assert top_sparse in (got.id_of["c0"], got.id_of["c5"])
        # BM25's top holds kafka (df 2) and lag (df 2) of 6, among 6: -(ln 6 + ln 2/6 + ln 2/6) = ln 1.5
        assert got.input.surprise["sparse"] == pytest.approx(math.log(1.5), abs=1e-12)
        assert top_dense >= 0
        plain = Query("kafka lag", vector)
        rrf = memory._searcher.candidates(plain, top_k=3, depth=6, weights=weights, fusion="rrf")
        assert rrf.input.surprise == {} and SURPRISE not in plain.cache


def test_dense_engine_surprise_counts_the_allowed_set_and_skips_a_zero_query():
    from hybrid_memory.embedders import HashingEmbedder
    from hybrid_memory.search.engine import DenseEngine

    rng = np.random.default_rng(11)
    vectors = _unit(rng.standard_normal((50, 8)))
    index = FaissIndex(8)
    index.add(np.arange(50), vectors)
    engine = DenseEngine(index, HashingEmbedder(8))
    query = Query("anything", vectors[4])
    hits = engine.search(query, 5, None)
    assert hits[0][0] == 4  # its own vector
    mean, variance = index._moments.chance(vectors[4])
    assert engine.surprise(query, hits, None) == gaussian_surprise(hits[0][1], mean, variance, 50)
    allowed = RowSet(np.arange(0, 50, 5))  # 10 ids, 4 not among them: the top is another
    top = engine.search(query, 5, allowed)
    assert engine.surprise(query, top, allowed) == gaussian_surprise(top[0][1], mean, variance, 10)
    zero = Query("stop words", np.zeros(8, dtype=np.float32))
    assert engine.search(zero, 5, None) == [] and engine.surprise(zero, [], None) is None


def test_no_moments_above_the_dimension_cap(tmp_path):
    from hybrid_memory.engines.calibration import MOMENTS_MAX_DIM

    rng = np.random.default_rng(5)
    dim = MOMENTS_MAX_DIM + 1
    vectors = _unit(rng.standard_normal((6, dim)))
    index = FaissIndex(dim)
    index.add(np.arange(6), vectors)
    index.remove([2])
    assert index._moments is None and index.surprise(vectors[0], 0.9) is None
    index.save(tmp_path / "saved")
    assert not (tmp_path / "saved" / "moments.npy").exists()
    reopened = FaissIndex(dim)
    assert reopened.load(tmp_path / "saved") and reopened._moments is None and len(reopened) == 5
    assert FaissIndex(MOMENTS_MAX_DIM)._moments is not None


def test_a_concurrent_search_prepares_the_dense_chance_in_the_worker_and_ranks_as_inline():
    """The worker that ran BM25 works out the dense engine's chance moments while the caller's thread still
    searches (a barrier holds the dense search until they are in): one matvec per search, the same surprises,
    and the same fused hits as a search with no executor."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.search.searcher import HandoffPolicy

    class DenseInCaller(HandoffPolicy):
        def concurrent(self, names, size=None):  # noqa: ANN001, ANN201
            return True

        def slowest_first(self, names):  # noqa: ANN001, ANN201
            return ["dense", "sparse"]

    texts = [
        "kafka consumer lag alert",
        "broker restart",
        "postgres vacuum stalled",
        "redis eviction storm",
        "nginx 504 gateway timeout",
        "kafka lag dashboard",
        "lag in the consumer group of kafka",
    ]
    with HybridMemory(embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(texts)])
        searcher, moments = memory._searcher, memory.backend.dense._moments
        weights = {"sparse": 1.0, "dense": 1.0}
        vector = np.asarray(memory.embedder.embed_query("kafka lag"), dtype=np.float32)
        own_executor, searcher.executor = searcher.executor, None  # inline: both engines in this thread
        inline_query = Query("kafka lag", vector)
        inline = searcher.search(inline_query, top_k=3, depth=6, weights=weights)

        prepared = threading.Event()
        calls = []
        dense = searcher.engines["dense"]
        original_search, original_prepare, original_chance = dense.search, dense.prepare_surprise, moments.chance

        def search(query, k, allowed):  # noqa: ANN001, ANN202
            assert prepared.wait(10), "the worker never prepared the dense chance"
            return original_search(query, k, allowed)

        def prepare(query):  # noqa: ANN001, ANN202
            original_prepare(query)
            prepared.set()

        def chance(q):  # noqa: ANN001, ANN202
            calls.append(threading.current_thread().name)
            return original_chance(q)

        dense.search, dense.prepare_surprise, moments.chance = search, prepare, chance
        searcher.policy = DenseInCaller()
        with ThreadPoolExecutor(1, thread_name_prefix="worker") as pool:
            searcher.executor = pool
            query = Query("kafka lag", vector)
            concurrent = searcher.search(query, top_k=3, depth=6, weights=weights)
        searcher.executor = own_executor
        assert len(calls) == 1 and calls[0].startswith("worker")  # once, in the worker
        dense_top = concurrent.runs["dense"].scores[concurrent.runs["dense"].keys[0]]
        assert query.cache["surprise"]["dense"] == gaussian_surprise(dense_top, *original_chance(vector), 7)
        assert query.cache["surprise"] == inline_query.cache["surprise"]
        assert [(h.key, h.score, h.rrf_score) for h in concurrent.hits] == [
            (h.key, h.score, h.rrf_score) for h in inline.hits
        ]
        assert concurrent.weights == inline.weights


def test_the_response_says_whether_the_default_ran_calibrated():
    from hybrid_memory import HashingEmbedder, HybridMemory

    texts = [
        "kafka consumer lag alert",
        "broker restart",
        "postgres vacuum stalled",
        "redis eviction storm",
        "nginx 504 gateway timeout",
        "kafka lag dashboard",
    ]
    with HybridMemory(embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(texts)])
        default = memory.search({"query_id": "q", "search_text": "kafka lag", "top_k": 3})
        assert default.fusion == "adaptive" and default.calibrated is True
        assert default.model_dump()["calibrated"] is True  # in the JSON too
        rrf = memory.search(
            {"query_id": "q", "search_text": "kafka lag", "top_k": 3, "hybrid_params": {"fusion": "rrf"}}
        )
        assert rrf.calibrated is None
        sparse_only = memory.search(
            {"query_id": "q", "search_text": "kafka lag", "top_k": 3, "hybrid_params": {"dense_weight": 0.0}}
        )
        assert sparse_only.calibrated is None and sparse_only.effective_weights == {"dense": 0.0, "sparse": 1.0}
    # every chunk alike: the cosines have no spread, so the dense top cannot be judged against chance and both
    # engines fall back to the uncalibrated confidence weights
    with HybridMemory(embedder=HashingEmbedder(32)) as memory:
        memory.add(
            [{"chunk_id": f"c{i}", "text": "kafka lag alert", "metadata": {"i": i}} for i in range(4)], dedup="keep"
        )
        same = memory.search({"query_id": "q", "search_text": "kafka lag", "top_k": 3})
        assert same.fusion == "adaptive" and same.calibrated is False
        assert [r.chunk_id for r in same.results] == ["c0", "c1", "c2"]  # a tie throughout: by chunk_id
