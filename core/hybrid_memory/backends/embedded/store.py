"""SQLite store: the source of truth for chunks, metadata, timestamps, content hashes and vectors.

Every content version of a chunk gets a fresh ``rowid`` (``AUTOINCREMENT``: never reused), and the
BM25 and FAISS indexes are keyed by rowid. An index is therefore in sync exactly when its set of rowids
equals the store's, which is how a reopened memory finds out what a saved index misses.

Several processes may open one store. Every write appends to the ``changes`` log in the same
transaction (``seq`` ascending, ``rowid``, ``kind``: added / removed / metadata changed), so a process
that sees ``PRAGMA data_version`` move (another connection committed) replays the log from the last
``seq`` it applied (:meth:`SQLiteStore.changes_since`) instead of rebuilding its indexes. The log keeps
the last ``log_keep`` entries; a process that fell further behind reconciles by diffing rowids.

Durability: WAL journal. ``synchronous="full"`` (the default) fsyncs the WAL at every commit, so a write
that returned survives power loss; ``"normal"`` survives a crash of the process (SIGKILL) but may lose the
last transactions on power loss or an OS crash (SQLite docs, "PRAGMA synchronous").
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..._exceptions import DiskFullError, MemoryClosedError, StoreBusyError, is_disk_full
from ...changes import ChangeSet
from ...dedup import content_hash  # re-exported: the store's column; defined on the ground floor
from ...filters import compile_filter, register_sql_functions
from ...models import StoredChunk

__all__ = [
    "ADDED",
    "KEY_MEMO_MAX",
    "KEY_PREFILL_BYTES",
    "METADATA",
    "REMOVED",
    "CommitResult",
    "NewRow",
    "SQLiteStore",
    "content_hash",
]

logger = logging.getLogger(__name__)

ADDED, REMOVED, METADATA = 0, 1, 2
"""``changes.kind``: a rowid was inserted, deleted (or replaced by a new version), or had its metadata or
system columns (scope, event time, merges) updated."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL DEFAULT '{}',
    content_hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    vector BLOB
);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rowid INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    chunk_id TEXT NOT NULL
);
"""

SYSTEM_COLUMNS = {
    "tenant": "TEXT",
    "user_id": "TEXT",
    "agent_id": "TEXT",
    "session_id": "TEXT",
    "valid_from": "REAL",
    "valid_to": "REAL",
    "superseded_by": "TEXT",
    "merged": "TEXT NOT NULL DEFAULT '[]'",
    "ord": "INTEGER",
}
"""Columns beside the chunk's own fields: scope (tenant, user_id, agent_id, session_id), event time
(valid_from, valid_to, superseded_by) and dedup merges (JSON list of ``[chunk_id, source]``). A store written
before they existed gets them by ``ALTER TABLE ADD COLUMN`` (NULL / '[]' for the old rows) when it opens.
``ord`` is the chunk's place in :meth:`SQLiteStore.iter_chunks` (its first rowid, kept across upserts)."""
_SCOPE_COLUMNS = ("tenant", "user_id", "agent_id", "session_id")
_INDEXES = {
    "chunks_tenant": "tenant",
    "chunks_user_id": "user_id",
    "chunks_agent_id": "agent_id",
    "chunks_session_id": "session_id",
    "chunks_content_hash": "content_hash",
    "chunks_ord": "ord",
}
_SYSTEM_SELECT = ", ".join(c for c in SYSTEM_COLUMNS if c != "ord")
_SYSTEM_VALUES = tuple(c for c in SYSTEM_COLUMNS if c != "ord")


def scope_sql(scope: Mapping[str, str] | None, as_of: float | None) -> tuple[str, list[Any]]:
    """SQL restricting rows to a scope and to the facts valid at ``as_of``.

    Args:
        scope: bound scope fields (``{"user_id": "u1"}``); each must equal (an unbound field is free).
        as_of: Unix seconds; rows with ``valid_from <= as_of < valid_to`` pass (a NULL bound is open).

    Returns:
        ``(sql, params)``, ``("1", [])`` when neither is given. Column names come from a fixed list, values
        are bound parameters.
    """
    clauses: list[str] = []
    params: list[Any] = []
    for name, value in (scope or {}).items():
        if name not in _SCOPE_COLUMNS:
            raise ValueError(f"unknown scope field {name!r}")
        clauses.append(f"{name} = ?")
        params.append(value)
    if as_of is not None:
        clauses.append("(valid_from IS NULL OR valid_from <= ?) AND (valid_to IS NULL OR valid_to > ?)")
        params.extend([as_of, as_of])
    return (" AND ".join(clauses) or "1"), params


KEY_MEMO_MAX = 1 << 21
"""At most this many rowid -> chunk_id answers are kept in memory by :meth:`SQLiteStore.chunk_ids_by_rowid`
(about 150 MB at 60-byte ids); beyond it the memo is emptied and fills again."""

KEY_PREFILL_BYTES = 1 << 28
""":meth:`SQLiteStore.memoize_keys` reads the ids at open only while they take at most this many bytes together
(256 MB: the two strings it reads stay far below SQLite's 1 GB string limit, ``SQLITE_MAX_LENGTH``)."""

_FILTERED_SYSTEM = ("tenant", "user_id", "agent_id", "session_id", "valid_from", "valid_to")
"""System columns the filter index keeps (hybrid_memory.backends.embedded.filter_index.INDEXED_SYSTEM_FIELDS)."""


