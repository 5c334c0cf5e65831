"""Leakage suite: two tenants x two users with overlapping vocabulary; every read path of every layer returns
zero items of another scope, and one user's secret is never found by another user's search for its own words."""

from __future__ import annotations

import itertools

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory

TENANTS, USERS = ("acme", "globex"), ("u1", "u2")
SCOPES = [{"tenant": t, "user_id": u} for t, u in itertools.product(TENANTS, USERS)]


def _tag(scope):
    return f"{scope['tenant']}-{scope['user_id']}"


def _chunks(scope):
    """The same vocabulary in every scope (services, hosts, errors), plus one secret with words of its own."""
    tag = _tag(scope)
    secret_words = {
        "acme-u1": "marigold orbit 4471",
        "acme-u2": "basalt heron 9025",
        "globex-u1": "saffron comet 1183",
        "globex-u2": "cobalt lynx 6642",
    }[tag]
    notes = [
        "billing-service answered HTTP 504 while Kafka lag grew on db-prod-3",
        "billing-service retries Kafka consumers when db-prod-3 is slow",
        "PostgreSQL connection pool exhausted on db-prod-3 behind billing-service",
        "Kafka alerts for billing-service page the on-call SRE",
    ]
    chunks = [{"chunk_id": f"{tag}:{i}", "text": text, **scope} for i, text in enumerate(notes)]  # identical texts
    chunks.append({"chunk_id": f"{tag}:secret", "text": f"my vault passphrase is {secret_words}", **scope})
    return chunks, secret_words


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    memory = HybridMemory(tmp_path_factory.mktemp("leak") / "m", embedder=HashingEmbedder(64))
    secrets = {}
    for scope in SCOPES:
        chunks, secrets[_tag(scope)] = _chunks(scope)
        memory.scoped(scope).add(chunks)
    yield memory, secrets
    memory.close()


def _own(scope, ids):
    """True when every id belongs to this scope."""
    return all(i.startswith(_tag(scope) + ":") for i in ids)


ALL_IDS = [f"{_tag(s)}:{i}" for s in SCOPES for i in (*range(4), "secret")]


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
def test_core_read_paths(world, scope):
    memory, secrets = world
    view = memory.scoped(scope)
    for query in ("billing-service Kafka lag db-prod-3", "vault passphrase", "PostgreSQL pool"):
        ids = [r.chunk_id for r in view.search(query, top_k=50).results]
        assert ids and _own(scope, ids)
    assert _own(scope, [c.chunk_id for c in view.get(ALL_IDS)]) and len(view.get(ALL_IDS)) == 5
    assert _own(scope, [c.chunk_id for c in view.iter_chunks()]) and view.count() == 5
    assert _own(scope, list(view.chunk_hashes()))
    assert view.count({"$not": {"nothing": 1}}) == 5
    for other, words in secrets.items():
        hits = view.search(f"vault passphrase {words}", top_k=50).results
        assert _own(scope, [h.chunk_id for h in hits])
        if other == _tag(scope):
            assert hits[0].chunk_id == f"{other}:secret"
        else:
            assert all(words.split()[0] not in h.text for h in hits)


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
async def test_asearch(world, scope):
    memory, _ = world
    response = await memory.scoped(scope).asearch("billing-service Kafka vault", top_k=50)
    assert len(response.results) == 5 and _own(scope, [r.chunk_id for r in response.results])


