"""Issue 35, class 6: every input has a documented bound (hybrid_memory.limits), checked by one validation that
every path shares, with a library error naming the limit and how to change it."""

from __future__ import annotations

import json
import os
import re

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError, InvalidRequestError, limits
from hybrid_memory.cli.app import main


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(8))
    mem.add([{"chunk_id": "a", "text": "alpha", "metadata": {"k": 3}}, {"chunk_id": "b", "text": "beta"}])
    yield mem
    mem.close()


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_search_request_from_dev_zero_is_refused_after_the_limit_not_read_forever(tmp_path, capsys):
    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    assert main(["search", "--request", "/dev/zero", "--memory", str(tmp_path / "m"), "--hashing-dim", "8"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--request /dev/zero holds more than MAX_REQUEST_BYTES (1,048,576 bytes, hybrid_memory.limits); a request is "
            "one JSON object with a query of at most 10,000 characters and a filter: give the request's file, not a data "
            "file"
        )
    )


def test_a_request_file_at_the_limit_is_read_and_one_byte_more_is_refused(tmp_path, capsys, monkeypatch):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)) as mem:
        mem.add([{"chunk_id": "a", "text": "alpha"}])
    request = json.dumps({"search_text": "alpha", "top_k": 1}).encode()
    monkeypatch.setattr(limits, "MAX_REQUEST_BYTES", len(request))
    (tmp_path / "r.json").write_bytes(request)
    assert (
        main(["search", "--request", str(tmp_path / "r.json"), "--memory", str(tmp_path / "m"), "--hashing-dim", "8"])
        == 0
    )
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["a"]
    (tmp_path / "r.json").write_bytes(request + b" ")
    assert (
        main(["search", "--request", str(tmp_path / "r.json"), "--memory", str(tmp_path / "m"), "--hashing-dim", "8"])
        == 2
    )
    assert f"holds more than MAX_REQUEST_BYTES ({len(request)} bytes" in capsys.readouterr().err


def test_in_lists_are_bounded_together_and_the_bound_can_be_raised(memory, monkeypatch):
    ok = memory.search("alpha", metadata_filter={"k": {"$in": [3, *range(10, 10_008)]}, "x": {"$nin": [1]}})
    assert [r.chunk_id for r in ok.results] == ["a"]  # 10,000 values together: accepted
    with pytest.raises(InvalidFilterError) as err:
        memory.search("alpha", metadata_filter={"k": {"$in": list(range(300_000))}})
    assert str(err.value) == (
        "metadata filter has more than MAX_IN_VALUES (10,000, hybrid_memory.limits) values in its $in/$nin lists "
        "together; tag the chunks with a shared metadata value and filter on it, split the search, or raise "
        "hybrid_memory.limits.MAX_IN_VALUES"
    )
    with pytest.raises(InvalidFilterError, match="MAX_IN_VALUES"):  # two lists of 5,001 are 10,002 values
        memory.count({"$or": [{"k": {"$in": list(range(5_001))}}, {"j": {"$nin": list(range(5_001))}}]})
    monkeypatch.setattr(limits, "MAX_IN_VALUES", 300_000)
    assert [
        r.chunk_id for r in memory.search("alpha", metadata_filter={"k": {"$in": list(range(300_000))}}).results
    ] == ["a"]


def test_a_chunk_text_over_the_limit_is_refused_on_every_write_path(memory, monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "MAX_CHUNK_TEXT_CHARS", 10)
    for write in (memory.add, memory.upsert):
        with pytest.raises(InvalidRequestError) as err:
            write([{"chunk_id": "c", "text": "x" * 11}])
        assert (
            "text has 11 characters, more than MAX_CHUNK_TEXT_CHARS (10, hybrid_memory.limits); split it into "
            "chunks (ingest's folders are cut into --chunk-size characters), or raise "
            "hybrid_memory.limits.MAX_CHUNK_TEXT_CHARS" in str(err.value)
        )
    memory.add([{"chunk_id": "c", "text": "x" * 10}])
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "d", "text": "y" * 11}) + "\n")
    from hybrid_memory.ingest import read_beir_corpus

    with pytest.raises(InvalidRequestError, match=rf"^{corpus}, line 1: invalid document 'd': text: text has 11 "):
        list(read_beir_corpus(corpus))
    assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["a", "b", "c"]
    from hybrid_memory.ingest import read_text_folder

    with pytest.raises(InvalidRequestError, match=r"^chunk_size 11 is more than MAX_CHUNK_TEXT_CHARS \(10, "):
        read_text_folder(tmp_path, chunk_size=11)


@pytest.mark.parametrize("after", [2**63, 10**30, 10**5000], ids=["2**63", "10**30", "10**5000"])
def test_a_paging_position_beyond_sqlite_is_a_library_error(memory, after):
    with pytest.raises(
        InvalidRequestError,
        match=r"^after must be a position a previous page returned \(an int in "
        r"-1\.\.2\*\*63-1, MAX_PAGE_POSITION\), or None for the first page",
    ):
        memory.page_chunks(after=after)
    page, last = memory.page_chunks(after=2**63 - 1)
    assert page == [] and last is None


def test_global_search_refuses_what_search_refuses(tmp_path):
    pytest.importorskip("networkx")
    from hybrid_memory.graph import GraphIndex

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        memory.add(
            [
                {"chunk_id": f"n{i}", "text": t}
                for i, t in enumerate(
                    [
                        "Kafka lag on billing-service delays invoices from db-prod-3",
                        "billing-service retries Kafka consumers when db-prod-3 is slow",
                    ]
                )
            ]
        )
        index = GraphIndex.build(memory)
        levels = sorted({c.level for c in index.communities.values()})
        assert levels == [0]
        for question, message in [
            (
                "x" * 100_000,
                "question has 100,000 characters, more than MAX_SEARCH_TEXT_CHARS (10,000, hybrid_memory.limits)",
            ),
            ("Kafka\x00lag", "question contains a NUL character ('\\x00') at position 5"),
            ("  ", "question must be a non-empty string, got '  ': ask about the memory"),
        ]:
            with pytest.raises(InvalidRequestError, match=re.escape(message)):
                index.global_search(question)
            with pytest.raises(InvalidRequestError):  # search refuses the same texts
                memory.search(question)
        for level, message in [
            (-1, "level -1 is not a level of this graph (its levels: 0..0)"),
            (99, "level 99 is not a level of this graph (its levels: 0..0)"),
            (True, "level must be an int or None, got bool True"),
        ]:
            with pytest.raises(InvalidRequestError, match=re.escape(message)):
                index.global_search("Kafka lag", level=level)
        assert index.global_search("Kafka lag", level=0).hits
