"""Escapes a fresh-user review found (issue 12 follow-up): each input below used to raise something outside the
library's error tree (TypeError, sqlite3.ProgrammingError, FileNotFoundError, ValueError, RecursionError,
a logged KeyError) or to store a NUL character that SQLite's text functions cut. Each test asserts the exact
library error class and the part of its message that names the fix."""

from __future__ import annotations

import json
import logging
import re
import threading

import pytest
from hybrid_memory import (
    HybridMemory,
    HybridMemoryError,
    InvalidFilterError,
    InvalidRequestError,
    MemoryClosedError,
)
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.filters import validate_filter


# -- a scoped view takes no scope argument ----------------------------------------------------------------
@pytest.fixture
def view(memory):
    memory.upsert([{"chunk_id": "alice-1", "text": "alice rotated the db-prod-3 password", "user_id": "alice"}])
    return memory.scoped(user_id="alice")


@pytest.mark.parametrize(
    "call",
    [
        lambda v: v.search("password", scope={"user_id": "bob"}),
        lambda v: v.search({"search_text": "password"}, scope=None),
        lambda v: v.get(["alice-1"], scope={"user_id": "bob"}),
        lambda v: v.count(scope={"user_id": "bob"}),
        lambda v: v.iter_chunks(scope={"user_id": "bob"}),
        lambda v: v.delete(["alice-1"], scope={"user_id": "bob"}),
        lambda v: v.upsert([{"chunk_id": "x", "text": "y"}], scope={"user_id": "bob"}),
        lambda v: v.chunk_hashes(scope={"user_id": "bob"}),
    ],
)
def test_a_scope_argument_to_a_view_is_an_invalid_request_naming_the_fix(view, call):
    with pytest.raises(
        InvalidRequestError,
        match=r"takes no scope argument: this view is already bound to "
        r"\{'user_id': 'alice'\}; drop scope=",
    ):
        call(view)
    assert [c.chunk_id for c in view.iter_chunks()] == ["alice-1"]  # nothing deleted, nothing written


def test_a_scope_argument_to_an_async_view_search_is_refused(view):
    import asyncio

    with pytest.raises(InvalidRequestError, match="asearch\\(\\) of a scoped view takes no scope argument"):
        asyncio.run(view.asearch("password", scope={"user_id": "bob"}))


def test_other_unexpected_keywords_of_a_view_are_invalid_requests(view):
    with pytest.raises(
        InvalidRequestError,
        match=r"get\(\) of a scoped view got unexpected keyword argument\(s\) "
        r"limit, order",
    ):
        view.get(["alice-1"], order="asc", limit=3)
    with pytest.raises(InvalidRequestError, match="invalid search request: bogus: Extra inputs are not permitted"):
        view.search("password", bogus=1)
    assert [c.chunk_id for c in view.get(["alice-1"])] == ["alice-1"]


# -- a closed memory, and a search racing close() ------------------------------------------------------------
def test_every_call_on_a_closed_memory_is_a_memory_closed_error(tmp_path, embedder, note_chunks):
    memory = HybridMemory(tmp_path / "mem", embedder=embedder)
    memory.add(note_chunks())
    memory.close()
    for call in (
        lambda: memory.search("HTTP 504"),
        lambda: memory.get(["prod-504"]),
        lambda: memory.count(),
        lambda: list(memory.iter_chunks()),
        lambda: memory.upsert([{"chunk_id": "a", "text": "b"}]),
        lambda: memory.delete(["prod-504"]),
        lambda: memory.stats(),
    ):
        with pytest.raises(MemoryClosedError, match=r"this memory is closed; open it again with HybridMemory.open"):
            call()
    with pytest.raises(
        MemoryClosedError, match=r"HybridMemory.open\(path\) \(" + str(tmp_path / "mem").replace("/", "\\/")
    ):
        memory.search("x")  # the folder to reopen is named
    in_ram = HybridMemory(embedder=embedder)
    in_ram.close()
    with pytest.raises(MemoryClosedError, match="an in-RAM memory's chunks are gone with it"):
        in_ram.search("x")
    assert issubclass(MemoryClosedError, InvalidRequestError) and issubclass(MemoryClosedError, HybridMemoryError)
    with HybridMemory.open(tmp_path / "mem", embedder=embedder) as again:  # nothing stored was lost
        assert again.count() == 6


