"""HybridMemoryRetriever (LlamaIndex): nodes, filters, async path, construction, query engines."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_index.core")

from hybrid_memory import HashingEmbedder, InvalidEmbedderError, InvalidFilterError, InvalidRequestError  # noqa: E402
from llama_index.core import Document  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import (  # noqa: E402
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters  # noqa: E402

from llamaindex_hybrid_memory import HybridMemoryRetriever, LlamaIndexEmbedder  # noqa: E402

QUERY = "HTTP 504 billing"
BILLING_SEVERE = MetadataFilters(
    filters=[
        MetadataFilter(key="service", value="billing"),
        MetadataFilter(key="severity", value=4, operator=FilterOperator.GTE),
    ]
)
BILLING_SEVERE_CORE = {"$and": [{"service": {"$eq": "billing"}}, {"severity": {"$gte": 4}}]}


# --- nodes ------------------------------------------------------------------------------------------


def test_nodes_carry_chunk_id_text_metadata_and_rrf_score(memory):
    nodes = HybridMemoryRetriever(memory, similarity_top_k=3).retrieve(QUERY)
    response = memory.search(QUERY, top_k=3)
    assert [n.node.node_id for n in nodes] == [r.chunk_id for r in response.results]
    for item, result in zip(nodes, response.results, strict=True):
        assert isinstance(item, NodeWithScore) and isinstance(item.node, TextNode)
        assert result.score is not None  # the default fusion orders by its own score, not rrf_score
        assert item.score == min(1.0, max(0.0, result.dense_score))  # the cosine, not the fused score
        assert item.node.text == result.text
        assert item.node.metadata == {
            **result.metadata,
            "source": result.source,
            "score": item.score,
            "fused_score": result.score,
            "rrf_score": result.rrf_score,
            "sparse_rank": result.sparse_rank,
            "sparse_score": result.sparse_score,
            "dense_rank": result.dense_rank,
            "dense_score": result.dense_score,
        }
        # ranks and raw scores are for people debugging, not for the LLM
        llm_text = item.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "sparse_rank" not in llm_text and "rrf_score" not in llm_text and "service: " in llm_text


def test_a_query_bundle_embedding_is_used_instead_of_embedding_again():
    from hybrid_memory import HashingEmbedder, HybridMemory

    from tests.adapters.conftest import INCIDENTS

    class CountingEmbedder(HashingEmbedder):
        def __init__(self, dim):
            super().__init__(dim)
            self.queries = 0

        def embed_query(self, text):
            self.queries += 1
            return super().embed_query(text)

    embedder = CountingEmbedder(64)
    with HybridMemory(embedder=embedder) as memory:
        memory.add(INCIDENTS)
        retriever = HybridMemoryRetriever(memory, similarity_top_k=3)
        plain = retriever.retrieve(QUERY)
        assert embedder.queries == 1
        vector = list(HashingEmbedder(64).embed_query(QUERY))
        bundled = retriever.retrieve(QueryBundle(QUERY, embedding=vector))
        assert embedder.queries == 1  # the bundle's embedding was used
        assert [(n.node.node_id, n.score) for n in bundled] == [(n.node.node_id, n.score) for n in plain]
        # a different vector changes the dense side: the bundle's vector is really the one searched
        other = retriever.retrieve(
            QueryBundle(QUERY, embedding=list(HashingEmbedder(64).embed_query("CDN cache purge")))
        )
        assert [n.node.metadata["dense_score"] for n in other] != [n.node.metadata["dense_score"] for n in plain]
        assert embedder.queries == 1


def test_parameters_are_passed_to_the_core(memory):
    retriever = HybridMemoryRetriever(
        memory, similarity_top_k=4, filters=BILLING_SEVERE, dense_weight=0.3, sparse_weight=0.7, rrf_k=5
    )
    expected = memory.search(
        QUERY, top_k=4, metadata_filter=BILLING_SEVERE_CORE, dense_weight=0.3, sparse_weight=0.7, rrf_k_constant=5
    )
    assert [n.node.node_id for n in retriever.retrieve(QUERY)] == [r.chunk_id for r in expected.results]
    assert {n.node.node_id for n in retriever.retrieve(QUERY)} == {"inc-1", "inc-3"}


def test_defaults_are_the_cores(memory):
    got = [n.node.node_id for n in HybridMemoryRetriever(memory).retrieve(QUERY)]
    assert got == [r.chunk_id for r in memory.search(QUERY).results]


def test_core_filter_dict_is_accepted(memory):
    retriever = HybridMemoryRetriever(memory, similarity_top_k=5, filters={"tags": {"$contains": "postgres"}})
    assert [n.node.node_id for n in retriever.retrieve(QUERY)] == ["inc-3"]


def test_attributes_can_change_between_queries(memory):
    retriever = HybridMemoryRetriever(memory, similarity_top_k=1)
    assert len(retriever.retrieve(QUERY)) == 1
    retriever.similarity_top_k = 3
    retriever.filters = MetadataFilters(filters=[MetadataFilter(key="service", value="search")])
    assert [n.node.node_id for n in retriever.retrieve(QUERY)] == ["inc-4"]


def test_unsupported_operator_fails_at_construction(memory):
    flt = MetadataFilters(filters=[MetadataFilter(key="service", value="bill", operator=FilterOperator.TEXT_MATCH)])
    with pytest.raises(InvalidFilterError, match="text_match"):
        HybridMemoryRetriever(memory, filters=flt)


def test_invalid_values_raise_core_errors(memory):
    with pytest.raises(InvalidRequestError, match="top_k"):  # at construction already
        HybridMemoryRetriever(memory, similarity_top_k=0)
    retriever = HybridMemoryRetriever(memory, similarity_top_k=2)
    retriever.similarity_top_k = 0  # set after construction: the core refuses it when the query runs
    with pytest.raises(InvalidRequestError, match="top_k"):
        retriever.retrieve(QUERY)
    # a library error (as LangChain's adapter gives), not a builtin TypeError
    for bad, name in ((42, "int"), (None, "NoneType")):  # a str is a path: test_adapters_close.py
        with pytest.raises(InvalidRequestError) as info:
            HybridMemoryRetriever(bad)  # type: ignore[arg-type]
        assert str(info.value) == (
            f"HybridMemoryRetriever: memory must be a hybrid_memory.HybridMemory (or a scoped view of one), got {name}; "
            "open one with HybridMemory.open(path), or build the retriever with HybridMemoryRetriever.from_documents(...) "
            "/ from_path(path)"
        )


# --- async ------------------------------------------------------------------------------------------


async def test_aretrieve_uses_core_asearch(memory, monkeypatch):
    calls = []
    original = memory.asearch

    async def spy(*args, **kwargs):
        calls.append(kwargs)
        return await original(*args, **kwargs)

    def no_sync(*args, **kwargs):
        raise AssertionError("aretrieve must not call the synchronous search")

    monkeypatch.setattr(memory, "asearch", spy)
    monkeypatch.setattr(memory, "search", no_sync)
    nodes = await HybridMemoryRetriever(memory, similarity_top_k=2, filters=BILLING_SEVERE).aretrieve(QUERY)
    assert {n.node.node_id for n in nodes} == {"inc-1", "inc-3"}
    assert calls == [
        {
            "top_k": 2,
            "metadata_filter": BILLING_SEVERE_CORE,
            "dense_weight": 1.0,
            "sparse_weight": 1.0,
            "rrf_k_constant": 60,
            "fusion": "adaptive",
        }
    ]


async def test_aretrieve_equals_retrieve(memory):
    retriever = HybridMemoryRetriever(memory, similarity_top_k=5)
    sync = [(n.node.node_id, n.score) for n in retriever.retrieve(QUERY)]
    assert [(n.node.node_id, n.score) for n in await retriever.aretrieve(QUERY)] == sync


# --- construction from LlamaIndex objects -----------------------------------------------------------


def test_from_documents_keeps_ids_text_and_metadata():
    docs = [
        Document(text="HTTP 504 on billing export", id_="d1", metadata={"source": "runbook.md", "n": 1}),
        Document(text="auth tokens expire after rotation", id_="d2", metadata={"n": 2}),
    ]
    retriever = HybridMemoryRetriever.from_documents(docs, HashingEmbedder(dim=32), similarity_top_k=1)
    try:
        [hit] = retriever.retrieve("billing export")
        assert hit.node.node_id == "d1" and hit.node.metadata["n"] == 1
        stored = {c.chunk_id: c for c in retriever.memory.iter_chunks()}
        assert stored["d1"].text == "HTTP 504 on billing export" and stored["d1"].source == "runbook.md"
        assert stored["d2"].source == "" and stored["d2"].metadata == {"n": 2}
    finally:
        retriever.memory.close()


def test_from_nodes_with_llamaindex_embedding_bridge():
    parent = RelatedNodeInfo(node_id="runbook")
    nodes = [
        TextNode(id_="n1", text="ERR_QUOTA_4471 quota exceeded", relationships={NodeRelationship.SOURCE: parent}),
        TextNode(id_="n2", text="kafka consumer lag", relationships={NodeRelationship.SOURCE: parent}),
    ]
    retriever = HybridMemoryRetriever.from_nodes(nodes, MockEmbedding(embed_dim=8), similarity_top_k=1)
    try:
        assert isinstance(retriever.memory.embedder, LlamaIndexEmbedder)
        [hit] = retriever.retrieve("ERR_QUOTA_4471")
        assert hit.node.node_id == "n1"
        assert hit.node.metadata["source"] == "runbook"  # a parsed node's source is its document
    finally:
        retriever.memory.close()


def test_insert_nodes_upserts(memory):
    retriever = HybridMemoryRetriever(memory, similarity_top_k=1)
    assert retriever.insert_nodes([TextNode(id_="inc-8", text="ERR_QUOTA_4471 in billing")]) == ["inc-8"]
    assert [n.node.node_id for n in retriever.retrieve("ERR_QUOTA_4471")] == ["inc-8"]
    retriever.insert_nodes([TextNode(id_="inc-8", text="ERR_QUOTA_4472 in billing")])
    assert memory.get(["inc-8"])[0].text == "ERR_QUOTA_4472 in billing"


def test_llamaindex_embedder_bridge_shapes_and_dtype():
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=6))
    assert embedder.name == "llamaindex:MockEmbedding:unknown"
    assert embedder.dim == 6
    matrix = embedder.embed_documents(["a", "b"])
    assert matrix.shape == (2, 6) and matrix.dtype == np.float32
    np.testing.assert_allclose(matrix, 0.5)
    query = embedder.embed_query("a")
    assert query.shape == (6,) and query.dtype == np.float32
    assert embedder.embed_documents([]).shape == (0, 6)
    assert LlamaIndexEmbedder(MockEmbedding(embed_dim=6), name="mine").name == "mine"
    with pytest.raises(InvalidEmbedderError) as err:
        LlamaIndexEmbedder(HashingEmbedder(dim=4))  # type: ignore[arg-type]
    assert str(err.value) == (
        "embed_model must be a llama_index BaseEmbedding (for example HuggingFaceEmbedding(...), an instance), got "
        "HashingEmbedder; for a hybrid_memory Embedder pass it to the retriever or memory directly"
    )
    assert isinstance(err.value, TypeError) and isinstance(err.value, InvalidRequestError)


# --- query engine -----------------------------------------------------------------------------------


def test_query_engine_sync(memory):
    retriever = HybridMemoryRetriever(memory, similarity_top_k=2, filters=BILLING_SEVERE)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUERY)
    expected = memory.search(QUERY, top_k=2, metadata_filter=BILLING_SEVERE_CORE).results
    assert [n.node.node_id for n in response.source_nodes] == [r.chunk_id for r in expected]
    for result in expected:  # MockLLM answers with its prompt: the retrieved text reached it
        assert result.text in str(response)


async def test_query_engine_async(memory, monkeypatch):
    def no_sync(*args, **kwargs):
        raise AssertionError("aquery must not call the synchronous search")

    monkeypatch.setattr(memory, "search", no_sync)
    engine = RetrieverQueryEngine.from_args(HybridMemoryRetriever(memory, similarity_top_k=1), llm=MockLLM())
    response = await engine.aquery("ERR_JWT_EXPIRED")
    assert [n.node.node_id for n in response.source_nodes] == ["inc-5"]
    assert "auth-service rejects tokens" in str(response)


def test_bad_settings_fail_at_construction_with_the_core_error():
    from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
    from llama_index.core.schema import TextNode

    from llamaindex_hybrid_memory import HybridMemoryRetriever, node_to_chunk

    memory = HybridMemory(embedder=HashingEmbedder(16))
    with pytest.raises(InvalidRequestError, match="top_k"):
        HybridMemoryRetriever(memory, similarity_top_k=0)
    with pytest.raises(InvalidRequestError, match="both 0"):
        HybridMemoryRetriever(memory, dense_weight=0.0, sparse_weight=0.0)
    with pytest.raises(InvalidRequestError, match="text"):
        node_to_chunk(TextNode(text="", id_="empty"))


def test_from_documents_on_an_existing_folder_without_embed_model_reuses_the_stored_embedder(tmp_path):
    from hybrid_memory import HybridMemory, StoreFormatError

    folder = tmp_path / "mem"
    with HybridMemoryRetriever.from_documents(
        [Document(text="HTTP 504 billing", id_="d0")], HashingEmbedder(dim=24), path=folder
    ):
        pass
    with HybridMemoryRetriever.from_nodes(
        [TextNode(id_="d1", text="kafka consumer lag")], path=folder, similarity_top_k=1
    ) as retriever:
        assert (retriever.memory.embedder.name, retriever.memory.embedder.dim) == ("hashing-24", 24)
        assert [n.node.node_id for n in retriever.retrieve("kafka lag")] == ["d1"]
        assert retriever.memory.count() == 2
    with pytest.raises(
        StoreFormatError,
        match=r"was built with embedder 'hashing-24' \(dim 24\), not "
        r"'llamaindex:MockEmbedding:unknown' \(dim 8\); open it with the "
        r"same embedder",
    ):
        HybridMemoryRetriever.from_documents(
            [Document(text="never stored", id_="d2")], MockEmbedding(embed_dim=8), path=folder
        )
    with HybridMemory.open(folder) as memory:
        assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["d0", "d1"]


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"similarity_top_k": -1},
            r"similarity_top_k must be an integer from 1 to 1000 \(the number of results\), got -1",
        ),
        (
            {"similarity_top_k": True},
            r"similarity_top_k must be an integer from 1 to 1000 \(the number of results\), "
            r"got True",
        ),
        ({"rrf_k": -1}, r"rrf_k: must be a finite number >= 0 \(60 is the usual value\), got -1"),
        ({"dense_weight": "a"}, r"dense_weight: Input should be a valid number \(got 'a'\)"),
        ({"fusion": "best"}, r"fusion: unknown fusion method 'best'; choose one of \['adaptive', "),
    ],
)
def test_bad_parameters_are_invalid_requests_naming_the_parameter_and_range(memory, fields, message):
    with pytest.raises(InvalidRequestError, match=rf"^HybridMemoryRetriever: {message}"):
        HybridMemoryRetriever(memory, **fields)
    assert memory.count() == 7


def test_a_chunks_own_retrieval_named_keys_stay_visible_under_chunk_metadata():
    from hybrid_memory import HybridMemory

    memory = HybridMemory(embedder=HashingEmbedder(dim=64))
    own = {"score": 99, "source": "mine", "rrf_score": "x", "dense_rank": "keep", "team": "sre"}
    memory.add([{"chunk_id": "c1", "text": "kafka consumer lag on orders topic", "source": "jira", "metadata": own}])
    result = memory.search("kafka lag", top_k=1).results[0]
    (item,) = HybridMemoryRetriever(memory, similarity_top_k=1).retrieve("kafka lag")
    assert item.node.node_id == "c1" and item.score == result.dense_score
    assert item.node.metadata == {
        "team": "sre",
        "source": "jira",
        "score": result.dense_score,
        "fused_score": result.score,
        "rrf_score": result.rrf_score,
        "sparse_rank": 1,
        "sparse_score": result.sparse_score,
        "dense_rank": 1,
        "dense_score": result.dense_score,
        "chunk_metadata": {"score": 99, "source": "mine", "rrf_score": "x", "dense_rank": "keep"},
    }
    # the chunk's own values are shown to the LLM like the rest of its metadata; the retrieval keys are not
    llm_text = item.node.get_content(metadata_mode=MetadataMode.LLM)
    assert llm_text == (
        "source: jira\nteam: sre\nchunk_metadata: {'source': 'mine', 'score': 99, 'rrf_score': 'x', "
        "'dense_rank': 'keep'}\n\nkafka consumer lag on orders topic"
    )
    assert memory.get(["c1"])[0].metadata == own
    memory.close()
