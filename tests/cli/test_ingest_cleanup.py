"""``hybrid-memory ingest`` removes the memory folder it created only when that loses nothing.

A second process that opens the same new folder between the ingest's own count and its clean-up must keep its
chunks: the clean-up re-checks under the memory's locks (``_discard.remove_new_memory``). The second writer
is a real process, driven step by step through its stdin / stdout (each step waits for the other's line, no
sleeps), and it acts exactly in that window: after the failed ingest closed its memory, before the clean-up.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.backends.embedded.discard import Discarded, remove_new_memory
from hybrid_memory.cli import app as cli
from hybrid_memory.cli.app import main

WRITER = """
import sys
from hybrid_memory import HashingEmbedder, HybridMemory
memory = HybridMemory(sys.argv[1], embedder=HashingEmbedder(8))
if sys.argv[2] == "write":
    memory.upsert([{"chunk_id": "theirs", "text": "the other process's note"}])
if sys.argv[3] == "close":
    memory.close()
print("ready", flush=True)
sys.stdin.readline()  # hold the memory (open or closed) until the test says so
memory.close()
"""


def _bad_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"  # the bad last line is in the first batch: the ingest stores nothing
    corpus.write_text(
        "".join(json.dumps({"_id": f"n{i}", "text": f"note {i}"}) + "\n" for i in range(3))
        + json.dumps({"_id": "bad"})
        + "\n"
    )
    return corpus


@pytest.fixture
def other_process_in_the_window(monkeypatch):
    """Start the second writer once the failing ingest has closed its memory (after its own count found 0
    chunks), and wait for its "ready" line before the clean-up runs. Yields the list the process lands in."""
    started: list[subprocess.Popen] = []
    real_open = cli.open_memory

    def arm(folder: Path, write: str, close: str) -> None:
        @contextmanager
        def open_then_let_the_other_in(args, **kwargs):
            try:
                with real_open(args, **kwargs) as memory:
                    yield memory  # the failed batch raises here, after the ingest counted 0 chunks
            finally:
                process = subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(folder), write, close],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                started.append(process)
                assert process.stdout.readline() == "ready\n"  # its chunk is committed (or its memory is open)

        monkeypatch.setattr(cli, "open_memory", open_then_let_the_other_in)

    yield arm
    for process in started:
        process.communicate("\n", timeout=60)
        assert process.returncode == 0


def _prefix(corpus: Path) -> str:
    return (
        f'hybrid-memory: error: {corpus}, line 4: missing \'text\' (use "text": "" with a title-only document) '
        "(this run stored nothing, but the folder it created for the memory, "
    )


def test_a_chunk_written_by_another_process_before_the_clean_up_survives(tmp_path, capsys, other_process_in_the_window):
    corpus = _bad_corpus(tmp_path)
    memory = tmp_path / "new" / "mem"
    other_process_in_the_window(memory, "write", "close")  # it wrote its chunk and closed: 1 chunk, nobody open
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 2
    assert capsys.readouterr().err == _prefix(corpus) + (
        f"{tmp_path / 'new'}, was kept: it holds 1 chunk now, written by another process; fix the input and run the "
        "same command again)\n"
    )
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as kept:
        assert [(c.chunk_id, c.text) for c in kept.get(["theirs"])] == [("theirs", "the other process's note")]
        assert kept.count() == 1


@pytest.mark.parametrize("write", ["write", "open only"])
def test_a_memory_another_process_holds_open_is_kept(tmp_path, capsys, other_process_in_the_window, write):
    corpus = _bad_corpus(tmp_path)
    memory = tmp_path / "mem"
    other_process_in_the_window(memory, write, "keep open")  # its writes may come any time: nothing is removed
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 2
    assert capsys.readouterr().err == _prefix(corpus) + (
        f"{memory}, was kept: another process has the memory open; fix the input and run the same command again)\n"
    )
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as kept:  # read while the other still has it open
        assert [c.chunk_id for c in kept.get(["theirs"])] == (["theirs"] if write == "write" else [])


def _new_memory(folder: Path) -> None:
    with HybridMemory(folder, embedder=HashingEmbedder(8)):
        pass


def test_an_unused_empty_memory_is_removed_with_the_folders_created_for_it(tmp_path):
    _new_memory(tmp_path / "a" / "b" / "mem")
    assert remove_new_memory(tmp_path / "a", tmp_path / "a" / "b" / "mem") == Discarded(True)
    assert list(tmp_path.iterdir()) == []  # no renamed leftover either


def test_a_file_of_the_user_s_keeps_the_folder_and_is_named(tmp_path):
    memory = tmp_path / "a" / "mem"
    _new_memory(memory)
    (memory / "notes.txt").write_text("mine")
    (tmp_path / "a" / "other.md").write_text("also mine")
    assert remove_new_memory(tmp_path / "a", memory) == Discarded(
        False, f"it holds {tmp_path / 'a' / 'other.md'}, which a new memory does not write"
    )
    (tmp_path / "a" / "other.md").unlink()
    assert remove_new_memory(tmp_path / "a", memory) == Discarded(
        False, f"it holds {memory / 'notes.txt'}, which a new memory does not write"
    )
    assert (memory / "notes.txt").read_text() == "mine"  # renamed back: all in place, the memory opens
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as kept:
        assert kept.count() == 0


def test_a_memory_open_in_another_thread_of_this_process_is_kept(tmp_path):
    memory = tmp_path / "mem"
    with HybridMemory(memory, embedder=HashingEmbedder(8)):  # SQLite's locks see connections of one process too
        assert remove_new_memory(memory, memory) == Discarded(False, "another process has the memory open")
    assert remove_new_memory(memory, memory) == Discarded(True)


def test_a_held_index_lock_keeps_the_folder(tmp_path):
    from filelock import FileLock

    memory = tmp_path / "mem"
    _new_memory(memory)
    with FileLock(str(memory / ".indexes.lock")):  # a save or load of another memory on this folder
        assert remove_new_memory(memory, memory) == Discarded(
            False, "another process holds its index lock (.indexes.lock)"
        )
    assert (memory / "store.sqlite3").is_file()


def test_a_connection_opened_just_before_the_removal_cannot_write_into_the_removed_file(tmp_path):
    memory = tmp_path / "mem"
    _new_memory(memory)
    late = sqlite3.connect(memory / "store.sqlite3")  # opened by its path, no lock taken yet
    try:
        assert remove_new_memory(memory, memory) == Discarded(True)
        with pytest.raises(sqlite3.DatabaseError, match="file is not a database"):
            late.execute("INSERT INTO chunks (chunk_id) VALUES ('lost')")
    finally:
        late.close()
    assert not memory.exists()


def test_a_folder_without_a_store_goes_only_if_it_is_empty(tmp_path):
    (tmp_path / "a" / "mem").mkdir(parents=True)
    assert remove_new_memory(tmp_path / "a", tmp_path / "a" / "mem") == Discarded(True)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "b" / "mem").mkdir(parents=True)
    (tmp_path / "b" / "mem" / "x.txt").write_text("x")
    kept = remove_new_memory(tmp_path / "b", tmp_path / "b" / "mem")
    assert kept.removed is False and kept.reason.startswith(f"{tmp_path / 'b' / 'mem'} is not empty (")
    assert (tmp_path / "b" / "mem" / "x.txt").read_text() == "x"


def test_a_folder_ingest_that_stores_nothing_leaves_no_memory_folder_it_created(tmp_path, capsys, caplog):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("")
    (docs / "b.txt").write_text("  \n\t\n")
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(docs), "--memory", str(tmp_path / "new" / "mem"), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ingested": 0,
        "repeated_ids": 0,
        "skipped_files": 0,
        "empty_files": 2,
        "symlinked_folders": 0,
        "outside_links": 0,
        "chunks": 0,
        "memory": str(tmp_path / "new" / "mem"),
    }
    assert [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.cli.app"] == [
        f"2 files held no text (empty or white space only) and gave no chunk: {docs / 'a.md'}, {docs / 'b.txt'}",
        f"nothing was stored, so the folder this run created for the memory, {tmp_path / 'new'}, was removed",
    ]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["docs", "docs/a.md", "docs/b.txt"]


def test_a_folder_ingest_that_stores_nothing_keeps_a_memory_folder_that_existed(tmp_path, capsys, caplog):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("")
    memory = tmp_path / "mem"
    _new_memory(memory)  # an empty memory made before this run: not the run's to remove
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(docs), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 0
    assert [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.cli.app"] == [
        f"1 file held no text (empty or white space only) and gave no chunk: {docs / 'a.md'}"
    ]
    assert (memory / "store.sqlite3").is_file()
