"""Qdrant point ids: integers since format 2 (the chunk's engine id), UUIDs in collections written before
(format 1), which open, read and write as they are; and the Qdrant Edge shard's configuration."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.tokenizer import TechnicalTokenizer

from tests.conftest import _note_chunks

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")
pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')")

ENGINES = ["qdrant-edge", "qdrant-client-local"]


def _open(engine: str, tmp_path) -> HybridMemory:
    """A memory over a collection that persists across reopenings: an Edge shard, or qdrant-client's local
    mode in a directory."""
    embedder = HashingEmbedder(dim=64)
    if engine == "qdrant-edge":
        return HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=embedder, payload_indexes=False)
    return HybridMemory.qdrant(str(tmp_path / "local"), collection="notes", embedder=embedder, payload_indexes=False)


def _stored_ids(mem: HybridMemory) -> list:
    """The point ids as the collection holds them."""
    records, offset = mem.backend.collection.scroll(None, 100, None, False)
    assert offset is None
    return [r.id for r in records]


def test_point_id_is_the_top_63_bits_of_the_chunk_uuid5():
    from hybrid_memory.backends.qdrant.backend import NAMESPACE, engine_id, point_id, point_uuid

    # uuid5(NAMESPACE, "a") = 0d4c374e-ca21-53fd-a1c5-b84e478b92e7: its top 63 bits 0x0d4c374eca2153fd >> 1
    assert str(point_uuid("a")) == "0d4c374e-ca21-53fd-a1c5-b84e478b92e7"
    assert point_id("a") == 0x0D4C374ECA2153FD >> 1 == 479100816130615806
    assert point_id("a") == uuid.uuid5(NAMESPACE, "a").int >> 65
    # the same engine id from either format's point id (int as is; UUID object or string: its top 63 bits)
    assert engine_id(point_id("a")) == engine_id(point_uuid("a")) == engine_id(str(point_uuid("a"))) == point_id("a")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_new_collection_stores_integer_ids(engine, tmp_path):
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(engine, tmp_path) as mem:
        mem.add(_note_chunks())
        assert mem.backend.uuid_ids is False
        assert sorted(_stored_ids(mem)) == sorted(point_id(c["chunk_id"]) for c in _note_chunks())
    with _open(engine, tmp_path) as mem:  # reopened: still format 2
        assert mem.backend.uuid_ids is False
        assert mem.count() == 6


@pytest.mark.parametrize("engine", ENGINES)
def test_a_format_1_collection_keeps_its_uuid_ids_and_answers_as_format_2(engine, tmp_path):
    """A collection written with UUID point ids (the previous version's format) is recognised on open and
    used as it is: searches (every fusion, the exact-match guard, filters) give the ids and scores a format-2
    collection of the same chunks gives; upserts replace its UUID points (no duplicate); deletes remove them."""
    from hybrid_memory.backends.qdrant.backend import point_uuid

    notes = _note_chunks()
    with _open(engine, tmp_path / "old") as old:
        old.backend.uuid_ids = True  # write as format 1 did: point id = str(uuid5(NAMESPACE, chunk_id))
        old.add(notes)
    with _open(engine, tmp_path / "old") as old, _open(engine, tmp_path / "new") as new:
        new.add(notes)
        assert old.backend.uuid_ids is True and new.backend.uuid_ids is False
        assert sorted(str(i) for i in _stored_ids(old)) == sorted(str(point_uuid(c["chunk_id"])) for c in notes)
        assert old.backend._ids == {}  # reopened: the id map fills from the searches' hits
        for query, options in [
            ("billing-service HTTP 504 PostgreSQL", {}),  # adaptive: cross-scores and the guard
            ("getUserById null", {}),
            ("billing-service HTTP 504", {"fusion": "rrf"}),
            ("PostgreSQL connection pool", {"fusion": "zscore"}),
            ("HTTP 504", {"dense_weight": 0.0}),
            ("HTTP 504", {"sparse_weight": 0.0}),
            ("HTTP 504", {"metadata_filter": {"service": "billing-service"}}),
        ]:
            a = old.search(query, top_k=4, **options)
            b = new.search(query, top_k=4, **options)
            assert [r.chunk_id for r in a.results] == [r.chunk_id for r in b.results], (query, options)
            # equal on Edge; local mode's numpy scoring differs in the 9th digit with the points' storage order
            assert [(r.score, r.rrf_score) for r in a.results] == [
                (
                    pytest.approx(r.score, rel=1e-7) if r.score is not None else None,
                    pytest.approx(r.rrf_score, rel=1e-12),
                )
                for r in b.results
            ], (query, options)
            assert [(r.text, r.source, r.metadata) for r in a.results] == [
                (r.text, r.source, r.metadata) for r in b.results
            ]
        assert len(old.backend._ids) == 6
        # the exact-match guard's counts, read by the backend on its own (one-term queries, a retrieve)
        ids = np.array(sorted(old.backend._ids))
        assert sorted(ids.tolist()) == sorted(new.backend._ids)  # the same engine ids in both formats
        for text in ("getUserById", "v2.3.1 10.0.0.12", "billing-service HTTP 504 PostgreSQL"):
            assert (
                old.backend.exact_matches(text, ids, 2, 0.25, 3).tolist()
                == new.backend.exact_matches(text, ids, 2, 0.25, 3).tolist()
            ), text
        assert old.get(["auth-user"])[0].text == "auth-api: getUserById returned null for deleted accounts"
        old.upsert([{"chunk_id": "auth-user", "text": "auth-api: getUserById returned null (edited)"}])
        assert old.count() == 6  # the UUID point was replaced, not joined by an integer one
        assert all(uuid.UUID(str(i)) for i in _stored_ids(old)) and len(_stored_ids(old)) == 6
        assert old.get(["auth-user"])[0].text == "auth-api: getUserById returned null (edited)"
        assert old.search("getUserById edited", top_k=1).results[0].chunk_id == "auth-user"
        old.delete(["reset"])
        assert old.count() == 5 and old.get(["reset"]) == []
        assert "reset" not in [r.chunk_id for r in old.search("ERR_CONN_RESET Elasticsearch", top_k=6).results]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_second_chunk_id_on_a_known_point_id_is_refused(engine, tmp_path):
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(engine, tmp_path) as mem:
        mem.add([{"chunk_id": "a", "text": "HTTP 504"}])
        mem.backend._ids[point_id("b")] = "other"  # as if "other" hashed to b's point id
        with pytest.raises(InvalidRequestError, match="chunk ids 'b' and 'other' map to the same Qdrant point id"):
            mem.add([{"chunk_id": "b", "text": "HTTP 502"}])
        assert mem.count() == 1


def test_edge_shard_config_keeps_payload_in_the_page_cache_and_one_search_thread(tmp_path):
    from hybrid_memory.backends.qdrant.collection import SEARCH_THREADS

    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(dim=8)) as mem:
        mem.add([{"chunk_id": "a", "text": "HTTP 504"}])
    config = json.loads((tmp_path / "shard" / "edge_config.json").read_text())
    assert config["payload_memory"] == "cached" and config["max_search_threads"] == SEARCH_THREADS == 1
    segment = json.loads(next((tmp_path / "shard" / "segments").glob("*/segment.json")).read_text())
    assert segment["config"]["payload_storage_type"] == {"type": "in_ram_mmap"}


def test_edge_collection_options_are_checked(tmp_path):
    from hybrid_memory.backends.qdrant.collection import EdgeCollection

    with pytest.raises(InvalidRequestError, match="payload_memory must be 'cached', 'cold' or None, got 'hot'"):
        EdgeCollection(tmp_path / "a", payload_memory="hot")
    for bad in (0, True, 1.5):
        with pytest.raises(InvalidRequestError, match="search_threads must be an int >= 1 or None"):
            EdgeCollection(tmp_path / "a", search_threads=bad)
    assert not (tmp_path / "a").exists()
    coll = EdgeCollection(tmp_path / "b", payload_memory="cold", search_threads=None)
    coll.ensure(4, {})
    coll.close()
    config = json.loads((tmp_path / "b" / "edge_config.json").read_text())
    assert config["payload_memory"] == "cold" and "max_search_threads" not in config


# -- the presence vector ("terms") of the exact-match guard's whole-query test ----------------------------
def _open_without_terms(engine: str, tmp_path) -> HybridMemory:
    """A memory over a collection created as before the presence vector existed (dense + bm25 only)."""
    if engine == "qdrant-edge":
        import qdrant_edge as qe

        config = qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=64, distance=qe.Distance.Cosine)},
            sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        qe.EdgeShard.create(str(tmp_path / "shard"), config).close()
    else:
        from qdrant_client import QdrantClient, models

        client = QdrantClient(path=str(tmp_path / "local"))
        client.create_collection(
            "notes",
            vectors_config={"dense": models.VectorParams(size=64, distance=models.Distance.COSINE)},
            sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        client.close()
    return _open(engine, tmp_path)


GUARD_CASES = {  # query -> guard counts over every chunk, top_k=2 (rare: held by at most 2), worked out by hand
    # the identifier is in 2 chunks (+1 each), both hold getuserbyid/get/user/id in order (+(1 + 1))
    "getUserById": {"auth-user": 3, "ids": 3},
    # v2.3.1 in 2 chunks, 10.0.0.12 in 1 (both rare); "upgrade" holds the whole query in order (+(1 + 2))
    "v2.3.1 10.0.0.12": {"upgrade": 5, "ids": 1},
    # postgresql is in 4 chunks (not rare) and 4 hold every token (more than top_k): nothing
    "PostgreSQL connection pool exhausted": {},
    # e1243 is rare (+1); "upgrade" holds all three tokens but e1243 comes first there: not in order
    "certificate expired E1243": {"upgrade": 1},
}
GUARD_CHUNKS = [
    *_note_chunks(),
    {"chunk_id": "pool-a", "text": "PostgreSQL connection pool exhausted again on db-prod-3"},
    {"chunk_id": "pool-b", "text": "connection pool PostgreSQL exhausted, order differs"},
    {"chunk_id": "ids", "text": "getUserById and ERR_CONN_RESET seen together on v2.3.1"},
]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_presence_vector_holds_each_distinct_token_once(engine, tmp_path):
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(engine, tmp_path) as mem:
        mem.add(_note_chunks())
        assert mem.backend.collection.terms is True
        coll = mem.backend.collection
        if engine == "qdrant-edge":
            raw = coll.shard.retrieve([point_id("auth-user")], with_payload=False, with_vector=True)[0].vector
        else:
            raw = coll.client.retrieve(coll.name, [point_id("auth-user")], with_payload=False, with_vectors=True)[
                0
            ].vector
        bm25 = mem.backend.encoder.document("auth-api: getUserById returned null for deleted accounts")
        tokens = set(TechnicalTokenizer().tokenize("auth-api: getUserById returned null for deleted accounts"))
        assert len(bm25[0]) == len(tokens) >= 9  # auth-api auth api getuserbyid get user id returned null ...
        assert list(raw["terms"].indices) == bm25[0] == list(raw["bm25"].indices)
        assert list(raw["terms"].values) == [1.0] * len(bm25[0])
    with _open(engine, tmp_path) as mem:  # reopened: still with the presence vector
        assert mem.backend.collection.terms is True


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("terms", [True, False], ids=["presence-vector", "written-before-it"])
def test_whole_query_guard_counts_with_and_without_the_presence_vector(engine, terms, tmp_path):
    """The guard's counts equal the embedded backend's on a collection with the presence vector (the test
    is one query riding with the legs; no sparse vectors travel) and on one written before it (the test reads
    the sparse vectors the sparse queries return); searches rank alike on both."""
    from hybrid_memory.backends.qdrant.collection import TERMS
    from hybrid_memory.search.engine import Query

    with (
        HybridMemory(embedder=HashingEmbedder(64)) as embedded,
        _open(engine, tmp_path) if terms else _open_without_terms(engine, tmp_path) as qdrant,
    ):
        embedded.add(GUARD_CHUNKS)
        qdrant.add(GUARD_CHUNKS)
        assert qdrant.backend.collection.terms is terms
        collection = qdrant.backend.collection
        calls = []
        real = collection.query_batch

        def spy(legs):
            calls.append(list(legs))
            return real(legs)

        collection.query_batch = spy
        for text, expected in GUARD_CASES.items():
            found = []
            for memory in (embedded, qdrant):
                q = Query(text)
                if memory is qdrant:
                    q.cache["qdrant_legs"] = ("sparse", "dense")
                candidates = memory._searcher.candidates(q, top_k=2, depth=9, weights={}, fusion="adaptive")
                found.append(candidates.input.identifier_matches)
            assert found[0] == found[1] == expected, text
        legs = [leg for call in calls for leg in call]
        # sparse vectors travel only without the presence vector, but for the sparse surprise's one: the top hit's
        # (a leg restricted to that one point)
        guard = [
            leg
            for leg in legs
            if not (leg.limit == 1 and len(leg.filter["must"][0].get("has_id", ())) == 1 if leg.filter else False)
        ]
        assert any(leg.tokens for leg in guard) is not terms
        presence = [leg for leg in legs if leg.using == TERMS]
        if terms:  # one presence query per whole-query test: value 1 per distinct token, threshold halfway
            tokens = sorted({t for t in TechnicalTokenizer().tokenize("PostgreSQL connection pool exhausted")})
            assert any(
                len(leg.vector[0]) == len(tokens)
                and leg.vector[1] == [1.0] * len(tokens)
                and leg.threshold == len(tokens) - 0.5
                for leg in presence
            )
        else:
            assert presence == []
        collection.query_batch = real
        # the backend's own reads (nothing fetched with the legs): a presence query over the ids, or a retrieve
        ids = np.array(sorted(qdrant.backend._ids))
        keys = [qdrant.backend._ids[i] for i in ids.tolist()]
        for text, expected in GUARD_CASES.items():
            counts = qdrant.backend.exact_matches(text, ids, 2, 0.25, 3)
            assert {k: int(c) for k, c in zip(keys, counts, strict=True) if c} == expected, text


@pytest.mark.parametrize("engine", ENGINES)
def test_the_payload_holds_each_value_once(engine, tmp_path):
    """Source, metadata, system fields and times live in ``doc`` (JSON text) and the typed filter fields ``f``,
    not also as payload objects: Qdrant reads a point's whole payload to return any key of it."""
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(engine, tmp_path) as mem:
        mem.add(_note_chunks())
        record = mem.backend.collection.retrieve([point_id("reset")], payload=True)[0]
        assert sorted(record.payload) == ["chunk_id", "content_hash", "doc", "f", "seq", "text"]
        doc = json.loads(record.payload["doc"])
        assert doc["source"] == "notes" and doc["metadata"] == {
            "environment": "production",
            "service": "search-indexer",
            "severity": 2,
            "tags": ["elasticsearch", "network"],
        }
        assert sorted(doc) == ["created_at", "metadata", "source", "sys", "updated_at"]
        assert mem.count({"tags": "network"}) == 1 and mem.count({"severity": {"$in": [2]}}) == 3
