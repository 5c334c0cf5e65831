"""add / upsert / delete / get / count, and what the engines see after each."""

import pytest
from hybrid_memory import (
    DimensionMismatchError,
    DuplicateChunkError,
    HybridMemory,
    InvalidRequestError,
)


def sparse_ids(memory, text, top_k=10, **kw):
    return [r.chunk_id for r in memory.search(text, top_k=top_k, dense_weight=0.0, **kw).results]


def dense_ids(memory, text, top_k=10, **kw):
    return [r.chunk_id for r in memory.search(text, top_k=top_k, sparse_weight=0.0, **kw).results]


def test_add_get_count(memory):
    assert memory.count() == 6
    assert memory.count({"environment": "production"}) == 4
    got = memory.get(["reset", "missing", "prod-504"])
    assert [c.chunk_id for c in got] == ["reset", "prod-504"]
    assert got[0].metadata["tags"] == ["elasticsearch", "network"]
    assert got[0].source == "notes"
    assert len(got[0].content_hash) == 64
    stats = memory.stats()
    assert (stats["chunks"], stats["bm25_documents"], stats["dense_vectors"]) == (6, 6, 6)


def test_add_existing_id_is_refused_and_nothing_is_written(memory):
    with pytest.raises(DuplicateChunkError, match="use upsert"):
        memory.add([{"chunk_id": "new-1", "text": "fresh"}, {"chunk_id": "reset", "text": "other"}])
    assert memory.get(["new-1"]) == []
    assert memory.get(["reset"])[0].text.startswith("search-indexer")


def test_repeated_id_in_one_call_is_refused(embedder):
    with HybridMemory(embedder=embedder) as mem:
        with pytest.raises(DuplicateChunkError, match="repeated"):
            mem.add([{"chunk_id": "a", "text": "x"}, {"chunk_id": "a", "text": "y"}])
        assert mem.count() == 0


def test_bad_chunks_name_the_field(embedder):
    with HybridMemory(embedder=embedder) as mem:
        with pytest.raises(InvalidRequestError, match="text"):
            mem.add([{"chunk_id": "a", "text": "   "}])
        with pytest.raises(InvalidRequestError, match="chunk_id"):
            mem.add([{"chunk_id": "", "text": "x"}])
        with pytest.raises(InvalidRequestError, match="JSON"):
            mem.add([{"chunk_id": "a", "text": "x", "metadata": {"bad": float("nan")}}])
        assert mem.count() == 0


def test_upsert_replaces_text_in_both_engines(memory):
    assert sparse_ids(memory, "getUserById") == ["auth-user"]
    memory.upsert(
        [
            {
                "chunk_id": "auth-user",
                "text": "auth-api rotates JWT signing keys weekly",
                "metadata": {"environment": "production", "service": "auth-api"},
            }
        ]
    )
    assert memory.count() == 6
    assert sparse_ids(memory, "getUserById") == []
    assert sparse_ids(memory, "JWT signing keys") == ["auth-user"]
    top = memory.search("auth-api rotates JWT signing keys weekly", top_k=1, sparse_weight=0.0).results[0]
    assert top.chunk_id == "auth-user"
    assert top.dense_score == pytest.approx(1.0, abs=1e-5)  # the new text's own vector
    stats = memory.stats()
    assert (stats["bm25_documents"], stats["dense_vectors"]) == (6, 6)


def test_upsert_with_same_text_updates_metadata_without_reembedding(memory, monkeypatch, note_chunks):
    calls = []
    original = memory.embedder.embed_documents
    monkeypatch.setattr(memory.embedder, "embed_documents", lambda texts: calls.append(list(texts)) or original(texts))
    chunk = note_chunks()[0]
    chunk["metadata"] = {**chunk["metadata"], "environment": "archived"}
    memory.upsert([chunk])
    assert calls == []
    assert memory.count({"environment": "archived"}) == 1
    assert sparse_ids(memory, "HTTP 504", metadata_filter={"environment": "archived"}) == ["prod-504"]


def test_deleted_chunk_never_comes_back(memory):
    assert memory.delete(["prod-504", "never-existed"]) == 1
    assert memory.delete(["prod-504"]) == 0
    assert memory.count() == 5
    assert "prod-504" not in sparse_ids(memory, "HTTP 504 connection pool")
    assert "prod-504" not in dense_ids(memory, "HTTP 504 connection pool", top_k=50)
    assert memory.get(["prod-504"]) == []


def test_a_lone_string_is_one_id_for_delete_get_and_a_scoped_view(memory):
    """delete("prod-504") deletes that chunk (not the chunks 'p', 'r', ...): documented, as supersede's old_ids."""
    assert [c.chunk_id for c in memory.get("prod-504")] == ["prod-504"]
    assert memory.delete("prod-504") == 1
    assert (memory.count(), memory.get("prod-504")) == (5, [])
    assert memory.scoped(user_id="nobody").delete("reset") == 0  # another scope's id: ignored like an unknown one
    assert memory.count() == 5


