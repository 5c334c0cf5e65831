"""Several processes opening one new memory folder at once: the schema migration is serialised by SQLite's write
lock, so none fails with "duplicate column name" (a fresh user's finding: 3 of 12 trials of 4 processes)."""

import sqlite3
import threading

import pytest
from hybrid_memory.backends.embedded import store as store_module
from hybrid_memory.backends.embedded.store import _SCHEMA, SYSTEM_COLUMNS, SQLiteStore


def test_a_store_opening_while_another_migrates_waits_and_finds_the_columns(tmp_path, monkeypatch):
    db = tmp_path / "store.sqlite3"
    other = sqlite3.connect(db, isolation_level=None)  # "another process": the schema created, not yet migrated
    other.execute("PRAGMA journal_mode=WAL")
    other.executescript(_SCHEMA)
    other.execute("BEGIN IMMEDIATE")  # ... and it is migrating now: it holds the write lock

    waiting = threading.Event()
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):  # the opener's connection reports when it starts its migration transaction
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: waiting.set() if sql == "BEGIN IMMEDIATE" else None)
        return conn

    monkeypatch.setattr(store_module.sqlite3, "connect", connect)
    opened, failed = [], []

    def open_store():
        try:
            opened.append(SQLiteStore(db, busy_timeout=60))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failed.append(exc)

    opener = threading.Thread(target=open_store)
    opener.start()
    assert waiting.wait(60), "the opener never began its migration transaction"
    for name, kind in SYSTEM_COLUMNS.items():  # the other process adds every column while the opener waits
        other.execute(f"ALTER TABLE chunks ADD COLUMN {name} {kind}")
    other.execute("COMMIT")
    opener.join(60)
    assert failed == [] and len(opened) == 1
    columns = [row[1] for row in other.execute("PRAGMA table_info(chunks)")]
    assert columns == [
        "rowid",
        "chunk_id",
        "text",
        "source",
        "metadata",
        "content_hash",
        "created_at",
        "updated_at",
        "vector",
        *SYSTEM_COLUMNS,
    ]
    opened[0].set_meta("k", 1)
    assert opened[0].get_meta("k") == 1
    opened[0].close()
    other.close()


def test_an_operational_error_on_open_does_not_advise_moving_the_store(tmp_path, monkeypatch):
    from hybrid_memory import HashingEmbedder, HybridMemory, StoreFormatError

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)) as memory:
        memory.add([{"chunk_id": "a", "text": "alpha"}])

    def refuse(self):  # noqa: ANN001 - what SQLite raises for a failing open of a sound file
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SQLiteStore, "_migrate", refuse)
    with pytest.raises(StoreFormatError) as err:
        HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(8))
    assert str(err.value) == (
        f"opening {tmp_path / 'm' / 'store.sqlite3'} failed (disk I/O error); the store was not changed, so do not "
        "move or restore it: check the folder's permissions and free space, then open it again"
    )
    monkeypatch.undo()
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(8)) as memory:
        assert memory.count() == 1


def _open_and_add(path, i, barrier, results):  # a process of the test below
    from hybrid_memory import HashingEmbedder, HybridMemory

    barrier.wait()
    try:
        with HybridMemory(path, embedder=HashingEmbedder(8)) as memory:
            memory.add([{"chunk_id": f"c{i}", "text": f"chunk number {i}"}])
        results.put((i, "ok"))
    except Exception as exc:  # noqa: BLE001 - reported by the assertion
        results.put((i, f"{type(exc).__name__}: {exc}"))


def test_four_processes_creating_one_new_memory_at_once_all_store(tmp_path):
    """Before the fixes, 3-10 of 12 such rounds lost writes: "duplicate column name" from the migration, then
    "database is locked" from the switch to WAL. Four rounds, each released by one barrier."""
    import multiprocessing

    from hybrid_memory import HashingEmbedder, HybridMemory

    ctx = multiprocessing.get_context("spawn")  # no fork of the test process and its threads
    for round_ in range(4):
        path = str(tmp_path / f"new{round_}" / "mem")
        barrier, results = ctx.Barrier(4), ctx.Queue()
        workers = [ctx.Process(target=_open_and_add, args=(path, i, barrier, results)) for i in range(4)]
        for worker in workers:
            worker.start()
        outcomes = sorted(results.get(timeout=120) for _ in workers)
        for worker in workers:
            worker.join(120)
        assert outcomes == [(0, "ok"), (1, "ok"), (2, "ok"), (3, "ok")]
        with HybridMemory.open(path, embedder=HashingEmbedder(8)) as memory:
            assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["c0", "c1", "c2", "c3"]