def test_the_store_of_a_closed_memory_raises_memory_closed_not_sqlite_errors(memory):
    store = memory.backend.store
    memory.close()
    for call in (store.data_version, lambda: store.get(["prod-504"]), lambda: store.texts([1]), store.rowids):
        with pytest.raises(MemoryClosedError, match="is closed; open it again"):
            call()


def test_a_search_racing_close_either_answers_or_raises_memory_closed(tmp_path, embedder, note_chunks):
    """The search has passed its open check and waits inside the engines' executor when close() starts: close
    waits for it (the search answers in full), and a search that starts once close() began gets
    MemoryClosedError, never sqlite3.ProgrammingError."""
    memory = HybridMemory(tmp_path / "mem", embedder=embedder)
    memory.add(note_chunks())
    expected = [r.chunk_id for r in memory.search("HTTP 504", top_k=2).results]
    assert sorted(expected) == ["prod-504", "stage-504"]
    inside, release = threading.Event(), threading.Event()
    real_search = memory._searcher.search

    def held_search(*args, **kwargs):
        inside.set()
        assert release.wait(10)
        return real_search(*args, **kwargs)

    memory._searcher.search = held_search
    results: dict[str, object] = {}

    def first():
        try:
            results["first"] = [r.chunk_id for r in memory.search("HTTP 504", top_k=2).results]
        except Exception as exc:  # noqa: BLE001 - the test reports what escaped
            results["first"] = exc

    searcher = threading.Thread(target=first)
    searcher.start()
    assert inside.wait(10)  # the first search holds the index lock, past its open check
    closer = threading.Thread(target=memory.close)
    closing = threading.Event()
    real_acquire_write = memory.backend.index_lock.acquire_write

    def acquire_write():
        if threading.current_thread() is closer:
            closing.set()  # close() has set the closed flag and now waits for the search holding the lock
        real_acquire_write()

    memory.backend.index_lock.acquire_write = acquire_write
    closer.start()
    assert closing.wait(10)
    with pytest.raises(MemoryClosedError, match="this memory is closed"):
        memory.search("HTTP 504")  # started after close() began
    assert closer.is_alive()  # close waits for the search in flight
    release.set()
    searcher.join(10)
    closer.join(10)
    assert results["first"] == expected  # the search in flight answered in full
    assert memory.backend.store.closed
    with pytest.raises(MemoryClosedError):
        memory.search("HTTP 504")


def test_a_search_that_reaches_the_store_after_close_gets_memory_closed(tmp_path, embedder, note_chunks):
    """The other interleaving: close() finishes between a search's open check and its first store access
    (the catch-up's PRAGMA data_version). Forced with a barrier inside the check."""
    memory = HybridMemory(tmp_path / "mem", embedder=embedder)
    memory.add(note_chunks())
    barrier = threading.Barrier(2, timeout=10)
    real_check = memory._check_open
    calls = {"n": 0}

    def check_then_wait():
        real_check()
        calls["n"] += 1
        if calls["n"] == 1 and threading.current_thread().name == "racer":
            barrier.wait()  # 1: checked open
            barrier.wait()  # 2: close() has finished

    memory._check_open = check_then_wait
    outcome: dict[str, object] = {}

    def racer():
        try:
            memory.search("HTTP 504")
            outcome["error"] = None
        except Exception as exc:  # noqa: BLE001
            outcome["error"] = exc

    thread = threading.Thread(target=racer, name="racer")
    thread.start()
    barrier.wait()
    memory.close()
    barrier.wait()
    thread.join(10)
    assert isinstance(outcome["error"], MemoryClosedError), outcome
    assert "is closed; open it again with HybridMemory.open(path)" in str(outcome["error"])


