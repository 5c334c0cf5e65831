import pytest
from hybrid_memory.graph import GraphIndex


@pytest.fixture
def index(memory):
    return GraphIndex.build(memory, save=False)


def test_langchain_global_retriever_returns_reports_as_documents(index):
    pytest.importorskip("langchain_core")
    from langchain_hybrid_memory.graph import GlobalGraphRetriever

    retriever = GlobalGraphRetriever(graph=index, token_budget=2000)
    docs = retriever.invoke("ERR_CONN_RESET on db-prod-3")
    expected = index.global_search("ERR_CONN_RESET on db-prod-3", token_budget=2000)
    assert [d.id for d in docs] == [h.community_id for h in expected.hits]
    assert docs[0].metadata["chunk_ids"] == ["n1", "n2"] and docs[0].metadata["level"] == 0
    assert docs[0].page_content == expected.hits[0].text
    assert retriever.invoke("zebra migration patterns") == []
    assert len(retriever.invoke("billing-service auth-api search-indexer", max_reports=1)) == 1


def test_llamaindex_global_retriever_returns_reports_as_nodes(index):
    pytest.importorskip("llama_index.core")
    from llamaindex_hybrid_memory.graph import GlobalGraphRetriever

    retriever = GlobalGraphRetriever(index, token_budget=2000)
    nodes = retriever.retrieve("ERR_CONN_RESET on db-prod-3")
    expected = index.global_search("ERR_CONN_RESET on db-prod-3", token_budget=2000)
    assert [n.node.node_id for n in nodes] == [h.community_id for h in expected.hits]
    assert nodes[0].score == pytest.approx(expected.hits[0].score)
    assert nodes[0].node.metadata["chunk_ids"] == ["n1", "n2"]
    assert retriever.retrieve("zebra migration patterns") == []
