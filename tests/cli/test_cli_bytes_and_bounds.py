"""A fresh user's findings: output a console cannot encode, names and arguments that are not UTF-8, and a
``--hashing-dim`` with no upper bound."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli.app import main

CAFE = "caf\u00e9-note"


def _run(*args: str, encoding: str = "ascii") -> subprocess.CompletedProcess:
    """The real command in its own process, its stdout encoding ``encoding`` (as a cp1252 or ASCII console)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONIOENCODING": encoding}
    return subprocess.run([sys.executable, "-m", "hybrid_memory.cli", *args], capture_output=True, env=env, check=False)


@pytest.fixture
def cafe_memory(tmp_path, capsys):
    """A memory holding one chunk whose id is not ASCII; its folder as a str."""
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        json.dumps({"_id": CAFE, "text": "the espresso machine in the caf\u00e9 leaks"}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    folder = str(tmp_path / "mem")
    assert main(["ingest", str(notes), "--memory", folder, "--hashing-dim", "64", "-q"]) == 0
    capsys.readouterr()
    return folder


def test_delete_on_an_ascii_stdout_prints_escaped_json_and_exits_0(cafe_memory):
    done = _run("delete", "--memory", cafe_memory, "--hashing-dim", "64", CAFE)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == (
        f'{{"deleted": ["caf\\u00e9-note"], "not_found": [], "chunks": 0, "memory": "{cafe_memory}"}}\n'.encode()
    )
    assert json.loads(done.stdout)["deleted"] == [CAFE]
    with HybridMemory.open(cafe_memory, embedder=HashingEmbedder(64)) as memory:
        assert memory.count() == 0


def test_search_and_ingest_on_an_ascii_stdout_print_escaped_json_and_exit_0(cafe_memory, tmp_path):
    done = _run("search", "espresso caf\u00e9", "--memory", cafe_memory, "--hashing-dim", "64")
    assert (done.returncode, done.stderr) == (0, b"")
    response = json.loads(done.stdout)
    assert [result["chunk_id"] for result in response["results"]] == [CAFE]
    assert b'"chunk_id": "caf\\u00e9-note"' in done.stdout  # indented, as a UTF-8 console gets it
    assert done.stdout.startswith(b'{\n  "query_id": ')
    docs = tmp_path / "caf\u00e9-docs"
    docs.mkdir()
    (docs / "a.md").write_text("alpha", encoding="utf-8")
    done = _run("ingest", str(docs), "--memory", str(tmp_path / "m2"), "--hashing-dim", "64", "-q")
    assert (done.returncode, done.stderr) == (0, b"")
    assert json.loads(done.stdout)["ingested"] == 1


def test_a_utf8_stdout_still_gets_the_text_as_is(cafe_memory):
    done = _run("delete", "--memory", cafe_memory, "--hashing-dim", "64", CAFE, encoding="utf-8")
    assert done.returncode == 0
    assert f'"deleted": ["{CAFE}"]'.encode() in done.stdout


def test_a_file_whose_name_is_not_utf8_is_skipped_with_one_warning_line(tmp_path, capsys, caplog):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("alpha notes", encoding="utf-8")
    (docs / "z.txt").write_text("zeta notes", encoding="utf-8")
    fd = os.open(os.fsencode(docs) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"menu of the day")
    os.close(fd)
    memory = str(tmp_path / "mem")
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(docs), "--memory", memory, "--hashing-dim", "64", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ingested"], summary["skipped_files"], summary["chunks"]) == (2, 1, 2)
    assert [record.getMessage() for record in caplog.records] == [
        f"skipped {docs}/caf\\xe9.md: its name is not valid UTF-8 (chunk ids and sources are text); rename the file "
        "to UTF-8 to read it",
        "1 unreadable file was skipped (listed above); fix it and run the same command again",
    ]
    with HybridMemory.open(memory, embedder=HashingEmbedder(64)) as mem:
        assert sorted(c.chunk_id for c in mem.iter_chunks()) == ["docs/a.md#0", "docs/z.txt#0"]


def test_the_library_names_a_file_whose_name_is_not_utf8(tmp_path):
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.ingest import read_text_folder

    fd = os.open(os.fsencode(tmp_path) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    with pytest.raises(InvalidRequestError) as raised:
        list(read_text_folder(tmp_path))
    assert str(raised.value) == (
        f"{tmp_path}/caf\\xe9.md: its name is not valid UTF-8 (chunk ids and sources are text); rename the file to "
        "UTF-8 to read it"
    )


def test_an_id_or_search_text_that_is_not_utf8_is_one_line_exit_2(cafe_memory, capsys):
    assert main(["delete", "--memory", cafe_memory, "--hashing-dim", "64", CAFE, "caf\udce9"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: the id 'caf\\xe9' is not valid UTF-8 text (the terminal or script passed bytes of "
        "another encoding); give it as UTF-8 text\n"
    )
    with HybridMemory.open(cafe_memory, embedder=HashingEmbedder(64)) as memory:
        assert memory.count() == 1  # nothing is deleted, not even the good id
    assert main(["search", "caf\udce9", "--memory", cafe_memory, "--hashing-dim", "64"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: the search text 'caf\\xe9' is not valid UTF-8 text (the terminal or script passed "
        "bytes of another encoding); give it as UTF-8 text\n"
    )


def test_an_id_that_is_not_utf8_from_a_real_command_line(cafe_memory):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, "-m", "hybrid_memory.cli", "delete", "--memory", cafe_memory, "--hashing-dim", "64"]
    done = subprocess.run([os.fsencode(part) for part in command] + [b"caf\xe9"], capture_output=True, env=env)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().startswith("hybrid-memory: error: the id 'caf\\xe9' is not valid UTF-8 text")


@pytest.mark.parametrize("dim", ["65537", "100000000"])
def test_a_hashing_dim_past_the_bound_is_refused_before_any_folder_is_created(tmp_path, capsys, dim):
    notes = Path(__file__).resolve().parents[2] / "examples" / "incident_memory" / "notes.jsonl"
    memory = tmp_path / "new" / "mem"
    assert main(["ingest", str(notes), "--memory", str(memory), "--hashing-dim", dim, "-q"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --hashing-dim must be >= 1 and at most 65,536 (MAX_HASHING_DIM: a chunk's vector is "
        f"dim x 4 bytes), got {int(dim):,}; the default of tests and demos is 64\n"
    )
    assert not (tmp_path / "new").exists()


def test_the_largest_hashing_dim_is_taken():
    from hybrid_memory.embedders import MAX_HASHING_DIM

    assert MAX_HASHING_DIM == 65_536
    assert HashingEmbedder(MAX_HASHING_DIM).embed_query("alpha").shape == (65_536,)
