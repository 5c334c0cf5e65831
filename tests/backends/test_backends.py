"""The memory's behaviour on every backend: embedded (SQLite + bm25s + FAISS), Qdrant Edge (the Rust shard
engine in process) and qdrant-client's local mode (the client API a Qdrant server answers). Each test id names
the engine it ran on. Plus what only the Qdrant backend has: the legs of one batched request fused by the
core's fusion, BM25 scores equal to the embedded backend's with matching parameters, schema checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hybrid_memory import (
    DuplicateChunkError,
    HashingEmbedder,
    HybridMemory,
    InvalidFilterError,
    InvalidRequestError,
    StoreFormatError,
)
from hybrid_memory.fusion import FUSION_METHODS, rank_by_score
from hybrid_memory.tokenizer import TechnicalTokenizer

from tests.conftest import _note_chunks

ENGINES = ["embedded", "qdrant-edge", "qdrant-client-local"]


class CountingEmbedder(HashingEmbedder):
    """HashingEmbedder that records the texts it embedded (to prove what is not re-embedded)."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.embedded: list[str] = []

    def embed_documents(self, texts):
        self.embedded.extend(texts)
        return super().embed_documents(texts)


def _need(engine: str) -> None:
    if engine == "qdrant-edge":
        pytest.importorskip(
            "qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')"
        )
    elif engine == "qdrant-client-local":
        pytest.importorskip(
            "qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')"
        )


def open_memory(engine: str, tmp_path, embedder=None, **options) -> HybridMemory:
    _need(engine)
    embedder = embedder or HashingEmbedder(dim=64)
    if engine == "embedded":
        return HybridMemory(embedder=embedder, **{k: v for k, v in options.items() if k in ("candidate_multiplier",)})
    options.setdefault(
        "payload_indexes", False
    )  # ~0.2 s more per new Edge shard; the filter suite and test_filters_with_payload_indexes use them
    if engine == "qdrant-edge":
        return HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=embedder, **options)
    return HybridMemory.qdrant(":memory:", collection="test", embedder=embedder, **options)


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


@pytest.fixture
def mem(engine, tmp_path):
    memory = open_memory(engine, tmp_path)
    yield memory
    memory.close()


def _ids(response) -> list[str]:
    return [r.chunk_id for r in response.results]


# -- the memory-behaviour cases, on every backend ---------------------------------------------------------
def test_empty_memory(mem):
    assert mem.count() == 0
    assert list(mem.iter_chunks()) == []
    response = mem.search("HTTP 504", top_k=5)
    assert response.results == [] and response.total_retrieved == 0
    assert mem.get(["nothing"]) == []
    assert mem.delete(["nothing"]) == 0


def test_add_get_count_iter(mem):
    chunks = _note_chunks()
    assert mem.add(chunks) == [c["chunk_id"] for c in chunks]
    assert mem.count() == 6
    assert [c.chunk_id for c in mem.iter_chunks()] == ["prod-504", "stage-504", "auth-user", "reset", "poem", "upgrade"]
    got = mem.get(["reset", "missing", "poem"])
    assert [c.chunk_id for c in got] == ["reset", "poem"]
    assert got[0].metadata == {
        "environment": "production",
        "service": "search-indexer",
        "severity": 2,
        "tags": ["elasticsearch", "network"],
    }
    assert got[0].source == "notes" and len(got[0].content_hash) == 64
    with pytest.raises(DuplicateChunkError, match="already stored"):
        mem.add([{"chunk_id": "reset", "text": "other"}])
    assert mem.get(["reset"])[0].text.startswith("search-indexer logs ERR_CONN_RESET")


def test_page_chunks_pages_in_insertion_order_with_filters_scopes_and_deletes(engine, mem):
    """The MCP server's list_memories pages with page_chunks: same order as iter_chunks on every backend, the
    position stays valid across a delete, a filter and a scope restrict the pages, bad arguments are refused."""
    mem.add(_note_chunks())
    first, after = mem.page_chunks(limit=4)
    assert [c.chunk_id for c in first] == ["prod-504", "stage-504", "auth-user", "reset"], engine
    assert after is not None
    mem.delete(["poem"])  # a chunk of the next page goes; the position still holds
    second, last = mem.page_chunks(after=after, limit=4)
    assert ([c.chunk_id for c in second], last) == (["upgrade"], None)
    prod, end = mem.page_chunks({"environment": "production"}, limit=10)
    assert [c.chunk_id for c in prod] == [c.chunk_id for c in mem.iter_chunks({"environment": "production"})]
    assert end is None and len(prod) >= 1
    mem.add([{"chunk_id": "scoped", "text": "team note on retries"}], scope={"user_id": "u1"})
    assert [c.chunk_id for c in mem.page_chunks(scope={"user_id": "u1"})[0]] == ["scoped"]
    with pytest.raises(InvalidRequestError, match="limit"):
        mem.page_chunks(limit=0)
    with pytest.raises(InvalidRequestError, match="after"):
        mem.page_chunks(after="x")


