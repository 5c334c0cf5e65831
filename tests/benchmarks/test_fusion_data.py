"""benchmarks/_fusion_data.py reads any BEIR-layout folder, so the fusion benchmarks run on a corpus of one's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _common as common
import _fusion_data as fdata


def _write_set(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Pool", "text": "connection pool exhausted", "metadata": {"team": "db"}},
        {"_id": "d2", "title": "", "text": "ERR_CONN_RESET on the gateway", "metadata": {"team": "edge"}},
        {"_id": "d3", "title": "Soup", "text": "tomato soup with basil"},
    ]
    queries = [
        {"_id": "q1", "text": "pool exhausted", "metadata": {"kind": "words"}},
        {
            "_id": "q2",
            "text": "ERR_CONN_RESET",
            "metadata": {"kind": "identifier"},
            "metadata_filter": {"team": "edge"},
        },
        {"_id": "q3", "text": "not judged"},
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n", encoding="utf-8")
    return folder


def test_a_beir_folder_given_by_its_path_loads_with_classes_and_filters(tmp_path):
    folder = _write_set(tmp_path / "incidents")
    data = fdata.load(str(folder), vectors=False, class_key="kind")
    assert data.name == "incidents"
    assert [c["chunk_id"] for c in data.chunks] == ["d1", "d2", "d3"]
    assert data.queries == {"q1": "pool exhausted", "q2": "ERR_CONN_RESET"}  # only the judged queries
    assert data.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert data.query_class == {"q1": "words", "q2": "identifier"}
    assert data.query_filter == {"q2": {"team": "edge"}}
    assert data.doc_vectors is None and data.query_vectors == {}


def test_without_a_class_key_every_query_is_one_class(tmp_path):
    data = fdata.load(str(_write_set(tmp_path / "mine")), vectors=False)
    assert data.query_class == {"q1": "all", "q2": "all"}


def test_a_folder_without_the_beir_files_is_refused_naming_what_it_lacks(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "corpus.jsonl").write_text("", encoding="utf-8")
    assert common.dataset_dir(str(tmp_path / "half")) is None
    with pytest.raises(SystemExit) as raised:
        fdata.load(str(tmp_path / "half"), vectors=False)
    message = str(raised.value)
    assert "(the folder lacks queries.jsonl, qrels/test.tsv)" in message and "scifact" in message
    with pytest.raises(SystemExit) as raised:
        fdata.load(str(tmp_path / "nowhere"), vectors=False)
    assert "lacks" not in str(raised.value) and "unknown dataset" in str(raised.value)


def test_qrels_naming_a_query_that_queries_jsonl_lacks_is_a_clear_error(tmp_path):
    folder = _write_set(tmp_path / "broken")
    with (folder / "qrels" / "test.tsv").open("a", encoding="utf-8") as fh:
        fh.write("q99\td1\t1\n")
    with pytest.raises(SystemExit) as raised:
        fdata.load(str(folder), vectors=False)
    assert "names 1 queries that" in str(raised.value) and "['q99']" in str(raised.value)


def test_a_class_key_no_query_has_is_refused_as_a_likely_typo(tmp_path):
    folder = _write_set(tmp_path / "typo")
    with pytest.raises(SystemExit) as raised:
        fdata.load(str(folder), vectors=False, class_key="knid")
    assert "no query" in str(raised.value) and "'knid'" in str(raised.value)


def test_a_dataset_given_by_path_is_labelled_by_its_folder(tmp_path):
    folder = _write_set(tmp_path / "labelled")
    assert common.dataset_dir(str(folder)) == folder
    assert common.dataset_label(str(folder)) == "labelled" and common.dataset_label("scifact") == "scifact"
    assert common.BeirData(str(folder)).name == "labelled"


def test_the_benchmarks_take_such_a_set_and_its_class_key():
    import argparse

    parser = argparse.ArgumentParser()
    fdata.add_dataset_arguments(parser)
    assert parser.parse_args([]).datasets == list(fdata.DATASETS)
    args = parser.parse_args(["--datasets", "/data/mine", "techdocs", "--class-key", "kind"])
    assert args.datasets == ["/data/mine", "techdocs"] and args.class_key == "kind"


def test_class_values_that_are_falsy_are_classes_and_a_query_without_the_key_is_other(tmp_path):
    folder = _write_set(tmp_path / "falsy")
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[0]["metadata"]["kind"] = 0
    del rows[1]["metadata"]["kind"]
    rows[1]["kind"] = "top-level"  # a field of the query itself counts too
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = fdata.load(str(folder), vectors=False, class_key="kind")
    assert data.query_class == {"q1": "0", "q2": "top-level"}
    del rows[1]["kind"]
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert fdata.load(str(folder), vectors=False, class_key="kind").query_class == {"q1": "0", "q2": "other"}


def test_sets_are_checked_before_any_runs_and_labels_never_collide(tmp_path):
    mine = _write_set(tmp_path / "a" / "mine")
    again = _write_set(tmp_path / "b" / "mine")
    fdata.check_datasets([str(mine)])  # fine alone
    with pytest.raises(SystemExit) as raised:
        fdata.check_datasets([str(mine), str(again)])
    assert "two sets are named 'mine'" in str(raised.value)
    with pytest.raises(SystemExit) as raised:
        fdata.check_datasets([str(mine), "scifac"])  # a typo is found before the first set runs
    assert "unknown dataset 'scifac'" in str(raised.value)
    # a copy of a built-in set given by its path is labelled by its path: not judged against that set's targets
    copy = _write_set(tmp_path / "c" / "scifact")
    assert fdata.label(str(copy)) == str(copy.resolve())
    assert fdata.load(str(copy), vectors=False).query_class == {"q1": "all", "q2": "all"}
    assert fdata.label("scifact") == "scifact" and fdata.label(str(mine)) == "mine"


def test_a_set_of_fewer_queries_than_the_warm_up_counts_every_query(tmp_path, monkeypatch):
    import fusion_eval as fe

    folder = _write_set(tmp_path / "two")
    data = fdata.load(str(folder), vectors=False)
    data.query_vectors = {q: None for q in data.queries}
    seen: list[str] = []

    class FakeMemory:
        def search(self, request, query_vector=None):
            seen.append(request["query_id"])
            from types import SimpleNamespace

            return SimpleNamespace(results=[SimpleNamespace(chunk_id="d1", score=1.0, rrf_score=1.0)])

    monkeypatch.setattr(fe, "rows", lambda: [("only", {"fusion": "rrf"})])
    runs, p50 = fe.run_public(data, FakeMemory(), repeats=1)
    assert sorted(runs["only"]) == ["q1", "q2"]  # both queries recorded after warming up on both
    assert seen == ["q1", "q2", "q1", "q2"]


def test_queries_whose_filter_matches_no_chunk_are_named(tmp_path):
    import fusion_eval as fe
    import numpy as np
    from hybrid_memory import HashingEmbedder

    folder = _write_set(tmp_path / "filters")
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[0]["metadata_filter"] = {"team": "nobody"}  # q1: a value no chunk has
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = fdata.load(str(folder), vectors=False)
    embedder = HashingEmbedder(16)
    data.doc_vectors = np.asarray(embedder.embed_documents([c["text"] for c in data.chunks]), dtype=np.float32)
    memory = fe.build_memory(data)
    try:
        assert fe.empty_filters(data, memory) == ["q1"]  # q2's {"team": "edge"} matches d2
    finally:
        memory.close()