# -- impossible or unwritable memory paths ------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/proc/nope", "/proc/self/nope/deeper"])
def test_an_impossible_memory_path_is_an_invalid_request_naming_it(path, embedder):
    with pytest.raises(
        InvalidRequestError,
        match=rf"cannot create the memory folder {path} \(No such file or "
        r"directory\); give a folder this process can create and write",
    ):
        HybridMemory(path, embedder=embedder)


def test_a_memory_path_below_a_file_is_an_invalid_request(tmp_path, embedder):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidRequestError, match=r"cannot create the memory folder .*file/mem \(Not a directory\)"):
        HybridMemory(tmp_path / "file" / "mem", embedder=embedder)
    with pytest.raises(InvalidRequestError, match="is a file; give a directory"):
        HybridMemory(tmp_path / "file", embedder=embedder)


def test_an_unwritable_memory_folder_is_an_invalid_request(tmp_path, embedder, monkeypatch):
    import os

    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) else real_access(p, mode))
    with pytest.raises(InvalidRequestError, match=r"the memory folder .*ro is not writable by this process"):
        HybridMemory(folder, embedder=embedder)
    assert list(folder.iterdir()) == []  # nothing created


# -- the graph layer's empty question ------------------------------------------------------------------------
def test_global_search_of_a_blank_question_is_an_invalid_request(memory):
    pytest.importorskip("cdlib")
    from hybrid_memory.graph import GraphIndex

    graph = GraphIndex.build(memory)
    for question in ("", "   ", None):
        with pytest.raises(
            InvalidRequestError, match="question must be a non-empty string, got .*: ask about the memory"
        ):
            graph.global_search(question)
    with pytest.raises(InvalidRequestError, match="token_budget must be an int >= 1"):
        graph.global_search("database timeouts", token_budget=0)


# -- bounded reprs in filter errors --------------------------------------------------------------------------
def test_filter_errors_show_deep_and_huge_values_shortened():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidFilterError, match=r"a metadata filter must be an object, got list: \[\[\[\[") as info:
        validate_filter({"$and": [deep]})
    assert len(str(info.value)) < 200
    with pytest.raises(InvalidFilterError, match=r"\$and takes a non-empty list of filters, got 'x+\.\.\.x+'") as info:
        validate_filter({"$and": "x" * 100_000})
    assert len(str(info.value)) < 200
    with pytest.raises(
        InvalidFilterError,
        match=r"\$gt on 'n' takes a number or a string, got \[0, 1, 2, 3, 4, 5, "
        r"\.\.\.\]",
    ):
        validate_filter({"n": {"$gt": list(range(300_000))}})


# -- a BM25 merge while another process deletes rows -----------------------------------------------------------
def _downgrade_bm25_save_to_format_1(folder):
    """A bm25/ folder as format 1 wrote it (main segment only, no token cache), so the next merge has to load
    the main segment's texts from the store."""
    manifest_path = folder / "bm25" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = 1
    manifest_path.write_text(json.dumps(manifest))


