"""The Qdrant Edge payload cache (``EdgeCollection.payloads``): a search's response reads a point's ``text`` and
``doc`` from the shard once; every write of the collection drops its points' entries, and a read that overlaps
a write keeps nothing. All on Qdrant Edge (a Qdrant server is shared by processes: the client path has no
cache, checked last)."""

from __future__ import annotations

import threading

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError

from tests.conftest import _note_chunks

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")


class _CountingShard:
    """The real ``EdgeShard`` with its ``retrieve`` calls recorded (the binding's class takes no attributes)."""

    def __init__(self, real, before_return=None) -> None:
        self.real = real
        self.retrieved: list[list] = []
        self.before_return = before_return

    def retrieve(self, ids, **kwargs):
        self.retrieved.append(list(ids))
        found = self.real.retrieve(ids, **kwargs)
        if self.before_return is not None:
            self.before_return()
        return found

    def __getattr__(self, name):
        return getattr(self.real, name)


def _open(tmp_path, **options) -> HybridMemory:
    return HybridMemory.qdrant(
        edge_path=tmp_path / "shard", embedder=HashingEmbedder(dim=64), payload_indexes=False, **options
    )


def _rows(response) -> list[tuple[str, str, str | None, dict]]:
    return [(r.chunk_id, r.text, r.source, r.metadata) for r in response.results]


def test_a_repeated_search_reads_no_payload_and_returns_the_same_rows(tmp_path):
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(tmp_path) as mem:
        mem.add(_note_chunks())
        collection = mem.backend.collection
        shard = collection.shard = _CountingShard(collection.shard)
        first = mem.search("billing-service HTTP 504", top_k=3, fusion="rrf")
        assert shard.retrieved == [[point_id(c) for c in [r.chunk_id for r in first.results]]]
        shard.retrieved.clear()
        again = mem.search("billing-service HTTP 504", top_k=3, fusion="rrf")
        assert shard.retrieved == []  # all three rows from the cache
        assert (collection.cache_hits, collection.cache_misses) == (3, 3)
        assert _rows(again) == _rows(first)
        notes = {c["chunk_id"]: c for c in _note_chunks()}
        assert [(t, s, m) for _, t, s, m in _rows(again)] == [
            (notes[c]["text"], "notes", notes[c]["metadata"]) for c, _, _, _ in _rows(again)
        ]
        # a caller changing a result's metadata changes nothing stored or cached
        again.results[0].metadata["service"] = "changed"
        assert _rows(mem.search("billing-service HTTP 504", top_k=3, fusion="rrf")) == _rows(first)
        assert shard.retrieved == []


def test_writes_drop_their_points_from_the_cache(tmp_path):
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(tmp_path) as mem:
        mem.add(_note_chunks())
        query = {"search_text": "billing-service HTTP 504", "top_k": 6, "fusion": "rrf"}

        def row(chunk_id):
            return {r.chunk_id: r for r in mem.search(**query).results}[chunk_id]

        before = row("prod-504")
        assert point_id("prod-504") in mem.backend.collection._rows
        # a new text (vectors and payload rewritten): the new text is returned
        mem.upsert(
            [
                {
                    "chunk_id": "prod-504",
                    "text": "billing-service HTTP 504 upstream timeout, again",
                    "source": "notes",
                    "metadata": before.metadata,
                }
            ]
        )
        assert row("prod-504").text == "billing-service HTTP 504 upstream timeout, again"
        # metadata only (the payload is replaced, the vectors kept): the new metadata is returned
        mem.upsert(
            [
                {
                    "chunk_id": "prod-504",
                    "text": "billing-service HTTP 504 upstream timeout, again",
                    "source": "notes",
                    "metadata": {**before.metadata, "severity": 9},
                }
            ]
        )
        assert row("prod-504").metadata == {**before.metadata, "severity": 9}
        # deleted: gone from the results, and from the cache
        mem.delete(["prod-504"])
        assert "prod-504" not in [r.chunk_id for r in mem.search(**query).results]
        assert point_id("prod-504") not in mem.backend.collection._rows


def test_a_read_overlapping_a_write_keeps_nothing(tmp_path):
    """A read of the shard that returns after a write of the same point keeps no entry: the next read sees
    the write. Without the generation check, the old text would stay cached."""
    from hybrid_memory.backends.qdrant.backend import point_id

    with _open(tmp_path) as mem:
        mem.add([{"chunk_id": "a", "text": "old text"}])
        collection = mem.backend.collection
        read_done, write_done = threading.Event(), threading.Event()

        def pause() -> None:
            if threading.current_thread() is not threading.main_thread():
                read_done.set()
                assert write_done.wait(10)

        collection.shard = _CountingShard(collection.shard, pause)
        got = {}
        reader = threading.Thread(target=lambda: got.update(collection.payloads([point_id("a")], ("text",))))
        reader.start()
        assert read_done.wait(10)  # the reader holds the old payload, not yet returned
        mem.upsert([{"chunk_id": "a", "text": "new text"}])
        write_done.set()
        reader.join(10)
        assert got == {point_id("a"): {"text": "old text"}}  # read before the write returned
        assert point_id("a") not in collection._rows  # ... and not kept
        collection.shard.retrieved.clear()
        assert collection.payloads([point_id("a")], ("text",)) == [(point_id("a"), {"text": "new text"})]
        assert collection.payloads([point_id("a")], ("text",)) == [(point_id("a"), {"text": "new text"})]
        assert collection.shard.retrieved == [[point_id("a")]]  # the first read was kept, the second used it