@pytest.mark.parametrize(
    "chunk_ids, message",
    [
        (
            5,
            "chunk_ids must be a list of chunk ids (str), or one id as a str, got int 5; pass e.g. ['c1', 'c2'] or 'c1'",
        ),
        (
            b"reset",
            "chunk_ids must be a list of chunk ids (str), or one id as a str, got bytes b'reset'; pass e.g. "
            "['c1', 'c2'] or 'c1'",
        ),
        (
            ["reset", None],
            "chunk_ids must be chunk ids (str), got NoneType None at position 1; pass the ids as str, e.g. "
            "['c1', 'c2']",
        ),
    ],
)
def test_ids_that_are_not_strings_are_refused_naming_value_and_position(memory, chunk_ids, message):
    """bytes iterated as ints (the message quoted [114, 101, ...]), and the message named no fix."""
    with pytest.raises(InvalidRequestError) as info:
        memory.delete(chunk_ids)
    assert str(info.value) == message
    assert memory.count() == 6  # nothing deleted


def test_a_chunk_object_given_as_an_id_names_its_chunk_id_and_supersede_names_old_ids(memory):
    stored = memory.get(["reset"])
    with pytest.raises(InvalidRequestError) as info:
        memory.delete(stored)
    assert str(info.value) == (
        "chunk_ids must be chunk ids (str), got a StoredChunk (chunk_id 'reset') at position 0; "
        "pass the ids: [c.chunk_id for c in chunks]"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.supersede(7, {"chunk_id": "new", "text": "a new fact"})
    assert str(info.value) == (
        "old_ids must be a list of chunk ids (str), or one id as a str, got int 7; pass e.g. ['c1', 'c2'] or 'c1'"
    )
    assert memory.count() == 6


def test_precomputed_vectors_are_used_and_checked(embedder):
    import numpy as np

    with HybridMemory(embedder=embedder) as mem:
        vectors = np.zeros((2, 64), dtype=np.float32)
        vectors[0, 0] = 3.0
        vectors[1, 1] = 1.0
        mem.add([{"chunk_id": "x", "text": "alpha"}, {"chunk_id": "y", "text": "beta"}], vectors=vectors)
        with pytest.raises(DimensionMismatchError, match=r"\(1, 64\)"):
            mem.add([{"chunk_id": "z", "text": "gamma"}], vectors=np.zeros((1, 32), dtype=np.float32))
        assert mem.count() == 2
        hits = mem.backend.dense.search(np.eye(64, dtype=np.float32)[0], 2)
        assert hits[0][1] == pytest.approx(1.0)  # normalised on the way in


def test_add_texts_upserts_with_given_ids(embedder):
    with HybridMemory(embedder=embedder) as mem:
        assert mem.add_texts(["one", "two"], metadatas=[{"n": 1}, {"n": 2}], ids=["a", "b"]) == ["a", "b"]
        mem.add_texts(["uno"], ids=["a"])
        assert [c.text for c in mem.get(["a", "b"])] == ["uno", "two"]
        with pytest.raises(InvalidRequestError, match="metadatas has 1 items for 2 texts"):
            mem.add_texts(["x", "y"], metadatas=[{}])


def test_closed_memory_says_how_to_reopen(embedder):
    mem = HybridMemory(embedder=embedder)
    mem.close()
    with pytest.raises(InvalidRequestError, match="HybridMemory.open"):
        mem.search("x")


def test_bulk_defers_compaction_until_the_delta_reaches_its_memory_bound(embedder):
    with HybridMemory(embedder=embedder, compact_min=4, compact_ratio=0.0) as mem:
        mem.add([{"chunk_id": f"a{j}", "text": f"first {j}"} for j in range(8)])
        mem.flush()
        assert (mem.stats()["bm25_delta_documents"], mem.stats()["bm25_documents"]) == (0, 8)
        with mem.bulk():
            for i in range(2):
                mem.add([{"chunk_id": f"b{i}-{j}", "text": f"batch {i} item {j} token{i}{j}"} for j in range(3)])
                # past the usual threshold (4), but under the bulk bound max(4, min(main size 8, 100k))
                assert mem.stats()["bm25_delta_documents"] == 3 * (i + 1)
            assert sparse_ids(mem, "token11") == ["b1-1"]
            mem.add([{"chunk_id": f"b2-{j}", "text": f"batch 2 item {j} token2{j}"} for j in range(3)])
            mem.flush()  # the delta reached 9 >= 8: merged in the background, inside the block
            assert (mem.stats()["bm25_delta_documents"], mem.stats()["bm25_documents"]) == (0, 17)
            mem.add([{"chunk_id": "b3-0", "text": "batch 3 token30"}])
            assert sparse_ids(mem, "token30") == ["b3-0"]
        stats = mem.stats()
        assert (stats["bm25_delta_documents"], stats["bm25_documents"]) == (1, 18)  # 1 < compact_min: kept
        assert sparse_ids(mem, "token21") == ["b2-1"]
        mem.add([{"chunk_id": f"c{j}", "text": f"late {j}"} for j in range(4)])
        mem.flush()
        assert mem.stats()["bm25_delta_documents"] == 0  # outside a block the threshold applies at once


def test_many_single_adds_with_background_merges_stay_correct(embedder):
    with HybridMemory(embedder=embedder, compact_min=5, compact_ratio=0.2) as mem:
        for i in range(40):
            mem.add([{"chunk_id": f"n{i:02d}", "text": f"note {i} mentions code ERR{i:02d}"}])
            assert sparse_ids(mem, f"ERR{i:02d}", top_k=1) == [f"n{i:02d}"]  # searchable right after add
            if i % 7 == 0:
                mem.delete([f"n{i:02d}"])
        mem.flush()
        assert mem.count() == 34
        assert mem.stats()["bm25_documents"] == 34
        assert sparse_ids(mem, "ERR07") == []
        assert sorted(sparse_ids(mem, "note mentions code", top_k=50)) == sorted(
            f"n{i:02d}" for i in range(40) if i % 7
        )


def test_one_chunk_given_where_a_list_is_taken_names_the_call_that_was_made(memory):
    """A fresh user's finding: write({...}) advised add([chunk]), another call than the one made."""
    chunk = {"chunk_id": "x", "text": "y"}
    before = memory.count()
    for call in ("add", "upsert", "write"):
        with pytest.raises(InvalidRequestError) as info:
            getattr(memory, call)(chunk)
        assert str(info.value) == (
            f"chunks must be a list of Chunk objects or mappings, got dict; wrap one chunk in a list: {call}([chunk])"
        )
        with pytest.raises(InvalidRequestError) as info:
            getattr(memory.scoped(user_id="u1"), call)("y")
        assert str(info.value) == (
            f"chunks must be a list of Chunk objects or mappings, got str; wrap one chunk in a list: {call}([chunk])"
        )
    assert memory.count() == before == 6


def test_wrong_argument_shapes_are_clear_errors(memory):
    with pytest.raises(InvalidRequestError, match="wrap it"):
        memory.add_texts("hello")
    with pytest.raises(InvalidRequestError, match=r"wrap one chunk in a list"):
        memory.add({"chunk_id": "x", "text": "y"})
    with pytest.raises(InvalidRequestError, match="chunk_ids must be a list"):
        memory.delete(None)
    with pytest.raises(InvalidRequestError) as info:
        memory.get([1, 2])
    assert str(info.value) == (
        "chunk_ids must be chunk ids (str), got int 1 at position 0; pass the ids as str, e.g. ['c1', 'c2']"
    )
    with pytest.raises(InvalidRequestError, match="chunk_id"):
        memory.add([{"chunk_id": "   ", "text": "x"}])
    with pytest.raises(InvalidRequestError, match="not valid Unicode"):
        memory.add([{"chunk_id": "s", "text": "bad \ud800 text"}])
    assert memory.count() == 6


def test_an_embedder_returning_nan_stores_nothing(memory, monkeypatch):
    import numpy as np

    monkeypatch.setattr(memory.embedder, "embed_documents", lambda texts: np.full((len(texts), 64), np.nan, np.float32))
    with pytest.raises(InvalidRequestError, match="NaN or infinite values for 1 of 1"):
        memory.add([{"chunk_id": "nan", "text": "anything"}])
    assert memory.get(["nan"]) == []


def test_loading_the_default_model_leaves_the_environment_as_it_was(monkeypatch):
    import os

    from hybrid_memory.embedders import _offline_env

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    with _offline_env():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert os.environ["TRANSFORMERS_OFFLINE"] == "0"  # the caller's choice is kept
    assert "HF_HUB_OFFLINE" not in os.environ
    assert os.environ["TRANSFORMERS_OFFLINE"] == "0"


def test_callable_embedder_bridges_plain_functions():
    from hybrid_memory import CallableEmbedder, DimensionMismatchError

    calls = []

    def docs(texts):
        calls.append(len(texts))
        return [[1.0, float(len(t))] for t in texts]

    bridge = CallableEmbedder(docs, lambda text: [0.0, 1.0], name="toy")
    assert bridge.dim == 2  # found by one probe query
    assert bridge.embed_documents(["ab", "abc"]).tolist() == [[1.0, 2.0], [1.0, 3.0]]
    assert bridge.embed_documents([]).shape == (0, 2) and calls == [2]
    assert bridge.embed_query("q").dtype.name == "float32"
    wrong = CallableEmbedder(docs, lambda text: [1.0, 2.0, 3.0], name="bad", dim=2)
    with pytest.raises(DimensionMismatchError, match="dimension 3, expected 2"):
        wrong.embed_query("q")
    with HybridMemory(embedder=bridge) as mem:
        mem.add([{"chunk_id": "a", "text": "ab"}])
        assert mem.search("ab", top_k=1).results[0].chunk_id == "a"