def test_a_bm25_merge_survives_rows_another_process_deleted_meanwhile(tmp_path, embedder, caplog):
    folder = tmp_path / "mem"
    texts = {f"doc-{i}": f"runbook {i} restart the worker-{i} queue ERR_{i}" for i in range(12)}
    with HybridMemory(folder, embedder=embedder, compact_min=5) as first:
        first.upsert([{"chunk_id": cid, "text": text} for cid, text in texts.items()])
        first.flush()
        assert first.backend.sparse.delta_size == 0  # all in the main segment, which the save below writes
    _downgrade_bm25_save_to_format_1(folder)

    writer = HybridMemory(folder, embedder=embedder, compact_min=10_000, background_compaction=False)
    other = HybridMemory(folder, embedder=embedder, compact_min=10_000, background_compaction=False)
    try:
        assert len(writer.backend.sparse._tokens) == 0  # format 1: the merge must read the main segment's texts
        deleted_rowid = writer.backend.store.lookup(["doc-3"])["doc-3"][0]

        def texts_after_a_delete_elsewhere(rowids):
            other.delete(["doc-3"])  # commits between the merge's snapshot and its text load
            return writer.backend.store.texts(rowids)

        caplog.set_level(logging.DEBUG, logger="hybrid_memory")
        assert writer.backend.sparse.compact(texts_after_a_delete_elsewhere)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
        assert deleted_rowid not in writer.backend.sparse.ids().tolist()
        assert len(writer.backend.sparse._main_ids) == 11  # the merge happened, over the 11 rows still stored
        response = writer.search("ERR_3 worker-3", sparse_weight=1.0, dense_weight=0.0, top_k=3)
        assert "doc-3" not in [r.chunk_id for r in response.results]
        response = writer.search("ERR_7", sparse_weight=1.0, dense_weight=0.0, top_k=1)
        assert [r.chunk_id for r in response.results] == ["doc-7"]
        # the merged index scores exactly as one built from scratch over the rows still stored
        fresh = BM25Index(writer.backend.sparse.tokenizer)
        live = writer.backend.store.rowids()
        fresh.build(live, writer.backend.store.texts(live))
        for query in ("restart the queue", "ERR_5 worker-5", "runbook 11"):
            assert dict(writer.backend.sparse.search(query, k=20)) == pytest.approx(
                dict(fresh.search(query, k=20)), rel=1e-6
            )
    finally:
        writer.close()
        other.close()


# -- NUL characters --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, chunk",
    [
        ("text", {"chunk_id": "n1", "text": "alpha\x00beta"}),
        ("source", {"chunk_id": "n1", "text": "alpha beta", "source": "notes\x00.md"}),
    ],
)
def test_nul_in_stored_text_is_refused_with_its_position(memory, field, chunk):
    with pytest.raises(
        InvalidRequestError,
        match=rf"{field}: {field} contains a NUL character "
        rf"\('\\x00'\) at position 5; remove it",
    ):
        memory.upsert([chunk])
    assert memory.get(["n1"]) == [] and memory.count() == 6


@pytest.mark.parametrize("request_", [{"search_text": "HTTP\x00504"}, {"search_text": "HTTP 504", "query_id": "q\x00"}])
def test_nul_in_a_search_request_is_refused(memory, request_):
    with pytest.raises(InvalidRequestError, match=r"contains a NUL character \('\\x00'\) at position \d; remove it"):
        memory.search(request_)


def test_nul_free_text_round_trips_unchanged_through_the_store(tmp_path, embedder):
    text = "tab\tnewline\ncontrol\x01\x1f bell\x07 end"
    with HybridMemory(tmp_path / "mem", embedder=embedder) as memory:
        memory.upsert([{"chunk_id": "c", "text": text}])
    with HybridMemory.open(tmp_path / "mem", embedder=embedder) as memory:
        assert memory.get(["c"])[0].text == text
        row = memory.backend.store._conn.execute("SELECT length(text) FROM chunks").fetchone()
        assert row == (len(text),)  # SQLite sees the whole text (a NUL would have cut length() there)


# -- a Qdrant Edge shard and an embedded memory never share a folder (fresh-user review, session 3) -----------
@pytest.fixture
def embedded_folder(tmp_path, embedder, note_chunks):
    folder = tmp_path / "mem"
    with HybridMemory(folder, embedder=embedder) as memory:
        memory.add(note_chunks())
    return folder


def _listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("inside", ["", "shard", "bm25/shard"])
def test_an_edge_shard_inside_an_embedded_memory_is_refused(embedded_folder, embedder, inside):
    before = _listing(embedded_folder)
    edge_path = embedded_folder / inside if inside else embedded_folder
    where = "is the embedded memory folder" if not inside else f"is inside the embedded memory folder {embedded_folder}"
    with pytest.raises(
        InvalidRequestError,
        match=rf"edge_path {edge_path} {where} "
        rf"\(it holds store.sqlite3\); a Qdrant Edge "
        r"shard must not share a memory's folder: use another folder, e.g. "
        rf"{embedded_folder}-edge",
    ):
        HybridMemory.qdrant(edge_path=edge_path, embedder=embedder)
    assert _listing(embedded_folder) == before  # no shard file written, nothing of the memory touched
    with HybridMemory.open(embedded_folder, embedder=embedder) as memory:
        assert memory.count() == 6


