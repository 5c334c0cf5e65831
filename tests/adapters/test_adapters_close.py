"""Adapters close the memory they opened (with, close()), never one passed in; an unclosed one heals."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402

from langchain_hybrid_memory import HybridMemoryRetriever as LangChainRetriever  # noqa: E402
from llamaindex_hybrid_memory import HybridMemoryRetriever as LlamaRetriever  # noqa: E402


def test_langchain_retriever_closes_the_memory_it_opened(tmp_path):
    with LangChainRetriever.from_documents(
        [Document(page_content="HTTP 504 billing", id="a")], HashingEmbedder(16), path=tmp_path, k=1
    ) as retriever:
        assert [d.id for d in retriever.invoke("504")] == ["a"]
    with pytest.raises(InvalidRequestError, match="closed"):
        retriever.memory.search("504")
    assert (tmp_path / "indexes.json").exists()  # closing saved the indexes
    with LangChainRetriever.from_path(tmp_path, HashingEmbedder(16), k=1) as again:
        assert [d.id for d in again.invoke("504")] == ["a"]
    assert again.memory._closed


def test_llamaindex_retriever_closes_the_memory_it_opened(tmp_path):
    with LlamaRetriever.from_nodes(
        [TextNode(text="HTTP 504 billing", id_="a")], HashingEmbedder(16), path=tmp_path, similarity_top_k=1
    ) as retriever:
        assert [n.node.node_id for n in retriever.retrieve("504")] == ["a"]
    assert retriever.memory._closed
    retriever.close()  # idempotent
    with LlamaRetriever.from_path(tmp_path, HashingEmbedder(16), similarity_top_k=1) as again:
        assert [n.node.node_id for n in again.retrieve("504")] == ["a"]
    assert again.memory._closed


def test_a_memory_passed_in_stays_open():
    with HybridMemory(embedder=HashingEmbedder(16)) as memory:
        memory.add([{"chunk_id": "a", "text": "HTTP 504 billing"}])
        with LangChainRetriever(memory=memory, k=1) as lc, LlamaRetriever(memory, similarity_top_k=1) as li:
            assert lc.invoke("504")[0].id == li.retrieve("504")[0].node.node_id == "a"
        assert memory.search("504", top_k=1).results[0].chunk_id == "a"


def path_message(path: str) -> str:
    return (
        f"HybridMemoryRetriever: memory must be a HybridMemory, not a path ({path!r}); open the folder with "
        f"HybridMemoryRetriever.from_path({path!r}) (the retriever closes it), or pass "
        f"memory=HybridMemory.open({path!r}) (you close it)"
    )


@pytest.mark.parametrize("path", ["./memory", Path("memory")], ids=["str", "Path"])
@pytest.mark.parametrize(
    "construct",
    [
        lambda path: LangChainRetriever(memory=path),
        lambda path: LangChainRetriever(memory=path, k=3, scope={"user_id": "u1"}),
        lambda path: LlamaRetriever(memory=path),
        lambda path: LlamaRetriever(path, similarity_top_k=3),
    ],
    ids=["langchain", "langchain-with-fields", "llamaindex", "llamaindex-positional"],
)
def test_a_path_as_memory_is_one_line_naming_from_path(tmp_path, monkeypatch, path, construct):
    """A fresh user's finding: HybridMemoryRetriever(memory="./memory") failed with pydantic's generic wording
    (two "Input should be an instance of ..." errors). A path is refused, not opened: what is passed as memory stays
    the caller's to close, while from_path opens the folder and closes it with the retriever; the message names
    both, and nothing is opened or created."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequestError) as err:
        construct(path)
    assert str(err.value) == path_message(os.fspath(path))
    assert err.value.__cause__ is None and err.value.__context__ is None  # no pydantic error chained to it
    assert list(tmp_path.iterdir()) == []


def test_the_two_ways_the_path_message_names_both_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with HybridMemory("./memory", embedder=HashingEmbedder(16)) as memory:
        memory.add([{"chunk_id": "a", "text": "HTTP 504 billing"}])
    with LangChainRetriever.from_path("./memory", HashingEmbedder(16), k=1) as retriever:
        assert [d.id for d in retriever.invoke("504")] == ["a"]
    assert retriever.memory._closed  # the retriever opened it, so it closed it
    with HybridMemory.open("./memory", embedder=HashingEmbedder(16)) as memory:
        with LlamaRetriever(memory=memory, similarity_top_k=1) as retriever:
            assert [n.node.node_id for n in retriever.retrieve("504")] == ["a"]
        assert not memory._closed  # the caller's: left open for the caller to close


@pytest.mark.parametrize(
    "construct",
    [lambda value: LangChainRetriever(memory=value), lambda value: LlamaRetriever(value)],
    ids=["langchain", "llamaindex"],
)
@pytest.mark.parametrize("value, name", [(5, "int"), (None, "NoneType"), (b"./memory", "bytes")])
def test_anything_else_as_memory_names_its_type(construct, value, name):
    with pytest.raises(InvalidRequestError) as err:
        construct(value)
    assert str(err.value) == (
        f"HybridMemoryRetriever: memory must be a hybrid_memory.HybridMemory (or a scoped view of one), got {name}; "
        "open one with HybridMemory.open(path), or build the retriever with HybridMemoryRetriever.from_documents(...) "
        "/ from_path(path)"
    )


def test_a_retriever_never_closed_is_healed_by_the_next_open_once(tmp_path):
    code = textwrap.dedent(
        """
        import os, sys
        from langchain_core.documents import Document
        from hybrid_memory import HashingEmbedder
        from langchain_hybrid_memory import HybridMemoryRetriever
        docs = [Document(page_content=f"note {i} about service {i % 7}", id=f"n{i}") for i in range(700)]
        HybridMemoryRetriever.from_documents(docs, HashingEmbedder(16), path=sys.argv[1])
        os._exit(0)  # never closed
        """
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], check=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    syncs = []
    for _ in range(2):
        memory = HybridMemory.open(tmp_path, embedder=HashingEmbedder(16))
        syncs.append({name: report["rebuilt"] for name, report in memory.last_sync.items()})
        assert memory.count() == 700
        memory._closed = True  # as if this process died too: nothing saved at close
        memory.backend.executor.shutdown()
        memory.backend.store.close()
    assert syncs == [{"bm25": True, "dense": True}, {"bm25": False, "dense": False}]


def test_constructors_that_build_a_memory_refuse_memory_before_creating_anything(tmp_path):
    held = HybridMemory(embedder=HashingEmbedder(16))
    calls = [
        lambda: LangChainRetriever.from_documents([Document(page_content="x")], memory=held, path=tmp_path / "a"),
        lambda: LangChainRetriever.from_texts(["x"], memory=held, path=tmp_path / "b"),
        lambda: LangChainRetriever.from_path(tmp_path / "c", memory=held),
        lambda: LlamaRetriever.from_documents([TextNode(text="x", id_="n")], memory=held, path=tmp_path / "d"),
        lambda: LlamaRetriever.from_nodes([TextNode(text="x", id_="n")], memory=held, path=tmp_path / "e"),
        lambda: LlamaRetriever.from_path(tmp_path / "f", memory=held),
    ]
    for call in calls:
        with pytest.raises(InvalidRequestError, match=r"builds its own memory .* construct the retriever with it"):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder was created
    assert held.count() == 0  # the held memory is untouched and still open
    held.close()
