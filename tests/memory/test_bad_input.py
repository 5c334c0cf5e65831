"""Bad input stays in the library's error tree, from the API and from the CLI (issue 12's fuzz findings)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hybrid_memory import (
    MAX_SEARCH_TEXT_CHARS,
    HashingEmbedder,
    HybridMemory,
    HybridMemoryError,
    InvalidFilterError,
    InvalidRequestError,
)
from hybrid_memory.cli.app import main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fuzz  # noqa: E402


@pytest.fixture(scope="module")
def cli_memory(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "memory"
    fuzz.build_memory(path).close()
    return path


def _search_cli(path: Path, request_text: str, tmp_path: Path, capsys) -> tuple[int, str, str]:
    file = tmp_path / "request.json"
    file.write_text(request_text, encoding="utf-8")
    code = main(["search", "--request", str(file), "--memory", str(path), "--hashing-dim", str(fuzz.DIM)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("params", ["5", "[0.5, 0.5]", "true", "Infinity", '"fast"'])
def test_cli_hybrid_params_of_the_wrong_type_is_a_one_line_error(cli_memory, tmp_path, capsys, params):
    code, out, err = _search_cli(
        cli_memory, f'{{"search_text": "HTTP 504", "hybrid_params": {params}}}', tmp_path, capsys
    )
    assert (code, out) == (2, "")
    assert err.startswith("hybrid-memory: error: hybrid_params must be a JSON object") and "Traceback" not in err


def test_cli_deeply_nested_json_is_a_one_line_error(cli_memory, tmp_path, capsys):
    # 50,000 levels: 0.6 MB, under MAX_REQUEST_BYTES (1 MiB), far over what the JSON parser nests
    deep = '{"search_text": "x", "metadata_filter": ' + '{"$and": [' * 50_000 + "{}" + "]}" * 50_000 + "}"
    code, out, err = _search_cli(cli_memory, deep, tmp_path, capsys)
    assert (code, out) == (2, "")
    assert "nested too deeply" in err and err.count("\n") == 1


def test_api_deep_values_surrogate_query_ids_and_huge_weights_are_library_errors():
    memory = fuzz.build_memory(None)
    deep: object = 1
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(
        InvalidRequestError,
        match=r"\$in on 'tags' takes a string, number, boolean or null, got "
        r"list: \[\[\[\[\.\.\.\]\]\]\]",
    ):  # a bounded repr
        memory.search({"search_text": "x", "metadata_filter": {"tags": {"$in": deep}}})
    with pytest.raises(InvalidRequestError, match="values may nest lists and objects at most 32 levels deep"):
        memory.search({"search_text": "x", "metadata_filter": {"tags": {"$eq": deep}}})
    with pytest.raises(InvalidRequestError, match="as_of"):  # found by the 10,000-request fuzz run
        memory.search({"search_text": "x", "as_of": 10**400})
    with pytest.raises(InvalidRequestError, match="as_of"):
        memory.count(as_of=10**400)
    with pytest.raises(InvalidRequestError, match="query_id is not valid Unicode"):
        memory.search({"search_text": "HTTP 504", "query_id": "\ud800"})
    with pytest.raises(InvalidRequestError, match="dense_weight"):
        memory.search("HTTP 504", dense_weight=1e308, sparse_weight=1e308, rrf_k_constant=0)
    with pytest.raises(InvalidRequestError, match="hybrid_params must be an object"):
        memory.search({"search_text": "HTTP 504", "hybrid_params": 5}, dense_weight=0.5)
    # the largest weights allowed with rrf_k 0 give a finite score: rank 1 in both runs = 1e6/1 + 1e6/1
    response = memory.search("note 7", top_k=1, dense_weight=1e6, sparse_weight=1e6, rrf_k_constant=0, fusion="rrf")
    top = response.results[0]
    # (dense ties between equal hashing vectors rank by chunk_id, so "c145" precedes "c7" in the dense run)
    assert (top.sparse_rank, top.dense_rank) == (1, 2) and top.rrf_score == 1e6 / 1 + 1e6 / 2
    assert json.loads(response.model_dump_json())["results"][0]["rrf_score"] == 1.5e6
    memory.close()


def test_count_and_iter_chunks_refuse_deeply_nested_filter_values():
    memory = fuzz.build_memory(None)
    deep: object = 1
    for _ in range(3_000):
        deep = [deep]
    shortened = r"\$in on 'tags' takes a string, number, boolean or null, got list: \[\[\[\[\.\.\.\]\]\]\]"
    with pytest.raises(InvalidFilterError, match=shortened):
        memory.count({"tags": {"$in": deep}})
    with pytest.raises(InvalidFilterError, match=shortened):
        memory.iter_chunks({"tags": {"$in": deep}})  # refused at the call, not at the first next()
    with pytest.raises(InvalidFilterError, match="values may nest lists and objects at most 32 levels deep"):
        memory.count({"tags": {"$eq": deep}})
    assert memory.count({"labels": {"$contains": "db"}}) == 43  # chunks 0, 7, ..., 294
    memory.close()


def test_search_text_has_a_documented_length_limit():
    memory = fuzz.build_memory(None)
    assert memory.search("x" * MAX_SEARCH_TEXT_CHARS).total_retrieved >= 0
    with pytest.raises(InvalidRequestError, match="search_text"):
        memory.search("x" * (MAX_SEARCH_TEXT_CHARS + 1))
    memory.close()


def test_cli_ingest_keeps_the_last_line_of_a_repeated_id_whatever_the_batches(tmp_path, capsys):
    lines = [{"_id": f"c{i}", "text": f"chunk {i}"} for i in range(600)]
    lines[1] = {"_id": "dup", "text": "first"}
    lines[3] = {"_id": "dup", "text": "second, same batch"}
    lines[400] = {"_id": "dup", "text": "third, another batch"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    memory = tmp_path / "mem"
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "16", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ingested"], out["repeated_ids"], out["chunks"]) == (600, 2, 598)
    with HybridMemory.open(memory, embedder=HashingEmbedder(16)) as mem:
        assert [c.text for c in mem.get(["dup"])] == ["third, another batch"]
        order = [c.chunk_id for c in mem.iter_chunks()]
        assert order[:3] == ["c0", "dup", "c2"]  # its place is its first line's


def test_cli_ingest_of_a_missing_path_says_so_and_creates_nothing(tmp_path, capsys):
    memory = tmp_path / "mem"
    assert main(["ingest", str(tmp_path / "nope.jsonl"), "--memory", str(memory), "--hashing-dim", "16"]) == 2
    err = capsys.readouterr().err
    assert "nope.jsonl: no such file or folder" in err
    assert not memory.exists()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_operators = st.sampled_from(
    [
        "$eq",
        "$ne",
        "$gt",
        "$gte",
        "$lt",
        "$lte",
        "$in",
        "$nin",
        "$contains",
        "$exists",
        "$and",
        "$or",
        "$not",
        "$regex",
        "$",
    ]
)
_filters = st.recursive(
    st.dictionaries(
        st.sampled_from(["environment", "severity", "tags", "labels", "score", "", "a\nb"]), _json, max_size=3
    ),
    lambda inner: st.dictionaries(_operators, inner | st.lists(inner, max_size=3) | _json, max_size=2),
    max_leaves=12,
)
_requests = st.fixed_dictionaries(
    {},
    optional={
        "search_text": st.text(max_size=40) | _json,
        "query_id": st.text(max_size=8) | _json,
        "top_k": st.integers(-5, 2**70) | _json,
        "hybrid_params": st.dictionaries(
            st.sampled_from(["dense_weight", "sparse_weight", "rrf_k_constant", "x"]),
            st.floats() | st.integers() | _json,
            max_size=3,
        )
        | _json,
        "metadata_filter": _filters | _json,
        "as_of": _json,
    },
)


@pytest.fixture(scope="module")
def fuzz_memory():
    memory = fuzz.build_memory(None)
    yield memory
    memory.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=_requests | _json)
def test_generated_requests_raise_only_library_errors_and_serialise(fuzz_memory, request):
    try:
        response = fuzz_memory.search(request)
    except HybridMemoryError:
        return
    data = json.loads(response.model_dump_json())
    assert all(math.isfinite(r["rrf_score"]) for r in data["results"])


def test_the_fuzz_benchmark_short_run_meets_its_target(tmp_path):
    """benchmarks/fuzz.py on 150 generated requests, through the API and the CLI: 0 escaped (the 5 s hang
    count is the benchmark's to judge, not a unit test's)."""
    summary = fuzz.main(["--n", "150", "--seed", "7", "--json", str(tmp_path / "fuzz.json")])
    assert summary["api"]["outcomes"].get("escaped", 0) == 0, summary["api"]["samples"][:3]
    assert summary["cli"]["outcomes"].get("escaped", 0) == 0, summary["cli"]["samples"][:3]
    assert summary["api"]["outcomes"].get("ok", 0) > 0 and summary["api"]["outcomes"].get("library error", 0) > 0
