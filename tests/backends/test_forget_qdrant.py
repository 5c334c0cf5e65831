"""Issue 35, class 3 on the Qdrant backends (qdrant-client's local mode in a folder, Qdrant Edge): after a delete
(or an upsert that replaces a text) no search, graph report, answer or MCP tool quotes or cites the old text, and
after the documented steps (``GraphIndex.refresh`` for the graph's files, ``close`` for the shard's segments) no
file holds it, but for the one the docs name: Qdrant Edge's write-ahead log
(:meth:`~hybrid_memory.backends.qdrant.collection.EdgeCollection.vacuum`)."""

from __future__ import annotations

import pytest

pytest.importorskip("networkx")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402
from hybrid_memory.graph import GraphIndex  # noqa: E402

from tests.graph.test_forget import NOTES, SECRET, _cites  # noqa: E402

ENGINES = ["qdrant-edge", "qdrant-client-local"]
QUESTION = "what unlocks the billing-service Kafka archive?"


def _open(engine, folder, **options):
    options.setdefault("payload_indexes", False)
    if engine == "qdrant-edge":
        pytest.importorskip(
            "qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')"
        )
        return HybridMemory.qdrant(edge_path=folder, embedder=HashingEmbedder(64), **options)
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')")
    return HybridMemory.qdrant(str(folder), collection="forget", embedder=HashingEmbedder(64), **options)


def _holding(folder, word):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and word in p.read_bytes())


@pytest.mark.parametrize("how", ["delete", "upsert"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_deleted_or_replaced_chunk_is_not_served_and_no_segment_file_keeps_it(tmp_path, engine, how):
    store = tmp_path / "store"
    memory = _open(engine, store)
    with memory:
        memory.add([{"chunk_id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
        memory.add([{"chunk_id": "secret", "text": SECRET}])
        index = GraphIndex.build(memory, path=tmp_path / "graph")
        assert _cites(index.global_search(QUESTION, token_budget=4000))  # served while stored
        assert _holding(store, b"Zorblax")  # and on disk
        if how == "delete":
            assert memory.delete(["secret"]) == 1
        else:
            memory.upsert([{"chunk_id": "secret", "text": "the billing-service Kafka archive is read-only"}])
        assert all("Zorblax" not in r.text for r in memory.search("Zorblax vault 7731", top_k=4).results)
        assert not _cites(index.global_search(QUESTION, token_budget=4000))
        assert "Zorblax" not in index.ask(QUESTION, token_budget=4000).answer
        index.refresh(memory)  # the documented step for the graph's files
        assert _holding(tmp_path / "graph", b"Zorblax") == []
        assert not _cites(index.global_search(QUESTION, token_budget=4000), chunk_id=None)
    # after close, as EdgeCollection.vacuum documents: a deleted text is in no segment file, only in Qdrant Edge's
    # write-ahead log; a text replaced in place (an upsert of a point of the shard's appendable segment) also stays
    # in that segment's freed payload pages; qdrant-client's local mode keeps neither
    left = [
        p.split("/")[0] + "/" + p.split("/")[-2] if p.startswith("segments/") else p
        for p in _holding(store, b"Zorblax")
    ]
    if engine == "qdrant-client-local":
        assert left == []
    else:
        assert left == (["wal/open-1"] if how == "delete" else ["segments/payload_storage", "wal/open-1"]), left
    with _open(engine, store) as memory:  # and the memory still reads right
        assert memory.count() == (3 if how == "delete" else 4)
        assert all("Zorblax" not in r.text for r in memory.search("Zorblax vault 7731", top_k=4).results)
        assert [r.chunk_id for r in memory.search("Kafka lag delays invoices", top_k=1).results] == ["n0"]


def test_edge_close_vacuums_only_after_a_delete_or_rewrite(tmp_path):
    """An open that only added points rewrites no segment at close; one that deleted a point does."""
    pytest.importorskip("qdrant_edge")
    with _open("qdrant-edge", tmp_path / "s") as memory:
        memory.add([{"chunk_id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
    with _open("qdrant-edge", tmp_path / "s") as memory:
        collection = memory.backend.collection
        assert collection._forgotten is False
        memory.delete(["n1"])
        assert collection._forgotten is True
        collection.shard.flush()
        collection.shard.close()
        collection.shard = None
        assert collection.vacuum() is True  # the segment holding n1 was rewritten
        assert collection.vacuum() is False  # nothing left to rewrite
    with _open("qdrant-edge", tmp_path / "s") as memory:
        assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["n0", "n2"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_mcp_global_search_forgets_a_deleted_memory_on_qdrant(tmp_path, engine):
    pytest.importorskip("mcp")
    from hybrid_memory.mcp_server import build_server
    from mcp import Client
    from mcp.client._memory import InMemoryTransport

    with _open(engine, tmp_path / "store") as memory:
        memory.add([{"chunk_id": f"u1-{i}", "text": t, "user_id": "u1"} for i, t in enumerate(NOTES)])
        memory.add([{"chunk_id": "secret", "text": SECRET, "user_id": "u1"}])
        graph = GraphIndex.build(memory.scoped(user_id="u1"), path=tmp_path / "graph")
        server = build_server(memory, scope={"user_id": "u1"}, graph=graph)
        async with Client(InMemoryTransport(server)) as c:
            question = {"question": QUESTION, "token_budget": 4000}
            assert "Zorblax" in (await c.call_tool("global_search", question)).content[0].text
            await c.call_tool("delete_memory", {"chunk_ids": ["secret"]})
            after = await c.call_tool("global_search", question)
            assert not after.is_error
            assert "Zorblax" not in after.content[0].text and "secret" not in str(after.structured_content)
            found = await c.call_tool("search_memory", {"request": {"search_text": "Zorblax vault 7731", "top_k": 4}})
            assert not found.is_error and "Zorblax" not in found.content[0].text
