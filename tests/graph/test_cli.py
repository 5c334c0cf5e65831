import json

import pytest
from hybrid_memory.cli.app import main

from .conftest import NOTES


@pytest.fixture
def memory_dir(tmp_path):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": cid, "text": text}) for cid, text in NOTES.items()))
    target = tmp_path / "memory"
    assert main(["ingest", str(corpus), "--memory", str(target), "--hashing-dim", "64", "-q"]) == 0
    return target


def _run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_graph_build_show_ask_export(memory_dir, capsys, tmp_path):
    mem = ["--memory", str(memory_dir), "--hashing-dim", "64"]
    code, out = _run(capsys, "graph", "build", *mem)
    assert code == 0
    built = json.loads(out)
    assert built["graph"]["communities_per_level"] == {"0": 3} and built["graph"]["coverage"] == 1.0
    assert built["refresh"]["added"] == sorted(NOTES)

    code, out = _run(capsys, "graph", "build", *mem)  # second build is a no-op refresh
    assert code == 0 and json.loads(out)["refresh"]["summarised"] == 0

    code, out = _run(capsys, "graph", "show", *mem)
    shown = json.loads(out)
    assert code == 0 and [row["entities"] for row in shown["largest_communities"]] == [4, 4, 3]

    code, out = _run(capsys, "graph", "ask", "ERR_CONN_RESET on db-prod-3", *mem)
    answer = json.loads(out)
    assert code == 0 and answer["search"]["hits"][0]["chunk_ids"] == ["n1", "n2"]
    assert answer["tokens"]["report_tokens"] > 0

    code, out = _run(capsys, "graph", "export", *mem, "-o", str(tmp_path / "g.graphml"))
    assert code == 0 and (tmp_path / "g.graphml").read_text().count("<node ") == 11

    pytest.importorskip("pyvis")
    code, out = _run(capsys, "graph", "export", *mem, "-o", str(tmp_path / "g.html"))
    page = (tmp_path / "g.html").read_text()
    assert code == 0 and "vis-network" in page and "billing-service" in page
    assert "cdn.jsdelivr.net" not in page and 'src="http' not in page


def test_graph_commands_need_a_built_graph(memory_dir, capsys):
    code = main(["graph", "show", "--memory", str(memory_dir)])
    assert code == 2 and "run `hybrid-memory graph build" in capsys.readouterr().err


def test_graph_cli_refuses_settings_it_would_ignore(tmp_path, capsys):
    from pathlib import Path

    from hybrid_memory.cli.app import main

    notes = Path(__file__).resolve().parents[2] / "examples" / "incident_memory" / "notes.jsonl"
    memory = str(tmp_path / "m")
    assert main(["ingest", str(notes), "--memory", memory, "--hashing-dim", "32", "-q"]) == 0
    assert main(["graph", "build", "--memory", memory, "--hashing-dim", "32", "--max-cluster-size", "4"]) == 0
    assert main(["graph", "build", "--memory", memory, "--hashing-dim", "32"]) == 0  # refresh keeps 4
    capsys.readouterr()
    assert main(["graph", "build", "--memory", memory, "--hashing-dim", "32", "--max-cluster-size", "6"]) == 2
    assert "--rebuild" in capsys.readouterr().err
    assert main(["graph", "ask", "timeouts", "--memory", memory, "--hashing-dim", "32", "--level", "99"]) == 2
    assert "this graph has levels 0.." in capsys.readouterr().err
    assert main(["graph", "show", "--memory", memory, "--top", "0"]) == 2
    assert main(["graph", "ask", "", "--memory", memory, "--hashing-dim", "32"]) == 2
    assert "question" in capsys.readouterr().err


def test_export_refuses_an_unknown_extension(tmp_path, capsys):
    from pathlib import Path

    from hybrid_memory.cli.app import main

    notes = Path(__file__).resolve().parents[2] / "examples" / "incident_memory" / "notes.jsonl"
    memory = str(tmp_path / "m")
    assert main(["ingest", str(notes), "--memory", memory, "--hashing-dim", "32", "-q"]) == 0
    assert main(["graph", "build", "--memory", memory, "--hashing-dim", "32"]) == 0
    capsys.readouterr()
    assert main(["graph", "export", "--memory", memory, "-o", str(tmp_path / "g.png")]) == 2
    assert "--format" in capsys.readouterr().err
    assert not (tmp_path / "g.png").exists()


def test_a_missing_graph_names_the_graphs_that_exist(tmp_path, capsys):
    notes = tmp_path / "notes.jsonl"
    notes.write_text("\n".join(json.dumps({"_id": cid, "text": text}) for cid, text in NOTES.items()))
    memory = str(tmp_path / "m")
    dim = ["--hashing-dim", "64"]
    assert main(["ingest", str(notes), "--memory", memory, *dim, "-q", "--tenant", "acme"]) == 0
    assert main(["graph", "build", "--memory", memory, *dim, "--scope", "tenant=acme"]) == 0
    capsys.readouterr()
    assert main(["graph", "ask", "ERR_CONN_RESET", "--memory", memory, *dim]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            f"no graph in {memory}/graph; run `hybrid-memory graph build --memory {memory}` first "
            "(this memory has graphs for: --scope tenant=acme)"
        )
    )
    assert main(["graph", "build", "--memory", memory, *dim]) == 0  # the whole memory's graph too
    capsys.readouterr()
    assert main(["graph", "show", "--memory", memory, "--scope", "tenant=other"]) == 2
    assert "(this memory has graphs for: --scope tenant=acme, no --scope)" in capsys.readouterr().err


def test_graph_build_draws_no_bar_into_a_file_or_pipe_and_takes_quiet(memory_dir, capsys):
    """The README: a bar is drawn only when stderr is a terminal (captured here: not one), as ingest does."""
    mem = ["--memory", str(memory_dir), "--hashing-dim", "64"]
    capsys.readouterr()
    assert main(["graph", "build", *mem, "--rebuild"]) == 0
    err = capsys.readouterr().err
    assert "extracting" not in err and "summarising" not in err and "\r" not in err
    assert main(["graph", "build", *mem, "-q"]) == 0  # accepted, as ingest -q and export-qdrant -q
    assert "\r" not in capsys.readouterr().err
