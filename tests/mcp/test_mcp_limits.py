"""Issue 35, class 6, through MCP: global_search refuses what search_memory refuses, and a paging cursor beyond
SQLite's integers is a clear tool error, not "Error executing tool"."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")
pytest.importorskip("networkx")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402
from hybrid_memory.mcp_server import build_server  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client._memory import InMemoryTransport  # noqa: E402


async def test_global_search_and_search_memory_refuse_the_same_inputs(tmp_path):
    from hybrid_memory.graph import GraphIndex

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        memory.add(
            [
                {"chunk_id": f"u1-{i}", "text": t, "user_id": "u1"}
                for i, t in enumerate(
                    [
                        "Kafka lag on billing-service delays invoices from db-prod-3",
                        "billing-service retries Kafka consumers when db-prod-3 is slow",
                    ]
                )
            ]
        )
        GraphIndex.build(memory.scoped(user_id="u1"))
        async with Client(InMemoryTransport(build_server(memory, scope={"user_id": "u1"}))) as c:
            for question in ("x" * 100_000, "Kafka\x00lag", "   "):
                searched = await c.call_tool("search_memory", {"request": {"search_text": question}})
                asked = await c.call_tool("global_search", {"question": question})
                assert searched.is_error and asked.is_error, question[:20]
            long = await c.call_tool("global_search", {"question": "x" * 100_000})
            assert "10000" in long.content[0].text or "10,000" in long.content[0].text
            nul = await c.call_tool("global_search", {"question": "Kafka\x00lag"})
            assert "NUL character" in nul.content[0].text
            for level, words in [
                (-1, "level"),
                (99, "level 99 is not a level of this graph (its levels: 0..0)"),
                (True, "level"),
            ]:
                result = await c.call_tool("global_search", {"question": "Kafka lag", "level": level})
                assert result.is_error and words in result.content[0].text, (level, result.content[0].text)
                assert "Error executing tool" not in result.content[0].text
            ok = await c.call_tool("global_search", {"question": "Kafka lag", "level": 0})
            assert not ok.is_error and ok.structured_content["hits"]
            for cursor in (f"k{2**63}", "k" + "9" * 24):
                paged = await c.call_tool("list_memories", {"cursor": cursor})
                assert paged.is_error and paged.content[0].text.endswith(  # a scoped server's cursors are sealed tokens
                    f"cursor {cursor!r} is not one this server gave (a scoped view's cursors are opaque, bound to its "
                    "scope, and last while the memory stays open); start the listing again without a cursor"
                )
