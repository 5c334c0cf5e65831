"""Documents / nodes a retriever returned, added back to a memory through the adapters' add path, store their
chunk's metadata: not the retrieval keys (score, rrf_score, ranks, raw scores, source) of one search (a fresh
user's finding: they were stored as metadata)."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory._adapter_support import written_back_metadata

CHUNKS = [
    {
        "chunk_id": "inc-1",
        "text": "HTTP 504 Gateway Timeout from billing-service",
        "source": "pagerduty",
        "metadata": {"service": "billing", "severity": 4, "tags": ["timeout", "http"]},
    },
    # own metadata under names the adapters add: returned under chunk_metadata, restored on the way back
    {
        "chunk_id": "inc-2",
        "text": "billing-service HTTP 504 after the deploy",
        "source": "slack",
        "metadata": {"score": 99, "source": "runbook.md", "chunk_metadata": "x", "team": "sre"},
    },
]
STORED = {
    "inc-1": ("pagerduty", {"service": "billing", "severity": 4, "tags": ["timeout", "http"]}),
    "inc-2": ("slack", {"score": 99, "source": "runbook.md", "chunk_metadata": "x", "team": "sre"}),
}


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    mem.add(CHUNKS)
    yield mem
    mem.close()


def _stored(mem: HybridMemory) -> dict:
    return {c.chunk_id: (c.source, c.metadata) for c in mem.iter_chunks()}


def test_the_inverse_of_result_metadata_by_hand():
    returned = {
        "team": "sre",
        "source": "pd",
        "score": 0.5,
        "rrf_score": 0.03,
        "sparse_rank": 1,
        "sparse_score": 2.1,
        "dense_rank": None,
        "dense_score": None,
        "chunk_metadata": {"score": 99},
    }
    assert written_back_metadata(returned) == {"team": "sre", "score": 99}
    # a document that does not carry every retrieval key is the user's own: stored as given
    assert written_back_metadata({"score": 5, "source": "a.txt"}) == {"score": 5, "source": "a.txt"}
    assert written_back_metadata({"score": 5, "rrf_score": 1, "chunk_metadata": {"a": 1}}) == {
        "score": 5,
        "rrf_score": 1,
        "chunk_metadata": {"a": 1},
    }


def test_langchain_documents_added_back_store_their_chunks_metadata(memory):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from langchain_hybrid_memory import HybridMemoryRetriever

    docs = HybridMemoryRetriever(memory=memory, k=2).invoke("HTTP 504 billing")
    assert sorted(d.id for d in docs) == ["inc-1", "inc-2"]
    assert {"score", "rrf_score", "sparse_rank", "dense_rank"} <= set(docs[0].metadata)
    with HybridMemory(embedder=HashingEmbedder(64)) as other:
        target = HybridMemoryRetriever(memory=other)
        assert target.add_documents(docs) == [d.id for d in docs]
        assert _stored(other) == STORED
        # a returned document the user edited keeps the edit; a fresh document keeps a 'score' of its own
        edited = docs[0].model_copy(update={"metadata": {**docs[0].metadata, "reviewed": True}})
        target.add_documents([edited, Document(id="mine", page_content="my note", metadata={"score": 5})])
        assert _stored(other)[edited.id][1] == {**STORED[edited.id][1], "reviewed": True}
        assert _stored(other)["mine"] == ("", {"score": 5})
    # added back into the memory they came from: the chunks are as they were
    HybridMemoryRetriever(memory=memory).add_documents(docs)
    assert _stored(memory) == STORED


def test_llamaindex_nodes_added_back_store_their_chunks_metadata(memory):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode

    from llamaindex_hybrid_memory import HybridMemoryRetriever

    nodes = HybridMemoryRetriever(memory, similarity_top_k=2).retrieve("HTTP 504 billing")
    assert sorted(n.node.node_id for n in nodes) == ["inc-1", "inc-2"]
    with HybridMemory(embedder=HashingEmbedder(64)) as other:
        target = HybridMemoryRetriever(other)
        assert target.insert_nodes(nodes) == [n.node.node_id for n in nodes]  # NodeWithScore taken as its node
        assert _stored(other) == STORED
    with HybridMemory(embedder=HashingEmbedder(64)) as other:
        target = HybridMemoryRetriever(other)
        target.insert_nodes([n.node for n in nodes] + [TextNode(id_="mine", text="my note", metadata={"score": 5})])
        assert _stored(other) == {**STORED, "mine": ("", {"score": 5})}
        with pytest.raises(InvalidRequestError) as raised:
            target.insert_nodes(["just a string"])
        assert str(raised.value) == "insert_nodes takes LlamaIndex nodes, Documents or NodeWithScore, got str"