@dataclass(frozen=True)
class CommitResult:
    """What :meth:`SQLiteStore.write` committed, and what other processes had committed before it."""

    rowids: list[int]
    """The new rowids, in the order of the written rows."""
    seq: int
    """The change-log position after this write (every earlier entry is covered by ``pending`` + this write)."""
    pending: ChangeSet | None
    """Other processes' changes since ``since_seq``, read inside this write's transaction (so they precede
    it); None when ``since_seq`` is older than the log keeps (reconcile by rowids instead)."""


class WriteConflict(Exception):
    """Internal: the rows a write was prepared against changed in another process; prepare it again."""


@dataclass
class _Transaction:
    pending: ChangeSet | None
    rowids: list[int] = field(default_factory=list)
    log: list[tuple[int, int, str]] = field(default_factory=list)
    result: CommitResult | None = None

    def committed(self) -> CommitResult:
        """The result, set when the transaction committed. Raises RuntimeError before that."""
        if self.result is None:
            raise RuntimeError("the write transaction has not committed")
        return self.result


@dataclass(frozen=True)
class NewRow:
    """A chunk version about to be written."""

    chunk_id: str
    """Caller's id."""
    text: str
    """Indexed text."""
    source: str
    """Where it came from."""
    metadata: Mapping[str, Any]
    """JSON-serialisable metadata."""
    vector: np.ndarray
    """float32 (dim,), L2-normalised."""
    system: Mapping[str, Any] = field(default_factory=dict)
    """Values of :data:`SYSTEM_COLUMNS` (scope, event time, merges); missing ones are NULL / '[]'."""


