"""Issue 35, class 3: a deleted (or replaced) chunk is forgotten by the GraphRAG layer: no global search, answer
or MCP tool quotes or cites it, and after the documented step (``GraphIndex.refresh``) no graph file holds it."""

from __future__ import annotations

import pytest

pytest.importorskip("networkx")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402
from hybrid_memory.graph import GraphIndex  # noqa: E402

SECRET = "Zorblax vault code 7731 unlocks the billing-service Kafka archive"
NOTES = [
    "Kafka lag on billing-service delays invoices from db-prod-3",
    "billing-service retries Kafka consumers when db-prod-3 is slow",
    "Kafka and billing-service alerts page the SRE team",
]


def _cites(result, words=("Zorblax", "7731"), chunk_id="secret"):
    text = " ".join(h.text for h in result.hits)
    return any(w in text for w in words) or chunk_id in {c for h in result.hits for c in h.chunk_ids}


def _folder_bytes(folder):
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


@pytest.mark.parametrize("how", ["delete", "upsert"])
def test_a_deleted_or_replaced_chunk_is_not_served_and_refresh_removes_it_from_the_graph_files(tmp_path, how):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
        memory.add([{"chunk_id": "secret", "text": SECRET}])
        index = GraphIndex.build(memory)
        question = "what unlocks the billing-service Kafka archive?"
        assert _cites(index.global_search(question, token_budget=4000))  # served while stored
        assert b"Zorblax" in _folder_bytes(tmp_path / "m" / "graph")
        if how == "delete":
            memory.delete(["secret"])
        else:
            memory.upsert([{"chunk_id": "secret", "text": "the billing-service Kafka archive is read-only"}])
        assert not _cites(index.global_search(question, token_budget=4000))
        assert "Zorblax" not in index.ask(question, token_budget=4000).answer
        reopened = GraphIndex.open(memory)  # another process's view of the saved files: the same rule
        assert not _cites(reopened.global_search(question, token_budget=4000))
        reopened.refresh(memory)  # the documented step: the community is rewritten without the chunk
        assert b"Zorblax" not in _folder_bytes(tmp_path / "m" / "graph")
        # (an upserted chunk is cited again, for its new text)
        assert not _cites(reopened.global_search(question, token_budget=4000), chunk_id=None)
        assert reopened.global_search("Kafka lag billing-service", token_budget=4000).hits  # the rest still serves


async def test_mcp_global_search_forgets_a_memory_deleted_through_mcp(tmp_path):
    pytest.importorskip("mcp")
    from hybrid_memory.mcp_server import build_server
    from mcp import Client
    from mcp.client._memory import InMemoryTransport

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": f"u1-{i}", "text": t, "user_id": "u1"} for i, t in enumerate(NOTES)])
        memory.add([{"chunk_id": "secret", "text": SECRET, "user_id": "u1"}])
        GraphIndex.build(memory.scoped(user_id="u1"))
        async with Client(InMemoryTransport(build_server(memory, scope={"user_id": "u1"}))) as c:
            question = {"question": "what unlocks the billing-service Kafka archive?", "token_budget": 4000}
            before = await c.call_tool("global_search", question)
            assert "Zorblax" in before.content[0].text
            await c.call_tool("delete_memory", {"chunk_ids": ["secret"]})
            after = await c.call_tool("global_search", question)
            assert not after.is_error
            assert "Zorblax" not in after.content[0].text and "secret" not in str(after.structured_content)


def test_after_delete_and_close_no_file_of_the_memory_holds_the_text(tmp_path):
    """The BM25 vocabulary (vocab.json and bm25s's copy of the main segment's) kept a deleted text's words for
    ever; the store keeps no free page with it (secure_delete)."""
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16), compact_min=5) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": f"note {i} about billing-service"} for i in range(20)])
        memory.add([{"chunk_id": "secret", "text": SECRET}])
        memory.add([{"chunk_id": f"d{i}", "text": f"more {i} about Kafka"} for i in range(20)])  # merges: main
        memory.persist()
        assert b"Zorblax" in _folder_bytes(tmp_path / "m")
        memory.delete(["secret"])
        memory.upsert([{"chunk_id": "c3", "text": "note three replaced Quuxwort"}])
        memory.upsert([{"chunk_id": "c3", "text": "note three"}])
        assert [r.chunk_id for r in memory.search("Zorblax vault 7731", top_k=3, dense_weight=0).results] == []
    data = _folder_bytes(tmp_path / "m")
    assert b"zorblax" not in data.lower() and b"quuxwort" not in data.lower()
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:  # and it still reads right
        assert [r.chunk_id for r in memory.search("note three", top_k=1, dense_weight=0).results] == ["c3"]
        assert memory.search("Zorblax", top_k=3, dense_weight=0).results == []
        assert memory.count() == 40