def test_exact_lookup_ranks_first(mem):
    mem.add(_note_chunks())
    assert _ids(mem.search("getUserById", top_k=3))[0] == "auth-user"
    assert _ids(mem.search("ERR_CONN_RESET", top_k=3))[0] == "reset"
    assert _ids(mem.search("v2.3.1", top_k=3))[0] == "upgrade"
    assert _ids(mem.search("故乡", top_k=3, fusion="rrf"))[0] == "poem"


def test_upsert_replaces_and_skips_unchanged_texts(engine, tmp_path):
    embedder = CountingEmbedder()
    with open_memory(engine, tmp_path, embedder=embedder) as mem:
        mem.add(_note_chunks())
        assert len(embedder.embedded) == 6
        embedder.embedded.clear()
        mem.upsert(
            [
                {
                    "chunk_id": "reset",
                    "text": _note_chunks()[3]["text"],
                    "source": "wiki",
                    "metadata": {"environment": "dev"},
                },
                {"chunk_id": "poem", "text": "a new text about kafka consumer lag", "metadata": {"environment": "dev"}},
            ]
        )
        assert embedder.embedded == ["a new text about kafka consumer lag"]  # the unchanged text kept its vector
        reset = mem.get(["reset"])[0]
        assert (reset.source, reset.metadata) == ("wiki", {"environment": "dev"})
        assert mem.count({"environment": "dev"}) == 2
        assert mem.count({"environment": "production"}) == 3
        assert _ids(mem.search("kafka consumer lag", top_k=1)) == ["poem"]
        assert _ids(mem.search("ERR_CONN_RESET", top_k=1, metadata_filter={"environment": "dev"})) == ["reset"]
        # an upsert keeps the chunk's place in iteration order
        assert [c.chunk_id for c in mem.iter_chunks()] == [
            "prod-504",
            "stage-504",
            "auth-user",
            "reset",
            "poem",
            "upgrade",
        ]


def test_delete(mem):
    mem.add(_note_chunks())
    assert mem.delete(["reset", "missing"]) == 1
    assert mem.count() == 5 and mem.get(["reset"]) == []
    assert "reset" not in _ids(mem.search("ERR_CONN_RESET Elasticsearch", top_k=5))
    mem.add([{"chunk_id": "reset", "text": "restored ERR_CONN_RESET note"}])
    assert _ids(mem.search("ERR_CONN_RESET", top_k=1)) == ["reset"]
    assert [c.chunk_id for c in mem.iter_chunks()][-1] == "reset"  # deleted and added again: at the end


def test_filters_restrict_both_engines(indexed):
    mem = indexed
    mem.add(_note_chunks())
    flt = {"$and": [{"environment": "production"}, {"severity": {"$lte": 1}}]}
    assert _ids(mem.search("HTTP 504 PostgreSQL connection pool", top_k=5, metadata_filter=flt)) == ["prod-504"]
    assert mem.count(flt) == 1
    assert _ids(mem.search("Elasticsearch", top_k=5, metadata_filter={"tags": "network"})) == ["reset"]
    assert mem.count({"tags": {"$nin": ["network"]}}) == 5
    assert mem.count({"language": {"$exists": False}}) == 5
    none = mem.search("HTTP 504", top_k=5, metadata_filter={"environment": "nowhere"})
    assert none.results == []


def test_top_k_fills_under_a_selective_filter(engine, tmp_path):
    with open_memory(engine, tmp_path) as mem:
        mem.add(
            [
                {
                    "chunk_id": f"c{i:02d}",
                    "text": f"HTTP 504 gateway timeout on node {i}",
                    "metadata": {"team": "rare" if i % 7 == 0 else "common"},
                }
                for i in range(50)
            ]
        )
        rare = {f"c{i:02d}" for i in range(50) if i % 7 == 0}
        assert len(rare) == 8
        five = mem.search("HTTP 504 gateway timeout", top_k=5, metadata_filter={"team": "rare"})
        assert len(five.results) == 5 and set(_ids(five)) <= rare
        all_rare = mem.search("HTTP 504 gateway timeout", top_k=20, metadata_filter={"team": "rare"})
        assert set(_ids(all_rare)) == rare


def test_ties_break_by_chunk_id(mem):
    mem.add([{"chunk_id": cid, "text": "identical ERR_DISK_FULL text"} for cid in ("m", "c", "x", "a")])
    for top_k in (1, 2, 4):
        for fusion in ("rrf", "adaptive"):
            assert _ids(mem.search("ERR_DISK_FULL", top_k=top_k, fusion=fusion)) == ["a", "c", "m", "x"][:top_k]


@pytest.fixture
def indexed(engine, tmp_path):
    memory = open_memory(
        engine, tmp_path, payload_indexes=True, indexed_keys={"environment": "keyword", "severity": "float"}
    )
    yield memory
    memory.close()


def test_filters_with_payload_indexes(indexed):
    indexed.add(_note_chunks())
    assert indexed.count({"environment": "production"}) == 4
    assert indexed.count({"severity": {"$gte": 2}}) == 4
    assert indexed.count({"severity": {"$in": [1, 3]}}) == 2
    assert _ids(indexed.search("HTTP 504", top_k=5, metadata_filter={"environment": "staging"})) == ["stage-504"]