def test_the_cache_keeps_the_most_recently_read_points(tmp_path):
    from hybrid_memory.backends.qdrant.backend import QdrantBackend, point_id
    from hybrid_memory.backends.qdrant.collection import EdgeCollection

    coll = EdgeCollection(tmp_path / "s", payload_cache=2)
    with HybridMemory(backend=QdrantBackend(coll, payload_indexes=False), embedder=HashingEmbedder(dim=16)) as mem:
        mem.add([{"chunk_id": c, "text": f"note {c}"} for c in "abc"])
        a, b, c = (point_id(x) for x in "abc")
        coll.payloads([a, b], ("text",))
        coll.payloads([a], ("text",))  # a is now the most recent
        coll.payloads([c], ("text",))  # evicts b
        assert list(coll._rows) == [a, c]
        assert dict(coll.payloads([b, c], ("text",))) == {b: {"text": "note b"}, c: {"text": "note c"}}
        assert list(coll._rows) == [c, b]
        # another key set of a point is its own entry, dropped with the point
        coll.payloads([c], ("doc",))
        assert set(coll._rows[c]) == {("text",), ("doc",)}
        mem.delete(["c"])
        assert list(coll._rows) == [b]


def test_payload_cache_option(tmp_path):
    from hybrid_memory.backends.qdrant.collection import EdgeCollection, Point

    for bad in (-1, True, 1.5, "10"):
        with pytest.raises(InvalidRequestError, match="payload_cache must be an int >= 0"):
            EdgeCollection(tmp_path / "a", payload_cache=bad)
    coll = EdgeCollection(tmp_path / "b", payload_cache=0)  # no cache: every read goes to the shard
    coll.ensure(4, {})
    coll.upsert([Point(7, [1.0, 0.0, 0.0, 0.0], ([1], [1.0]), {"text": "x"})])
    coll.shard = _CountingShard(coll.shard)
    assert coll.payloads([7], ("text",)) == coll.payloads([7], ("text",)) == [(7, {"text": "x"})]
    assert coll.shard.retrieved == [[7], [7]] and not coll._rows
    coll.shard = coll.shard.real
    coll.close()


def test_the_client_path_keeps_no_payload_cache():
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    from hybrid_memory.backends.qdrant.collection import ClientCollection

    with HybridMemory.qdrant(
        ":memory:", collection="t", embedder=HashingEmbedder(dim=16), payload_indexes=False
    ) as mem:
        assert isinstance(mem.backend.collection, ClientCollection)
        assert not hasattr(mem.backend.collection, "_rows")


def test_the_shard_options_reach_the_collection(tmp_path):
    with HybridMemory.qdrant(
        edge_path=tmp_path / "shard", embedder=HashingEmbedder(dim=16), payload_cache=0, payload_indexes=False
    ) as mem:
        assert mem.backend.collection.payload_cache == 0
    with pytest.raises(InvalidRequestError, match="payload_cache must be an int >= 0"):
        HybridMemory.qdrant(edge_path=tmp_path / "other", embedder=HashingEmbedder(dim=16), payload_cache=-5)


@pytest.mark.parametrize("payload_cache", [4096, 0], ids=["cache", "no-cache"])
def test_result_metadata_is_a_fresh_copy_to_every_depth(tmp_path, payload_cache):
    """The rows' ``doc`` text is decoded once per distinct text (a memo keyed by the text), and every result
    gets its own copy of the metadata: changing a nested list or dict of one result changes no other."""
    meta = {
        "tags": ["db", "prod"],
        "owner": {"team": "billing", "oncall": ["dana"]},
        "severity": 2.5,
        "ok": True,
        "none": None,
    }
    with _open(tmp_path, payload_cache=payload_cache) as mem:
        mem.add([{"chunk_id": "a", "text": "PostgreSQL pool exhausted", "source": "notes", "metadata": meta}])
        first = mem.search("PostgreSQL pool", top_k=1).results[0]
        assert first.metadata == meta and first.source == "notes"
        first.metadata["tags"].append("changed")
        first.metadata["owner"]["oncall"].clear()
        first.metadata["owner"]["team"] = "changed"
        again = mem.search("PostgreSQL pool", top_k=1).results[0]
        assert again.metadata == meta
        info = mem.backend._decode_doc.cache_info()
        assert (info.hits, info.misses) == (1, 1)  # one decode for the two reads of the same doc text
        # a changed chunk has another doc text: decoded afresh, never a stale memo
        mem.upsert(
            [
                {
                    "chunk_id": "a",
                    "text": "PostgreSQL pool exhausted",
                    "source": "notes",
                    "metadata": {**meta, "severity": 3},
                }
            ]
        )
        assert mem.search("PostgreSQL pool", top_k=1).results[0].metadata == {**meta, "severity": 3}


def test_json_copy_copies_containers_and_shares_immutables():
    from hybrid_memory.backends.qdrant.backend import _json_copy

    value = {"a": [1, 2.5, {"b": None, "c": ["x"]}], "d": "text", "e": True}
    copy = _json_copy(value)
    assert copy == value and copy is not value
    assert (
        copy["a"] is not value["a"]
        and copy["a"][2] is not value["a"][2]
        and copy["a"][2]["c"] is not value["a"][2]["c"]
    )
    assert copy["d"] is value["d"]