_ROOM_TO_OPEN = 1 << 20
"""Free bytes (1 MiB) below which a failed writable open of the store is taken for a full disk and retried
read-only (SQLite needs 32 KiB for the ``-shm`` index and room for the ``-wal`` file)."""


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged process may still write on the file system holding ``folder`` (``statvfs``'s
    ``f_bavail * f_frsize``); None where that cannot be read."""
    import os

    try:
        stats = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows), or the folder is gone
        return None
    return int(stats.f_bavail * stats.f_frsize)


class SQLiteStore:
    """Chunks and their vectors in one SQLite database (standard library ``sqlite3``).

    Args:
        path: database file; None keeps everything in memory.
        synchronous: ``"full"`` (default: a returned write survives power loss) or ``"normal"`` (survives
            a killed process, not a power cut); SQLite's ``PRAGMA synchronous`` in WAL mode.
        busy_timeout: seconds a write waits for another process's write transaction before it raises
            :class:`~hybrid_memory.StoreBusyError` (default 30).
        log_keep: change-log entries kept for other processes to catch up from (default 100,000).

    One connection is shared by the memory's threads behind a lock; writes are ``BEGIN IMMEDIATE``
    transactions, so a crash leaves either the old or the new state, never a half-written chunk, and
    writers in several processes are serialised by SQLite.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
        log_keep: int = 100_000,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        self.path = path
        self.log_keep = int(log_keep)
        self._lock = threading.RLock()
        self._key_memo: dict[int, str] = {}  # rowid -> chunk_id, immutable (see chunk_ids_by_rowid)
        self.read_only: str | None = None
        """None, or why the store was opened read-only (a full disk: :meth:`_open_read_only`); every write then
        raises :class:`~hybrid_memory.DiskFullError` with it."""
        self._connection: sqlite3.Connection | None = sqlite3.connect(
            ":memory:" if path is None else str(path), check_same_thread=False, timeout=busy_timeout
        )
        try:
            if path is not None:
                self._enable_wal(busy_timeout)
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            # a deleted chunk's text is overwritten with zeros, not left in a free page (issue 35); many builds,
            # Debian's among them, default to it, others do not (SQLite docs, "PRAGMA secure_delete")
            self._conn.execute("PRAGMA secure_delete=ON")
            with self._lock, self._busy("open"):
                self._conn.executescript(_SCHEMA)
                register_sql_functions(self._conn)  # hm_canonical_json, for list equality in filter SQL
                self._migrate()
        except (sqlite3.OperationalError, DiskFullError) as exc:
            free = None if path is None else free_bytes(path.parent)
            if path is None or not path.exists() or free is None or free >= _ROOM_TO_OPEN:
                raise
            self._open_read_only(exc, free)

    def _open_read_only(self, failure: BaseException, free: int) -> None:
        """Open the store read-only after the writable open failed on a full disk (issue 35): a memory on a full
        disk opens and answers searches, and every write raises DiskFullError naming the cause.

        SQLite cannot open a WAL database for writing without its ``-wal`` and ``-shm`` files, which it creates
        (the ``-shm`` index is 32 KiB); on a full disk that fails ("disk I/O error"). Read-only, SQLite reads a
        WAL database through existing ``-wal`` / ``-shm`` files (``mode=ro``), or, when the ``-wal`` file is
        absent or empty (a memory closed cleanly: every commit is in the database file), straight from the
        database file (``immutable=1``: no ``-shm`` needed). SQLite's documentation: "WAL-mode read-only
        databases" and the ``immutable`` URI parameter. This process writes nothing, and no other can while the
        disk stays full; once space is freed, another process's writes are not seen through an immutable
        connection (SQLite may then report a damaged page to a read: a read error, never a change to the file),
        so the memory is to be opened again then, as the warning says.

        Raises:
            DiskFullError: neither works (``-wal`` holds commits not yet in the database file, and no ``-shm``
                can be made to read them): the message names the folder, the free space and the fix.
        """
        assert self.path is not None
        if self._connection is not None:
            self._connection.close()
        self._connection = None
        wal = self.path.with_name(self.path.name + "-wal")
        wal_size = wal.stat().st_size if wal.exists() else 0
        cause = f"the disk holding it is full ({free:,} bytes free; the writable open failed: {failure})"
        uris = [f"file:{self.path}?mode=ro"] + ([f"file:{self.path}?mode=ro&immutable=1"] if wal_size == 0 else [])
        last: BaseException = failure
        for uri in uris:
            connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                present = {row[1] for row in connection.execute("PRAGMA table_info(chunks)")}
            except sqlite3.Error as exc:
                connection.close()
                last = exc
                continue
            if not present or any(name not in present for name in SYSTEM_COLUMNS):
                connection.close()  # a store written before the system columns needs a migration: a write
                break
            register_sql_functions(connection)
            self._connection = connection
            self.read_only = cause
            logger.warning(
                "the memory at %s is opened read-only: %s; it answers searches, and writes raise "
                "DiskFullError until disk space is freed and it is opened again",
                self.path.parent,
                cause,
            )
            return
        raise DiskFullError(
            f"open: the disk holding the memory at {self.path.parent} is full ({free:,} bytes free) and the store "
            f"cannot be opened even read-only ({last}; its write-ahead log holds {wal_size:,} bytes of commits that "
            "SQLite needs room to read); nothing stored was changed or lost: free disk space (a few MB) and open it "
            "again"
        ) from failure

    def _refuse_write(self, what: str) -> None:
        """Raise DiskFullError if the store was opened read-only (a full disk at open)."""
        if self.read_only is not None:
            raise DiskFullError(
                f"{what}: the memory at {self.path.parent if self.path else None} was opened read-only because "
                f"{self.read_only}; nothing of this {what} was stored, and every write acknowledged before it is "
                "kept; free disk space and open the memory again to write (searches still work)"
            )

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection; MemoryClosedError once :meth:`close` ran (callers hold ``self._lock``, which
        :meth:`close` takes too, so a call either runs on the open connection or gets this error, never
        sqlite3's "Cannot operate on a closed database")."""
        connection = self._connection
        if connection is None:
            raise MemoryClosedError(
                f"the memory{'' if self.path is None else ' at ' + str(self.path.parent)} is closed; open it "
                "again with HybridMemory.open(path)"
            )
        return connection

    def _enable_wal(self, timeout: float) -> None:
        """Put the store in WAL mode (a no-op when it is), retrying for up to ``timeout`` seconds.

        Several processes opening one new folder at once all ask for the switch; SQLite answers the ones that
        find the file in use with "database is locked" at once, without its busy handler, or leaves the mode as
        it was, so the switch is retried with a growing pause (1 ms doubling to 50 ms) until one of them finds
        the store in WAL mode.

        Raises:
            StoreBusyError: still not in WAL mode after ``timeout`` seconds.
        """
        deadline = time.monotonic() + max(float(timeout), 0.0)
        pause = 0.001
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() == "wal":
                    return
                problem = f"journal mode stayed {mode}"
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                problem = str(exc)
            if time.monotonic() >= deadline:
                raise StoreBusyError(
                    f"open: the memory at {self.path} could not be put in WAL mode within the busy timeout "
                    f"({timeout} s; {problem}): another process kept it in use; retry, or open it with a longer "
                    "busy_timeout"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _migrate(self) -> None:
        """Add the :data:`SYSTEM_COLUMNS` and their indexes to a store written before they existed (every new
        store too: :data:`_SCHEMA` creates the chunk's own columns only).

        The columns are read and added in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock
        first: several processes opening the same new folder at once then migrate one after the other, and each
        later one finds the columns there. Read outside the lock, two could both miss a column and the second's
        ``ALTER TABLE`` fail with "duplicate column name" (a fresh user's finding: 3 of 12 trials of 4 processes).
        """
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")  # waits up to the busy timeout for another process's write
            try:
                present = {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}
                for name, kind in SYSTEM_COLUMNS.items():
                    if name not in present:
                        conn.execute(f"ALTER TABLE chunks ADD COLUMN {name} {kind}")
                # stores written before the ord column: a chunk's place is its rowid (its insertion order)
                conn.execute("UPDATE chunks SET ord = rowid WHERE ord IS NULL")
                for index, column in _INDEXES.items():
                    conn.execute(f"CREATE INDEX IF NOT EXISTS {index} ON chunks ({column})")
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    @contextlib.contextmanager
    def _busy(self, what: str) -> Iterator[None]:
        """Turn SQLite's "database is locked" (another process held the write lock too long) into StoreBusyError."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreBusyError(
                    f"{what}: the memory at {self.path} stayed locked by another process's write for longer than "
                    f"the busy timeout ({exc}); retry, or open it with a longer busy_timeout"
                ) from exc
            if is_disk_full(exc):
                raise DiskFullError(
                    f"{what}: the disk holding the memory at {self.path} is full (SQLite: {exc}); this {what} was "
                    "rolled back whole, so none of it was stored, and every write acknowledged before it is kept; "
                    "free disk space and repeat it (searches still work)"
                ) from exc
            raise

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes when another connection (any process) commits; cheap."""
        with self._lock:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    # -- meta ---------------------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        """JSON-decoded value stored under key, or None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under key."""
        self._refuse_write("set_meta")
        with self._lock, self._busy("set_meta"), self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    # -- writes -------------------------------------------------------------------------------------
    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """chunk_id -> (rowid, content_hash) for the ids that are stored."""
        with self._lock:
            return self._lookup(chunk_ids)

    def _lookup(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        found: dict[str, tuple[int, str]] = {}
        for start in range(0, len(chunk_ids), 500):
            batch = list(chunk_ids[start : start + 500])
            marks = ",".join("?" * len(batch))
            for chunk_id, rowid, digest in self._conn.execute(
                f"SELECT chunk_id, rowid, content_hash FROM chunks WHERE chunk_id IN ({marks})", batch
            ):
                found[chunk_id] = (rowid, digest)
        return found

    def write(
        self,
        new_rows: Sequence[NewRow],
        replace_rowids: Sequence[int] = (),
        metadata_updates: Iterable[tuple] = (),
        system_updates: Iterable[tuple[int, Mapping[str, Any]]] = (),
        *,
        since_seq: int | None = None,
        expected: Mapping[str, tuple[int, str] | None] | None = None,
    ) -> CommitResult:
        """In one ``BEGIN IMMEDIATE`` transaction: delete ``replace_rowids``, insert ``new_rows``, update
        metadata in place, and log each change.

        A chunk whose row is replaced keeps its ``created_at`` and its place in :meth:`iter_chunks`.
        ``metadata_updates`` are ``(rowid, source, metadata)`` for chunks whose text did not change (their
        rowid stays); ``system_updates`` are ``(rowid, {column: value})`` for :data:`SYSTEM_COLUMNS` of kept
        rows (scope, event time, merges), applied last.

        Args:
            since_seq: the change-log position the caller's indexes reflect; the changes other processes
                committed after it are read inside this transaction and returned as ``pending`` (they
                come before this write). None skips that read.
            expected: chunk_id -> ``(rowid, content_hash)`` (or None: not stored) as the caller saw it
                before preparing the write; if another process changed any of them since, nothing is
                written and :class:`WriteConflict` is raised, so the caller prepares the write again.

        Raises:
            WriteConflict: ``expected`` no longer holds.
            StoreBusyError: another process held the write lock longer than the busy timeout.
        """
        now = time.time()
        metadata_updates = list(metadata_updates)
        with self._write_transaction(since_seq) as txn:
            if expected is not None:
                found = self._lookup(list(expected))
                if any(found.get(chunk_id) != state for chunk_id, state in expected.items()):
                    raise WriteConflict("another process changed these chunks meanwhile")
            kept: dict[str, tuple[float, int]] = {}
            for start in range(0, len(replace_rowids), 500):
                batch = [int(r) for r in replace_rowids[start : start + 500]]
                marks = ",".join("?" * len(batch))
                for rowid, chunk_id, created_at, ord_ in self._conn.execute(
                    f"SELECT rowid, chunk_id, created_at, ord FROM chunks WHERE rowid IN ({marks})", batch
                ):
                    kept[chunk_id] = (created_at, ord_)
                    txn.log.append((rowid, REMOVED, chunk_id))
                self._conn.execute(f"DELETE FROM chunks WHERE rowid IN ({marks})", batch)
            for row in new_rows:
                created_at, ord_ = kept.get(row.chunk_id, (now, None))
                system = _system_values(row.system)
                cursor = self._conn.execute(
                    "INSERT INTO chunks (chunk_id, text, source, metadata, content_hash, created_at, updated_at,"
                    f" vector, ord, {_SYSTEM_SELECT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?{', ?' * len(_SYSTEM_VALUES)})",
                    (
                        row.chunk_id,
                        row.text,
                        row.source,
                        json.dumps(row.metadata, ensure_ascii=False),
                        content_hash(row.text),
                        created_at,
                        now,
                        np.ascontiguousarray(row.vector, dtype="<f4").tobytes(),
                        ord_,
                        *system,
                    ),
                )
                rowid = int(cast(int, cursor.lastrowid))  # set by every INSERT (None only before one)
                if ord_ is None:  # a new chunk: its place is its first rowid (unique, never reused)
                    self._conn.execute("UPDATE chunks SET ord = rowid WHERE rowid = ?", (rowid,))
                txn.rowids.append(rowid)
                txn.log.append((rowid, ADDED, row.chunk_id))
            for rowid, source, metadata in metadata_updates:
                self._conn.execute(
                    "UPDATE chunks SET source = ?, metadata = ?, updated_at = ? WHERE rowid = ?",
                    (source, json.dumps(metadata, ensure_ascii=False), now, rowid),
                )
                txn.log.append((int(rowid), METADATA, ""))
            for rowid, fields in system_updates:
                names = [n for n in fields if n in _SYSTEM_VALUES]
                if names:
                    self._conn.execute(
                        f"UPDATE chunks SET {', '.join(n + ' = ?' for n in names)} WHERE rowid = ?",
                        (*_system_values(fields, names), rowid),
                    )
                    txn.log.append((int(rowid), METADATA, ""))
        return txn.committed()

    def delete(self, chunk_ids: Sequence[str], *, since_seq: int | None = None) -> CommitResult:
        """Delete chunks by id (unknown ids are ignored), looked up inside the transaction.

        Returns:
            A :class:`CommitResult` whose ``rowids`` are the rowids removed.
        """
        with self._write_transaction(since_seq) as txn:
            found = self._lookup(list(chunk_ids))
            rowids = sorted(rowid for rowid, _ in found.values())
            for start in range(0, len(rowids), 500):
                batch = rowids[start : start + 500]
                self._conn.execute(f"DELETE FROM chunks WHERE rowid IN ({','.join('?' * len(batch))})", batch)
            txn.rowids.extend(rowids)
            txn.log.extend((rowid, REMOVED, chunk_id) for chunk_id, (rowid, _) in found.items())
        return txn.committed()

    @contextlib.contextmanager
    def _write_transaction(self, since_seq: int | None) -> Iterator[_Transaction]:
        self._refuse_write("write")
        with self._lock, self._busy("write"):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                txn = _Transaction(self._changes_since(since_seq) if since_seq is not None else None)
                yield txn
                if txn.log:
                    self._conn.executemany("INSERT INTO changes (rowid, kind, chunk_id) VALUES (?, ?, ?)", txn.log)
                seq = self._last_seq()
                self._prune_log(seq)
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise
        txn.result = CommitResult(txn.rowids, seq, txn.pending)

    def _last_seq(self) -> int:
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
        return int(row[0]) if row else 0

    def _horizon(self) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'change_log_horizon'").fetchone()
        return int(json.loads(row[0])) if row else 0

    def _prune_log(self, seq: int) -> None:
        """Keep the log bounded: past 2 x log_keep entries, drop all but the last log_keep (amortised O(1))."""
        horizon = self._horizon()
        if seq - horizon <= 2 * self.log_keep:
            return
        horizon = seq - self.log_keep
        self._conn.execute("DELETE FROM changes WHERE seq <= ?", (horizon,))
        self._conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('change_log_horizon', ?)", (json.dumps(horizon),)
        )
        logger.debug("change log pruned up to seq %d", horizon)

    def last_seq(self) -> int:
        """The change-log position of the last committed write (0 for a new store)."""
        with self._lock:
            return self._last_seq()

    def changes_since(self, seq: int) -> tuple[ChangeSet | None, int]:
        """What other connections committed after log position ``seq``, read in one snapshot.

        Returns:
            ``(changes, last_seq)``: the net :class:`ChangeSet` (rowids removed; rowids added and still
            stored, with their texts, vectors and metadata; metadata updates of rows that stay) and the
            log position it brings the caller to. ``changes`` is None when ``seq`` is older than the log
            keeps: the caller must reconcile by comparing rowids (:meth:`rowids`).
        """
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                return self._changes_since(seq), self._last_seq()
            finally:
                self._conn.commit()

    def _changes_since(self, seq: int) -> ChangeSet | None:
        if seq < self._horizon():
            return None
        entries = self._conn.execute("SELECT rowid, kind FROM changes WHERE seq > ? ORDER BY seq", (seq,)).fetchall()
        if not entries:
            return ChangeSet()
        removed = sorted({r for r, kind in entries if kind == REMOVED})
        gone = set(removed)
        added = sorted({r for r, kind in entries if kind == ADDED and r not in gone})
        new = set(added)
        updated = sorted({r for r, kind in entries if kind == METADATA and r not in gone and r not in new})
        rows = self._select(f"rowid, text, vector, metadata, {', '.join(_FILTERED_SYSTEM)}", added + updated)
        added = [r for r in added if r in rows]  # rowids are never reused, so "not stored" means removed later
        vectors = None
        if added:
            vectors = np.stack([np.frombuffer(rows[r][2], dtype="<f4") for r in added]).astype(np.float32)
        return ChangeSet(
            removed=removed,
            added_rowids=np.asarray(added, dtype=np.int64),
            added_texts=[rows[r][1] for r in added],
            added_vectors=vectors,
            added_metadata=[json.loads(rows[r][3]) for r in added],
            metadata_updated=[(r, json.loads(rows[r][3])) for r in updated if r in rows],
            # scope and validity columns, for the filter index (a METADATA entry may be a system update)
            added_system=[dict(zip(_FILTERED_SYSTEM, rows[r][4:], strict=True)) for r in added],
            system_updated=[(r, dict(zip(_FILTERED_SYSTEM, rows[r][4:], strict=True))) for r in updated if r in rows],
        )

    # -- reads --------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[np.ndarray, int]:
        """``(rowids, last_seq)`` read in one snapshot: every stored rowid, int64 (n,) ascending, and the
        change-log position they reflect."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                rowids = self._all_rowids()
                seq = self._last_seq()
            finally:
                self._conn.commit()
        return rowids, seq

    def _all_rowids(self) -> np.ndarray:
        """Every stored rowid, int64 (n,) ascending, in one query (caller holds the lock).

        No ``ORDER BY rowid``: that walks the table's own b-tree, every page of every text and vector (about
        2 GB at a million chunks), where an unordered read is served from the smallest covering index; the
        ids come back as one ``group_concat`` string parsed by numpy (no Python object per row), then sorted.
        10x faster at 100k rows than fetching one tuple per row in rowid order (0.09 vs 0.9 s).
        """
        text = self._conn.execute("SELECT group_concat(rowid) FROM chunks").fetchone()[0]
        if not text:
            return np.zeros(0, dtype=np.int64)
        rowids = np.fromstring(text, dtype=np.int64, sep=",")
        rowids.sort()
        return rowids

    def rowids(self) -> np.ndarray:
        """All stored rowids, int64 (n,), ascending."""
        with self._lock:
            return self._all_rowids()

    def count(
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> int:
        """Number of chunks matching the filter (all when None), in ``scope``, valid at ``as_of`` (see
        :func:`scope_sql`)."""
        sql, params = _where(metadata_filter, scope, as_of)
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM chunks WHERE {sql}", params).fetchone()[0])

    def scope_values(self, field: str, limit: int = 5) -> list[str]:
        """The distinct values of the scope field ``field`` (tenant, user_id, agent_id, session_id) the chunks
        hold (chunks without one left out), ascending, at most ``limit + 1`` (so a caller can tell there are
        more than ``limit``). Read from the field's index (``chunks_<field>``), not a scan of the rows.

        Raises:
            ValueError: ``field`` is not a scope field (a programming error: the callers pass bound fields).
        """
        if field not in _SCOPE_COLUMNS:
            raise ValueError(f"unknown scope field {field!r}")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT DISTINCT {field} FROM chunks WHERE {field} IS NOT NULL ORDER BY {field} LIMIT ?",
                (int(limit) + 1,),
            ).fetchall()
        return [r[0] for r in rows]

    def filter_rowids(
        self,
        metadata_filter: Mapping[str, Any] | None,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> np.ndarray:
        """Rowids of chunks matching the filter, in ``scope``, valid at ``as_of``; int64 (n,), ascending.
        Raises InvalidFilterError."""
        sql, params = _where(metadata_filter, scope, as_of)
        with self._lock:
            rows = self._conn.execute(f"SELECT rowid FROM chunks WHERE {sql} ORDER BY rowid", params).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def index_rows(self, rowids: Sequence[int] | np.ndarray, dim: int) -> tuple[np.ndarray, list[str], np.ndarray]:
        """``(found, texts, vectors)`` of the given rowids that are still stored, read in one snapshot:
        int64 (m,) ascending, m texts, float32 (m, dim). Rows deleted meanwhile (by another process) are
        left out: the change log removes them anyway. ``dim`` 0 reads no vectors."""
        ids = sorted({int(r) for r in rowids})
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                found = self._select("rowid, text, vector" if dim else "rowid, text", ids)
            finally:
                self._conn.commit()
        kept = [r for r in ids if r in found]
        vectors = np.empty((len(kept), dim), dtype=np.float32)
        if dim:  # dim 0: texts only
            for i, rowid in enumerate(kept):
                vectors[i] = np.frombuffer(found[rowid][2], dtype="<f4")
        return np.asarray(kept, dtype=np.int64), [found[r][1] for r in kept], vectors

    def filter_rows(
        self, batch_size: int = 50_000, rowids: Sequence[int] | np.ndarray | None = None
    ) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """``(rowid, metadata JSON text, system fields)`` of every chunk (or of the given ``rowids`` that are
        stored), ascending rowid, read in batches: what :meth:`FilterIndex.rebuild
        <hybrid_memory.backends.embedded.filter_index.FilterIndex.rebuild>` takes. The system fields are the scope and
        validity
        columns that are not NULL."""
        names = _FILTERED_SYSTEM
        select = f"SELECT rowid, metadata, {', '.join(names)} FROM chunks"
        if rowids is not None:
            wanted = sorted({int(r) for r in rowids})
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
                with self._lock:
                    rows = self._conn.execute(
                        f"{select} WHERE rowid IN ({','.join('?' * len(batch))}) ORDER BY rowid", batch
                    ).fetchall()
                for rowid, metadata, *system in rows:
                    yield rowid, metadata, {n: v for n, v in zip(names, system, strict=True) if v is not None}
            return
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"{select} WHERE rowid > ? ORDER BY rowid LIMIT ?", (last, batch_size)
                ).fetchall()
            if not rows:
                return
            for rowid, metadata, *system in rows:
                yield rowid, metadata, {n: v for n, v in zip(names, system, strict=True) if v is not None}
            last = rows[-1][0]

    def texts(self, rowids: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of the given rowids, in the given order. Raises KeyError for an unknown rowid."""
        found = self._select("rowid, text", rowids)
        return [found[int(r)][1] for r in rowids]

    def vectors(self, rowids: Sequence[int], dim: int) -> np.ndarray:
        """Stored vectors, float32 (len(rowids), dim), in the given order."""
        found = self._select("rowid, vector", rowids)
        out = np.empty((len(rowids), dim), dtype=np.float32)
        for i, rowid in enumerate(rowids):
            out[i] = np.frombuffer(found[int(rowid)][1], dtype="<f4")
        return out

    def chunk_ids_by_rowid(self, rowids: Sequence[int]) -> dict[int, str]:
        """rowid -> chunk_id for the given rowids that exist, or that another process removed while the
        caller's indexes still held them (from the change log), so a search racing that write keeps the
        chunk when it was replaced: :meth:`get` then finds its current version.

        A rowid names one chunk for good (``AUTOINCREMENT`` rowids are never reused, and a new version of a
        chunk gets a new rowid), so answers are kept in memory, up to :data:`KEY_MEMO_MAX` of them (then the
        memo starts again): a search's candidates cost dictionary reads, not SQLite page reads (cold pages
        were about 5 ms for 40 rows at 1M chunks).
        """
        memo = self._key_memo
        rowids = list(map(int, rowids))
        keys = list(map(memo.get, rowids))  # C-level loops: a search's 40-60 candidates in a few microseconds
        if None not in keys:
            return dict(zip(rowids, cast(list[str], keys), strict=True))
        found = {rowid: key for rowid, key in zip(rowids, keys, strict=True) if key is not None}
        missing = [rowid for rowid, key in zip(rowids, keys, strict=True) if key is None]
        if missing:
            fetched = self._chunk_ids_from_store(missing)
            if len(memo) + len(fetched) > KEY_MEMO_MAX:
                memo.clear()
            memo.update(fetched)
            found.update(fetched)
        return found

    def memoize_keys(self) -> int:
        """Read every rowid -> chunk_id into the memo of :meth:`chunk_ids_by_rowid` (when the store holds at
        most :data:`KEY_MEMO_MAX` chunks whose ids take at most :data:`KEY_PREFILL_BYTES` bytes together); returns
        how many the memo holds then.

        Called on opening a saved memory: otherwise the first searches read their candidates' ids from cold
        SQLite pages, one random page per row (measured at 1M chunks with the store out of the page cache: 9.8 ms
        of a 20 ms search for 25 candidates). One query over the smallest covering index
        (``chunk_id``'s), as two ``group_concat`` strings split in Python: 1.0-1.2 s at 1M chunks, against
        1.4-3.4 s fetching one tuple per row; about 100 MB of memory at 1M. A chunk id holding the separator
        (U+001F) falls back to one tuple per row; beyond the bounds nothing is read and the memo fills as
        searches ask.
        """
        with self._lock:
            count, total = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(chunk_id AS BLOB))), 0) FROM chunks"
            ).fetchone()
            if not count or count > KEY_MEMO_MAX or total > KEY_PREFILL_BYTES:
                return len(self._key_memo)
            ids, keys = self._conn.execute(
                "SELECT group_concat(rowid), group_concat(chunk_id, char(31)) FROM chunks"
            ).fetchone()
            rowids = ids.split(",")
            names = keys.split("\x1f")
            if len(names) == len(rowids):
                memo = dict(zip(map(int, rowids), names, strict=True))
            else:
                memo = dict(self._conn.execute("SELECT rowid, chunk_id FROM chunks"))
            self._key_memo.update(memo)
            return len(self._key_memo)

    def _chunk_ids_from_store(self, rowids: list[int]) -> dict[int, str]:
        found = {rowid: row[1] for rowid, row in self._select("rowid, chunk_id", rowids).items()}
        gone = [r for r in rowids if r not in found]
        if gone:
            with self._lock:
                for start in range(0, len(gone), 500):
                    batch = gone[start : start + 500]
                    found.update(
                        self._conn.execute(
                            f"SELECT rowid, chunk_id FROM changes WHERE kind = {REMOVED} AND rowid IN "
                            f"({','.join('?' * len(batch))})",
                            batch,
                        ).fetchall()
                    )
        return found

    def get(self, chunk_ids: Sequence[str], scope: Mapping[str, str] | None = None) -> list[StoredChunk]:
        """Chunks in the given order; unknown ids, and ids outside ``scope``, are skipped."""
        by_id = {}
        where, extra = scope_sql(scope, None)
        with self._lock:
            for start in range(0, len(chunk_ids), 500):
                batch = list(chunk_ids[start : start + 500])
                marks = ",".join("?" * len(batch))
                for row in self._conn.execute(
                    "SELECT chunk_id, text, source, metadata, content_hash, created_at, updated_at,"
                    f" {_SYSTEM_SELECT} FROM chunks WHERE chunk_id IN ({marks}) AND {where}",
                    [*batch, *extra],
                ):
                    by_id[row[0]] = _stored(row)
        return [by_id[c] for c in chunk_ids if c in by_id]

    def page_chunks(
        self,
        metadata_filter: Mapping[str, Any] | None,
        scope: Mapping[str, str] | None,
        as_of: float | None,
        after: int,
        limit: int,
    ) -> tuple[list[StoredChunk], int | None]:
        """Keyset paging in :meth:`iter_chunks` order: up to ``limit`` chunks whose place (``ord``) is after
        ``after`` (-1: from the start), and the place of the last one when more may follow (else None). One
        indexed range read per page (``ord`` is indexed), whatever the page number; chunks deleted or added
        between pages never shift the others."""
        sql, params = _where(metadata_filter, scope, as_of)
        with self._lock:
            rows = self._conn.execute(
                "SELECT ord, chunk_id, text, source, metadata, content_hash, created_at, updated_at,"
                f" {_SYSTEM_SELECT} FROM chunks WHERE ord > ? AND {sql} ORDER BY ord LIMIT ?",
                [after, *params, limit + 1],
            ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [_stored(row[1:]) for row in rows], (int(rows[-1][0]) if more else None)

    def iter_chunks(
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        batch_size: int = 1000,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> Iterator[StoredChunk]:
        """Chunks matching the filter, in ``scope``, valid at ``as_of``, in order of first insertion, read in
        batches of ``batch_size``.

        Order: the order in which chunk ids were first stored; an upsert keeps a chunk's place (a chunk
        deleted and added again goes to the end). Every chunk stored for the whole iteration is yielded
        exactly once, even while other threads or processes upsert; each yielded version is the one
        stored when its batch was read; chunks added or deleted meanwhile may or may not appear.
        """
        sql, params = _where(metadata_filter, scope, as_of)
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT ord, chunk_id, text, source, metadata, content_hash, created_at, updated_at,"
                    f" {_SYSTEM_SELECT} FROM chunks WHERE ord > ? AND {sql} ORDER BY ord LIMIT ?",
                    [last, *params, batch_size],
                ).fetchall()
            if not rows:
                return
            for row in rows:
                yield _stored(row[1:])
            last = rows[-1][0]

    def chunk_hashes(self, scope: Mapping[str, str] | None = None) -> dict[str, str]:
        """chunk_id -> content_hash of every stored chunk (in ``scope`` when given)."""
        where, params = scope_sql(scope, None)
        with self._lock:
            return dict(
                self._conn.execute(
                    f"SELECT chunk_id, content_hash FROM chunks WHERE {where} ORDER BY ord", params
                ).fetchall()
            )

    def hit_rows(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, dict[str, Any]]]:
        """rowid -> ``(text, source, metadata)`` of that stored version, for the given rowids that still exist:
        what a search result shows, without building a :class:`StoredChunk`."""
        return {
            rowid: (text, source, json.loads(metadata))
            for rowid, (_, text, source, metadata) in self._select("rowid, text, source, metadata", rowids).items()
        }

    def system_of(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> its :data:`SYSTEM_COLUMNS` values (``merged`` decoded) and ``rowid``, for stored ids."""
        found: dict[str, dict[str, Any]] = {}
        names = ["rowid", *_SYSTEM_VALUES]
        with self._lock:
            for start in range(0, len(chunk_ids), 500):
                batch = list(chunk_ids[start : start + 500])
                marks = ",".join("?" * len(batch))
                for chunk_id, *values in self._conn.execute(
                    f"SELECT chunk_id, rowid, {_SYSTEM_SELECT} FROM chunks WHERE chunk_id IN ({marks})", batch
                ):
                    row = dict(zip(names, values, strict=True))
                    row["merged"] = json.loads(row["merged"] or "[]")
                    found[chunk_id] = row
        return found

    def find_hashes(
        self, digests: Sequence[str], scope_values: Mapping[str, str | None], exclude: Collection[str] = ()
    ) -> dict[str, list[tuple[str, float | None, float | None]]]:
        """content_hash -> ``[(chunk_id, valid_from, valid_to), ...]``, oldest first, of the stored chunks with
        that hash and exactly these scope values (all four fields, None matching NULL only), other than the
        ``exclude`` ids; uses the content_hash index."""
        found: dict[str, list[tuple[str, float | None, float | None]]] = {}
        scope_where = " AND ".join(f"{name} IS ?" for name in _SCOPE_COLUMNS)
        scope_params = [scope_values.get(name) for name in _SCOPE_COLUMNS]
        skip = set(exclude)
        unique = list(dict.fromkeys(digests))
        with self._lock:
            for start in range(0, len(unique), 500):
                batch = unique[start : start + 500]
                marks = ",".join("?" * len(batch))
                for digest, chunk_id, valid_from, valid_to in self._conn.execute(
                    # INDEXED BY: with NULL scope fields the planner picks a scope index and scans every row
                    # (IS NULL matches them all), which made each add O(stored chunks)
                    "SELECT content_hash, chunk_id, valid_from, valid_to FROM chunks INDEXED BY chunks_content_hash"
                    f" WHERE content_hash IN ({marks}) AND {scope_where} ORDER BY rowid",
                    [*batch, *scope_params],
                ):
                    if chunk_id not in skip:
                        found.setdefault(digest, []).append((chunk_id, valid_from, valid_to))
        return found

    def _select(self, columns: str, rowids: Sequence[int] | np.ndarray) -> dict[int, tuple]:
        found: dict[int, tuple] = {}
        ids = [int(r) for r in rowids]
        with self._lock:
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                marks = ",".join("?" * len(batch))
                for row in self._conn.execute(f"SELECT {columns} FROM chunks WHERE rowid IN ({marks})", batch):
                    found[row[0]] = row
        return found

    def close(self) -> None:
        """Close the connection (idempotent); every later call raises MemoryClosedError."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._connection is None


def _where(
    metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
) -> tuple[str, list[Any]]:
    sql, params = compile_filter(metadata_filter)
    if not scope and as_of is None:
        return sql, params
    extra, extra_params = scope_sql(scope, as_of)
    return f"{extra} AND {sql}", [*extra_params, *params]


def _system_values(system: Mapping[str, Any], names: Sequence[str] = _SYSTEM_VALUES) -> list[Any]:
    """Column values in the order of ``names``; ``merged`` as JSON text ('[]' when absent)."""
    values = []
    for name in names:
        value = system.get(name)
        if name == "merged":
            value = json.dumps([list(m) for m in (value or [])], ensure_ascii=False)
        values.append(value)
    return values


def _stored(row: Sequence[Any]) -> StoredChunk:
    chunk_id, text, source, metadata, digest, created_at, updated_at, *system = row
    extra = dict(zip(_SYSTEM_VALUES, system, strict=True)) if system else {}
    merged = json.loads(extra.pop("merged", None) or "[]")
    return StoredChunk.model_construct(
        chunk_id=chunk_id,
        text=text,
        source=source,
        metadata=json.loads(metadata),
        content_hash=digest,
        created_at=created_at,
        updated_at=updated_at,
        tenant=extra.get("tenant"),
        user_id=extra.get("user_id"),
        agent_id=extra.get("agent_id"),
        session_id=extra.get("session_id"),
        valid_from=extra.get("valid_from"),
        valid_to=extra.get("valid_to"),
        superseded_by=extra.get("superseded_by"),
        merged_ids=[m[0] for m in merged],
        merged_sources=[m[1] for m in merged],
    )