def test_export_to_an_edge_path_inside_the_memory_is_exit_2_naming_the_fix(embedded_folder, capsys):
    from hybrid_memory.cli.app import main

    before = _listing(embedded_folder)
    code = main(
        [
            "export-qdrant",
            "--memory",
            str(embedded_folder),
            "--hashing-dim",
            "64",
            "--edge-path",
            str(embedded_folder),
            "-q",
        ]
    )
    assert code == 2
    assert "a Qdrant Edge shard must not share a memory's folder: use another folder" in capsys.readouterr().err
    assert _listing(embedded_folder) == before


def test_an_edge_path_that_is_a_file_is_an_invalid_request(tmp_path, embedder):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(
        InvalidRequestError,
        match=r"edge_path .*notes.txt is a file; a Qdrant Edge shard is a folder "
        r"\(created when absent\): give a folder path",
    ):
        HybridMemory.qdrant(edge_path=tmp_path / "notes.txt", embedder=embedder)
    with pytest.raises(
        InvalidRequestError,
        match=r"edge_path .*notes.txt/shard lies below the file .*notes.txt; a "
        r"Qdrant Edge shard is a folder",
    ):
        HybridMemory.qdrant(edge_path=tmp_path / "notes.txt" / "shard", embedder=embedder)
    assert (tmp_path / "notes.txt").read_text() == "x"


def test_an_embedded_memory_is_not_created_in_an_edge_shard_folder(tmp_path, embedder):
    pytest.importorskip("qdrant_edge", reason="the qdrant extra is not installed: pip install 'hybrid-memory[qdrant]'")
    shard = tmp_path / "shard"
    with HybridMemory.qdrant(edge_path=shard, embedder=embedder, payload_indexes=False) as edge:
        edge.add([{"chunk_id": "a", "text": "kept in the shard"}])
    before = _listing(shard)
    with pytest.raises(
        InvalidRequestError,
        match=r"holds a Qdrant Edge shard \(edge_config.json\), not an embedded "
        r"memory; open the shard with HybridMemory.qdrant\(edge_path=",
    ):
        HybridMemory(shard, embedder=embedder)
    assert _listing(shard) == before
    with HybridMemory.qdrant(edge_path=shard, embedder=embedder, payload_indexes=False) as edge:
        assert [c.chunk_id for c in edge.iter_chunks()] == ["a"]


# -- open() of a file, and a path that is not a path -------------------------------------------------------------
def test_open_of_a_regular_file_says_a_memory_is_a_folder(tmp_path, embedder):
    (tmp_path / "notes.jsonl").write_text("{}\n")
    with pytest.raises(
        InvalidRequestError,
        match=r"memory path .*notes.jsonl is a file; give a directory: a memory "
        r"is a folder \(holding store.sqlite3 and its index files\), not one "
        r"file$",
    ):
        HybridMemory.open(tmp_path / "notes.jsonl", embedder=embedder)
    assert (tmp_path / "notes.jsonl").read_text() == "{}\n"


def test_open_of_the_store_file_names_its_folder(embedded_folder, embedder):
    with pytest.raises(
        InvalidRequestError, match=rf"is a file; give a directory: .*: its folder is {embedded_folder}$"
    ):
        HybridMemory.open(embedded_folder / "store.sqlite3", embedder=embedder)
    with HybridMemory.open(embedded_folder, embedder=embedder) as memory:
        assert memory.count() == 6


def test_cli_memory_that_is_a_file_is_exit_2_saying_a_memory_is_a_folder(tmp_path, capsys):
    from hybrid_memory.cli.app import main

    (tmp_path / "notes.jsonl").write_text("{}\n")
    assert main(["search", "x", "--memory", str(tmp_path / "notes.jsonl"), "--hashing-dim", "8"]) == 2
    assert "is a file; give a directory: a memory is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("path, shown", [(5, "int: 5"), (b"mem", "bytes: b'mem'"), (["mem"], "list: ['mem']")])
