"""Escapes a fresh-user review found (issue 12 follow-up): each input below used to raise something outside the
library's error tree (TypeError, sqlite3.ProgrammingError, FileNotFoundError, ValueError, RecursionError,
a logged KeyError) or to store a NUL character that SQLite's text functions cut. Each test asserts the exact
library error class and the part of its message that names the fix."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from hybrid_memory import (
    HashingEmbedder,
    HybridMemory,
    HybridMemoryError,
    InvalidFilterError,
    InvalidRequestError,
    MemoryClosedError,
)
from hybrid_memory.filters import validate_filter
from hybrid_memory.sparse import BM25Index


# -- a scoped view takes no scope argument ----------------------------------------------------------------
@pytest.fixture
def view(memory):
    memory.upsert([{"chunk_id": "alice-1", "text": "alice rotated the db-prod-3 password", "user_id": "alice"}])
    return memory.scoped(user_id="alice")


@pytest.mark.parametrize("call", [
    lambda v: v.search("password", scope={"user_id": "bob"}),
    lambda v: v.search({"search_text": "password"}, scope=None),
    lambda v: v.get(["alice-1"], scope={"user_id": "bob"}),
    lambda v: v.count(scope={"user_id": "bob"}),
    lambda v: v.iter_chunks(scope={"user_id": "bob"}),
    lambda v: v.delete(["alice-1"], scope={"user_id": "bob"}),
    lambda v: v.upsert([{"chunk_id": "x", "text": "y"}], scope={"user_id": "bob"}),
    lambda v: v.chunk_hashes(scope={"user_id": "bob"}),
])
def test_a_scope_argument_to_a_view_is_an_invalid_request_naming_the_fix(view, call):
    with pytest.raises(InvalidRequestError, match=r"takes no scope argument: this view is already bound to "
                                                   r"\{'user_id': 'alice'\}; drop scope="):
        call(view)
    assert [c.chunk_id for c in view.iter_chunks()] == ["alice-1"]  # nothing deleted, nothing written


def test_a_scope_argument_to_an_async_view_search_is_refused(view):
    import asyncio

    with pytest.raises(InvalidRequestError, match="asearch\\(\\) of a scoped view takes no scope argument"):
        asyncio.run(view.asearch("password", scope={"user_id": "bob"}))


def test_other_unexpected_keywords_of_a_view_are_invalid_requests(view):
    with pytest.raises(InvalidRequestError, match=r"get\(\) of a scoped view got unexpected keyword argument\(s\) "
                                                   r"limit, order"):
        view.get(["alice-1"], order="asc", limit=3)
    with pytest.raises(InvalidRequestError, match="invalid search request: bogus: Extra inputs are not permitted"):
        view.search("password", bogus=1)
    assert [c.chunk_id for c in view.get(["alice-1"])] == ["alice-1"]


# -- a closed memory, and a search racing close() ------------------------------------------------------------
def test_every_call_on_a_closed_memory_is_a_memory_closed_error(tmp_path, embedder, note_chunks):
    memory = HybridMemory(tmp_path / "mem", embedder=embedder)
    memory.add(note_chunks())
    memory.close()
    for call in (lambda: memory.search("HTTP 504"), lambda: memory.get(["prod-504"]), lambda: memory.count(),
                 lambda: list(memory.iter_chunks()), lambda: memory.upsert([{"chunk_id": "a", "text": "b"}]),
                 lambda: memory.delete(["prod-504"]), lambda: memory.stats()):
        with pytest.raises(MemoryClosedError, match=r"this memory is closed; open it again with HybridMemory.open"):
            call()
    assert issubclass(MemoryClosedError, InvalidRequestError) and issubclass(MemoryClosedError, HybridMemoryError)
    with HybridMemory.open(tmp_path / "mem", embedder=embedder) as again:  # nothing stored was lost
        assert again.count() == 6


def test_the_store_of_a_closed_memory_raises_memory_closed_not_sqlite_errors(memory):
    store = memory._store
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
    real_acquire_write = memory._index_lock.acquire_write

    def acquire_write():
        if threading.current_thread() is closer:
            closing.set()  # close() has set the closed flag and now waits for the search holding the lock
        real_acquire_write()

    memory._index_lock.acquire_write = acquire_write
    closer.start()
    assert closing.wait(10)
    with pytest.raises(MemoryClosedError, match="this memory is closed"):
        memory.search("HTTP 504")  # started after close() began
    assert closer.is_alive()  # close waits for the search in flight
    release.set()
    searcher.join(10)
    closer.join(10)
    assert results["first"] == expected  # the search in flight answered in full
    assert memory._store.closed
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
    with pytest.raises(InvalidRequestError, match=rf"cannot create the memory folder {path} \(No such file or "
                                                  r"directory\); give a folder this process can create and write"):
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
        with pytest.raises(InvalidRequestError, match="question must be a non-empty string, got .*: ask about the "
                                                      "memory"):
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
    with pytest.raises(InvalidFilterError, match=r"\$gt on 'n' takes a number or a string, got \[0, 1, 2, 3, 4, 5, "
                                                 r"\.\.\.\]"):
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
        assert first._sparse.delta_size == 0  # all in the main segment, which the save below writes
    _downgrade_bm25_save_to_format_1(folder)

    writer = HybridMemory(folder, embedder=embedder, compact_min=10_000, background_compaction=False)
    other = HybridMemory(folder, embedder=embedder, compact_min=10_000, background_compaction=False)
    try:
        assert len(writer._sparse._tokens) == 0  # format 1: the merge must read the main segment's texts
        deleted_rowid = writer._store.lookup(["doc-3"])["doc-3"][0]

        def texts_after_a_delete_elsewhere(rowids):
            other.delete(["doc-3"])  # commits between the merge's snapshot and its text load
            return writer._store.texts(rowids)

        caplog.set_level(logging.DEBUG, logger="hybrid_memory")
        assert writer._sparse.compact(texts_after_a_delete_elsewhere)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
        assert deleted_rowid not in writer._sparse.ids().tolist()
        assert len(writer._sparse._main_ids) == 11  # the merge happened, over the 11 rows still stored
        response = writer.search("ERR_3 worker-3", sparse_weight=1.0, dense_weight=0.0, top_k=3)
        assert "doc-3" not in [r.chunk_id for r in response.results]
        response = writer.search("ERR_7", sparse_weight=1.0, dense_weight=0.0, top_k=1)
        assert [r.chunk_id for r in response.results] == ["doc-7"]
        # the merged index scores exactly as one built from scratch over the rows still stored
        fresh = BM25Index(writer._sparse.tokenizer)
        live = writer._store.rowids()
        fresh.build(live, writer._store.texts(live))
        for query in ("restart the queue", "ERR_5 worker-5", "runbook 11"):
            assert dict(writer._sparse.search(query, k=20)) == pytest.approx(dict(fresh.search(query, k=20)), rel=1e-6)
    finally:
        writer.close()
        other.close()


# -- NUL characters --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field, chunk", [
    ("text", {"chunk_id": "n1", "text": "alpha\x00beta"}),
    ("source", {"chunk_id": "n1", "text": "alpha beta", "source": "notes\x00.md"}),
])
def test_nul_in_stored_text_is_refused_with_its_position(memory, field, chunk):
    with pytest.raises(InvalidRequestError, match=rf"{field}: Value error, {field} contains a NUL character "
                                                  rf"\('\\x00'\) at position 5; remove it"):
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
        row = memory._store._conn.execute("SELECT length(text) FROM chunks").fetchone()
        assert row == (len(text),)  # SQLite sees the whole text (a NUL would have cut length() there)

