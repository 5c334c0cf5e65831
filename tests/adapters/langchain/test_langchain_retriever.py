"""HybridMemoryRetriever (LangChain): documents, per-call overrides, async path, construction, chains."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("langchain_core")

from hybrid_memory import HashingEmbedder, HybridMemory, InvalidEmbedderError, InvalidFilterError, InvalidRequestError  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from langchain_hybrid_memory import HybridMemoryRetriever, LangChainEmbedder  # noqa: E402

QUERY = "HTTP 504 billing"


def core_ids(memory, query=QUERY, **kwargs):
    return [r.chunk_id for r in memory.search(query, **kwargs).results]


# --- documents --------------------------------------------------------------------------------------


def test_documents_carry_chunk_id_text_and_metadata(memory):
    docs = HybridMemoryRetriever(memory=memory, k=3).invoke(QUERY)
    response = memory.search(QUERY, top_k=3)
    assert [d.id for d in docs] == [r.chunk_id for r in response.results]
    for doc, result in zip(docs, response.results, strict=True):
        assert doc.page_content == result.text
        assert doc.metadata == {
            **result.metadata,
            "source": result.source,
            "score": min(1.0, max(0.0, result.dense_score)),  # the cosine: absolute, not normalised to the top
            "fused_score": result.score,
            "rrf_score": result.rrf_score,
            "sparse_rank": result.sparse_rank,
            "sparse_score": result.sparse_score,
            "dense_rank": result.dense_rank,
            "dense_score": result.dense_score,
        }
    assert docs[0].metadata["service"] == "billing"
    assert docs[0].metadata["source"] in {"pagerduty", "postmortem"}


def test_fields_are_passed_to_the_core(memory):
    retriever = HybridMemoryRetriever(
        memory=memory, k=4, metadata_filter={"service": "billing"}, dense_weight=0.2, sparse_weight=0.8, rrf_k=10
    )
    expected = core_ids(
        memory, top_k=4, metadata_filter={"service": "billing"}, dense_weight=0.2, sparse_weight=0.8, rrf_k_constant=10
    )
    assert [d.id for d in retriever.invoke(QUERY)] == expected


def test_defaults_are_the_cores(memory):
    assert [d.id for d in HybridMemoryRetriever(memory=memory).invoke(QUERY)] == core_ids(memory)


# --- per-call overrides -----------------------------------------------------------------------------


def test_invoke_k_and_filter_override(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=1)
    docs = retriever.invoke(QUERY, k=3, filter={"service": "billing"})
    assert len(docs) == 3
    assert all(d.metadata["service"] == "billing" for d in docs)
    assert [d.id for d in docs] == core_ids(memory, top_k=3, metadata_filter={"service": "billing"})
    # the override is for that call only
    assert len(retriever.invoke(QUERY)) == 1


def test_fewer_matches_than_k_returns_all_matches(memory):
    docs = HybridMemoryRetriever(memory=memory).invoke(QUERY, k=5, filter={"service": "auth"})
    assert [d.id for d in docs] == ["inc-5"]


def test_metadata_filter_alias_and_operators(memory):
    flt = {"$and": [{"service": "billing"}, {"severity": {"$gte": 4}}]}
    retriever = HybridMemoryRetriever(memory=memory, k=5)
    assert {d.id for d in retriever.invoke(QUERY, metadata_filter=flt)} == {"inc-1", "inc-3"}
    assert {d.id for d in retriever.invoke(QUERY, filter=flt)} == {"inc-1", "inc-3"}


def test_per_call_filter_replaces_the_field(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=7, metadata_filter={"service": "billing"})
    assert {d.metadata["service"] for d in retriever.invoke(QUERY, filter={"service": "search"})} == {"search"}
    assert len(retriever.invoke(QUERY, filter=None)) == 7


def test_weight_overrides(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=7)
    sparse_only = retriever.invoke(QUERY, dense_weight=0.0, sparse_weight=1.0, rrf_k=1)
    expected = core_ids(memory, top_k=7, dense_weight=0.0, sparse_weight=1.0, rrf_k_constant=1)
    assert [d.id for d in sparse_only] == expected
    assert all(d.metadata["dense_rank"] is None for d in sparse_only)


def test_unknown_keyword_and_double_filter_raise(memory):
    retriever = HybridMemoryRetriever(memory=memory)
    with pytest.raises(InvalidRequestError, match="top_n"):
        retriever.invoke(QUERY, top_n=3)
    with pytest.raises(InvalidRequestError, match="either filter or metadata_filter"):
        retriever.invoke(QUERY, filter={}, metadata_filter={})


def test_invalid_values_raise_core_errors(memory):
    retriever = HybridMemoryRetriever(memory=memory)
    with pytest.raises(InvalidFilterError, match=r"\$regex"):
        retriever.invoke(QUERY, filter={"service": {"$regex": "bill"}})
    with pytest.raises(InvalidRequestError):
        retriever.invoke(QUERY, k=0)


# --- async ------------------------------------------------------------------------------------------


async def test_ainvoke_uses_core_asearch_not_a_thread(memory, monkeypatch):
    calls = []
    original = memory.asearch

    async def spy(*args, **kwargs):
        calls.append(kwargs)
        return await original(*args, **kwargs)

    def no_sync(*args, **kwargs):
        raise AssertionError("ainvoke must not call the synchronous search")

    monkeypatch.setattr(memory, "asearch", spy)
    monkeypatch.setattr(memory, "search", no_sync)
    docs = await HybridMemoryRetriever(memory=memory, k=2).ainvoke(QUERY, k=3, filter={"service": "billing"})
    assert len(docs) == 3
    assert calls == [
        {
            "top_k": 3,
            "metadata_filter": {"service": "billing"},
            "dense_weight": 1.0,
            "sparse_weight": 1.0,
            "rrf_k_constant": 60,
            "fusion": "adaptive",
        }
    ]


async def test_ainvoke_equals_invoke(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=5)
    assert [d.id for d in await retriever.ainvoke(QUERY)] == [d.id for d in retriever.invoke(QUERY)]


# --- construction from LangChain objects ------------------------------------------------------------


def test_from_documents_keeps_ids_and_metadata():
    docs = [
        Document(id="a", page_content="HTTP 504 on billing export", metadata={"source": "runbook.md", "n": 1}),
        Document(page_content="billing webhook retries", metadata={"n": 2}),
    ]
    retriever = HybridMemoryRetriever.from_documents(docs, HashingEmbedder(dim=32), k=2)
    try:
        got = retriever.invoke("billing")
        ids = [d.id for d in got]
        assert "a" in ids and len(ids) == 2
        generated = next(i for i in ids if i != "a")
        assert generated  # a uuid4 given by the adapter
        by_id = {d.id: d for d in got}
        assert by_id["a"].metadata["source"] == "runbook.md"
        assert by_id["a"].metadata["n"] == 1
        assert by_id[generated].metadata["source"] == ""
        stored = retriever.memory.get(["a"])[0]
        assert stored.source == "runbook.md" and stored.text == "HTTP 504 on billing export"
    finally:
        retriever.memory.close()


def test_from_texts_with_langchain_embeddings_bridge():
    texts = ["HTTP 504 billing", "auth token expired", "kafka lag"]
    retriever = HybridMemoryRetriever.from_texts(
        texts, DeterministicFakeEmbedding(size=16), metadatas=[{"i": 0}, {"i": 1}, {"i": 2}], ids=["t0", "t1", "t2"]
    )
    try:
        assert isinstance(retriever.memory, HybridMemory)
        docs = retriever.invoke("kafka lag", k=1)
        assert [d.id for d in docs] == ["t2"]
        assert docs[0].metadata["i"] == 2
    finally:
        retriever.memory.close()


def test_from_texts_length_mismatch_raises():
    with pytest.raises(InvalidRequestError, match="2 metadatas for 1 texts"):
        HybridMemoryRetriever.from_texts(["x"], HashingEmbedder(dim=8), metadatas=[{}, {}])


def test_add_documents_upserts(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=1)
    retriever.add_documents([Document(id="inc-8", page_content="ERR_QUOTA_4471 quota exceeded in billing")])
    assert [d.id for d in retriever.invoke("ERR_QUOTA_4471")] == ["inc-8"]
    retriever.add_documents([Document(id="inc-8", page_content="ERR_QUOTA_4472 quota exceeded in billing")])
    assert memory.get(["inc-8"])[0].text.startswith("ERR_QUOTA_4472")


def test_langchain_embedder_bridge_shapes_and_dtype():
    fake = DeterministicFakeEmbedding(size=12)
    embedder = LangChainEmbedder(fake)
    assert embedder.name == "langchain:DeterministicFakeEmbedding"
    assert embedder.dim == 12
    matrix = embedder.embed_documents(["a", "b", "c"])
    assert matrix.shape == (3, 12) and matrix.dtype == np.float32
    np.testing.assert_allclose(matrix[1], np.asarray(fake.embed_documents(["b"])[0], dtype=np.float32))
    query = embedder.embed_query("a")
    assert query.shape == (12,) and query.dtype == np.float32
    empty = embedder.embed_documents([])
    assert empty.shape == (0, 12) and empty.dtype == np.float32
    assert LangChainEmbedder(fake, name="mine", dim=12).name == "mine"
    with pytest.raises(InvalidEmbedderError) as err:
        LangChainEmbedder(HashingEmbedder(dim=4))  # type: ignore[arg-type]
    assert str(err.value) == (
        "embeddings must be a langchain_core Embeddings (for example HuggingFaceEmbeddings(...), an instance), got "
        "HashingEmbedder; for a hybrid_memory Embedder pass it to the retriever or memory directly"
    )
    assert isinstance(err.value, TypeError) and isinstance(err.value, InvalidRequestError)


# --- inside a chain ---------------------------------------------------------------------------------


def format_docs(docs: list[Document]) -> str:
    return "\n".join(f"[{d.id}] {d.page_content}" for d in docs)


def _chain(retriever):
    prompt = ChatPromptTemplate.from_template("Answer from these memories:\n{context}")
    return retriever | RunnableLambda(format_docs) | prompt | ParrotFakeChatModel()


def test_retrieved_text_reaches_the_prompt(memory):
    retriever = HybridMemoryRetriever(memory=memory, k=2, metadata_filter={"service": "billing"})
    message = _chain(retriever).invoke(QUERY)  # the parrot model answers with the prompt it was given
    expected = memory.search(QUERY, top_k=2, metadata_filter={"service": "billing"}).results
    assert message.content.startswith("Answer from these memories:")
    for result in expected:
        assert f"[{result.chunk_id}] {result.text}" in message.content


async def test_retrieved_text_reaches_the_prompt_async(memory):
    message = await _chain(HybridMemoryRetriever(memory=memory, k=1)).ainvoke("ERR_JWT_EXPIRED")
    assert "[inc-5] auth-service rejects tokens" in message.content


def test_constructor_accepts_filter_alias_and_refuses_unknown_fields(memory):
    from pydantic import ValidationError

    retriever = HybridMemoryRetriever(memory=memory, k=7, filter={"service": "search"})
    assert retriever.metadata_filter == {"service": "search"}
    assert [d.id for d in retriever.invoke(QUERY)] == ["inc-4"]
    with pytest.raises(
        InvalidRequestError,
        match=r"^invalid HybridMemoryRetriever argument: top_n: not an argument "
        r"of HybridMemoryRetriever \(check the spelling\)$",
    ) as caught:
        HybridMemoryRetriever(memory=memory, top_n=3)  # a typo is an error, never a silent no-op
    assert isinstance(caught.value.__cause__, ValidationError)  # pydantic's report stays attached


def test_bad_settings_fail_at_construction_with_the_core_error():
    from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError, InvalidRequestError
    from langchain_core.documents import Document

    from langchain_hybrid_memory import HybridMemoryRetriever, document_to_chunk

    memory = HybridMemory(embedder=HashingEmbedder(16))
    # the library's errors, not pydantic's ValidationError that wraps them (both are ValueErrors), named as
    # the retriever names its fields (k, rrf_k), with the accepted range
    with pytest.raises(
        InvalidRequestError,
        match=r"^HybridMemoryRetriever: k must be an integer from 1 to 1000 "
        r"\(the number of results\), got 0$",
    ):
        HybridMemoryRetriever(memory=memory, k=0)
    with pytest.raises(
        InvalidRequestError,
        match=r"^HybridMemoryRetriever: dense_weight: must be a number in "
        r"\[0, 1e\+06\] \(only the ratio of the weights matters\), got -1.0$",
    ):
        HybridMemoryRetriever(memory=memory, dense_weight=-1.0)
    with pytest.raises(InvalidFilterError, match=r"unknown operator '\$regex'"):
        HybridMemoryRetriever(memory=memory, filter={"a": {"$regex": "x"}})
    assert issubclass(InvalidFilterError, ValueError)
    with pytest.raises(InvalidRequestError, match="text"):
        document_to_chunk(Document(page_content="", id="empty"))


# --- reopening a folder: embedding=None uses the embedder the folder was built with ---------------------------


def test_from_documents_on_an_existing_folder_without_embedding_reuses_the_stored_embedder(tmp_path):
    from hybrid_memory import StoreFormatError

    folder = tmp_path / "mem"
    with HybridMemoryRetriever.from_texts(["HTTP 504 billing"], HashingEmbedder(dim=24), ids=["t0"], path=folder):
        pass
    # no embedding: the folder's hashing-24 embedder is rebuilt (the default MiniLM, 384 dimensions, would
    # fail the dimension check)
    with HybridMemoryRetriever.from_documents(
        [Document(id="t1", page_content="kafka consumer lag")], path=folder, k=5
    ) as retriever:
        assert (retriever.memory.embedder.name, retriever.memory.embedder.dim) == ("hashing-24", 24)
        assert sorted(c.chunk_id for c in retriever.memory.iter_chunks()) == ["t0", "t1"]
        assert [d.id for d in retriever.invoke("kafka lag", k=1)] == ["t1"]
    with HybridMemoryRetriever.from_texts(["auth token expired"], ids=["t2"], path=folder) as retriever:
        assert retriever.memory.embedder.name == "hashing-24" and retriever.memory.count() == 3
    # an explicit embedder that differs is refused naming both and the fix; nothing stored is lost
    with pytest.raises(
        StoreFormatError,
        match=r"was built with embedder 'hashing-24' \(dim 24\), not 'hashing-32' "
        r"\(dim 32\); open it with the same embedder",
    ):
        HybridMemoryRetriever.from_texts(["never stored"], HashingEmbedder(dim=32), ids=["t3"], path=folder)
    with HybridMemory.open(folder) as memory:
        assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["t0", "t1", "t2"]


def test_a_folder_built_with_a_langchain_model_needs_that_model_again(tmp_path):
    from hybrid_memory import StoreFormatError

    folder = tmp_path / "mem"
    fake = DeterministicFakeEmbedding(size=16)
    with HybridMemoryRetriever.from_texts(["HTTP 504 billing"], fake, ids=["t0"], path=folder):
        pass
    with pytest.raises(
        StoreFormatError,
        match=r"was built with embedder 'langchain:DeterministicFakeEmbedding.*"
        r"open it with the same embedder",
    ):
        HybridMemoryRetriever.from_texts(["kafka lag"], ids=["t1"], path=folder)
    with HybridMemoryRetriever.from_texts(["kafka lag"], fake, ids=["t1"], path=folder) as retriever:
        assert retriever.memory.count() == 2


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"k": -1}, r"k must be an integer from 1 to 1000 \(the number of results\), got -1"),
        ({"k": 1001}, r"k must be an integer from 1 to 1000 \(the number of results\), got 1001"),
        ({"k": True}, r"k must be an integer from 1 to 1000 \(the number of results\), got True"),
        ({"k": "5"}, r"k must be an integer from 1 to 1000 \(the number of results\), got '5'"),
        ({"rrf_k": -1}, r"rrf_k: must be a finite number >= 0 \(60 is the usual value\), got -1.0"),
        ({"fusion": "best"}, r"fusion: unknown fusion method 'best'; choose one of \['adaptive', "),
        (
            {"dense_weight": 0, "sparse_weight": 0},
            r"dense_weight and sparse_weight are both 0: set at least one above 0",
        ),
    ],
)
def test_bad_fields_are_invalid_requests_naming_the_field_and_range(memory, fields, message):
    with pytest.raises(InvalidRequestError, match=rf"^HybridMemoryRetriever: {message}"):
        HybridMemoryRetriever(memory=memory, **fields)
    # per call, the same keyword gets the same message (not the core's top_k / rrf_k_constant)
    with pytest.raises(InvalidRequestError, match=rf"^HybridMemoryRetriever: {message}"):
        HybridMemoryRetriever(memory=memory).invoke(QUERY, **fields)
    assert memory.count() == 7  # nothing stored is touched


def test_a_chunks_own_retrieval_named_keys_stay_visible_under_chunk_metadata():
    # a fresh user's finding: the chunk's own score/source/rrf_score/dense_rank were silently replaced
    memory = HybridMemory(embedder=HashingEmbedder(dim=64))
    own = {"score": 99, "source": "mine", "rrf_score": "x", "dense_rank": "keep", "chunk_metadata": [1], "team": "sre"}
    memory.add(
        [
            {"chunk_id": "c1", "text": "kafka consumer lag on orders topic", "source": "jira", "metadata": own},
            {
                "chunk_id": "c2",
                "text": "kafka broker disk usage",
                "source": "jira",
                "metadata": {"source": "jira", "team": "sre"},
            },
        ]
    )
    result = memory.search("kafka lag", top_k=2).results[0]
    assert result.chunk_id == "c1"
    doc = HybridMemoryRetriever(memory=memory, k=2).invoke("kafka lag")
    assert [d.id for d in doc] == ["c1", "c2"]
    assert doc[0].metadata == {
        "team": "sre",
        "source": "jira",
        "score": result.dense_score,
        "fused_score": result.score,
        "rrf_score": result.rrf_score,
        "sparse_rank": 1,
        "sparse_score": result.sparse_score,
        "dense_rank": result.dense_rank,
        "dense_score": result.dense_score,
        "chunk_metadata": {
            "score": 99,
            "source": "mine",
            "rrf_score": "x",
            "dense_rank": "keep",
            "chunk_metadata": [1],
        },
    }
    # a metadata source equal to the chunk's source (what document_to_chunk stores) shadows nothing
    assert "chunk_metadata" not in doc[1].metadata and doc[1].metadata["source"] == "jira"
    assert memory.get(["c1"])[0].metadata == own  # the store is untouched
    memory.close()
