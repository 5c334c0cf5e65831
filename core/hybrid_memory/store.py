"""SQLite store: the source of truth for chunks, metadata, timestamps, content hashes and vectors.

Every content version of a chunk gets a fresh ``rowid`` (``AUTOINCREMENT``: never reused), and the
BM25 and FAISS indexes are keyed by rowid. An index is therefore in sync exactly when its set of rowids
equals the store's, which is how a reopened memory finds out what a saved index misses.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .filters import compile_filter, register_sql_functions
from .models import StoredChunk

__all__ = ["NewRow", "SQLiteStore", "content_hash"]

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
"""


def content_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class SQLiteStore:
    """Chunks and their vectors in one SQLite database (standard library ``sqlite3``).

    Args:
        path: database file; None keeps everything in memory.

    One connection is shared by the memory's threads behind a lock; writes are transactions, so a crash
    leaves either the old or the new state, never a half-written chunk.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(":memory:" if path is None else str(path), check_same_thread=False)
        if path is not None:
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        register_sql_functions(self._conn)  # hm_canonical_json, for list equality in filter SQL

    # -- meta ---------------------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        """JSON-decoded value stored under key, or None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under key."""
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    # -- writes -------------------------------------------------------------------------------------
    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """chunk_id -> (rowid, content_hash) for the ids that are stored."""
        found: dict[str, tuple[int, str]] = {}
        with self._lock:
            for start in range(0, len(chunk_ids), 500):
                batch = list(chunk_ids[start : start + 500])
                marks = ",".join("?" * len(batch))
                for chunk_id, rowid, digest in self._conn.execute(
                    f"SELECT chunk_id, rowid, content_hash FROM chunks WHERE chunk_id IN ({marks})", batch
                ):
                    found[chunk_id] = (rowid, digest)
        return found

    def write(
        self, new_rows: Sequence[NewRow], replace_rowids: Sequence[int] = (), metadata_updates: Iterable[tuple] = ()
    ) -> list[int]:
        """In one transaction: delete ``replace_rowids``, insert ``new_rows``, update metadata in place.

        A chunk whose row is replaced keeps its ``created_at``. ``metadata_updates`` are
        ``(rowid, source, metadata)`` for chunks whose text did not change (their rowid stays).

        Returns:
            The new rowids, in the order of ``new_rows``.
        """
        now = time.time()
        rowids: list[int] = []
        with self._lock, self._conn:
            created: dict[str, float] = {}
            for start in range(0, len(replace_rowids), 500):
                batch = list(replace_rowids[start : start + 500])
                marks = ",".join("?" * len(batch))
                created.update(
                    self._conn.execute(
                        f"SELECT chunk_id, created_at FROM chunks WHERE rowid IN ({marks})", batch
                    ).fetchall()
                )
                self._conn.execute(f"DELETE FROM chunks WHERE rowid IN ({marks})", batch)
            for row in new_rows:
                cursor = self._conn.execute(
                    "INSERT INTO chunks (chunk_id, text, source, metadata, content_hash, created_at, updated_at, vector)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        row.chunk_id,
                        row.text,
                        row.source,
                        json.dumps(row.metadata, ensure_ascii=False),
                        content_hash(row.text),
                        created.get(row.chunk_id, now),
                        now,
                        np.ascontiguousarray(row.vector, dtype="<f4").tobytes(),
                    ),
                )
                rowids.append(int(cursor.lastrowid))
            for rowid, source, metadata in metadata_updates:
                self._conn.execute(
                    "UPDATE chunks SET source = ?, metadata = ?, updated_at = ? WHERE rowid = ?",
                    (source, json.dumps(metadata, ensure_ascii=False), now, rowid),
                )
        return rowids

    def delete(self, chunk_ids: Sequence[str]) -> list[int]:
        """Delete chunks by id (unknown ids are ignored). Returns the rowids removed."""
        rowids = [rowid for rowid, _ in self.lookup(list(chunk_ids)).values()]
        if rowids:
            self.write([], replace_rowids=rowids)
        return rowids

    # -- reads --------------------------------------------------------------------------------------
    def rowids(self) -> np.ndarray:
        """All stored rowids, int64 (n,), ascending."""
        with self._lock:
            rows = self._conn.execute("SELECT rowid FROM chunks ORDER BY rowid").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def count(self, metadata_filter: Mapping[str, Any] | None = None) -> int:
        """Number of chunks matching the filter (all when None)."""
        sql, params = compile_filter(metadata_filter)
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM chunks WHERE {sql}", params).fetchone()[0])

    def filter_rowids(self, metadata_filter: Mapping[str, Any]) -> np.ndarray:
        """Rowids of chunks matching the filter, int64 (n,), ascending. Raises InvalidFilterError."""
        sql, params = compile_filter(metadata_filter)
        with self._lock:
            rows = self._conn.execute(f"SELECT rowid FROM chunks WHERE {sql} ORDER BY rowid", params).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def texts(self, rowids: Sequence[int]) -> list[str]:
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
        """rowid -> chunk_id for the given rowids that exist."""
        return {rowid: row[1] for rowid, row in self._select("rowid, chunk_id", rowids).items()}

    def get(self, chunk_ids: Sequence[str]) -> list[StoredChunk]:
        """Chunks in the given order; unknown ids are skipped."""
        by_id = {}
        with self._lock:
            for start in range(0, len(chunk_ids), 500):
                batch = list(chunk_ids[start : start + 500])
                marks = ",".join("?" * len(batch))
                for row in self._conn.execute(
                    "SELECT chunk_id, text, source, metadata, content_hash, created_at, updated_at FROM chunks"
                    f" WHERE chunk_id IN ({marks})",
                    batch,
                ):
                    by_id[row[0]] = _stored(row)
        return [by_id[c] for c in chunk_ids if c in by_id]

    def iter_chunks(self, metadata_filter: Mapping[str, Any] | None = None, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Chunks matching the filter, in insertion (rowid) order, read in batches."""
        sql, params = compile_filter(metadata_filter)
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT rowid, chunk_id, text, source, metadata, content_hash, created_at, updated_at FROM chunks"
                    f" WHERE rowid > ? AND {sql} ORDER BY rowid LIMIT ?",
                    [last, *params, batch_size],
                ).fetchall()
            if not rows:
                return
            for row in rows:
                yield _stored(row[1:])
            last = rows[-1][0]

    def chunk_hashes(self) -> dict[str, str]:
        """chunk_id -> content_hash of every stored chunk."""
        with self._lock:
            return dict(self._conn.execute("SELECT chunk_id, content_hash FROM chunks ORDER BY rowid").fetchall())

    def _select(self, columns: str, rowids: Sequence[int]) -> dict[int, tuple]:
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
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()


def _stored(row: Sequence[Any]) -> StoredChunk:
    chunk_id, text, source, metadata, digest, created_at, updated_at = row
    return StoredChunk.model_construct(
        chunk_id=chunk_id,
        text=text,
        source=source,
        metadata=json.loads(metadata),
        content_hash=digest,
        created_at=created_at,
        updated_at=updated_at,
    )