def test_scopes(mem):
    acme = mem.scoped(tenant="acme", user_id="u1")
    acme.add([{"chunk_id": "a1", "text": "acme billing-service HTTP 504"}])
    mem.add([{"chunk_id": "other", "text": "globex billing-service HTTP 504", "tenant": "globex"}])
    stored = f"{acme.scope.key()}:a1"  # the administrator's view shows the view's namespace (hybrid_memory.isolation)
    assert mem.get([stored])[0].tenant == "acme" and mem.get([stored])[0].user_id == "u1" and mem.get(["a1"]) == []
    assert _ids(acme.search("billing-service HTTP 504", top_k=5)) == ["a1"]
    assert acme.get(["other"]) == [] and acme.count() == 1
    assert acme.delete(["other"]) == 0 and mem.count() == 2
    # an id another scope holds is a fresh id in this one (issue 35): written, the other scope's chunk untouched
    assert acme.upsert([{"chunk_id": "other", "text": "takeover"}]) == ["other"]
    assert mem.get(["other"])[0].text == "globex billing-service HTTP 504" and acme.count() == 2
    # an unscoped upsert keeps the stored owner it does not state
    mem.upsert([{"chunk_id": stored, "text": "acme billing-service HTTP 504, retried"}])
    assert mem.get([stored])[0].tenant == "acme" and acme.get(["a1"])[0].text.endswith("retried")
    assert mem.count(scope={"tenant": "globex"}) == 1


def test_supersede_and_as_of(mem):
    mem.add([{"chunk_id": "v1", "text": "the deploy window is Tuesday", "valid_from": 100.0}])
    mem.supersede("v1", {"chunk_id": "v2", "text": "the deploy window is Thursday", "valid_from": 200.0})
    old = mem.get(["v1"])[0]
    assert (old.valid_to, old.superseded_by) == (200.0, "v2")
    assert _ids(mem.search("deploy window", top_k=5, as_of=150)) == ["v1"]
    assert _ids(mem.search("deploy window", top_k=5, as_of=250)) == ["v2"]
    assert mem.count(as_of=150) == 1 and mem.count() == 2
    with pytest.raises(InvalidRequestError, match="already superseded"):
        mem.supersede("v1", {"chunk_id": "v3", "text": "Friday", "valid_from": 300.0})


def test_exact_duplicates_are_reported(mem):
    mem.add([{"chunk_id": "a", "text": "same words here"}])
    result = mem.write([{"chunk_id": "b", "text": "same words here"}])
    assert [(d.chunk_id, d.action, d.duplicate_of) for d in result.decisions] == [("b", "kept", "a")]
    assert mem.count() == 2


# -- Qdrant only --------------------------------------------------------------------------------------
QDRANT = ["qdrant-edge", "qdrant-client-local"]


@pytest.mark.parametrize("engine", QDRANT)
def test_fusion_of_the_returned_legs_is_the_core_fusion(engine, tmp_path):
    """Over the legs Qdrant returned for one batched request, the memory's order and scores are the core's
    fusion of those legs: RRF recomputed by hand, every score-based method through FUSION_METHODS."""
    from hybrid_memory.backends.qdrant.backend import point_id
    from hybrid_memory.backends.qdrant.collection import DENSE, SPARSE, Leg
    from hybrid_memory.fusion import FusionInput

    with open_memory(engine, tmp_path) as mem:
        mem.add(_note_chunks())
        query = "billing-service HTTP 504 PostgreSQL"
        backend = mem.backend
        vector = mem.embedder.embed_query(query)
        vector = (vector / np.linalg.norm(vector)).astype(np.float32).tolist()
        depth = 3 * 2
        sparse, dense = backend.collection.query_batch(
            [Leg(SPARSE, backend.encoder.query(query), None, depth), Leg(DENSE, vector, None, depth)]
        )
        legs = {}
        for name, found in (("sparse", sparse), ("dense", dense)):
            scores = {payload["chunk_id"]: score for _, score, payload, _ in found}
            legs[name] = (sorted(scores, key=lambda c: (-scores[c], c)), scores)
        rrf = mem.search(query, top_k=3, fusion="rrf", sparse_weight=0.4, dense_weight=0.6)
        expected = {}
        for name, weight in (("sparse", 0.4), ("dense", 0.6)):
            for rank, cid in enumerate(legs[name][0], start=1):
                expected[cid] = expected.get(cid, 0.0) + weight / (60 + rank)
        top = sorted(expected, key=lambda c: (-expected[c], c))[:3]
        assert _ids(rrf) == top
        assert [r.rrf_score for r in rrf.results] == pytest.approx([expected[c] for c in top], abs=1e-12)
        assert [r.sparse_score for r in rrf.results] == [legs["sparse"][1].get(c) for c in top]
        # score-based methods: exact cross-scores of the union, fused by the core's method
        union = sorted(set(legs["sparse"][0]) | set(legs["dense"][0]))
        pids = [point_id(c) for c in union]
        cross = {}
        for name, using, vec in (("sparse", SPARSE, backend.encoder.query(query)), ("dense", DENSE, vector)):
            found = backend.collection.query_batch([Leg(using, vec, {"must": [{"has_id": pids}]}, len(pids))])[0]
            got = {payload["chunk_id"]: score for _, score, payload, _ in found}
            cross[name] = {c: got.get(c, 0.0) for c in union}
            assert all(math.isclose(cross[name][c], s, rel_tol=1e-6) for c, s in legs[name][1].items())
        for method in ("zscore", "dbsf", "tm2c2"):
            result = mem.search(query, top_k=3, fusion=method)
            inp = FusionInput(
                runs={n: legs[n][0] for n in ("sparse", "dense")},
                scores={n: {**cross[n], **legs[n][1]} for n in ("sparse", "dense")},
                priors={"sparse": 1.0, "dense": 1.0},
                lower_bounds={"sparse": 0.0, "dense": -1.0},
                rrf_k=60.0,
                identifier_matches={},
            )
            fused = rank_by_score(FUSION_METHODS[method].fuse(inp).scores, 3)
            assert _ids(result) == [c for c, _ in fused], method
            assert [r.score for r in result.results] == pytest.approx([s for _, s in fused], rel=1e-9), method


