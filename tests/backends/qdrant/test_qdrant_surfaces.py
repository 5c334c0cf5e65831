"""Nothing above the backend knows it: both adapters and the MCP server over a memory on Qdrant Edge return
what the core returns, as they do over the embedded backend."""

from __future__ import annotations

import pytest

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402

from tests.adapters.test_adapters_agree import NOTES  # noqa: E402


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    mem = HybridMemory.qdrant(
        edge_path=tmp_path_factory.mktemp("edge") / "shard", embedder=HashingEmbedder(64), payload_indexes=False
    )
    mem.add([{"chunk_id": cid, "text": text, "metadata": meta} for cid, text, meta in NOTES])
    yield mem
    mem.close()


@pytest.mark.parametrize("flt", [None, {"service": "billing"}])
async def test_adapters_agree_with_the_core_on_qdrant(memory, flt):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    import langchain_hybrid_memory as lc
    import llamaindex_hybrid_memory as li

    expected = [r.chunk_id for r in memory.search("HTTP 504 billing", top_k=4, metadata_filter=flt).results]
    assert len(expected) == 4
    lc_docs = await lc.HybridMemoryRetriever(memory=memory, k=4, metadata_filter=flt).ainvoke("HTTP 504 billing")
    assert [d.id for d in lc_docs] == expected
    li_nodes = li.HybridMemoryRetriever(memory, similarity_top_k=4, filters=flt).retrieve("HTTP 504 billing")
    assert [n.node.node_id for n in li_nodes] == expected


async def test_mcp_server_serves_a_qdrant_memory(memory):
    pytest.importorskip("mcp")
    from hybrid_memory.mcp_server import build_server
    from mcp import Client
    from mcp.client._memory import InMemoryTransport

    expected = [r.chunk_id for r in memory.search("ERR_JWT_EXPIRED", top_k=2).results]
    async with Client(InMemoryTransport(build_server(memory, graph=None))) as c:
        found = await c.call_tool("search_memory", {"request": {"search_text": "ERR_JWT_EXPIRED", "top_k": 2}})
        assert [r["chunk_id"] for r in found.structured_content["results"]] == expected == ["n05", expected[1]]
        added = await c.call_tool(
            "add_memory",
            {"memory": {"chunk_id": "n11", "text": "Kafka consumer lag on billing events delays invoices"}},
        )
        assert (added.structured_content["action"], added.structured_content["stored_id"]) == ("skipped", "n06")
        got = await c.call_tool("get_memory", {"chunk_ids": ["n05", "missing"]})
        assert [m["chunk_id"] for m in got.structured_content["result"]] == ["n05"]
    assert memory.count() == 10
