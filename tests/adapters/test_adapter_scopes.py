"""Both adapters: a scope field that binds searches and writes, and from_documents that never doubles."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from llama_index.core import Document as LlamaDocument  # noqa: E402

from langchain_hybrid_memory import HybridMemoryRetriever as LangChainRetriever  # noqa: E402
from langchain_hybrid_memory.retrievers import content_chunk_id  # noqa: E402
from llamaindex_hybrid_memory import HybridMemoryRetriever as LlamaRetriever  # noqa: E402


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    mem.add(
        [
            {"chunk_id": "u1-note", "text": "the billing database password rotates monthly", "user_id": "u1"},
            {"chunk_id": "u2-note", "text": "the billing database password is hunter2", "user_id": "u2"},
        ]
    )
    yield mem
    mem.close()


def test_langchain_scope_binds_search_and_writes(memory):
    retriever = LangChainRetriever(memory=memory, k=5, scope={"user_id": "u2"})
    assert [d.id for d in retriever.invoke("billing database password")] == ["u2-note"]
    (new_id,) = retriever.add_documents([Document(page_content="u2 prefers postgres")])
    assert memory.scoped(user_id="u2").get([new_id])[0].user_id == "u2"
    assert new_id == content_chunk_id("u2 prefers postgres", "", memory.scoped(user_id="u2").scope)
    # an id u1 holds is a fresh id in u2's scope (issue 35: no existence oracle); u1's chunk is untouched
    assert retriever.add_documents([Document(page_content="x", metadata={})], ids=["u1-note"]) == ["u1-note"]
    assert [c.text for c in memory.scoped(user_id="u1").get(["u1-note"])] == [
        "the billing database password rotates monthly"
    ]
    assert [c.text for c in memory.scoped(user_id="u2").get(["u1-note"])] == ["x"]
    with pytest.raises(ValueError, match="re-bound"):  # pydantic wraps the core's ScopeError
        LangChainRetriever(memory=memory.scoped(user_id="u1"), scope={"user_id": "u2"})


async def test_langchain_async_is_scoped(memory):
    retriever = LangChainRetriever(memory=memory.scoped(user_id="u1"), k=5)
    assert [d.id for d in await retriever.ainvoke("billing database password")] == ["u1-note"]


def test_llamaindex_scope_binds_search_and_writes(memory):
    retriever = LlamaRetriever(memory, similarity_top_k=5, scope={"user_id": "u1"})
    assert [n.node.node_id for n in retriever.retrieve("billing database password")] == ["u1-note"]
    retriever.insert_nodes([LlamaDocument(text="u1 prefers sqlite", id_="u1-pref")])
    assert memory.scoped(user_id="u1").get(["u1-pref"])[0].user_id == "u1"


def test_rerunning_from_documents_does_not_double_the_memory(tmp_path):
    docs = [
        Document(page_content="HTTP 504 on billing export", metadata={"source": "runbook.md"}),
        Document(page_content="kafka lag on invoices"),
        Document(page_content="kafka lag on invoices"),
    ]
    for _ in range(2):
        retriever = LangChainRetriever.from_documents(docs, HashingEmbedder(32), path=tmp_path / "lc")
        ids = [c.chunk_id for c in retriever.memory.iter_chunks()]
        retriever.memory.close()
        assert len(ids) == 2 and all(i.startswith("doc-") for i in ids)
    llama_docs = [LlamaDocument(text="HTTP 504 on billing export"), LlamaDocument(text="kafka lag on invoices")]
    for _run in range(2):
        fresh = [LlamaDocument(text=d.text) for d in llama_docs]  # new random ids every run, as LlamaIndex does
        retriever = LlamaRetriever.from_documents(fresh, HashingEmbedder(32), path=tmp_path / "li")
        assert retriever.memory.count() == 2
        retriever.memory.close()