@pytest.mark.parametrize("engine", QDRANT)
def test_bm25_scores_equal_the_embedded_backend_with_matching_parameters(engine, tmp_path):
    """Qdrant's IDF is Lucene's; with avgdl set to the corpus's mean length (what the embedded index uses
    before its first merge) every sparse score equals the embedded backend's (float32 precision)."""
    chunks = _note_chunks()
    tokenizer = TechnicalTokenizer()
    avgdl = sum(len(tokenizer.tokenize(c["text"])) for c in chunks) / len(chunks)
    queries = [
        "HTTP 504 PostgreSQL connection pool",
        "getUserById null",
        "ERR_CONN_RESET Elasticsearch",
        "billing-service staging",
        "certificate expired E1243",
    ]
    with HybridMemory(embedder=HashingEmbedder(64)) as embedded, open_memory(engine, tmp_path, avgdl=avgdl) as qdrant:
        embedded.add(chunks)
        qdrant.add(chunks)
        for query in queries:
            a = embedded.search(query, top_k=6, fusion="rrf", dense_weight=0)
            b = qdrant.search(query, top_k=6, fusion="rrf", dense_weight=0)
            assert _ids(a) == _ids(b), query
            assert [r.sparse_score for r in b.results] == pytest.approx([r.sparse_score for r in a.results], rel=1e-5)
            assert _ids(embedded.search(query, top_k=3)) == _ids(qdrant.search(query, top_k=3)), query
        # the exact-match guard reads the same rare identifiers and whole-query matches from both backends
        from hybrid_memory.search.engine import Query

        for query in [*queries, "getUserById", "v2.3.1 10.0.0.12", "PostgreSQL connection pool exhausted"]:
            found = []
            for memory in (embedded, qdrant):
                q = Query(query)
                if memory is qdrant:
                    q.cache["qdrant_legs"] = ("sparse", "dense")
                found.append(
                    memory._searcher.candidates(
                        q, top_k=2, depth=4, weights={}, fusion="adaptive"
                    ).input.identifier_matches
                )
            assert found[0] == found[1], query
        # "postgresql" is a rare identifier (2 chunks hold it: +1) and both 504 notes hold every token of the query
        # ("exhausted" and "exhaustion" stem alike), 2 <= top_k: +(1 + 1 identifier)
        assert found[0] == {"prod-504": 3, "stage-504": 3}


