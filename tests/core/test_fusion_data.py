"""benchmarks/_fusion_data.py reads any BEIR-layout folder, so the fusion benchmarks run on a corpus of one's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _fusion_data as fdata


def _write_set(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": "d1", "title": "Pool", "text": "connection pool exhausted", "metadata": {"team": "db"}},
              {"_id": "d2", "title": "", "text": "ERR_CONN_RESET on the gateway", "metadata": {"team": "edge"}},
              {"_id": "d3", "title": "Soup", "text": "tomato soup with basil"}]
    queries = [{"_id": "q1", "text": "pool exhausted", "metadata": {"kind": "words"}},
               {"_id": "q2", "text": "ERR_CONN_RESET", "metadata": {"kind": "identifier"},
                "metadata_filter": {"team": "edge"}},
               {"_id": "q3", "text": "not judged"}]
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


def test_a_folder_without_the_beir_files_is_refused_with_what_is_accepted(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "corpus.jsonl").write_text("", encoding="utf-8")
    assert fdata.beir_folder(str(tmp_path / "half")) is None
    with pytest.raises(SystemExit) as raised:
        fdata.load(str(tmp_path / "half"), vectors=False)
    message = str(raised.value)
    assert "unknown dataset" in message and "qrels/test.tsv" in message and "scifact" in message


def test_the_benchmarks_take_such_a_set_and_its_class_key():
    import argparse

    parser = argparse.ArgumentParser()
    fdata.add_dataset_arguments(parser)
    assert parser.parse_args([]).datasets == list(fdata.DATASETS)
    args = parser.parse_args(["--datasets", "/data/mine", "techdocs", "--class-key", "kind"])
    assert args.datasets == ["/data/mine", "techdocs"] and args.class_key == "kind"
