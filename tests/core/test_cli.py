"""The hybrid-memory command: demo on the bundled memory, ingest, search with a request file, stats."""

import json
from pathlib import Path

import pytest

from hybrid_memory.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "incident_memory"
PRODUCTION_BILLING = {
    "inc-0412-billing-504-pool", "pm-0415-billing-pool-exhaustion", "inc-0302-billing-stripe-webhook",
    "rb-billing-refund-retry", "inc-0519-billing-currency-rounding", "rb-billing-db-failover",
    "inc-0608-billing-cron-duplicate",
}


@pytest.mark.slow  # the demo loads the real all-MiniLM-L6-v2
def test_demo_answers_the_reference_request_with_the_default_embedder(capsys):
    assert main(["demo", "-q"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["query_id"] == "mem_req_99214"
    assert response["total_retrieved"] == len(response["results"]) == 5
    ids = [r["chunk_id"] for r in response["results"]]
    assert ids[0] == "inc-0412-billing-504-pool"
    assert set(ids) <= PRODUCTION_BILLING  # the staging 504 note is filtered out
    top = response["results"][0]
    assert (top["sparse_rank"], top["dense_rank"]) == (1, 1)
    assert top["rrf_score"] == pytest.approx(0.4 / 61 + 0.6 / 61)


def test_ingest_search_stats(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "64", "-q"]) == 0
    ingested = json.loads(capsys.readouterr().out)
    assert ingested["ingested"] == ingested["chunks"] == 38

    assert main(["search", "--memory", memory, "--request", str(EXAMPLE / "request.json"), "--hashing-dim", "64"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["query_id"] == "mem_req_99214"
    assert response["total_retrieved"] == 5
    assert {r["chunk_id"] for r in response["results"]} <= PRODUCTION_BILLING
    assert response["results"][0]["chunk_id"] == "inc-0412-billing-504-pool"

    assert main(["search", "ERR_CONN_RESET", "--memory", memory, "--top-k", "2", "--sparse-weight", "1",
                 "--dense-weight", "0", "--hashing-dim", "64"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["total_retrieved"] == 2
    assert "ERR_CONN_RESET" in response["results"][0]["text"]  # the one note that names it
    assert "ERR_CONN_RESET" not in response["results"][1]["text"]

    assert main(["stats", "--memory", memory, "--hashing-dim", "64"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["chunks"], stats["dense_vectors"], stats["bm25_documents"]) == (38, 38, 38)


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8"]) == 2  # a typo must not create one
    assert "no memory at" in capsys.readouterr().err
    assert not (tmp_path / "mem").exists()
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8", "--filter", '{"a": {"$regex": "b"}}']) == 2
    assert "unknown operator '$regex'" in capsys.readouterr().err
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8", "--top-k", "0"]) == 2
    assert "top_k" in capsys.readouterr().err
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "0"]) == 2
    assert "--hashing-dim must be >= 1" in capsys.readouterr().err
    request = tmp_path / "list.json"
    request.write_text("[1, 2]")
    assert main(["search", "--memory", memory, "--hashing-dim", "8", "--request", str(request)]) == 2
    assert "one JSON object" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "nope.csv"), "--memory", memory, "--hashing-dim", "8"]) == 2
    assert ".jsonl" in capsys.readouterr().err


def test_a_failed_ingest_says_what_was_stored(tmp_path, capsys):
    lines = (EXAMPLE / "notes.jsonl").read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:3] + ["{not json"]) + "\n")
    assert main(["ingest", str(broken), "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "-q"]) == 2
    err = capsys.readouterr().err
    assert "line 4" in err and "holds 0 chunks, 0 new" in err


def test_same_named_folders_are_not_overwritten(tmp_path, capsys):
    for team, text in (("a", "alpha ERR_A1"), ("b", "beta ERR_B1")):
        (tmp_path / team / "runbooks").mkdir(parents=True)
        (tmp_path / team / "runbooks" / "x.md").write_text(text)
    memory = str(tmp_path / "mem")
    args = ["--memory", memory, "--hashing-dim", "16", "-q"]
    assert main(["ingest", str(tmp_path / "a" / "runbooks"), *args]) == 0
    assert main(["ingest", str(tmp_path / "b" / "runbooks"), *args]) == 2
    assert "--id-prefix" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "b" / "runbooks"), *args, "--id-prefix", "b/runbooks/"]) == 0
    assert main(["ingest", str(tmp_path / "a" / "runbooks"), *args]) == 0  # re-ingesting the same folder is fine
    capsys.readouterr()
    assert main(["search", "ERR_A1 ERR_B1", "--memory", memory, "--hashing-dim", "16", "--top-k", "5"]) == 0
    ids = sorted(r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"])
    assert ids == ["b/runbooks/x.md#0", "runbooks/x.md#0"]
