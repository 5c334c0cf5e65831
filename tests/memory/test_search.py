"""Hybrid search: fused scores, filters inside both engines, identifiers, concurrency, validation."""

import asyncio
import threading

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError, InvalidRequestError, SearchResponse


def test_rrf_scores_are_the_weighted_formula(memory):
    response = memory.search("HTTP 504 connection pool", top_k=6, dense_weight=0.6, sparse_weight=0.4, fusion="rrf")
    assert response.fusion == "rrf"
    assert response.effective_weights == {"sparse": 0.4, "dense": 0.6}
    assert all(r.score is None for r in response.results)  # the order is rrf_score's
    assert response.total_retrieved == len(response.results) == 6
    for r in response.results:
        expected = (0.4 / (60 + r.sparse_rank) if r.sparse_rank else 0) + (
            0.6 / (60 + r.dense_rank) if r.dense_rank else 0
        )
        assert r.rrf_score == pytest.approx(expected, abs=1e-15)
    scores = [r.rrf_score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    assert {r.chunk_id for r in response.results[:2]} == {"prod-504", "stage-504"}


def test_the_reference_request_shape(memory):
    request = {
        "query_id": "mem_req_99214",
        "search_text": "HTTP 504 gateway timeout postgres connection pool",
        "top_k": 5,
        "hybrid_params": {"dense_weight": 0.6, "sparse_weight": 0.4, "rrf_k_constant": 60},
        "metadata_filter": {"environment": "production", "service": "billing-service"},
    }
    response = memory.search(request)
    assert isinstance(response, SearchResponse)
    assert response.query_id == "mem_req_99214"
    assert [r.chunk_id for r in response.results] == ["prod-504"]  # staging note excluded
    assert response.total_retrieved == 1
    top = response.results[0]
    assert (top.sparse_rank, top.dense_rank) == (1, 1)
    assert top.rrf_score == pytest.approx(0.4 / 61 + 0.6 / 61)
    assert set(response.model_dump()) == {
        "query_id",
        "total_retrieved",
        "results",
        "fusion",
        "effective_weights",
        "calibrated",
    }
    assert response.fusion == "adaptive"
    assert top.score is not None
    assert {"chunk_id", "rrf_score", "text", "source"} <= set(response.model_dump()["results"][0])


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("user id", "auth-user"),
        ("getUserById", "auth-user"),
        ("ERR_CONN_RESET", "reset"),
        ("conn reset", "reset"),
        ("E1243", "upgrade"),
        ("v2.3.1", "upgrade"),
        ("10.0.0.12", "upgrade"),
        ("故乡", "poem"),
    ],
)
def test_identifiers_are_found_by_bm25(memory, query, expected_first):
    results = memory.search(query, top_k=3, dense_weight=0.0).results
    assert results[0].chunk_id == expected_first


def test_bm25_padding_never_reaches_fusion(memory):
    # only one note mentions getUserById: bm25s would pad top-5 with zero-score rows
    results = memory.search("getUserById", top_k=5, dense_weight=0.0).results
    assert [r.chunk_id for r in results] == ["auth-user"]


def test_selective_filter_still_fills_top_k_inside_both_engines():
    with HybridMemory(embedder=HashingEmbedder(64)) as mem:
        mem.add(
            [
                {
                    "chunk_id": f"noise-{i:03d}",
                    "text": f"HTTP 504 connection pool timeout number {i}",
                    "metadata": {"team": "noise"},
                }
                for i in range(200)
            ]
        )
        mem.add(
            [
                {
                    "chunk_id": f"rare-{i}",
                    "text": f"unrelated gardening note {i} about tomatoes",
                    "metadata": {"team": "rare"},
                }
                for i in range(3)
            ]
        )
        response = mem.search("HTTP 504 connection pool timeout", top_k=3, metadata_filter={"team": "rare"})
        assert sorted(r.chunk_id for r in response.results) == ["rare-0", "rare-1", "rare-2"]
        assert response.total_retrieved == 3
        response = mem.search("HTTP 504", top_k=10, metadata_filter={"team": {"$ne": "noise"}})
        assert all(r.metadata["team"] == "rare" for r in response.results)


def test_filter_operators_through_search(memory):
    def ids(flt):
        return sorted(r.chunk_id for r in memory.search("service", top_k=20, metadata_filter=flt).results)

    assert ids({"severity": {"$gte": 2}}) == ["auth-user", "reset", "stage-504", "upgrade"]
    assert ids({"severity": {"$lt": 2}}) == ["prod-504"]
    assert ids({"tags": {"$contains": "network"}}) == ["reset"]
    assert ids({"$or": [{"service": "auth-api"}, {"language": "zh"}]}) == ["auth-user", "poem"]
    assert ids({"$not": {"environment": "production"}}) == ["poem", "stage-504"]
    assert ids({"service": {"$in": ["auth-api", "search-indexer"]}}) == ["auth-user", "reset"]
    assert ids({"service": {"$nin": ["auth-api", "search-indexer", "billing-service"]}}) == ["poem", "upgrade"]
    assert ids({"language": {"$exists": True}}) == ["poem"]
    assert ids({"severity": {"$gt": "1"}}) == []  # type-strict: numbers never compare with strings
    assert ids({"$and": [{"environment": "production"}, {"severity": 2}]}) == ["auth-user", "reset", "upgrade"]
    assert memory.search("service", metadata_filter={"environment": "nowhere"}).total_retrieved == 0