def test_a_tenant_sees_only_its_users(world):
    memory, _ = world
    ids = [r.chunk_id for r in memory.scoped(tenant="acme").search("vault passphrase", top_k=50).results]
    # a wider view shows the chunks of a narrower view by their stored ids: that view's namespace and its id
    keys = {memory.scoped(tenant="acme", user_id=u).scope.key(): u for u in ("u1", "u2")}
    assert len(ids) == 10 and all(
        i.split(":", 1)[0] in keys and i.split(":", 1)[1].startswith(f"acme-{keys[i.split(':', 1)[0]]}:") for i in ids
    )
    # the same user id in another tenant is another scope
    assert memory.scoped(tenant="globex", user_id="u1").count() == 5
    assert memory.scoped(user_id="u1").count() == 10


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
async def test_langchain_retriever(world, scope):
    pytest.importorskip("langchain_core")
    from langchain_hybrid_memory import HybridMemoryRetriever

    memory, _ = world
    retriever = HybridMemoryRetriever(memory=memory, k=50, scope=scope)
    assert _own(scope, [d.id for d in retriever.invoke("billing-service Kafka vault passphrase")])
    assert _own(scope, [d.id for d in await retriever.ainvoke("billing-service Kafka vault passphrase")])


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
async def test_llamaindex_retriever(world, scope):
    pytest.importorskip("llama_index.core")
    from llamaindex_hybrid_memory import HybridMemoryRetriever

    memory, _ = world
    retriever = HybridMemoryRetriever(memory, similarity_top_k=50, scope=scope)
    assert _own(scope, [n.node.node_id for n in retriever.retrieve("billing-service Kafka vault passphrase")])
    assert _own(scope, [n.node.node_id for n in await retriever.aretrieve("billing-service Kafka vault")])


@pytest.fixture(scope="module")
def graphs(world):
    pytest.importorskip("networkx")
    from hybrid_memory.graph import GraphIndex

    memory, _ = world
    return {_tag(s): GraphIndex.build(memory.scoped(s)) for s in SCOPES}


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
def test_graph_global_search_and_ask(world, graphs, scope):
    from hybrid_memory.graph import GraphIndex
    from hybrid_memory.graph.errors import GraphStateError

    memory, _ = world
    graph = graphs[_tag(scope)]
    assert graph.reports and all(_own(scope, r.chunk_ids) for r in graph.reports.values())
    result = graph.global_search("how are Kafka lag and db-prod-3 timeouts on billing-service handled?")
    assert result.hits and all(_own(scope, h.chunk_ids) for h in result.hits)
    answer = graph.ask(
        "what happens to billing-service when db-prod-3 is slow?",
        llm=lambda prompt: (
            '{"points": [{"description": "retries", "score": 80}]}' if "points" in prompt else "It retries."
        ),
    )
    assert all(_own(scope, h.chunk_ids) for h in answer.search.hits)
    reopened = GraphIndex.open(memory.scoped(scope))
    assert set(reopened.extractions) == set(graph.extractions) and _own(scope, list(reopened.extractions))
    other = next(s for s in SCOPES if s != scope)
    with pytest.raises(GraphStateError, match="built for scope"):
        graph.refresh(memory.scoped(other))
    with pytest.raises(GraphStateError, match="built for scope"):
        graph.refresh(memory)


@pytest.mark.parametrize("scope", SCOPES, ids=_tag)
async def test_mcp_tools(world, graphs, scope):
    pytest.importorskip("mcp")
    from hybrid_memory.mcp_server import build_server
    from mcp import Client
    from mcp.client._memory import InMemoryTransport

    memory, secrets = world
    async with Client(InMemoryTransport(build_server(memory, scope=scope, read_only=True))) as c:
        for words in secrets.values():
            found = await c.call_tool("search_memory", {"request": {"search_text": f"vault {words}", "top_k": 50}})
            assert _own(scope, [r["chunk_id"] for r in found.structured_content["results"]])
        got = await c.call_tool("get_memory", {"chunk_ids": ALL_IDS})
        assert len(got.structured_content["result"]) == 5 and _own(
            scope, [m["chunk_id"] for m in got.structured_content["result"]]
        )
        listed = await c.call_tool("list_memories", {"page_size": 100})
        assert _own(scope, [m["chunk_id"] for m in listed.structured_content["memories"]])
        reports = await c.call_tool("global_search", {"question": "Kafka lag on billing-service"})
        assert not reports.is_error, reports.content[0].text
        assert all(_own(scope, h["chunk_ids"]) for h in reports.structured_content["hits"])
