"""Error messages a fresh user met (finding 10): each names the position or value once, and the fix."""

from __future__ import annotations

import json

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.cli.app import main
from hybrid_memory.ingest import read_beir_corpus

SURROGATE_FIX = (
    "which UTF-8 cannot encode); remove it, or decode the original bytes as UTF-8 "
    "(bytes.decode('utf-8', errors='replace') turns bad bytes into U+FFFD)"
)


def test_a_lone_surrogate_in_search_text_names_its_position_and_the_fix(memory):
    for request in ("故乡 🎉 \ud800", {"search_text": "故乡 🎉 \ud800"}):
        with pytest.raises(InvalidRequestError) as info:
            memory.search(request)
        assert str(info.value) == (
            "invalid search request: search_text: search_text is not valid Unicode text (surrogates not allowed at "
            f"position 5: a lone surrogate '\\ud800', {SURROGATE_FIX} (got '故乡 🎉 \\ud800')"
        )
    with pytest.raises(InvalidRequestError) as info:  # the chunk text says the same
        memory.add([{"chunk_id": "s", "text": "故 \ud800"}])
    assert (
        f"text: text is not valid Unicode text (surrogates not allowed at position 2: a lone surrogate '\\ud800', "
        f"{SURROGATE_FIX}" in str(info.value)
    )
    assert memory.count() == 6


@pytest.mark.parametrize("value, shown", [(-1, "-1.0"), (float("nan"), "nan"), (2e6, "2000000.0")])
def test_a_bad_weight_shows_its_value_once(memory, value, shown):
    with pytest.raises(InvalidRequestError) as info:
        memory.search("HTTP 504", dense_weight=value)
    assert str(info.value) == (
        "invalid search request: hybrid_params.dense_weight: must be a number in [0, 1e+06] "
        f"(only the ratio of the weights matters), got {shown}"
    )


def test_supersede_refusal_shows_iso_utc_times(memory):
    memory.upsert([{"chunk_id": "old", "text": "Dana prefers PostgreSQL", "valid_from": 1717200000.0}])
    with pytest.raises(InvalidRequestError) as info:
        memory.supersede("old", {"chunk_id": "new", "text": "Dana prefers SQLite", "valid_from": 1672531200.0})
    assert str(info.value) == (
        "chunks ['old'] are valid from 2024-06-01T00:00:00Z, not before the new fact's "
        "valid_from 2023-01-01T00:00:00Z; give the new chunk a later valid_from"
    )
    assert memory.get(["new"]) == [] and memory.get(["old"])[0].valid_to is None


def test_a_utf8_bom_is_skipped_in_jsonl_request_and_text_files(tmp_path, capsys):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps({"_id": "a", "text": "kafka lag on orders"}).encode()
        + b"\n"
        + json.dumps({"_id": "b", "text": "disk full on indexer"}).encode()
        + b"\n"
    )
    assert [(c.chunk_id, c.text) for c in read_beir_corpus(corpus)] == [
        ("a", "kafka lag on orders"),
        ("b", "disk full on indexer"),
    ]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_bytes(b"\xef\xbb\xbfkafka runbook")
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(corpus), str(docs), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["ingested"] == 3
    request = tmp_path / "request.json"
    request.write_bytes(b"\xef\xbb\xbf" + json.dumps({"search_text": "kafka lag", "top_k": 1}).encode())
    assert main(["search", "--request", str(request), "--memory", memory, "--hashing-dim", "8"]) == 0
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["a"]
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert mem.get(["docs/x.md#0"])[0].text == "kafka runbook"  # no U+FEFF stored


def test_export_to_the_memory_folder_itself_says_so(tmp_path, capsys):
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")
    folder = tmp_path / "mem"
    with HybridMemory(folder, embedder=HashingEmbedder(8)) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka lag"}])
    assert main(["export-qdrant", "--memory", str(folder), "--hashing-dim", "8", "--edge-path", str(folder), "-q"]) == 2
    assert capsys.readouterr().err == (
        f"hybrid-memory: error: edge_path {folder} is the embedded memory folder (it holds store.sqlite3); a Qdrant "
        f"Edge shard must not share a memory's folder: use another folder, e.g. {folder}-edge (hybrid-memory "
        "export-qdrant --edge-path copies the memory there)\n"
    )