def test_unknown_operator_is_a_clear_error(memory):
    with pytest.raises(InvalidFilterError, match=r"unknown operator '\$regex'"):
        memory.search("x", metadata_filter={"service": {"$regex": "bill.*"}})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"search_text": "  "}, "search_text"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 1001}, "top_k"),
        ({"hybrid_params": {"dense_weight": -0.1}}, "dense_weight"),
        ({"hybrid_params": {"sparse_weight": float("nan")}}, "sparse_weight"),
        ({"hybrid_params": {"dense_weight": float("inf")}}, "dense_weight"),
        ({"hybrid_params": {"dense_weight": 0, "sparse_weight": 0}}, "both 0"),
        ({"hybrid_params": {"rrf_k_constant": -1}}, "rrf_k_constant"),
        ({"topk": 3}, "topk"),
    ],
)
def test_bad_requests_name_the_field(memory, fields, message):
    with pytest.raises(InvalidRequestError, match=message):
        memory.search({"search_text": "HTTP 504", **fields})


def _stub_engines(memory, monkeypatch, search):
    for engine in memory._searcher.engines.values():
        monkeypatch.setattr(engine, "search", search)


def test_engines_run_concurrently(memory, monkeypatch):
    """Both engines must be inside search() at the same moment: a 2-party barrier only opens then."""
    barrier = threading.Barrier(2, timeout=5)
    names = []

    def meet(query, k, allowed):
        names.append(threading.current_thread().name)
        barrier.wait()  # BrokenBarrierError (a failed search) if the engines ran one after the other
        return []

    _stub_engines(memory, monkeypatch, meet)
    assert memory.search("anything").results == []
    barrier.reset()
    assert asyncio.run(memory.asearch("anything")).results == []
    assert len(names) == 4


async def test_asearch_does_not_block_the_event_loop(memory, monkeypatch):
    """The dense engine waits for an event that only a task on the event loop sets: if asearch blocked
    the loop while the engine runs, the event is never set and the engine raises."""
    released = threading.Event()

    def dense_waits_for_the_loop(query, k, allowed):
        if not released.wait(timeout=5):
            raise AssertionError("the event loop was blocked while the engine ran")
        return []

    monkeypatch.setattr(memory._searcher.engines["dense"], "search", dense_waits_for_the_loop)

    async def release():
        await asyncio.sleep(0)
        released.set()

    response, _ = await asyncio.gather(memory.asearch("x"), release())
    assert released.is_set()
    assert response.query_id


def test_results_are_deterministic_across_calls(memory):
    first = memory.search("billing timeout", top_k=6, query_id="same")
    second = memory.search("billing timeout", top_k=6, query_id="same")
    assert first == second


def test_large_and_deep_filters(memory):
    many = {"severity": {"$in": list(range(5000))}}
    assert sorted(r.chunk_id for r in memory.search("service", top_k=20, metadata_filter=many).results) == [
        "auth-user",
        "prod-504",
        "reset",
        "stage-504",
        "upgrade",
    ]
    with pytest.raises(InvalidFilterError, match="more than 256 field tests"):
        memory.search("x", metadata_filter={"$or": [{"n": i} for i in range(1000)]})
    deep = {"service": "auth-api"}
    for _ in range(40):
        deep = {"$not": deep}
    with pytest.raises(InvalidFilterError, match="deeper than 32"):
        memory.search("x", metadata_filter=deep)
    with pytest.raises(InvalidFilterError, match="64 bits"):
        memory.count({"severity": 2**70})
    mixed = {"severity": {"$in": [2, "1", None, True]}}  # type-strict per element; None matches missing
    assert sorted(r.chunk_id for r in memory.search("service", top_k=20, metadata_filter=mixed).results) == [
        "auth-user",
        "poem",
        "reset",
        "upgrade",
    ]


def test_equal_scores_rank_by_chunk_id_whatever_the_insertion_history():
    with HybridMemory(embedder=HashingEmbedder(64)) as mem:
        mem.add([{"chunk_id": c, "text": "same text here"} for c in "cab"])
        first = [r.chunk_id for r in mem.search("same text", top_k=3).results]
        mem.upsert([{"chunk_id": "a", "text": "other"}])
        mem.upsert([{"chunk_id": "a", "text": "same text here"}])
        again = mem.search("same text", top_k=3).results
        assert first == [r.chunk_id for r in again] == ["a", "b", "c"]
        assert [(r.sparse_rank, r.dense_rank) for r in again] == [(1, 1), (2, 2), (3, 3)]