@pytest.mark.parametrize("engine", QDRANT)
@pytest.mark.parametrize("weights", [{}, {"dense": 0.0}], ids=["both-legs", "sparse-only"])
def test_exact_match_guard_counts_equal_the_embedded_backend(engine, weights, tmp_path):
    """The guard's counts per candidate (rare identifiers +1 each, the whole query in order +(1 + identifiers))
    are the embedded SparseEngine.exact_matches counts, over the same candidates: with both legs and with the
    sparse leg alone (its inputs ride with the legs), and read by the backend on its own."""
    from hybrid_memory.search.engine import Query

    chunks = [
        *_note_chunks(),
        {"chunk_id": "pool-a", "text": "PostgreSQL connection pool exhausted again on db-prod-3"},
        {"chunk_id": "pool-b", "text": "connection pool PostgreSQL exhausted, order differs"},
        {"chunk_id": "ids", "text": "getUserById and ERR_CONN_RESET seen together on v2.3.1"},
        {"chunk_id": "quote-a", "text": "quarterly invoice reconciliation finished late"},
        {"chunk_id": "quote-b", "text": "quarterly invoice reconciliation is manual"},
    ]
    cases = {  # query -> counts worked out by hand (top_k=2: rare means held by at most 2 chunks)
        # plain words (the query names nothing) held in order by both quote chunks: a shared phrase, no guard
        # (issue 36); held by one of them alone: a quote, +1
        "quarterly invoice reconciliation": {},
        "invoice reconciliation finished": {"quote-a": 1},
        # the identifier is in 2 chunks (+1 each), both hold getuserbyid/get/user/id in order (+(1 + 1))
        "getUserById": {"auth-user": 3, "ids": 3},
        # err_conn_reset in 2 chunks (+1 each); only "reset" also holds elasticsearch (+2)
        "ERR_CONN_RESET Elasticsearch": {"reset": 3, "ids": 1},
        # postgresql is in 4 chunks (not rare) and 4 hold every token (more than top_k): nothing
        "PostgreSQL connection pool exhausted": {},
        # v2.3.1 in 2 chunks, 10.0.0.12 in 1 (both rare); "upgrade" holds the whole query in order (+(1 + 2))
        "v2.3.1 10.0.0.12": {"upgrade": 5, "ids": 1},
        # e1243 is rare (+1); "upgrade" holds all three tokens but e1243 comes first there: not in order
        "certificate expired E1243": {"upgrade": 1},
        # a word or a CJK pair typed alone names itself (TechnicalTokenizer.names): held by 1 chunk, +1
        "Elasticsearch": {"reset": 1},
        "故乡": {"poem": 1},
        "the restarts": {"reset": 1},
        # "connection" alone: 4 chunks hold it (prod-504, stage-504, pool-a, pool-b), more than top_k 2
        "connection": {},
    }
    with HybridMemory(embedder=HashingEmbedder(64)) as embedded, open_memory(engine, tmp_path) as qdrant:
        embedded.add(chunks)
        qdrant.add(chunks)
        for text, expected in cases.items():
            found = []
            for memory in (embedded, qdrant):
                q = Query(text)
                if memory is qdrant:
                    q.cache["qdrant_legs"] = tuple(n for n in ("sparse", "dense") if weights.get(n, 1.0) > 0)
                candidates = memory._searcher.candidates(q, top_k=2, depth=6, weights=weights, fusion="adaptive")
                found.append(candidates.input.identifier_matches)
            assert found[0] == found[1] == expected, text
            # the backend's own reads (no inputs fetched with the legs): one-term queries and a retrieve
            keys = sorted(candidates.id_of)
            counts = qdrant.backend.exact_matches(text, np.array([candidates.id_of[k] for k in keys]), 2, 0.25, 3)
            assert {k: int(c) for k, c in zip(keys, counts, strict=True) if c} == expected, text


@pytest.mark.parametrize("engine", QDRANT)
def test_search_legs_carry_no_payload_and_the_id_map_fills_once(engine, tmp_path):
    """A search asks Qdrant for ids and scores only: one batched request with both legs (RRF), one more for
    the adaptive fusion's cross-scores, and one read of the top_k's text for the response (plus
    the texts of the chunks holding the whole query, when few do, for the guard's in-order test). A
    backend that never saw the points (a reopened shard, another process's writes) reads their chunk ids once,
    in one retrieve; deletes drop them from the id map."""
    from hybrid_memory.backends.qdrant.backend import engine_id, point_id

    if engine == "qdrant-edge":
        with open_memory(engine, tmp_path) as first:
            first.add(_note_chunks())
        mem = open_memory(engine, tmp_path)
    else:
        mem = open_memory(engine, tmp_path)
        mem.add(_note_chunks())
        mem.backend._ids.clear()  # as a process that did not write them
    with mem:
        collection = mem.backend.collection
        calls = []
        for name in ("query_batch", "retrieve", "payloads"):
            real = getattr(collection, name)

            def spy(*args, _real=real, _name=name, **kwargs):
                calls.append((_name, args, kwargs))
                return _real(*args, **kwargs)

            setattr(collection, name, spy)
        first = mem.search("billing-service HTTP 504", top_k=3, fusion="rrf")  # depth 2 x RANK_FLOOR = 20: every chunk
        assert sorted(_ids(first)[:2]) == ["prod-504", "stage-504"]  # the two chunks naming the 504 lead
        assert [c[0] for c in calls] == ["query_batch", "retrieve", "payloads"]
        assert [(leg.limit, leg.payload) for leg in calls[0][1][0]] == [(21, ()), (21, ())]  # ids and scores only
        assert calls[1][2]["payload"] == ["chunk_id"] and len(calls[1][1][0]) == len(mem.backend._ids) == 6
        assert calls[2][1] == ([point_id(c) for c in _ids(first)], ("text", "doc"))
        calls.clear()
        again = mem.search("billing-service HTTP 504", top_k=3)  # adaptive: cross-scores and guard, one request
        assert sorted(_ids(again)[:2]) == ["prod-504", "stage-504"]
        # both 504 notes hold every query token (2 <= max(top_k, RANK_FLOOR)): their texts are read for the in-order test
        assert [c[0] for c in calls] == ["query_batch", "query_batch", "retrieve", "payloads"]
        assert all(leg.payload == () for c in calls[:2] for leg in c[1][0])
        assert calls[2][2]["payload"] == ["text"] and sorted(calls[2][1][0]) == sorted(
            point_id(c) for c in ("prod-504", "stage-504")
        )
        notes = {c["chunk_id"]: c for c in _note_chunks()}
        assert [(r.text, r.source, r.metadata) for r in again.results] == [
            (notes[c]["text"], "notes", notes[c]["metadata"]) for c in _ids(again)
        ]
        mem.delete(["prod-504"])
        assert engine_id(point_id("prod-504")) not in mem.backend._ids and len(mem.backend._ids) == 5