def test_search_help_lists_the_default_fusion_first(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert (
        "[--fusion {adaptive,rrf,rrf_guard,dbsf,tm2c2,zscore,confidence,zscore_guard,adaptive_uncalibrated,adaptive_v1}]"
        in out
    )


@pytest.mark.parametrize(
    "vector, got", [("abc", "got str 'abc'"), ([1.0, "x"], "got list [1.0, 'x']"), ({"a": 1}, "got dict {'a': 1}")]
)
def test_a_query_vector_that_is_not_numbers_is_a_clear_error(vector, got):
    from hybrid_memory import InvalidRequestError

    with HybridMemory(embedder=HashingEmbedder(4)) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka lag"}])
        with pytest.raises(InvalidRequestError) as raised:
            mem.search("kafka", query_vector=vector)
    assert str(raised.value) == (
        f"query_vector must be numbers, {got}; pass 4 finite floats (this memory's "
        "embedding size), or None to embed search_text"
    )


def test_the_qdrant_order_filter_hint_names_the_cli_flag_too():
    from hybrid_memory import InvalidFilterError
    from hybrid_memory.backends.qdrant.filters import translate
    from hybrid_memory.filters import parse_filter

    with pytest.raises(InvalidFilterError) as raised:
        translate(parse_filter({"severity": {"$lte": 1}}), set())
    assert str(raised.value).endswith(
        "declare it: HybridMemory.qdrant(..., indexed_keys={'severity': 'float'}), or "
        "on the command line --index-key severity=float"
    )


NONE_FIX = (
    "invalid search request: got None (and no search_text=); pass a request dict or SearchRequest, e.g. "
    '{"search_text": "..."}, or the search text itself'
)


async def test_search_of_none_says_none_was_passed_and_what_to_pass(memory):
    """A fresh user's finding: memory.search(None) read "search_text: Field required (got {})", a {} never passed."""
    for call in (
        lambda: memory.search(None),
        lambda: memory.search(),
        lambda: memory.search(None, top_k=3),
        lambda: memory.scoped({"user_id": "u1"}).search(None),
    ):
        with pytest.raises(InvalidRequestError) as info:
            call()
        assert str(info.value) == NONE_FIX
    with pytest.raises(InvalidRequestError) as info:
        await memory.asearch(None)
    assert str(info.value) == NONE_FIX
    # None with search_text= is a request, as before
    assert [r.chunk_id for r in memory.search(None, search_text="HTTP 504", top_k=2).results] == [
        r.chunk_id for r in memory.search("HTTP 504", top_k=2).results
    ]


def test_a_nan_in_given_vectors_names_the_first_bad_row_its_chunk_and_the_fix(memory):
    """A fresh user's finding: "vectors contain NaN or infinite values" named no row and no fix."""
    import numpy as np

    vectors = np.random.default_rng(3).normal(size=(4, 64)).astype(np.float32)
    vectors[2, 5] = np.nan
    vectors[3, 0] = np.inf
    chunks = [{"chunk_id": f"v{i}", "text": f"vector note {i}"} for i in range(4)]
    with pytest.raises(InvalidRequestError) as info:
        memory.add(chunks, vectors=vectors)
    assert str(info.value) == (
        "vectors row 2 (chunk 'v2') holds NaN or infinite values as float32 (2 of 4 rows do); nothing was stored: "
        "give finite rows (np.isfinite(vectors).all(axis=1) finds the bad ones), or leave vectors= out to embed the "
        "texts with the memory's embedder"
    )
    with pytest.raises(
        InvalidRequestError, match=r"^vectors row 0 \(chunk 'v0'\) holds NaN or infinite values as float32 \(1 of 1 "
    ):
        memory.upsert(chunks[:1], vectors=np.full((1, 64), 1e39))  # finite in float64, infinite as float32
    assert memory.count() == 6 and memory.get(["v0", "v2"]) == []
    vectors[2, 5] = vectors[3, 0] = 0.5
    assert memory.add(chunks, vectors=vectors) == ["v0", "v1", "v2", "v3"] and memory.count() == 10
