"""Isolation suite, GraphRAG layer (issue 35): a scoped attacker's graph learns nothing of other scopes.

The same two memories as ``test_isolation.py`` (the ``pair`` fixture: the attacker's writes alone, and the same
writes with a victim's chunks before, between and after them, sharing the attacker's entities and holding the ids
it writes). The attacker's graph is built from its scoped view in each (offline extractor and extractive
summariser, no model), and everything it serves is asserted EQUAL in both: the extractions, the entity graph, the
communities, the community reports (texts, community ids, cited and quoted chunk ids, sources), the hits of
``global_search``, the answers of ``ask`` (without a model, and with one: the prompts the model is sent too), and the
scoped MCP server's ``global_search`` tool, before and after the attacker deletes and replaces chunks of its own
and refreshes. Only timings (``RefreshStats.seconds``) are left out.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.memory import test_isolation
from tests.memory.test_isolation import ATTACKER, ATTACKER_NOTES, VICTIM_NOTES, _clean

pair = test_isolation.pair  # the same two memories, on every backend

pytest.importorskip("networkx")

QUESTIONS = [
    "how are Kafka lag and db-prod-3 timeouts on billing-service handled?",
    "what raised ERR_LEDGER_7?",
    "what happens when the PostgreSQL connection pool on db-prod-3 is exhausted?",
    "diagnosis: type 2 diabetes",
    "victim passphrase marigold-orbit-4471 zebra",
]


class _RecordingLLM:
    """A model stand-in (``prompt -> str``) that keeps every prompt it is sent: what a real model would see."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if "points" in prompt:
            return '{"points": [{"description": "billing-service retries on db-prod-3", "score": 80}]}'
        return "It retries."


def _graph_view(graph):
    """Everything the attacker's graph holds, as plain data."""
    return {
        "scope": graph.scope,
        "extractions": {cid: e.model_dump() for cid, e in sorted(graph.extractions.items())},
        "failures": sorted(graph.failures),
        "nodes": sorted((n, _clean(dict(d))) for n, d in graph.graph.nodes(data=True)),
        "edges": sorted((u, v, repr(sorted(_clean(dict(d)).items()))) for u, v, d in graph.graph.edges(data=True)),
        "communities": {cid: c.model_dump() for cid, c in sorted(graph.communities.items())},
        "reports": {cid: (r.text(), r.model_dump()) for cid, r in sorted(graph.reports.items())},
        "stats": graph.stats(),
    }


def _answers(graph, memory):
    out = []
    for question in QUESTIONS:
        out.append(graph.global_search(question).model_dump())
        out.append(graph.global_search(question, token_budget=300, evidence=False, focus=None).model_dump())
        out.append(graph.ask(question).model_dump())
        llm = _RecordingLLM()
        out.append((graph.ask(question, llm=llm).model_dump(), llm.prompts))
    return out


async def _mcp(memory, graph):
    pytest.importorskip("mcp")
    from hybrid_memory.mcp_server import build_server
    from mcp import Client
    from mcp.client._memory import InMemoryTransport

    out = []
    async with Client(InMemoryTransport(build_server(memory, scope=ATTACKER, graph=graph))) as c:
        for question in QUESTIONS:
            for arguments in ({}, {"token_budget": 300}, {"level": 0}, {"level": 7}):
                result = await c.call_tool("global_search", {"question": question, **arguments})
                out.append((result.is_error, result.content[0].text if result.is_error else result.structured_content))
    return out


def _everything(memory):
    """The attacker's graph built from its view, what it serves, then the same after its own delete, replace
    and refresh."""
    from hybrid_memory.graph import GraphIndex

    view = memory.scoped(ATTACKER)
    graph = GraphIndex.build(view, save=False)
    before = (_graph_view(graph), _answers(graph, view), asyncio.run(_mcp(memory, graph)))
    view.delete(["m-2"])
    view.upsert([{"chunk_id": "m-0", "text": "billing-service answered HTTP 503 while ledger-service lagged"}])
    served_stale = [graph.global_search(q).model_dump() for q in QUESTIONS]  # the unrefreshed graph, checked
    stats = graph.refresh(view, save=False).model_dump(exclude={"seconds"})
    after = (_graph_view(graph), _answers(graph, view), asyncio.run(_mcp(memory, graph)))
    return before, served_stale, stats, after


def test_graph_reports_and_answers_learn_nothing(pair):
    """The attacker's graph (extractions, nodes, edges, communities, reports), its global_search hits and ask answers
    (and the prompts a model is sent), and the scoped MCP global_search tool are the same with and without the
    victim's chunks, before and after the attacker's own delete, replace and refresh."""
    _, alone, shared = pair
    got_alone, got_shared = _everything(alone), _everything(shared)
    # the graph is not empty, and the attacker's chunks are its only sources (under the ids the attacker wrote)
    before = got_alone[0][0]
    assert sorted(before["extractions"]) == [f"m-{i}" for i in range(len(ATTACKER_NOTES))]
    assert before["reports"] and {c for _, r in before["reports"].values() for c in r["chunk_ids"]} <= set(
        before["extractions"]
    )
    assert any(h["hits"] for h in got_alone[0][1][::4])
    assert got_alone[2]["deleted"] == ["m-2"] and got_alone[2]["changed"] == ["m-0"]
    # no text of the victim's anywhere in what the attacker's graph serves
    blob = repr(got_shared)
    for question in QUESTIONS:  # asked by the attacker, echoed in results and prompts
        blob = blob.replace(question, "")
    assert not any(word in blob for word in ("diabetes", "marigold", "victim", "v-0", "w-1"))
    assert VICTIM_NOTES[0] not in blob
    # and the whole of it is equal with and without the victim
    assert got_alone[0] == got_shared[0]
    assert got_alone[1] == got_shared[1]
    assert got_alone[2] == got_shared[2]
    assert got_alone[3] == got_shared[3]