def test_order_tests_need_a_float_index_on_qdrant_edge(tmp_path):
    _need("qdrant-edge")
    with open_memory("qdrant-edge", tmp_path) as mem:  # no indexed_keys
        mem.add(_note_chunks())
        with pytest.raises(InvalidFilterError, match="\\$gt on 'severity'.*indexed_keys=\\{'severity': 'float'\\}"):
            mem.search("HTTP 504", metadata_filter={"severity": {"$gt": 1}})
        assert mem.count({"severity": {"$in": [1, 2]}}) == 4  # equality needs no index
        assert mem.count(as_of=1e9) == 6  # the validity times are always indexed


@pytest.mark.parametrize("engine", QDRANT)
def test_string_order_is_refused_on_qdrant(engine, tmp_path):
    with open_memory(engine, tmp_path) as mem:
        mem.add(_note_chunks())
        with pytest.raises(InvalidFilterError, match="\\$gt on 'service' with the string 'b'"):
            mem.search("HTTP 504", metadata_filter={"service": {"$gt": "b"}})
        with pytest.raises(InvalidFilterError, match="\\$lt on 'service'"):
            mem.count({"service": {"$lt": "b"}})


def test_edge_shard_reopens_and_checks_its_schema(tmp_path):
    _need("qdrant-edge")
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(64)) as mem:
        mem.add(_note_chunks())
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(64)) as mem:
        assert mem.count() == 6
        assert _ids(mem.search("getUserById", top_k=1)) == ["auth-user"]
    with pytest.raises(StoreFormatError) as err:  # no export record: the dimensions, and the fix without a name
        HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(32))
    assert str(err.value) == (
        f"Qdrant Edge shard at {tmp_path / 'shard'} holds vectors of dimension 64, this memory's "
        "embedder gives 32: open it with the embedder it was written with, one of dimension 64 "
        "(the shard has no export record naming it; on the command line, --hashing-dim 64 if it "
        "was written with a HashingEmbedder), or give another directory"
    )


def test_client_collection_is_idempotent_and_checks_its_schema():
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    client = qdrant_client.QdrantClient(":memory:")
    first = HybridMemory.qdrant(client, collection="notes", embedder=HashingEmbedder(64))
    first.add(_note_chunks())
    again = HybridMemory.qdrant(client, collection="notes", embedder=HashingEmbedder(64))
    assert again.count() == 6
    with pytest.raises(StoreFormatError, match="has dimension 64, this memory needs 32"):
        HybridMemory.qdrant(client, collection="notes", embedder=HashingEmbedder(32))
    client.close()


def test_edge_takes_no_cluster_settings(tmp_path):
    _need("qdrant-edge")
    with pytest.raises(InvalidRequestError, match="configure a Qdrant cluster"):
        HybridMemory.qdrant(edge_path=tmp_path / "s", embedder=HashingEmbedder(8), shard_number=2)


def test_near_duplicates_skip_and_merge(mem):
    mem.add([{"chunk_id": "a", "text": "Dana prefers PostgreSQL for the billing-service", "source": "chat-1"}])
    skipped = mem.write([{"chunk_id": "b", "text": "Dana prefers PostgreSQL for the billing-service!"}], dedup="skip")
    decision = skipped.decisions[0]
    assert (decision.action, decision.stored_id, decision.kind) == ("skipped", "a", "near")
    assert decision.cosine == pytest.approx(1.0) and decision.overlap == 1.0  # "!" is no token, the hash differs
    assert mem.count() == 1
    merged = mem.write(
        [{"chunk_id": "c", "text": "Dana prefers PostgreSQL for the billing-service", "source": "chat-2"}],
        dedup="merge",
    )
    assert (merged.decisions[0].action, merged.decisions[0].stored_id) == ("merged", "a")
    stored = mem.get(["a"])[0]
    assert (stored.merged_ids, stored.merged_sources) == (["c"], ["chat-2"])
    other_scope = mem.write(
        [{"chunk_id": "d", "text": "Dana prefers PostgreSQL for the billing-service", "user_id": "u9"}], dedup="skip"
    )
    assert other_scope.decisions[0].action == "written" and mem.count() == 2


