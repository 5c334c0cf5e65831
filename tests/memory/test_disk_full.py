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


class _NoRoomForShm:
    """A stand-in for a connection SQLite opened on a full disk: every statement fails as SQLite does when it
    cannot create the store's ``-wal`` / ``-shm`` files ("disk I/O error")."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def execute(self, *args):
        raise sqlite3.OperationalError("disk I/O error")

    executescript = execute


def _full_disk_at_open(monkeypatch):
    """Inject a full disk at the store's open: 0 bytes free, and every connection that would need a ``-shm``
    file (all but an ``immutable=1`` one, which reads the database file alone) fails its first statement."""
    from hybrid_memory.backends.embedded import store as store_module

    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        connection = real(database, *args, **kwargs)
        return connection if "immutable=1" in str(database) else _NoRoomForShm(connection)

    monkeypatch.setattr(store_module, "free_bytes", lambda folder: 0)
    monkeypatch.setattr(store_module.sqlite3, "connect", connect)


def test_a_memory_on_a_disk_too_full_for_its_wal_files_opens_read_only_and_answers(tmp_path, monkeypatch, caplog):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        memory.add(NOTES)  # acknowledged; a clean close leaves no -wal file
        expected = [r.chunk_id for r in memory.search("note 7 billing-service", top_k=3).results]
    _full_disk_at_open(monkeypatch)
    with caplog.at_level("WARNING"), HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        assert memory.backend.store.read_only is not None
        assert [r.chunk_id for r in memory.search("note 7 billing-service", top_k=3).results] == expected
        assert memory.count() == 30 and len(memory.get(["n3", "n29"])) == 2
        for write in (
            lambda: memory.add([{"chunk_id": "new", "text": "a new note"}]),
            lambda: memory.delete(["n1"]),
            lambda: memory.upsert([{"chunk_id": "n2", "text": "replaced"}]),
        ):
            with pytest.raises(DiskFullError) as err:
                write()
            assert str(err.value) == (
                f"write: the memory at {tmp_path / 'm'} was opened read-only because the disk holding it is full "
                "(0 bytes free; the writable open failed: disk I/O error); nothing of this write was stored, and "
                "every write acknowledged before it is kept; free disk space and open the memory again to write "
                "(searches still work)"
            )
        assert memory.count() == 30
    assert any("opened read-only" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()  # space freed: it opens for writing again, nothing lost
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        assert memory.backend.store.read_only is None
        memory.add([{"chunk_id": "new", "text": "a new note"}])
        assert memory.count() == 31


def test_a_full_disk_with_commits_still_in_the_wal_is_a_clear_error_not_a_wrong_read(tmp_path, monkeypatch):
    """Commits still in the -wal file (a process killed before its checkpoint) cannot be read without a -shm
    file: reading the database file alone (immutable) would miss them, so the open refuses, naming the cause."""
    writer = HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16))
    writer.add(NOTES)  # committed to the -wal file; the writer stays open (its process "killed" later)
    assert (tmp_path / "m" / "store.sqlite3-wal").stat().st_size > 0
    _full_disk_at_open(monkeypatch)
    with pytest.raises(DiskFullError) as err:
        HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16))
    assert str(err.value).startswith(
        f"open: the disk holding the memory at {tmp_path / 'm'} is full (0 bytes free) "
        "and the store cannot be opened even read-only (disk I/O error; its write-ahead "
        "log holds "
    )
    assert str(err.value).endswith("nothing stored was changed or lost: free disk space (a few MB) and open it again")
    monkeypatch.undo()
    writer.close()
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        assert memory.count() == 30