def test_a_path_that_is_not_a_path_is_an_invalid_request_naming_what_is_accepted(path, shown, embedder):
    message = (
        rf"path must be a memory folder path, a str or os.PathLike such as pathlib.Path \(or None for a memory "
        rf"kept in process memory only\), got {re.escape(shown)}; a Qdrant memory is HybridMemory.qdrant"
    )
    with pytest.raises(InvalidRequestError, match=message):
        HybridMemory(path, embedder=embedder)
    with pytest.raises(InvalidRequestError, match=message):
        HybridMemory.open(path, embedder=embedder)


def test_an_empty_path_is_refused_not_taken_as_the_current_directory(tmp_path, embedder, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequestError, match=r"path is empty; give a memory folder, e.g. './memory'"):
        HybridMemory("", embedder=embedder)
    assert list(tmp_path.iterdir()) == []


# -- JSONL metadata keys reserved for operators name the file and line -------------------------------------------
def test_a_dollar_metadata_key_in_jsonl_names_the_file_and_line(tmp_path):
    from hybrid_memory.ingest import read_beir_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "fine"}\n\n{"_id": "b", "text": "x", "metadata": {"$gt": 1}}\n')
    chunks = read_beir_corpus(corpus)
    assert next(chunks).chunk_id == "a"
    with pytest.raises(
        InvalidRequestError,
        match=rf"^{re.escape(str(corpus))}, line 3: document 'b': metadata key "
        r"'\$gt' cannot be filtered on: a key may not start with '\$' "
        r"\(reserved for operators\); rename it$",
    ):
        next(chunks)


def test_cli_ingest_of_a_dollar_metadata_key_names_the_line_and_stores_nothing_of_it(tmp_path, capsys):
    from hybrid_memory.cli.app import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": "x", "metadata": {"$or": 1}}\n')
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(corpus), "--memory", memory, "--hashing-dim", "8", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{corpus}, line 2: document 'b': metadata key '$or' cannot be filtered on" in err
    # the line stops the ingest before its batch: nothing stored, so the new memory folder is removed
    assert f"nothing was stored, so the folder this run created for the memory, {tmp_path / 'mem'}, was removed" in err
    assert not (tmp_path / "mem").exists()


# -- `search --request FILE`: the file named, and one search text ------------------------------------------------
@pytest.fixture
def cli_memory(tmp_path, capsys):
    from hybrid_memory.cli.app import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha ERR_A"}\n{"_id": "b", "text": "beta ERR_B"}\n')
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(corpus), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    return memory


