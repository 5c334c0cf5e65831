"""Issue 35, class 5: a full disk, injected (ENOSPC at the seams where the memory writes: SQLite's connection,
the index files' writes). A write raises DiskFullError naming the cause and what was stored, not a raw
sqlite3.OperationalError; close() likewise, not a raw OSError; a memory whose index files cannot be saved opens
and answers searches; nothing acknowledged is lost."""

from __future__ import annotations

import errno
import sqlite3

import numpy as np
import pytest
from hybrid_memory import DiskFullError, HashingEmbedder, HybridMemory, HybridMemoryError

NOTES = [{"chunk_id": f"n{i}", "text": f"note {i} on billing-service deploy {i * 3}"} for i in range(30)]


class _FullDisk:
    """A stand-in for the store's sqlite3.Connection that fails every statement that would grow the file, as
    SQLite does on a full disk (SQLITE_FULL), and passes everything else to the real connection."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def _check(self, sql):
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE", "REPLACE")):
            raise sqlite3.OperationalError("database or disk is full")

    def execute(self, sql, *args):
        self._check(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        self._check(sql)
        return self._conn.executemany(sql, *args)

    def __enter__(self):
        return self._conn.__enter__()

    def __exit__(self, *exc):
        return self._conn.__exit__(*exc)


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_and_close_on_a_full_disk_raise_library_errors_and_lose_nothing(tmp_path, monkeypatch):
    memory = HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16))
    memory.add(NOTES[:20])  # acknowledged
    store = memory.backend.store
    real = store._connection
    store._connection = _FullDisk(real)
    with pytest.raises(DiskFullError) as err:
        memory.add(NOTES[20:])
    assert not isinstance(err.value, sqlite3.Error)
    assert str(err.value) == (
        f"write: the disk holding the memory at {store.path} is full (SQLite: database or disk is full); this write "
        "was rolled back whole, so none of it was stored, and every write acknowledged before it is kept; free disk "
        "space and repeat it (searches still work)"
    )
    assert memory.count() == 20
    assert [r.chunk_id for r in memory.search("note 7 billing-service", top_k=1).results] == ["n7"]
    store._connection = real
    monkeypatch.setattr(np, "save", _no_space)  # the index files: the disk is still full
    with pytest.raises(DiskFullError) as err:
        memory.close()
    assert isinstance(err.value, OSError) and isinstance(err.value, HybridMemoryError)
    assert str(err.value) == (
        f"saving the indexes: the disk holding the memory at {tmp_path / 'm'} is full (No space left on device); "
        "every acknowledged write is in the store (20 chunks), and the indexes, derived from it, are rebuilt at the "
        "next open; free disk space (searches still work)"
    )
    with pytest.raises(HybridMemoryError, match="closed"):
        memory.search("note")  # closed all the same: the store was released
    assert not list((tmp_path / "m").glob(".*.tmp"))  # no half-written index folder left
    monkeypatch.undo()
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as again:
        assert sorted(c.chunk_id for c in again.iter_chunks()) == sorted(n["chunk_id"] for n in NOTES[:20])


def test_a_memory_whose_indexes_cannot_be_saved_opens_and_answers(tmp_path, monkeypatch, caplog):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        memory.add(NOTES)
        expected = [r.chunk_id for r in memory.search("note 7 billing-service", top_k=3).results]
    import shutil

    shutil.rmtree(tmp_path / "m" / "dense")  # the open must rebuild, and cannot save what it rebuilt
    monkeypatch.setattr(np, "save", _no_space)
    with caplog.at_level("WARNING"), HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        assert [r.chunk_id for r in memory.search("note 7 billing-service", top_k=3).results] == expected
        assert memory.count() == 30
        monkeypatch.undo()  # space freed before close: the rebuilt indexes are saved then
    assert any("is full" in r.getMessage() and "answers searches" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "m" / "dense" / "manifest.json").is_file()