def test_a_duplicate_is_a_stored_fact_whose_validity_covers_the_new_one(mem):
    """Dedup compares a new chunk with the stored chunks whose validity covers its interval (no valid_from:
    from now on; ended without one: up to its end): while n1 holds, its text is n1's duplicate, exact or near;
    after n1 was superseded, the same text states it anew, as does a restatement that runs past a stored end
    or a past fact the stored one does not reach back to."""
    apollo = "Dana works on project Apollo"
    mem.add([{"chunk_id": "n1", "text": apollo, "valid_from": 100.0}])
    mem.supersede(["n1"], {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": 200.0})
    during = mem.write(
        [
            {"chunk_id": "d1", "text": apollo, "valid_from": 150.0, "valid_to": 180.0},
            {"chunk_id": "d2", "text": apollo + "!", "valid_from": 199.0, "valid_to": 200.0},
        ],
        dedup="merge",
    )
    assert [(d.action, d.kind, d.stored_id) for d in during.decisions] == [
        ("merged", "exact", "n1"),
        ("merged", "near", "n1"),
    ]
    after = mem.write([{"chunk_id": "n3", "text": apollo}], dedup="skip")
    assert [(d.action, d.duplicate_of) for d in after.decisions] == [("written", None)]
    again = mem.write([{"chunk_id": "n4", "text": apollo + "!"}, {"chunk_id": "n5", "text": apollo}], dedup="skip")
    assert [(d.action, d.kind, d.stored_id) for d in again.decisions] == [
        ("skipped", "near", "n3"),
        ("skipped", "exact", "n3"),
    ]
    assert sorted(c.chunk_id for c in mem.iter_chunks()) == ["n1", "n2", "n3"]
    assert mem.get(["n1"])[0].merged_ids == ["d1", "d2"]
    # within one call, in another scope: w3 lies in w1 [400, 500); w4 runs past w1's end and starts before w2
    calls = mem.write(
        [
            {"chunk_id": "w1", "text": apollo, "valid_from": 400.0, "valid_to": 500.0, "user_id": "u2"},
            {"chunk_id": "w2", "text": apollo, "valid_from": 600.0, "user_id": "u2"},
            {"chunk_id": "w3", "text": apollo, "valid_from": 450.0, "valid_to": 480.0, "user_id": "u2"},
            {"chunk_id": "w4", "text": apollo, "valid_from": 450.0, "user_id": "u2"},
        ],
        dedup="skip",
    )
    assert [(d.chunk_id, d.action, d.duplicate_of) for d in calls.decisions] == [
        ("w1", "written", None),
        ("w2", "written", None),
        ("w3", "skipped", "w1"),
        ("w4", "written", None),
    ]
    # a past fact (no valid_from, valid_to long gone) is not a duplicate of a current one that starts later
    mem.write([{"chunk_id": "cur", "text": apollo, "valid_from": 1000.0, "user_id": "u3"}])
    past = mem.write(
        [
            {"chunk_id": "hist", "text": apollo, "valid_to": 900.0, "user_id": "u3"},
            {"chunk_id": "hist2", "text": apollo, "valid_to": 850.0, "user_id": "u3"},
        ],
        dedup="skip",
    )
    assert [(d.chunk_id, d.action, d.duplicate_of) for d in past.decisions] == [
        ("hist", "written", None),
        ("hist2", "skipped", "hist"),
    ]


def test_an_upsert_whose_bound_and_the_kept_one_leave_an_empty_interval_is_refused(mem):
    """A fresh user's finding: an upsert stating only valid_to kept the stored later valid_from; embedded stored
    the empty interval, Qdrant raised pydantic's traceback. Now every backend refuses it, nothing written."""
    mem.write([{"chunk_id": "a", "text": "Dana works on Apollo", "valid_from": 1.5e9}])
    with pytest.raises(InvalidRequestError) as info:
        mem.write([{"chunk_id": "a", "text": "Dana works on Apollo", "valid_to": 1.2e9}])
    assert str(info.value) == (
        "chunk 'a': its valid_to 2008-01-10T21:20:00Z and the stored valid_from 2017-07-14T02:40:00Z it keeps leave "
        "the interval [valid_from, valid_to) empty; give valid_from too (None to clear it), or another valid_to; "
        "nothing was written"
    )
    assert [(c.valid_from, c.valid_to) for c in mem.get(["a"])] == [(1.5e9, None)]
    mem.write([{"chunk_id": "a", "text": "Dana works on Apollo", "valid_from": None, "valid_to": 1.2e9}])
    assert [(c.valid_from, c.valid_to) for c in mem.get(["a"])] == [(None, 1.2e9)]


def test_a_chunk_is_never_matched_to_one_the_call_then_drops(mem):
    """A fresh user's finding: b matched a (exact) before a was dropped as p's near-duplicate, so b's id pointed
    at a chunk never written; and a fact covered only by a dropped chunk was lost. One pass in input order now
    decides each chunk before a later one can match it."""
    x = "the user prefers dark mode in every editor"
    assert mem.add(
        [{"chunk_id": "p", "text": x + "!"}, {"chunk_id": "a", "text": x}, {"chunk_id": "b", "text": x}], dedup="skip"
    ) == ["p", "p", "p"]
    berlin = "Dana works on project Apollo in the Berlin office"
    mem.add([{"chunk_id": "c", "text": berlin + "!", "valid_from": 2000.0, "user_id": "u2"}])
    result = mem.write(
        [
            {"chunk_id": "a2", "text": berlin, "valid_from": 3000.0, "user_id": "u2"},
            {"chunk_id": "b2", "text": berlin, "valid_from": 100.0, "valid_to": 200.0, "user_id": "u2"},
        ],
        dedup="merge",
    )
    assert [(d.chunk_id, d.action, d.kind, d.stored_id) for d in result.decisions] == [
        ("a2", "merged", "near", "c"),
        ("b2", "written", None, "b2"),
    ]
    assert mem.get(["c"])[0].merged_ids == ["a2"]
    assert sorted(c.chunk_id for c in mem.iter_chunks()) == ["b2", "c", "p"]


def test_closed_versions_of_a_fact_do_not_hide_its_open_one(mem):
    """A fresh user's finding: 20 closed near-copies filled the 16 neighbours the embedded backend read, so the
    open one was missed there and found on Qdrant (whose query filters by validity)."""
    base = (
        "Dana prefers PostgreSQL for the billing service because its replication survived every regional "
        "outage last winter"
    )
    # the closed copies hold the new text's tokens exactly (cosine 1); the open one has one more word
    mem.add(
        [{"chunk_id": f"old{i}", "text": base + "!" * (i + 1), "valid_to": 100.0 + i} for i in range(20)]
        + [{"chunk_id": "open", "text": base + " uniform"}]
    )
    result = mem.write([{"chunk_id": "new", "text": base}], dedup="skip")
    assert [(d.action, d.kind, d.duplicate_of) for d in result.decisions] == [("skipped", "near", "open")]
    assert 0.95 <= result.decisions[0].cosine < 1.0 and result.decisions[0].overlap == pytest.approx(16 / 17)


def test_ids_a_call_rewrites_are_compared_in_their_new_version(mem):
    """A fresh user's finding: editing a from Apollo to Zeus while adding b "Apollo" skipped b as a's
    duplicate, and the Apollo fact was gone; closing x and restating its text in one call skipped the
    restatement. Now the rewritten ids count as the call writes them."""
    mem.write([{"chunk_id": "a", "text": "Dana works on project Apollo"}, {"chunk_id": "x", "text": "Bo likes tea"}])
    result = mem.write(
        [
            {"chunk_id": "a", "text": "Dana works on project Zeus"},
            {"chunk_id": "b", "text": "Dana works on project Apollo"},
            {"chunk_id": "c", "text": "Dana works on project Zeus"},
            {"chunk_id": "c2", "text": "Dana works on project Zeus!"},
            {"chunk_id": "x", "text": "Bo likes tea", "valid_to": 100.0},
            {"chunk_id": "y", "text": "Bo likes tea"},
        ],
        dedup="skip",
    )
    assert [(d.chunk_id, d.action, d.kind, d.duplicate_of) for d in result.decisions] == [
        ("a", "written", None, None),
        ("b", "written", None, None),
        ("c", "skipped", "exact", "a"),
        ("c2", "skipped", "near", "a"),
        ("x", "written", None, None),
        ("y", "written", None, None),
    ]
    assert sorted((c.chunk_id, c.text) for c in mem.iter_chunks()) == [
        ("a", "Dana works on project Zeus"),
        ("b", "Dana works on project Apollo"),
        ("x", "Bo likes tea"),
        ("y", "Bo likes tea"),
    ]


def test_an_all_zero_vector_is_no_dense_evidence_on_every_backend(engine, tmp_path):
    """A chunk stored with an all-zero vector, the only BM25 hit: first under adaptive (it ranked last when its
    cosine 0 was standardised against the dense list), never returned by the dense leg alone."""
    notes = [
        ("a", "apple orchard notes", [1.0, 0.0, 0.0, 0.0]),
        ("b", "banana plantation notes", [0.0, 1.0, 0.0, 0.0]),
        ("c", "cherry blossom notes", [0.0, 0.0, 1.0, 0.0]),
        ("z", "quasar telescope log", [0.0, 0.0, 0.0, 0.0]),
    ]
    query = np.array([1.0, 1.0, 1.0, 0.0], dtype=np.float32) / np.sqrt(3.0)
    memory = open_memory(engine, tmp_path, embedder=HashingEmbedder(dim=4))
    try:
        memory.add(
            [{"chunk_id": cid, "text": text} for cid, text, _ in notes],
            vectors=np.array([v for _, _, v in notes], dtype=np.float32),
        )
        response = memory.search("quasar", top_k=4, query_vector=query)
        assert response.fusion == "adaptive"
        assert _ids(response)[0] == "z" and sorted(_ids(response)[1:]) == ["a", "b", "c"]
        assert (response.results[0].dense_rank, response.results[0].dense_score) == (None, None)
        dense_only = memory.search("quasar", top_k=4, query_vector=query, dense_weight=1.0, sparse_weight=0.0)
        assert sorted(_ids(dense_only)) == ["a", "b", "c"]
        assert [c.chunk_id for c in memory.get(["z"])] == ["z"]  # stored, with its text
    finally:
        memory.close()
