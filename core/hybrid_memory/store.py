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
from dataclasses import dataclass, field
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

SYSTEM_COLUMNS = {
    "tenant": "TEXT",
    "user_id": "TEXT",
    "agent_id": "TEXT",
    "session_id": "TEXT",
    "valid_from": "REAL",
    "valid_to": "REAL",
    "superseded_by": "TEXT",
    "merged": "TEXT NOT NULL DEFAULT '[]'",
}
"""Columns beside the chunk's own fields: scope (tenant, user_id, agent_id, session_id), event time
(valid_from, valid_to, superseded_by) and dedup merges (JSON list of ``[chunk_id, source]``). A store written
before they existed gets them by ``ALTER TABLE ADD COLUMN`` (NULL / '[]' for the old rows) when it opens."""
_SCOPE_COLUMNS = ("tenant", "user_id", "agent_id", "session_id")
_INDEXES = {
    "chunks_tenant": "tenant",
    "chunks_user_id": "user_id",
    "chunks_agent_id": "agent_id",
    "chunks_session_id": "session_id",
    "chunks_content_hash": "content_hash",
}
_SYSTEM_SELECT = ", ".join(SYSTEM_COLUMNS)


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
    system: Mapping[str, Any] = field(default_factory=dict)
    """Values of :data:`SYSTEM_COLUMNS` (scope, event time, merges); missing ones are NULL / '[]'."""


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
        self._migrate()

    def _migrate(self) -> None:
        """Add the :data:`SYSTEM_COLUMNS` and their indexes to a store written before they existed."""
        with self._lock, self._conn:
            present = {row[1] for row in self._conn.execute("PRAGMA table_info(chunks)")}
            for name, kind in SYSTEM_COLUMNS.items():
                if name not in present:
                    self._conn.execute(f"ALTER TABLE chunks ADD COLUMN {name} {kind}")
            for index, column in _INDEXES.items():
                self._conn.execute(f"CREATE INDEX IF NOT EXISTS {index} ON chunks ({column})")

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
        self, new_rows: Sequence[NewRow], replace_rowids: Sequence[int] = (), metadata_updates: Iterable[tuple] = (),
        system_updates: Iterable[tuple[int, Mapping[str, Any]]] = (),
    ) -> list[int]:
        """In one transaction: delete ``replace_rowids``, insert ``new_rows``, update metadata in place.

        A chunk whose row is replaced keeps its ``created_at``. ``metadata_updates`` are
        ``(rowid, source, metadata)`` for chunks whose text did not change (their rowid stays);
        ``system_updates`` are ``(rowid, {column: value})`` for :data:`SYSTEM_COLUMNS` of kept rows (scope,
        event time, merges), applied last.

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
                system = _system_values(row.system)
                cursor = self._conn.execute(
                    "INSERT INTO chunks (chunk_id, text, source, metadata, content_hash, created_at, updated_at, vector,"
                    f" {_SYSTEM_SELECT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?{', ?' * len(SYSTEM_COLUMNS)})",
                    (
                        row.chunk_id,
                        row.text,
                        row.source,
                        json.dumps(row.metadata, ensure_ascii=False),
                        content_hash(row.text),
                        created.get(row.chunk_id, now),
                        now,
                        np.ascontiguousarray(row.vector, dtype="<f4").tobytes(),
                        *system,
                    ),
                )
                rowids.append(int(cursor.lastrowid))
            for rowid, source, metadata in metadata_updates:
                self._conn.execute(
                    "UPDATE chunks SET source = ?, metadata = ?, updated_at = ? WHERE rowid = ?",
                    (source, json.dumps(metadata, ensure_ascii=False), now, rowid),
                )
            for rowid, system in system_updates:
                names = [n for n in system if n in SYSTEM_COLUMNS]
                if names:
                    self._conn.execute(
                        f"UPDATE chunks SET {', '.join(n + ' = ?' for n in names)} WHERE rowid = ?",
                        (*_system_values(system, names), rowid),
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

    def count(
        self, metadata_filter: Mapping[str, Any] | None = None, scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> int:
        """Number of chunks matching the filter (all when None), in ``scope``, valid at ``as_of`` (see
        :func:`scope_sql`)."""
        sql, params = _where(metadata_filter, scope, as_of)
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM chunks WHERE {sql}", params).fetchone()[0])

    def filter_rowids(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> np.ndarray:
        """Rowids of chunks matching the filter, in ``scope``, valid at ``as_of``; int64 (n,), ascending.
        Raises InvalidFilterError."""
        sql, params = _where(metadata_filter, scope, as_of)
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

    def iter_chunks(
        self, metadata_filter: Mapping[str, Any] | None = None, batch_size: int = 1000,
        scope: Mapping[str, str] | None = None, as_of: float | None = None,
    ) -> Iterator[StoredChunk]:
        """Chunks matching the filter, in ``scope``, valid at ``as_of``, in insertion (rowid) order, read in
        batches."""
        sql, params = _where(metadata_filter, scope, as_of)
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT rowid, chunk_id, text, source, metadata, content_hash, created_at, updated_at,"
                    f" {_SYSTEM_SELECT} FROM chunks WHERE rowid > ? AND {sql} ORDER BY rowid LIMIT ?",
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
            return dict(self._conn.execute(
                f"SELECT chunk_id, content_hash FROM chunks WHERE {where} ORDER BY rowid", params
            ).fetchall())

    def system_of(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> its :data:`SYSTEM_COLUMNS` values (``merged`` decoded) and ``rowid``, for stored ids."""
        found: dict[str, dict[str, Any]] = {}
        names = ["rowid", *SYSTEM_COLUMNS]
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

    def exact_scope_rowids(self, scope_values: Mapping[str, str | None]) -> np.ndarray:
        """Rowids whose four scope fields equal ``scope_values`` exactly (None matches NULL only), int64 (n,)."""
        where = " AND ".join(f"{name} IS ?" for name in _SCOPE_COLUMNS)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT rowid FROM chunks WHERE {where} ORDER BY rowid", [scope_values.get(n) for n in _SCOPE_COLUMNS]
            ).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def find_hashes(self, digests: Sequence[str], scope_values: Mapping[str, str | None]) -> dict[str, str]:
        """content_hash -> chunk_id of the oldest stored chunk with that hash and exactly these scope values
        (all four fields, None matching NULL only); uses the content_hash index."""
        found: dict[str, str] = {}
        scope_where = " AND ".join(f"{name} IS ?" for name in _SCOPE_COLUMNS)
        scope_params = [scope_values.get(name) for name in _SCOPE_COLUMNS]
        unique = list(dict.fromkeys(digests))
        with self._lock:
            for start in range(0, len(unique), 500):
                batch = unique[start : start + 500]
                marks = ",".join("?" * len(batch))
                for digest, chunk_id in self._conn.execute(
                    f"SELECT content_hash, chunk_id FROM chunks WHERE content_hash IN ({marks}) AND {scope_where}"
                    " ORDER BY rowid DESC",
                    [*batch, *scope_params],
                ):
                    found[digest] = chunk_id  # descending rowids: the oldest one is written last and wins
        return found

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


def _where(
    metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
) -> tuple[str, list[Any]]:
    sql, params = compile_filter(metadata_filter)
    if not scope and as_of is None:
        return sql, params
    extra, extra_params = scope_sql(scope, as_of)
    return f"{extra} AND {sql}", [*extra_params, *params]


def _system_values(system: Mapping[str, Any], names: Sequence[str] = tuple(SYSTEM_COLUMNS)) -> list[Any]:
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
    extra = dict(zip(SYSTEM_COLUMNS, system)) if system else {}
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