def _request_file(tmp_path, name, content):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.json", "skip", r"--request {path}: no such file \(give the path of a JSON file holding the request"),
        ("folder.json", None, r"--request {path} is a folder; give the path of a JSON file holding the request"),
        (
            "latin1.json",
            b'{"search_text": "caf\xe9"}',
            r"--request {path}: not UTF-8 text \(invalid continuation byte "
            r"at byte 20\); save it as UTF-8 JSON",
        ),
        (
            "bad.json",
            "{bad",
            r"--request {path}: invalid JSON \(Expecting property name enclosed in double quotes at "
            r"line 1 column 2\)",
        ),
    ],
)
def test_a_bad_request_file_is_exit_2_naming_the_file(tmp_path, capsys, cli_memory, name, content, message):
    from hybrid_memory.cli.app import main

    path = tmp_path / name if content == "skip" else _request_file(tmp_path, name, content)
    assert main(["search", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(message.format(path=re.escape(str(path))), err), err
    assert "Traceback" not in err


def test_an_unreadable_request_file_is_exit_2_naming_the_file(tmp_path, capsys, cli_memory, monkeypatch):
    from pathlib import Path

    from hybrid_memory.cli.app import main

    path = _request_file(tmp_path, "locked.json", '{"search_text": "alpha"}')
    import builtins

    real_open = builtins.open

    def fake_open(file, *args, **kwargs):  # root ignores chmod, so the permission error is simulated
        if Path(str(file)).name == "locked.json":
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert main(["search", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(path)]) == 2
    assert f"--request {path}: cannot be read (Permission denied); check its permissions" in capsys.readouterr().err


def test_a_positional_text_and_a_request_files_search_text_are_refused(tmp_path, capsys, cli_memory):
    from hybrid_memory.cli.app import main

    path = _request_file(tmp_path, "req.json", '{"search_text": "ERR_A", "top_k": 1}')
    assert main(["search", "ERR_B", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(path)]) == 2
    assert (
        f"two search texts: 'ERR_B' on the command line and search_text 'ERR_A' in --request {path}; give one "
        "(drop the positional text, or the file's search_text)"
    ) in capsys.readouterr().err
    # either alone works; a file without search_text takes the positional text, and --top-k replaces the file's
    assert main(["search", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(path)]) == 0
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["a"]
    no_text = _request_file(tmp_path, "no_text.json", '{"top_k": 1}')
    assert main(["search", "ERR_B", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(no_text)]) == 0
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["b"]
    assert main(["search", "--memory", cli_memory, "--hashing-dim", "8", "--request", str(path), "--top-k", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["total_retrieved"] == 2


# -- an empty .md of a folder is counted and logged ---------------------------------------------------------------
def test_empty_files_of_a_folder_are_counted_and_logged(tmp_path, capsys, caplog):
    from hybrid_memory.cli.app import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("alpha ERR_GOOD1")
    (docs / "empty.md").write_text("")
    (docs / "blank.txt").write_text("  \n\t\n")
    memory = str(tmp_path / "mem")
    caplog.set_level(logging.INFO, logger="hybrid_memory")
    assert main(["ingest", str(docs), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ingested"], summary["empty_files"], summary["skipped_files"], summary["chunks"]) == (1, 2, 0, 1)
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("hybrid_memory")]
    assert ("INFO", f"{docs / 'blank.txt'} holds no text (empty or white space only): no chunk") in messages
    assert ("INFO", f"{docs / 'empty.md'} holds no text (empty or white space only): no chunk") in messages
    assert (
        "WARNING",
        f"2 files held no text (empty or white space only) and gave no chunk: {docs / 'blank.txt'}, "
        f"{docs / 'empty.md'}",
    ) in messages


def test_read_text_folder_reports_empty_files_to_on_empty(tmp_path):
    from hybrid_memory.ingest import read_text_folder

    (tmp_path / "a.md").write_text("# Title\n\nbody")
    (tmp_path / "b.md").write_text("\n\n")
    empty = []
    chunks = list(read_text_folder(tmp_path, id_prefix="", on_empty=empty.append))
    assert [c.chunk_id for c in chunks] == ["a.md#0"]
    assert empty == [tmp_path / "b.md"]


# -- export-qdrant --api-key: sent to --url, QDRANT_API_KEY read when absent ---------------------------------------
def test_export_qdrant_help_says_where_the_api_key_goes(capsys):
    from hybrid_memory.cli.app import main

    with pytest.raises(SystemExit):
        main(["export-qdrant", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "API key of the Qdrant server given by --url, sent to that server only (qdrant-client's api-key header); "
        "when the flag is absent the QDRANT_API_KEY environment variable is read"
    ) in help_text


@pytest.mark.parametrize(
    "flag, env, sent",
    [(None, "from-env", "from-env"), ("from-flag", "from-env", "from-flag"), (None, None, None), (None, "", None)],
)
def test_export_qdrant_sends_the_flag_or_the_environment_key(
    tmp_path, capsys, cli_memory, monkeypatch, flag, env, sent
):
    pytest.importorskip(
        "qdrant_client", reason="the qdrant extra is not installed: pip install 'hybrid-memory[qdrant]'"
    )
    import qdrant_client
    from hybrid_memory.cli.app import main

    seen = {}

    class Recorder:  # stands for qdrant_client.QdrantClient: records what the CLI gives it, then fails to connect
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)
            raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(qdrant_client, "QdrantClient", Recorder)
    if env is None:
        monkeypatch.delenv("QDRANT_API_KEY", raising=False)
    else:
        monkeypatch.setenv("QDRANT_API_KEY", env)
    argv = ["export-qdrant", "--memory", cli_memory, "--hashing-dim", "8", "--url", "http://127.0.0.1:1", "-q"]
    assert main(argv + (["--api-key", flag] if flag else [])) == 2
    assert seen == {
        "url": "http://127.0.0.1:1",
        "api_key": sent,
        "check_compatibility": False,
    }  # no version-check warning
    capsys.readouterr()


def test_export_qdrant_refuses_an_api_key_with_an_edge_path(tmp_path, capsys, cli_memory):
    from hybrid_memory.cli.app import main

    argv = [
        "export-qdrant",
        "--memory",
        cli_memory,
        "--hashing-dim",
        "8",
        "--edge-path",
        str(tmp_path / "shard"),
        "--api-key",
        "k",
    ]
    assert main(argv) == 2
    assert "--edge-path takes no --url, --api-key or cluster options" in capsys.readouterr().err
    assert not (tmp_path / "shard").exists()


def test_a_qdrant_local_mode_folder_inside_an_embedded_memory_is_refused(embedded_folder, embedder, tmp_path):
    pytest.importorskip(
        "qdrant_client", reason="the qdrant extra is not installed: pip install 'hybrid-memory[qdrant]'"
    )
    before = _listing(embedded_folder)
    with pytest.raises(
        InvalidRequestError,
        match=rf"client_or_url {embedded_folder} is the embedded memory "
        r"folder \(it holds store.sqlite3\); a "
        r"qdrant-client local-mode folder must not share a memory's folder: "
        rf"use another folder, e.g. {embedded_folder}-qdrant$",
    ):
        HybridMemory.qdrant(str(embedded_folder), embedder=embedder)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(
        InvalidRequestError,
        match=r"client_or_url .*notes.txt is a file; a qdrant-client local-mode "
        r"folder is a folder \(created when absent\)",
    ):
        HybridMemory.qdrant(str(tmp_path / "notes.txt"), embedder=embedder)
    assert _listing(embedded_folder) == before
    with HybridMemory.qdrant(str(tmp_path / "local"), embedder=embedder, payload_indexes=False) as local:
        local.add([{"chunk_id": "a", "text": "a folder of its own works"}])
        assert local.count() == 1


# -- two search texts: one in the request, another as search_text= ------------------------------------------
@pytest.mark.parametrize("request_", [{"search_text": "PostgreSQL"}, "PostgreSQL"])
def test_two_different_search_texts_are_refused_naming_both_and_the_fix(memory, request_):
    with pytest.raises(
        InvalidRequestError,
        match=r"two search texts: 'PostgreSQL' in the request and "
        r"search_text='Elasticsearch' as a keyword; give the search "
        r"text once \(drop search_text=, or leave it out of the request\)",
    ):
        memory.search(request_, search_text="Elasticsearch")
    model = memory.make_request("PostgreSQL", top_k=2)
    with pytest.raises(InvalidRequestError, match="two search texts"):
        memory.search(model, search_text="Elasticsearch")
    with pytest.raises(InvalidRequestError, match="two search texts"):
        memory.scoped(user_id="alice").search(request_, search_text="Elasticsearch")
    assert memory.count() == 6  # nothing stored is touched


def test_the_same_search_text_twice_is_accepted_and_documented_overrides_still_override(memory):
    text = "PostgreSQL Elasticsearch"  # BM25 alone (dense_weight=0): three notes hold one of the two words
    assert len(memory.search({"search_text": text, "top_k": 5}, dense_weight=0).results) == 3
    response = memory.search({"search_text": text, "top_k": 5}, search_text=text, top_k=1, dense_weight=0)
    assert len(response.results) == 1  # top_k= overrides the request's top_k, as documented
    # metadata_filter= is documented as an override of the request's filter: the keyword's filter is the one used
    response = memory.search(
        {"search_text": "PostgreSQL HTTP 504", "metadata_filter": {"environment": "staging"}},
        metadata_filter={"environment": "production"},
        top_k=5,
        dense_weight=0,
    )
    assert [r.chunk_id for r in response.results] == ["prod-504"]
