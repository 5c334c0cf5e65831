"""The core, the LangChain adapter and the LlamaIndex adapter return the same chunks in the same order,
and a memory folder built through one framework opens in the other."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError, StoreFormatError  # noqa: E402
from langchain_core.documents import Document as LCDocument  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from llama_index.core import Document as LIDocument  # noqa: E402
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters  # noqa: E402

import langchain_hybrid_memory as lc  # noqa: E402
import llamaindex_hybrid_memory as li  # noqa: E402
from tests.adapters.conftest import INCIDENTS  # noqa: E402

NOTES = [
    ("n01", "billing-service HTTP 504 Gateway Timeout during invoice export", {"service": "billing", "sev": 4}),
    ("n02", "billing-service HTTP 500 when the Stripe webhook retries", {"service": "billing", "sev": 3}),
    ("n03", "Postgres pool exhausted on the billing database; HTTP 504 upstream", {"service": "billing", "sev": 5}),
    ("n04", "search-service latency spike after reindex, HTTP 504 at the edge", {"service": "search", "sev": 2}),
    ("n05", "auth-service rejects tokens after key rotation ERR_JWT_EXPIRED", {"service": "auth", "sev": 3}),
    ("n06", "Kafka consumer lag on billing events delays invoices", {"service": "billing", "sev": 2}),
    ("n07", "CDN purge failed with HTTP 503 for static assets", {"service": "frontend", "sev": 1}),
    ("n08", "billing invoice PDF rendering slow under load", {"service": "billing", "sev": 2}),
    ("n09", "duplicate text, other id: HTTP 504 billing", {"service": "billing", "sev": 1}),
    ("n10", "duplicate text, other id: HTTP 504 billing", {"service": "search", "sev": 1}),
]

# (query, core filter, the same filter for LlamaIndex, weights and constant)
CASES = [
    ("HTTP 504 billing", None, None, {}),
    (
        "HTTP 504 billing",
        {"service": "billing"},
        MetadataFilters(filters=[MetadataFilter(key="service", value="billing")]),
        {},
    ),
    (
        "invoice timeout",
        {"$or": [{"service": {"$eq": "billing"}}, {"sev": {"$gte": 3}}]},
        MetadataFilters(
            filters=[
                MetadataFilter(key="service", value="billing"),
                MetadataFilter(key="sev", value=3, operator=FilterOperator.GTE),
            ],
            condition="or",
        ),
        {"dense_weight": 0.3, "sparse_weight": 0.7, "rrf_k": 10},
    ),
    ("ERR_JWT_EXPIRED", None, None, {"dense_weight": 0.0, "sparse_weight": 1.0}),
    (
        "slow rendering",
        {"service": {"$nin": ["auth"]}},
        MetadataFilters(filters=[MetadataFilter(key="service", value=["auth"], operator=FilterOperator.NIN)]),
        {"dense_weight": 1.0, "sparse_weight": 0.0, "rrf_k": 1},
    ),
    (
        "HTTP 504 billing",
        {"service": "billing"},
        MetadataFilters(filters=[MetadataFilter(key="service", value="billing")]),
        {"dense_weight": 0.6, "sparse_weight": 0.4, "fusion": "rrf"},
    ),
]


@pytest.fixture(scope="module")
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(dim=64))
    mem.add([{"chunk_id": cid, "text": text, "metadata": meta} for cid, text, meta in NOTES])
    yield mem
    mem.close()


def _core(memory, query, core_filter, params, top_k):
    response = memory.search(
        query,
        top_k=top_k,
        metadata_filter=core_filter,
        dense_weight=params.get("dense_weight", 1.0),
        sparse_weight=params.get("sparse_weight", 1.0),
        rrf_k_constant=params.get("rrf_k", 60),
        **({"fusion": params["fusion"]} if "fusion" in params else {}),
    )
    return [
        (
            r.chunk_id,
            r.rrf_score,
            r.score if r.score is not None else r.rrf_score,
            0.0 if r.dense_score is None else min(1.0, max(0.0, r.dense_score)),
        )
        for r in response.results
    ]


@pytest.mark.parametrize("top_k", [1, 4, 10])
@pytest.mark.parametrize(("query", "core_filter", "li_filter", "params"), CASES)
async def test_core_langchain_llamaindex_agree(memory, query, core_filter, li_filter, params, top_k):
    expected = _core(memory, query, core_filter, params, top_k)
    assert expected, "every case must retrieve something"

    lc_retriever = lc.HybridMemoryRetriever(memory=memory, k=top_k, metadata_filter=core_filter, **params)
    lc_docs = lc_retriever.invoke(query)
    lc_adocs = await lc_retriever.ainvoke(query)
    lc_override = lc.HybridMemoryRetriever(memory=memory).invoke(query, k=top_k, filter=core_filter, **params)

    li_retriever = li.HybridMemoryRetriever(memory, similarity_top_k=top_k, filters=li_filter, **params)
    li_nodes = li_retriever.retrieve(query)
    li_anodes = await li_retriever.aretrieve(query)

    for docs in (lc_docs, lc_adocs, lc_override):
        assert [
            (d.id, d.metadata["rrf_score"], d.metadata["fused_score"], d.metadata["score"]) for d in docs
        ] == expected
    for nodes in (li_nodes, li_anodes):
        assert [
            (n.node.node_id, n.node.metadata["rrf_score"], n.node.metadata["fused_score"], n.score) for n in nodes
        ] == expected


def test_equal_texts_keep_their_own_ids(memory):
    """Identity is the chunk id, never the text: two chunks with the same text both come back."""
    ids = [d.id for d in lc.HybridMemoryRetriever(memory=memory, k=10).invoke("duplicate text other id")]
    assert {"n09", "n10"} <= set(ids)
    nodes = li.HybridMemoryRetriever(memory, similarity_top_k=10).retrieve("duplicate text other id")
    assert [n.node.node_id for n in nodes] == ids


def test_memory_built_with_langchain_opens_in_llamaindex(tmp_path):
    path = tmp_path / "memory"
    embedder = lc.LangChainEmbedder(DeterministicFakeEmbedding(size=32))
    docs = [LCDocument(id=cid, page_content=text, metadata=meta) for cid, text, meta in NOTES]
    built = lc.HybridMemoryRetriever.from_documents(docs, embedder, path=path, k=5)
    expected = [d.id for d in built.invoke("HTTP 504 billing")]
    built.memory.close()

    # the embedder is a core Embedder: any framework can pass it
    reopened = li.HybridMemoryRetriever.from_path(path, embedder, similarity_top_k=5)
    try:
        assert [n.node.node_id for n in reopened.retrieve("HTTP 504 billing")] == expected
        assert reopened.memory.count() == len(NOTES)
    finally:
        reopened.memory.close()


def test_memory_built_with_llamaindex_opens_in_langchain(tmp_path):
    path = tmp_path / "memory"
    docs = [LIDocument(id_=cid, text=text, metadata=meta) for cid, text, meta in NOTES]
    built = li.HybridMemoryRetriever.from_documents(docs, HashingEmbedder(dim=64), path=path, similarity_top_k=5)
    expected = [n.node.node_id for n in built.retrieve("HTTP 504 billing")]
    built.memory.close()

    reopened = lc.HybridMemoryRetriever.from_path(path, HashingEmbedder(dim=64), k=5)
    try:
        assert [d.id for d in reopened.invoke("HTTP 504 billing")] == expected
    finally:
        reopened.memory.close()


def test_reopening_with_another_embedder_is_refused(tmp_path):
    path = tmp_path / "memory"
    docs = [LCDocument(id="a", page_content="HTTP 504 billing")]
    lc.HybridMemoryRetriever.from_documents(docs, DeterministicFakeEmbedding(size=8), path=path).memory.close()
    with pytest.raises(StoreFormatError, match="DeterministicFakeEmbedding"):
        li.HybridMemoryRetriever.from_path(path, HashingEmbedder(dim=8))


def test_the_adapters_pass_the_fusion_method_and_refuse_an_unknown_one(memory):
    rrf = memory.search("HTTP 504 billing", top_k=5, fusion="rrf", dense_weight=0.6, sparse_weight=0.4)
    assert rrf.fusion == "rrf"
    scores = [r.rrf_score for r in rrf.results]
    assert scores == sorted(scores, reverse=True)  # plain RRF orders by rrf_score
    docs = lc.HybridMemoryRetriever(memory=memory, k=5, fusion="rrf", dense_weight=0.6, sparse_weight=0.4).invoke(
        "HTTP 504 billing"
    )
    assert [d.id for d in docs] == [r.chunk_id for r in rrf.results]
    nodes = li.HybridMemoryRetriever(
        memory, similarity_top_k=5, fusion="rrf", dense_weight=0.6, sparse_weight=0.4
    ).retrieve("HTTP 504 billing")
    assert [n.node.metadata["fused_score"] for n in nodes] == scores
    with pytest.raises(ValueError, match="unknown fusion method 'borda'"):  # pydantic wraps the core's error
        lc.HybridMemoryRetriever(memory=memory, fusion="borda")
    with pytest.raises(InvalidRequestError, match="unknown fusion method 'borda'"):
        li.HybridMemoryRetriever(memory, fusion="borda")


def test_a_weak_hit_does_not_score_like_a_perfect_one_and_its_score_ignores_the_other_results():
    """Issue 35, class 9: a query matching one word of one chunk got ``NodeWithScore.score == 1.0`` (the fused score
    is normalised to the query's top), so every cut-off let it through. The adapters' score is now the query-chunk
    cosine: the same whatever else the memory holds, below any sensible cut-off for a one-word-in-four match."""
    from llama_index.core.postprocessor import SimilarityPostprocessor

    embedder = HashingEmbedder(dim=256)
    query = "quantum zebra invoice xylophone"
    text = "Kafka consumer lag on billing events topic delays invoice by an hour"
    query_vec, text_vec = embedder.embed_query(query), embedder.embed_documents([text])[0]
    cosine = float(np.dot(query_vec, text_vec))
    assert cosine == pytest.approx(1 / 6)  # 1 shared token of the query's 4 and the text's 9 (stop words dropped)
    scores = []
    for extra in ([], INCIDENTS):  # alone, then among other chunks that the query does not match
        with HybridMemory(embedder=embedder) as mem:
            mem.add([{"chunk_id": "weak", "text": text}, *[c for c in extra if c["chunk_id"] != "inc-6"]])
            top = mem.search(query, top_k=1).results[0]
            assert top.chunk_id == "weak" and top.score == 1.0  # the fused score of a lone weak hit: "perfect"
            (node,) = li.HybridMemoryRetriever(mem, similarity_top_k=1).retrieve(query)
            (doc,) = lc.HybridMemoryRetriever(memory=mem, k=1).invoke(query)
            assert node.score == doc.metadata["score"] == pytest.approx(cosine, abs=1e-6)
            assert node.node.metadata["fused_score"] == doc.metadata["fused_score"] == 1.0
            assert SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes([node]) == []
            scores.append(node.score)
    assert scores[0] == scores[1]  # a function of the query and the chunk only
