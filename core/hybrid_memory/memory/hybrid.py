"""HybridMemory: the long-term memory an agent adds to, searches, and reopens days later.

Flow: chunks are validated, embedded (only when their text changed), written to the SQLite store (the
source of truth), then applied to the BM25 and FAISS indexes, which are derived and rebuilt from the store
when missing, stale or damaged. A search resolves the metadata filter to store rowids, runs BM25 and dense
retrieval concurrently, each restricted to those rowids, and fuses the two runs (``hybrid_params.fusion``:
the query-adaptive default or weighted RRF, see :mod:`hybrid_memory.fusion`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from filelock import FileLock, Timeout

from .._exceptions import (
    DiskFullError,
    DuplicateChunkError,
    InvalidFilterError,
    InvalidRequestError,
    MemoryClosedError,
    MemoryNotFoundError,
    StoreBusyError,
    StoreFormatError,
    is_disk_full,
)
from .._options import check_memory_options
from .._rwlock import ReadWriteLock
from ..changes import ChangeSet
from ..dedup import DedupPolicy, WriteResult, as_policy, covers
from ..engines.dense.index import DENSE_KINDS, FaissIndex
from ..embedders import Embedder, HashingEmbedder
from ..embedders import query_vector as checked_query_vector
from ..backends.embedded.filter_index import FilterIndex
from ..filters import check_metadata, system_filter, validate_filter
from ..limits import check_page
from ..onnx_embedder import OnnxEmbedder
from ..search.engine import DenseEngine, Query, RowSet, SparseEngine
from ..paths import EDGE_CONFIG, INDEX_LOCK, STORE_FILE, memory_path
from ..models import _SHORT, SCOPE_FIELDS, Chunk, SearchRequest, SearchResponse, StoredChunk, build_response, validation_message
from ..scopes import Scope, ScopedMemory, as_scope, check_scope_keys, check_scope_values
from ..search.searcher import HybridResult, HybridSearcher
from ..engines.bm25.index import BM25Index
from ..backends.embedded.store import CommitResult, NewRow, SQLiteStore, WriteConflict
from ..temporal import RecencyPrior, apply_recency_prior, to_timestamp
from .write_plan import check_chunk_list, check_vectors, embed_checked, plan_supersede, plan_write
from ..tokenizer import TechnicalTokenizer

__all__ = ["FORMAT_VERSION", "RANK_FLOOR", "HybridMemory"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of the memory directory layout, saved in manifest.json and checked on open."""

RANK_FLOOR = 10
"""A search for any ``top_k`` up to this ranks as one for ``top_k = RANK_FLOOR``: each engine returns
``candidate_multiplier x max(top_k, RANK_FLOOR)`` candidates and the exact-match guard's bound is
``max(top_k, RANK_FLOOR)`` documents, so the results of ``top_k = 1 .. 10`` are the first ``top_k`` of the same
list. Fusion depends on the candidates: without a floor, ``top_k = 1`` fused 2 candidates per engine and could
put first what ``top_k = 5`` put third. 10 is the cut of nDCG@10 (BEIR), the depth the fusion is measured at
(``benchmarks/fusion_eval.py``). Above it, deeper candidate lists can still reorder the first results."""

NEAR_POOL = 16
"""Stored neighbours a near-duplicate check reads per new chunk, before keeping the (at most 5) whose validity
covers the new chunk's: the 5 nearest of the scope as before, with room for superseded versions of the same
fact, which sit nearest to it and are left out."""

NEAR_POOL_MAX = 256
"""The deepest a near-duplicate check reads (x4 from :data:`NEAR_POOL` while too few neighbours cover the new
chunk): many closed versions of one fact no longer hide its open one, as the Qdrant backend's filtered query
does not."""

_SHORTCUTS = ("dense_weight", "sparse_weight", "rrf_k_constant", "fusion")

_INDEX_LOCK_TIMEOUT = 600.0
"""Seconds a save or load of the derived index files waits for another process's save (then StoreBusyError)."""

_WRITE_RETRIES = 20
"""How often a write is prepared again when another process changed the same chunks meanwhile."""




def _sorted_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ids of ``a`` not in ``b``, both int64 ascending without duplicates (a store's rowids, an index's ids).

    A binary search of each id of ``a`` in ``b``: O(n log n) without the hashing and sorting
    ``np.setdiff1d`` does (0.03 s instead of ~1.8 s for two 1M-id arrays on the reference machine).
    """
    if not len(a) or not len(b):
        return a.copy()
    pos = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return a[b[pos] != a]


def _check_embedder(embedder: Any) -> None:
    """Refuse an ``embedder=`` that does not follow the Embedder protocol (a model name, a class), naming the fix.

    Raises:
        InvalidRequestError: an attribute of the protocol is missing.
    """
    for attribute in ("name", "dim", "embed_documents", "embed_query"):
        if not hasattr(embedder, attribute):
            given = (f"the class {embedder.__name__}" if isinstance(embedder, type)
                     else f"{type(embedder).__name__} {embedder!r}"[:120])
            raise InvalidRequestError(
                f"embedder {given} lacks {attribute!r}; it must follow the Embedder protocol (name, dim, "
                "embed_documents, embed_query): pass an instance such as OnnxEmbedder() (the packaged "
                "all-MiniLM-L6-v2) or HashingEmbedder(384), or leave embedder out for the default"
            )


class HybridMemory:
    """Hybrid BM25 + dense memory, persisted in a folder: the query-adaptive fusion by default, weighted
    Reciprocal Rank Fusion and the other methods of ``hybrid_memory.fusion.FUSION_METHODS`` by name.

    Args:
        path: memory directory (created if absent; reopened if it holds a memory). None keeps the memory
            in process memory only.
        embedder: any :class:`~hybrid_memory.embedders.Embedder`. None: the embedder the directory was built
            with when it is a :class:`HashingEmbedder`, else the offline all-MiniLM-L6-v2
            (:class:`OnnxEmbedder`, 384 dimensions, the vectors and name of :class:`SentenceTransformerEmbedder`).
        k1, b: BM25 parameters (bm25s, Lucene variant); defaults 1.5 and 0.75.
        candidate_multiplier: each engine retrieves ``candidate_multiplier × max(top_k, RANK_FLOOR)`` candidates before
            fusion (default 2, as in the reference design); >= 1.
        compact_min, compact_ratio: when the BM25 delta segment is merged (see :class:`BM25Index`): once the delta
            and removed documents reach ``max(compact_min, compact_ratio × main size)``; ``compact_ratio`` is a
            fraction in [0, 1] (0 leaves ``compact_min`` alone to decide).
        faiss_threads: OpenMP threads for FAISS, set in every thread that searches (1 is fastest for single
            queries on 2 cores, measured by ``benchmarks/scale.py``).
        dense_index: ``"auto"`` (default: an exact scan below :data:`~hybrid_memory.engines.dense.index.ANN_MIN` vectors,
            a FAISS IVF index with 8-bit codes and exact re-ranking above), ``"flat"`` (always exact) or
            ``"ivf"`` (always approximate once there are enough vectors to train on); see
            :class:`~hybrid_memory.engines.dense.index.FaissIndex`.
        background_compaction: merge the BM25 delta in a background thread, so an add never waits for
            a rebuild (searches keep using the old segments until the new one is swapped in); False merges
            inside the add that crosses the threshold.
        show_progress: progress bars for embedding and index builds (off by default in library calls).
        dedup: what writes do with duplicates by default (:class:`~hybrid_memory.dedup.DedupPolicy` or
            ``"keep"``, ``"skip"``, ``"merge"``); default ``"keep"``: exact duplicates are reported by
            :meth:`write` and stored anyway (see :mod:`hybrid_memory.dedup` for why).
        recency_prior: a :class:`~hybrid_memory.temporal.RecencyPrior` applied after fusion to every search, or
            None (default: off; ``search(..., recency=...)`` turns it on per call).
        synchronous: ``"full"`` (default): a write that returned survives a power cut (SQLite fsyncs the WAL
            at each commit); ``"normal"``: it survives a killed process but the last transactions may roll
            back on power loss or an OS crash, for cheaper commits (see ``benchmarks/durability.py``).
        busy_timeout: seconds a write waits for another process's write transaction (default 30).

    Raises:
        StoreFormatError: the directory was written by another format version or another embedder.
        InvalidRequestError: a numeric option of the wrong type or out of its range (``k1="x"``, ``b=2``,
            ``compact_min=-1``, ``compact_ratio=5``, ``faiss_threads=0``, ``busy_timeout="x"``, a bool for an int,
            ``show_progress="yes"``), before the folder is created; ``path`` is a file, cannot be created (``/proc/nope``, a path below a file), is
            a folder this process cannot write, holds a Qdrant Edge shard, or is not a str / os.PathLike
            (``HybridMemory(5)``) or is empty; the message names the path and the fix.

    Thread-safe: searches may run from many threads while others write. Several processes may open one
    directory and all may write (SQLite serialises the write transactions); each search first applies what
    other processes committed (see :meth:`search`), from the store's change log, never by a rebuild.
    """

    def __new__(cls, *args: Any, backend: Any = None, **kwargs: Any) -> HybridMemory:
        """``HybridMemory(backend=...)`` builds the memory over that backend (a
        :class:`~hybrid_memory.memory.backend_memory.BackendMemory`); without one, the embedded memory."""
        if backend is not None and cls is HybridMemory:
            from .backend_memory import BackendMemory

            return object.__new__(BackendMemory)
        return object.__new__(cls)

    @classmethod
    def qdrant(
        cls,
        client_or_url: Any = ":memory:",
        *,
        collection: str = "hybrid_memory",
        embedder: Embedder | None = None,
        api_key: str | None = None,
        edge_path: str | Path | None = None,
        **options: Any,
    ) -> HybridMemory:
        """A memory in a Qdrant collection (the ``qdrant`` extra); see :mod:`hybrid_memory.backends.qdrant.backend`.

        Args:
            client_or_url: a ``qdrant_client.QdrantClient``, a server URL (``"http://qdrant:6333"``), or
                ``":memory:"`` / a directory for qdrant-client's local mode. Ignored with ``edge_path``.
            collection: the collection name.
            embedder: as for the constructor (its dimension fixes the collection's).
            api_key: the server's API key, with a URL.
            edge_path: a directory for a Qdrant Edge shard (the Rust engine in process) instead of a client.
            **options: ``shard_number``, ``replication_factor``, ``write_consistency_factor``,
                ``write_ordering``, ``k1``, ``b``, ``avgdl``, ``indexed_keys``, ``payload_indexes`` go to
                :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend` (with ``edge_path``, also the shard's
                ``payload_cache``, ``payload_memory``, ``search_threads``: :meth:`QdrantBackend.edge
                <hybrid_memory.backends.qdrant.backend.QdrantBackend.edge>`); ``candidate_multiplier``, ``dedup``,
                ``recency_prior`` to the memory.

        Raises:
            MissingDependencyError: the ``qdrant`` extra is not installed.
            StoreFormatError: the collection exists with another schema (dimension, distance, sparse modifier).
            InvalidRequestError: ``edge_path`` is a file, or is (or lies inside) an embedded memory's folder
                (a shard and a memory never share a folder: use another one); cluster options with ``edge_path``.
            BackendUnavailableError: the server could not be reached (the message names the URL and collection).
        """
        from ..backends.qdrant.backend import QdrantBackend

        memory_options = {k: options.pop(k) for k in ("candidate_multiplier", "dedup", "recency_prior", "show_progress")
                          if k in options}
        if edge_path is not None:
            cluster = [k for k in ("shard_number", "replication_factor", "write_consistency_factor", "write_ordering")
                       if k in options]
            if cluster:
                raise InvalidRequestError(f"{cluster} configure a Qdrant cluster; an Edge shard takes none of them")
            backend = QdrantBackend.edge(edge_path, **options)
        else:
            backend = QdrantBackend.client(client_or_url, collection=collection, api_key=api_key, **options)
        return cls(backend=backend, embedder=embedder, **memory_options)

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        embedder: Embedder | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        candidate_multiplier: int = 2,
        compact_min: int = 500,
        compact_ratio: float = 0.1,
        faiss_threads: int | None = 1,
        dense_index: str = "auto",
        background_compaction: bool = True,
        show_progress: bool = False,
        dedup: DedupPolicy | str = "keep",
        recency_prior: RecencyPrior | None = None,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
    ) -> None:
        if dense_index not in DENSE_KINDS:
            raise InvalidRequestError(f"dense_index must be one of {DENSE_KINDS}, got {dense_index!r}")
        check_memory_options(k1=k1, b=b, candidate_multiplier=candidate_multiplier, compact_min=compact_min,
                             compact_ratio=compact_ratio, faiss_threads=faiss_threads, busy_timeout=busy_timeout,
                             show_progress=show_progress, background_compaction=background_compaction)
        if synchronous not in ("full", "normal"):
            raise InvalidRequestError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        self.path = memory_path(path) if path is not None else None
        self.candidate_multiplier = candidate_multiplier
        self.show_progress = show_progress
        self.dedup = as_policy(dedup, DedupPolicy())
        if recency_prior is not None and not isinstance(recency_prior, RecencyPrior):
            raise InvalidRequestError(f"recency_prior must be a RecencyPrior or None, got {recency_prior!r}")
        self.recency_prior = recency_prior
        if embedder is not None:
            _check_embedder(embedder)  # before any folder exists: a refused call leaves nothing behind
        if self.path is not None:
            if not (self.path / STORE_FILE).exists() and (self.path / EDGE_CONFIG).exists():
                raise InvalidRequestError(
                    f"{self.path} holds a Qdrant Edge shard ({EDGE_CONFIG}), not an embedded memory; open the shard "
                    f"with HybridMemory.qdrant(edge_path={str(self.path)!r}), or give another folder for a new memory"
                )
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InvalidRequestError(
                    f"cannot create the memory folder {self.path} ({exc.strerror or exc}); give a folder this "
                    "process can create and write, e.g. one under your home directory"
                ) from exc
            if not os.access(self.path, os.W_OK | os.X_OK):
                raise InvalidRequestError(
                    f"the memory folder {self.path} is not writable by this process (SQLite's WAL and the index "
                    "files are written there, by readers too); fix its permissions or copy the memory elsewhere"
                )
        self._store = self._open_store(synchronous=synchronous, busy_timeout=busy_timeout)
        self.embedder = self._resolve_embedder(embedder)
        self._sparse = BM25Index(
            TechnicalTokenizer(), k1=k1, b=b, compact_min=compact_min, compact_ratio=compact_ratio
        )
        self._faiss_threads = None if faiss_threads is None else int(faiss_threads)  # FAISS takes no numpy int
        self._dense_kind = dense_index
        self._dense = self._new_dense()
        self._write_lock = threading.RLock()  # one local writer at a time (embedding happens under it)
        self._index_lock = ReadWriteLock()  # searches share it; applying a change to the indexes takes it alone
        self._files_lock = FileLock(str(self.path / INDEX_LOCK)) if self.path is not None else None
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-memory")
        self._dirty = False
        self._closed = False
        self._bulk_depth = 0
        self._background_compaction = background_compaction
        self._seq = 0  # change-log position the indexes reflect
        self._data_version: int | None = None  # PRAGMA data_version when they were brought there
        self.last_sync: dict[str, Any] = {}
        self._filters = FilterIndex()
        self._filters_rebuilt = False
        self._sync_indexes()

        self._searcher = HybridSearcher(
            {"sparse": SparseEngine(self._sparse), "dense": DenseEngine(self._dense, self.embedder)},
            self._store.chunk_ids_by_rowid,
            executor=self._executor,
        )

    def _open_store(self, **options: Any) -> SQLiteStore:
        if self.path is None:
            return SQLiteStore(None, **options)
        db = self.path / STORE_FILE
        if not db.exists() and (self.path / "manifest.json").exists():
            raise StoreFormatError(
                f"{db} is missing but {self.path} holds a memory manifest: the chunks are gone. Restore "
                f"store.sqlite3 from a backup, or delete {self.path} to start an empty memory"
            )
        try:
            store = SQLiteStore(db, **options)
            store.get_meta("manifest")
        except sqlite3.OperationalError as exc:  # a readable store that SQLite could not open or lock now: keep it
            raise StoreFormatError(
                f"opening {db} failed ({exc}); the store was not changed, so do not move or restore it: check the "
                "folder's permissions and free space, then open it again"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreFormatError(
                f"{db} is not a readable SQLite database ({exc}); restore it from a backup, or move the folder "
                "away to start an empty memory"
            ) from exc
        return store

    @classmethod
    def open(cls, path: str | Path, *, create: bool = False, **kwargs: Any) -> HybridMemory:
        """Open the memory directory at ``path``; keyword arguments as for the constructor.

        Raises:
            MemoryNotFoundError: there is no memory at ``path`` (a mistyped path must not silently give an empty
                memory) unless ``create=True``; a :class:`StoreFormatError` and a ``FileNotFoundError``.
            StoreFormatError: as the constructor.
            InvalidRequestError: ``path`` is a regular file (a memory is a folder; for its ``store.sqlite3`` the
                message names the folder), not a str / os.PathLike, or empty; or it holds a Qdrant Edge shard
                (the message says to open it with ``HybridMemory.qdrant(edge_path=...)``).
        """
        folder = memory_path(path)
        if (not create and not (folder / STORE_FILE).exists() and not (folder / "manifest.json").exists()
                and not (folder / EDGE_CONFIG).exists()):  # a shard: the constructor names HybridMemory.qdrant
            raise MemoryNotFoundError(
                f"no memory at {folder}; create one with HybridMemory({str(folder)!r}) or "
                f"HybridMemory.open(..., create=True)"
            )
        return cls(folder, **kwargs)

    # -- manifest -----------------------------------------------------------------------------------
    def _resolve_embedder(self, embedder: Embedder | None) -> Embedder:
        saved = self._store.get_meta("manifest")
        if saved is not None and saved.get("format_version") != FORMAT_VERSION:
            raise StoreFormatError(
                f"memory at {self.path} has format version {saved.get('format_version')}, this hybrid-memory "
                f"reads version {FORMAT_VERSION}; re-ingest it with this version"
            )
        if embedder is None:
            saved_name = (saved or {}).get("embedder", {}).get("name", "")
            if saved_name.startswith("hashing-"):
                embedder = HashingEmbedder(int(saved["embedder"]["dim"]))
            else:
                embedder = OnnxEmbedder()
        _check_embedder(embedder)
        info = {"name": str(embedder.name), "dim": int(embedder.dim)}
        if saved is None:
            manifest = {"format_version": FORMAT_VERSION, "embedder": info, "created_at": time.time()}
            self._store.set_meta("manifest", manifest)
            self._write_manifest_file(manifest)
        elif saved["embedder"] == info:
            self._write_manifest_file(saved)  # the readable copy; the store's own copy is the one checked
        if saved is not None and saved["embedder"] != info:
            raise StoreFormatError(
                f"memory at {self.path} was built with embedder {saved['embedder']['name']!r} "
                f"(dim {saved['embedder']['dim']}), not {info['name']!r} (dim {info['dim']}); open it with the "
                f"same embedder (embedder=<the {saved['embedder']['name']!r} model>, for instance "
                "SentenceTransformerEmbedder(model_path=DIR) from the [torch] extra), or ingest into a new "
                "directory to switch models"
            )
        return embedder

    def _write_manifest_file(self, manifest: Mapping[str, Any]) -> None:
        if self.path is not None:
            (self.path / "manifest.json").write_text(json.dumps(manifest, indent=2))

    # -- index sync ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _index_files(self) -> Iterator[None]:
        """Hold the inter-process lock on the derived index files (saves and loads), so that no process
        loads a half-written index and two saves never interleave."""
        if self._files_lock is None:
            yield
            return
        try:
            self._files_lock.acquire(timeout=_INDEX_LOCK_TIMEOUT)
        except Timeout as exc:
            raise StoreBusyError(
                f"another process kept the index files of {self.path} locked for {_INDEX_LOCK_TIMEOUT:.0f} s "
                f"({self._files_lock.lock_file}); retry when its save has finished"
            ) from exc
        try:
            yield
        finally:
            self._files_lock.release()

    def _sync_indexes(self) -> None:
        """Open: load the saved indexes, then reconcile each with the store's rowids.

        Order matters for several processes: the store's rowids and change-log position are read in one
        snapshot first, so whatever other processes commit afterwards is applied by the next catch-up,
        whichever state the loaded files are in (rows they hold beyond the snapshot are removed here and
        re-added from the log). An index that had to be rebuilt is saved at once, so the next open (after
        a crash too) loads it instead of rebuilding again.
        """
        self._data_version = self._store.data_version()
        store_ids, self._seq = self._store.snapshot()
        if self.path is not None:
            self._store.memoize_keys()  # searches then read candidate ids from memory, not cold pages
        loaded = {"bm25": False, "dense": False}
        if self.path is not None:
            with self._index_files():
                loaded["bm25"] = self._sparse.load(self.path / "bm25")
                loaded["dense"] = self._dense.load(self.path / "dense")
                loaded["filters_seq"] = self._filters.load(self.path / "filters")
        self.last_sync = self._reconcile(store_ids, loaded)
        rebuilt = any(report["rebuilt"] for report in self.last_sync.values()) or self._filters_rebuilt
        self._dirty = any(report["rebuilt"] or report["added"] or report["removed"] for report in self.last_sync.values())
        if rebuilt and self.path is not None and len(store_ids):
            try:
                self._save_indexes()
            except DiskFullError as exc:  # open anyway: the rebuilt indexes serve from memory (issue 35)
                logger.warning("%s; the memory is open and answers searches, its rebuilt indexes kept in memory "
                               "only; writes fail until disk space is freed", exc)

    def _reconcile(self, store_ids: np.ndarray, loaded: Mapping[str, bool]) -> dict[str, dict[str, Any]]:
        """Bring every derived index to exactly ``store_ids`` (int64, ascending). One call per index."""
        self._filters_rebuilt = self._reconcile_filters(store_ids, loaded.get("filters_seq"))
        return {
            "bm25": self._reconcile_sparse(store_ids, loaded.get("bm25", True)),
            "dense": self._reconcile_dense(store_ids, loaded.get("dense", True)),
        }

    def _reconcile_filters(self, store_ids: np.ndarray, saved_seq: int | None) -> bool:
        """The filter index loaded at change-log position ``saved_seq``: replay the log from there (in-place
        metadata updates leave rowids alone, so a rowid diff alone would miss them), then diff rowids with the
        snapshot. Rebuilt from the store in one pass when nothing was loaded or the log no longer reaches back
        (or the store is behind the files, e.g. restored from a backup). Returns True when rebuilt."""
        changes, last = (None, -1) if saved_seq is None else self._store.changes_since(saved_seq)
        if changes is None or saved_seq > last:
            self._filters.rebuild(self._store.filter_rows())
            return bool(len(store_ids))
        self._filters.apply(changes)
        live = self._filters.rowids()
        self._filters.remove(_sorted_difference(live, store_ids))
        missing = _sorted_difference(store_ids, live)
        if len(missing):
            self._filters.add_rows(self._store.filter_rows(rowids=missing))
        return False

    def _reconcile_sparse(self, store_ids: np.ndarray, loaded: bool) -> dict[str, Any]:
        live = self._sparse.ids()
        missing = _sorted_difference(store_ids, live)
        if not loaded or len(missing) > self._sparse.compact_min:
            found, texts, _ = self._store.index_rows(store_ids, 0)
            if len(found):
                logger.info("building BM25 index over %d stored chunks", len(found))
            self._sparse.build(found, texts, show_progress=self.show_progress)
            return {"rebuilt": bool(len(found)), "added": 0, "removed": 0}
        extra = _sorted_difference(live, store_ids)
        self._sparse.remove(extra)
        found, texts, _ = self._store.index_rows(missing, 0)
        if len(found):
            self._sparse.add(found, texts)
        return {"rebuilt": False, "added": len(found), "removed": len(extra)}

    def _reconcile_dense(self, store_ids: np.ndarray, loaded: bool) -> dict[str, Any]:
        if not loaded:
            self._dense = self._new_dense()
            if hasattr(self, "_searcher"):
                self._searcher.engines["dense"] = DenseEngine(self._dense, self.embedder)
        live = self._dense.ids()
        extra = _sorted_difference(live, store_ids)
        self._dense.remove(extra)
        missing = _sorted_difference(store_ids, live)
        added = 0
        for start in range(0, len(missing), 50_000):  # in batches: the store's blobs never pile up in memory
            found, _, vectors = self._store.index_rows(missing[start : start + 50_000], self._dense.dim)
            if len(found):
                self._dense.add(found, vectors)
            added += len(found)
        self._dense.maintain(background=self._background_compaction)
        return {"rebuilt": not loaded and bool(len(store_ids)), "added": added, "removed": len(extra)}

    def _catch_up(self) -> bool:
        """Apply what other processes committed since the indexes' change-log position; cheap when nothing
        was (one ``PRAGMA data_version``). Returns True when something was read."""
        if self.path is None or self._store.data_version() == self._data_version:
            return False
        with self._index_lock.write():
            version = self._store.data_version()
            if version == self._data_version:
                return False
            changes, seq = self._store.changes_since(self._seq)
            self._follow(changes, seq)
            self._data_version = version
        return True

    def _follow(self, changes: ChangeSet | None, seq: int) -> None:
        """Apply other processes' changes up to log position ``seq`` (caller holds the index lock alone).

        None: the log no longer reaches back to our position (it keeps the last ``log_keep`` entries), so
        every index is reconciled with a fresh snapshot of the store's rowids instead: a diff, no rebuild.
        """
        if changes is None:
            logger.info("change log pruned past this process's position; reconciling indexes by rowid")
            store_ids, seq = self._store.snapshot()
            logger.debug("reconciled: %s", self._reconcile(store_ids, {}))
            self._seq = seq
            self._dirty = True
            return
        if changes:
            self._apply_changes(changes)
            self._dirty = True
        self._seq = max(self._seq, seq)

    def _new_dense(self) -> FaissIndex:
        return FaissIndex(int(self.embedder.dim), kind=self._dense_kind, omp_threads=self._faiss_threads)

    # -- writes -------------------------------------------------------------------------------------
    def add(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Add new chunks. Returns, in order, the id under which each chunk's content is stored: its own id,
        or, when the dedup policy skipped or merged it, the id of the chunk it duplicates.

        Args:
            chunks: :class:`Chunk` objects or mappings with ``chunk_id``, ``text``, optional ``source``,
                ``metadata``, scope fields and ``valid_from`` / ``valid_to``.
            vectors: optional precomputed float32 (n, dim) vectors, one row per chunk (L2-normalised here);
                None embeds the texts with the memory's embedder.
            dedup: policy for this call (default the memory's, ``keep``); see :meth:`write` for the decisions.
            scope: write as a view of this scope (what :meth:`scoped` views pass): bound fields are stamped.

        Raises:
            DuplicateChunkError: a chunk_id is already stored or repeated in ``chunks`` (nothing is written).
            InvalidRequestError: a chunk is malformed (nothing is written).
            ScopeError: with ``scope``, a chunk of another scope or an id another scope holds (nothing is written).
            DimensionMismatchError: ``vectors`` has the wrong shape (nothing is written).
        """
        check_chunk_list(chunks, "add")
        return self._write(chunks, vectors, replace=False, dedup=dedup, scope=scope).ids

    def upsert(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Add chunks, replacing stored chunks with the same ids in both engines. Returns the stored ids as
        :meth:`add` does.

        A chunk whose text is unchanged keeps its vector (no re-embedding); only its source, metadata, scope
        and event time are updated. Raises as :meth:`add`, except for already stored ids.
        """
        check_chunk_list(chunks, "upsert")
        return self._write(chunks, vectors, replace=True, dedup=dedup, scope=scope).ids

    def write(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        replace: bool = True,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Upsert (``replace=False``: add) chunks and say what was done with each: a
        :class:`~hybrid_memory.dedup.WriteResult` of :class:`~hybrid_memory.dedup.WriteDecision` s (``written``,
        ``kept``, ``skipped`` or ``merged``, with the duplicate's id, kind, cosine and token overlap).

        Duplicates are looked for among chunks with new ids only, in exactly the same scope (see
        :mod:`hybrid_memory.dedup`). Raises as :meth:`add` / :meth:`upsert`.
        """
        check_chunk_list(chunks, "write")
        return self._write(chunks, vectors, replace=replace, dedup=dedup, scope=scope)

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        *,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Upsert plain texts (ids default to random uuid4 hex) in ``scope`` (None: unscoped). Returns the
        chunk ids."""
        if isinstance(texts, str):
            raise InvalidRequestError("texts must be a list of strings, got one str; wrap it: add_texts([text])")
        n = len(texts)
        for name, values in (("metadatas", metadatas), ("ids", ids), ("sources", sources)):
            if values is not None and len(values) != n:
                raise InvalidRequestError(f"{name} has {len(values)} items for {n} texts; give one per text")
        chunks = [
            {
                "chunk_id": ids[i] if ids is not None else uuid.uuid4().hex,
                "text": texts[i],
                "source": sources[i] if sources is not None else "",
                "metadata": dict(metadatas[i]) if metadatas is not None else {},
            }
            for i in range(n)
        ]
        return self.upsert(chunks, scope=scope)

    def _validate_chunks(self, chunks: Iterable[Chunk | Mapping[str, Any]]) -> list[Chunk]:
        check_chunk_list(chunks, "add")  # add / upsert / write checked first, naming themselves
        valid: list[Chunk] = []
        for position, chunk in enumerate(chunks):
            try:
                item = chunk if isinstance(chunk, Chunk) else Chunk.model_validate(chunk)
            except ValidationError as exc:
                raise InvalidRequestError(validation_message(exc, f"chunk #{position}")) from exc
            try:
                check_metadata(item.metadata)  # the key rule filters share, and storable values (bounded depth)
                check_scope_values(item)  # a scope value no view could bind would hide the chunk from every scope
            except InvalidRequestError as exc:
                raise InvalidRequestError(f"chunk #{position} ({item.chunk_id!r}): {exc}") from exc
            try:
                json.dumps(item.metadata, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidRequestError(
                    f"chunk #{position} ({item.chunk_id!r}): metadata must be JSON-serialisable with finite "
                    f"numbers: {exc}"
                ) from exc
            valid.append(item)
        seen: set[str] = set()
        repeated = sorted({c.chunk_id for c in valid if c.chunk_id in seen or seen.add(c.chunk_id)})
        if repeated:
            raise DuplicateChunkError(f"chunk ids repeated in one call: {repeated[:5]}; give each id once")
        return valid

    def _prepare_write(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        vectors: Any,
        dedup: DedupPolicy | str | None,
        scope: Scope | Mapping[str, Any] | None,
        dim: int,
        checked: bool = False,
    ) -> tuple[Scope | None, DedupPolicy, list[Chunk], np.ndarray | None]:
        """What every write does first, on any backend: the memory is open, chunks valid and stamped with
        the scope, caller-given vectors float32 (len(chunks), dim) and finite, the dedup policy resolved.
        ``checked``: the chunks are :class:`Chunk` s validated already, as the caller gave them (a supersede's
        new fact, whose inherited scope values are the stored ones: a value stored before a rule was added
        must not make the fact impossible to supersede)."""
        self._check_open()
        scope = as_scope(scope)
        policy = as_policy(dedup, self.dedup)
        items = list(chunks) if checked else self._validate_chunks(chunks)
        if scope is not None:
            items = [scope.stamp(c) for c in items]
        if vectors is not None:
            vectors = check_vectors(vectors, len(items), dim, [c.chunk_id for c in items])
        return scope, policy, items, vectors

    def _write(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        vectors: np.ndarray | None,
        *,
        replace: bool,
        dedup: DedupPolicy | str | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        extra_updates: Sequence[tuple[int, Mapping[str, Any]]] = (),
        checked: bool = False,
    ) -> WriteResult:
        scope, policy, items, vectors = self._prepare_write(chunks, vectors, dedup, scope, self._dense.dim, checked)
        if not items:
            return WriteResult([])
        with self._write_lock:
            for _attempt in range(_WRITE_RETRIES):
                try:
                    return self._write_once(items, vectors, replace, policy, scope, extra_updates)
                except WriteConflict:
                    logger.debug("chunks changed by another process while this write was prepared; preparing again")
        raise StoreBusyError(
            f"other processes kept changing the same chunks during {_WRITE_RETRIES} attempts of this write; retry it"
        )

    def _write_once(
        self,
        items: list[Chunk],
        vectors: np.ndarray | None,
        replace: bool,
        policy: DedupPolicy,
        scope: Scope | None,
        extra_updates: Sequence[tuple[int, Mapping[str, Any]]],
    ) -> WriteResult:
        """Prepare the write against the rows stored now, then commit it unless another process changed
        those rows meanwhile (WriteConflict: the caller prepares it again). Caller holds the write lock."""
        existing = self._store.lookup([c.chunk_id for c in items])
        systems = self._store.system_of(list(existing)) if existing else {}
        plan = plan_write(
            items, {cid: (digest, systems[cid]) for cid, (_, digest) in existing.items()},
            vectors=vectors, replace=replace, policy=policy, scope=scope,
            embed=self._embed, find_hashes=self._store.find_hashes,
            near_search=lambda: self._near_candidates(self._sparse.tokenizer.tokenize, policy.cosine_threshold),
            tokenize=self._sparse.tokenizer.tokenize,
        )
        items, changed, new_vectors, unchanged = plan.items, plan.changed, plan.vectors, plan.unchanged
        old_rowids = [existing[items[i].chunk_id][0] for i in changed if items[i].chunk_id in existing]
        new_rows = [
            NewRow(items[i].chunk_id, items[i].text, items[i].source, items[i].metadata, new_vectors[j],
                   system=plan.system(i))
            for j, i in enumerate(changed)
        ]
        updates = [(existing[items[i].chunk_id][0], items[i].source, items[i].metadata) for i in unchanged]
        system_updates = [(existing[items[i].chunk_id][0], plan.system(i)) for i in unchanged]
        merge_targets = plan.merge_targets()
        if merge_targets:
            stored = self._store.system_of(list(merge_targets))
            system_updates += [
                (stored[cid]["rowid"], {"merged": stored[cid]["merged"] + refs})
                for cid, refs in merge_targets.items() if cid in stored
            ]
        expected = {c.chunk_id: existing.get(c.chunk_id) for c in items}
        with self._index_lock.write():
            result = self._store.write(
                new_rows, replace_rowids=old_rowids, metadata_updates=updates,
                system_updates=[*system_updates, *extra_updates], since_seq=self._seq, expected=expected,
            )
            self._committed(
                result,
                ChangeSet(
                    removed=old_rowids,
                    added_rowids=result.rowids,
                    added_texts=[r.text for r in new_rows],
                    added_vectors=new_vectors,
                    added_metadata=[r.metadata for r in new_rows],
                    metadata_updated=[(rowid, metadata) for rowid, _, metadata in updates],
                    added_system=[r.system for r in new_rows],
                    system_updated=[*system_updates, *extra_updates],
                ),
            )
        logger.debug("stored %d chunks (%d re-indexed, %d duplicates dropped)", len(items), len(changed), len(plan.dropped))
        return plan.result()

    def _committed(self, result: CommitResult, ours: ChangeSet) -> None:
        """After a local commit (caller holds the index lock alone): first what other processes committed
        before it (read in the same transaction), then this write."""
        if result.pending is None:  # fell behind the log: the reconciled snapshot already holds this write
            self._follow(None, result.seq)
            return
        self._follow(result.pending, self._seq)
        self._apply_changes(ours)
        self._seq = result.seq
        self._dirty = True

    def _near_candidates(self, tokenize: Any, cosine_floor: float) -> Any:
        """``(vector, scope key, span) -> [(chunk_id, cosine, tokens)]``: the 5 nearest stored chunks of exactly
        that scope whose validity covers the span (:func:`~hybrid_memory.dedup.covers`): a dense search over the
        scope's rowids (resolved once per scope from the filter index), :data:`NEAR_POOL` deep, kept to the
        covering ones, read deeper (:data:`NEAR_POOL_MAX`) while fewer than 5 cover it and the last one read is
        still at ``cosine_floor`` or above. The validity is tested on the hits, not resolved per span: chunks with
        their own ``valid_from`` each have a span of their own, and a range resolved per chunk made a large batch
        quadratic."""
        rowsets: dict[tuple, RowSet] = {}

        def search(vector: np.ndarray, key: tuple, span: tuple) -> list[tuple[str, float, list[str]]]:
            if key not in rowsets:
                # exactly this scope, every field (None: absent), from the filter index's bitmaps, not a scan
                exact = {"$and": [{name: value} for name, value in zip(SCOPE_FIELDS, key, strict=True)]}
                rowsets[key] = self._filters.resolve(None, exact) or RowSet(np.zeros(0, np.int64), sorted_unique=True)
            if not len(rowsets[key]):
                return []
            depth = NEAR_POOL
            while True:
                hits = self._dense.search(vector, depth, rowsets[key])
                names = self._store.chunk_ids_by_rowid([rowid for rowid, _ in hits])
                systems = self._store.system_of(list(names.values()))
                kept = [(r, score) for r, score in hits if r in names and names[r] in systems and
                        covers((systems[names[r]]["valid_from"], systems[names[r]]["valid_to"]), span)][:5]
                # closed versions of the same fact crowd the nearest: read deeper while they fill the pool
                if len(kept) == 5 or len(hits) < depth or depth >= NEAR_POOL_MAX or hits[-1][1] < cosine_floor:
                    break
                depth *= 4
            texts = dict(zip([r for r, _ in kept], self._store.texts([r for r, _ in kept]), strict=True))
            return [(names[r], score, tokenize(texts[r])) for r, score in kept]

        return search

    def _embed(self, texts: list[str]) -> np.ndarray:
        return embed_checked(self.embedder, texts, self._dense.dim)

    def _apply_changes(self, changes: ChangeSet) -> None:
        """The one funnel by which every derived index follows the store (caller holds the write lock)."""
        if not changes:
            return
        self._filters.apply(changes)
        self._sparse.remove(changes.removed)
        self._dense.remove(changes.removed)
        if len(changes.added_rowids):
            self._dense.add(changes.added_rowids, changes.added_vectors)
            self._sparse.add(changes.added_rowids, changes.added_texts)
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._bulk_depth:
            # a bulk load merges the BM25 delta in the background whenever it reaches its memory bound, so a
            # million-chunk load never holds a million documents of Python postings
            if self._sparse.needs_compaction(bulk=True):
                self._sparse.compact(self._store.texts, background=True)
            return
        if self._sparse.needs_compaction():
            self._sparse.compact(self._store.texts, background=self._background_compaction)
        if self._dense.needs_maintenance():
            self._dense.maintain(background=self._background_compaction)

    @contextlib.contextmanager
    def bulk(self) -> Iterator[HybridMemory]:
        """Defer index maintenance to the end of the block, for loading many batches.

        Inside the block every added chunk is searchable at once (from the BM25 delta segment and the exact
        vector scan or the current IVF index). The BM25 main segment is rebuilt in the background only when
        the delta reaches its memory bound (:meth:`BM25Index.needs_compaction` with ``bulk=True``; a
        geometric schedule, so a load of n chunks rebuilds O(n log n + n² / 100k) documents in all), and
        once more at the end; IVF training waits for the end of the block and runs in the background
        (:meth:`flush` waits for it). Blocks nest; the outermost one compacts.
        """
        with self._write_lock:
            self._bulk_depth += 1
        try:
            yield self
        finally:
            with self._write_lock:
                self._bulk_depth -= 1
                if not self._bulk_depth and not self._closed:
                    if self._dense.needs_maintenance():
                        # IVF training runs beside the BM25 merge (FAISS releases the GIL)
                        self._dense.maintain(background=True)
                    self._sparse.wait()
                    if self._sparse.needs_compaction() or self._sparse.delta_size >= self._sparse.compact_min:
                        self._sparse.compact(self._store.texts, show_progress=self.show_progress)

    def delete(self, chunk_ids: Iterable[str] | str, *, scope: Scope | Mapping[str, Any] | None = None) -> int:
        """Delete chunks by id from the store and both engines. Unknown ids are ignored, and so are ids
        outside ``scope`` when it is given.

        Args:
            chunk_ids: a list (any iterable) of chunk ids; a lone str is one id (``delete("c1")`` deletes the
                chunk ``"c1"``, not ``"c"`` and ``"1"``).

        Returns:
            The number of chunks deleted.

        Raises:
            InvalidRequestError: ``chunk_ids`` is not an iterable of str (an int, bytes, a chunk object among
                the ids); nothing is deleted.
        """
        self._check_open()
        ids = self._ids_argument(chunk_ids)
        scope = as_scope(scope)
        with self._write_lock:
            if scope is not None:
                ids = [c.chunk_id for c in self._store.get(ids, scope=scope.bound())]
            with self._index_lock.write():
                result = self._store.delete(ids, since_seq=self._seq)
                self._committed(result, ChangeSet(removed=result.rowids))
        return len(result.rowids)

    # -- reads --------------------------------------------------------------------------------------
    def get(self, chunk_ids: Iterable[str] | str, *, scope: Scope | Mapping[str, Any] | None = None) -> list[StoredChunk]:
        """Stored chunks in the order of ``chunk_ids`` (a list of ids; a lone str is one id); unknown ids (and ids
        outside ``scope``) are skipped. Raises InvalidRequestError as :meth:`delete` does."""
        self._check_open()
        return self._store.get(self._ids_argument(chunk_ids), scope=_bound(scope))

    @staticmethod
    def _ids_argument(chunk_ids: Iterable[str] | str, name: str = "chunk_ids") -> list[str]:
        """``chunk_ids`` of :meth:`delete` and :meth:`get` (``old_ids`` of :meth:`supersede`, ``name`` in messages)
        as a list of str; a lone str is one id.

        Raises:
            InvalidRequestError: not an iterable, bytes (which iterate as ints), or an element that is not a str
                (a chunk object: the message says to pass its ``chunk_id``); the message names the value, its type,
                its position and the fix.
        """
        ids = [chunk_ids] if isinstance(chunk_ids, str) else chunk_ids
        if isinstance(ids, (bytes, bytearray)) or not isinstance(ids, Iterable):
            raise InvalidRequestError(
                f"{name} must be a list of chunk ids (str), or one id as a str, got {type(chunk_ids).__name__} "
                f"{chunk_ids!r:.60}; pass e.g. ['c1', 'c2'] or 'c1'"
            )
        ids = list(ids)
        for position, value in enumerate(ids):
            if isinstance(value, str):
                continue
            if isinstance(getattr(value, "chunk_id", None), str):
                raise InvalidRequestError(
                    f"{name} must be chunk ids (str), got a {type(value).__name__} (chunk_id {value.chunk_id!r:.60}) "
                    f"at position {position}; pass the ids: [c.chunk_id for c in chunks]"
                )
            raise InvalidRequestError(
                f"{name} must be chunk ids (str), got {type(value).__name__} {value!r:.60} at position {position}; "
                "pass the ids as str, e.g. ['c1', 'c2']"
            )
        return ids

    def count(
        self, metadata_filter: Mapping[str, Any] | None = None, *, scope: Scope | Mapping[str, Any] | None = None,
        as_of: Any = None,
    ) -> int:
        """Number of stored chunks matching the filter (all when None), in ``scope``, valid at ``as_of`` (Unix
        seconds, datetime or ISO string). Raises InvalidFilterError, InvalidRequestError.

        Resolved from the in-memory filter index (Roaring bitmaps, after applying other processes' commits, as a
        search does), not by a SQL scan of the metadata: the same rows the same filter gives a search. Without
        any restriction it is the store's row count."""
        self._check_open()
        metadata_filter, bound, instant = _checked_filter(metadata_filter), _bound(scope), _instant(as_of)
        if not metadata_filter and not bound and instant is None:
            return self._store.count()
        self._catch_up()
        with self._index_lock.read():
            self._check_open()
            allowed = self._resolve_filter(metadata_filter, bound, instant)
            return self._store.count() if allowed is None else len(allowed)

    def __len__(self) -> int:
        return self.count()

    def iter_chunks(
        self, metadata_filter: Mapping[str, Any] | None = None, *, scope: Scope | Mapping[str, Any] | None = None,
        as_of: Any = None,
    ) -> Iterator[StoredChunk]:
        """Stored chunks matching the filter, in ``scope``, valid at ``as_of``, in order of first insertion,
        read lazily in batches of 1,000.

        An upsert keeps a chunk's place; a chunk deleted and added again goes to the end. Every chunk that
        stays stored during the whole iteration is yielded exactly once, even while other threads or
        processes write; each yielded version is the one stored when its batch was read; chunks added or
        deleted during the iteration may or may not be yielded. Raises InvalidFilterError.
        """
        self._check_open()
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound, catch_up=True)  # SQL listings: no search caught up
        return self._store.iter_chunks(metadata_filter, scope=bound, as_of=_instant(as_of))

    def page_chunks(
        self, metadata_filter: Mapping[str, Any] | None = None, *, after: int | None = None, limit: int = 100,
        scope: Scope | Mapping[str, Any] | None = None, as_of: Any = None,
    ) -> tuple[list[StoredChunk], int | None]:
        """One page of :meth:`iter_chunks` (same order, filter, scope and ``as_of``), by keyset: the chunks after
        position ``after`` (None: the first page), at most ``limit`` (1..10,000), and the position to pass as
        ``after`` for the next page (None on the last). A position is an opaque int; it stays valid while
        chunks are added or deleted (none is skipped or repeated because others moved), and each page costs
        one indexed range read, whatever its number. Raises InvalidFilterError, InvalidRequestError."""
        self._check_open()
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound, catch_up=True)  # SQL listings: no search caught up
        return self._store.page_chunks(metadata_filter, bound, _instant(as_of), _page_after(after, limit), limit)

    def chunk_hashes(self, *, scope: Scope | Mapping[str, Any] | None = None) -> dict[str, str]:
        """chunk_id -> sha256 of the text, for every stored chunk in ``scope`` (all when None), for change
        detection by derived layers."""
        self._check_open()
        return self._store.chunk_hashes(_bound(scope))

    # -- scopes and time ----------------------------------------------------------------------------
    def scoped(self, scope: Scope | Mapping[str, Any] | None = None, /, **fields: str) -> ScopedMemory:
        """A view bound to a scope (``memory.scoped(tenant="acme", user_id="u1")``) that cannot read or write
        outside it; see :mod:`hybrid_memory.scopes`.

        Raises:
            InvalidRequestError: an unknown scope field or a blank value.
            ScopeError: no field bound.
        """
        base = dict(scope) if isinstance(scope, Mapping) else (scope.bound() if isinstance(scope, Scope) else {})
        if scope is not None and not isinstance(scope, (Mapping, Scope)):
            raise InvalidRequestError(
                f"scope must be a Scope or a mapping of {', '.join(SCOPE_FIELDS)}, got {type(scope).__name__}")
        bound = as_scope({**base, **fields})
        return ScopedMemory(self, bound or Scope())

    def supersede(
        self,
        old_ids: Iterable[str] | str,
        new_chunk: Chunk | Mapping[str, Any],
        *,
        vector: np.ndarray | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> str:
        """Write ``new_chunk`` and close the validity of the facts it replaces, instead of deleting them.

        The new chunk's ``valid_from`` is its own, else now. Each old chunk gets ``valid_to`` = that instant and
        ``superseded_by`` = the new id, in the same transaction; it stays stored and searchable with ``as_of``
        before that instant (Graphiti's edge invalidation, bi-temporal: ingestion time is kept apart).

        Args:
            old_ids: ids of the facts replaced (one id or several).
            new_chunk: the new fact (upserted; scope fields stamped with ``scope``).
            vector: its precomputed float32 (dim,) vector, or None to embed it.
            scope: act as a view of this scope: old ids outside it are unknown.

        Returns:
            The new chunk's id.

        Raises:
            InvalidRequestError: an old id is unknown (or outside ``scope``), is the new id, or its fact starts
                after the new one (its interval would be empty); nothing is written.
        """
        self._check_open()
        old = self._ids_argument(old_ids, "old_ids")
        if not old:
            raise InvalidRequestError("old_ids is empty: give the ids of the facts the new chunk replaces")
        chunk = self._validate_chunks([new_chunk])[0]
        if chunk.chunk_id in old:
            raise InvalidRequestError(f"chunk {chunk.chunk_id!r} cannot supersede itself; give the new fact a new id")
        with self._write_lock:
            found = [c.chunk_id for c in self._store.get(old, scope=_bound(scope))]
            systems = self._store.system_of(found)
            chunk, closes = plan_supersede(old, chunk, systems, time.time())
            vectors = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(1, -1)
            updates = [(systems[cid]["rowid"], update) for cid, update in closes]
            self._write([chunk], vectors, replace=True, dedup="keep", scope=scope, extra_updates=updates, checked=True)
        return chunk.chunk_id

    # -- search -------------------------------------------------------------------------------------
    @staticmethod
    def make_request(request: SearchRequest | Mapping[str, Any] | str | None = None, /, **fields: Any) -> SearchRequest:
        """Build a validated :class:`SearchRequest` from a request, a mapping or a query string plus fields.

        ``fields`` override the request's ``top_k``, ``metadata_filter``, ``as_of``, ``query_id`` and
        ``hybrid_params``; ``dense_weight``, ``sparse_weight``, ``rrf_k_constant`` and ``fusion`` may be given as
        top-level shortcuts that override those of ``hybrid_params``. ``search_text`` is not an override: given
        both in ``request`` (its text, or its ``search_text``) and as a keyword, the two must be equal.

        Raises:
            InvalidRequestError: a field is invalid (the message names it), two different search texts were
                given (in ``request`` and as ``search_text=``), or ``request`` is None without ``search_text=``.
            InvalidFilterError: the metadata filter is malformed.
        """
        if isinstance(request, SearchRequest):
            data = request.model_dump()
        elif isinstance(request, str):
            data = {"search_text": request}
        elif isinstance(request, Mapping):
            data = dict(request)
        elif request is None:
            if "search_text" not in fields:  # search(None): "got {}" named nothing the caller passed
                raise InvalidRequestError(
                    'invalid search request: got None (and no search_text=); pass a request dict or SearchRequest, '
                    'e.g. {"search_text": "..."}, or the search text itself'
                )
            data = {}
        else:
            raise InvalidRequestError(
                f"request must be a SearchRequest, a mapping or the search text, got {type(request).__name__}"
            )
        if "search_text" in fields and "search_text" in data and fields["search_text"] != data["search_text"]:
            # two texts is a mistake, not an override: searching one of them silently would answer another question
            raise InvalidRequestError(
                f"two search texts: {_SHORT.repr(data['search_text'])} in the request and search_text="
                f"{_SHORT.repr(fields['search_text'])} as a keyword; give the search text once (drop search_text=, "
                "or leave it out of the request)"
            )
        shortcuts = {key: fields.pop(key) for key in _SHORTCUTS if key in fields}
        data.update(fields)
        if shortcuts:
            params = data.get("hybrid_params") or {}
            if hasattr(params, "model_dump"):
                params = params.model_dump()
            if not isinstance(params, Mapping):
                raise InvalidRequestError(
                    f"hybrid_params must be an object with dense_weight, sparse_weight, rrf_k_constant, got "
                    f"{type(params).__name__}"
                )
            data["hybrid_params"] = {**params, **shortcuts}
        try:
            validated = SearchRequest.model_validate(data)
            validate_filter(validated.metadata_filter)
        except ValidationError as exc:
            raise InvalidRequestError(validation_message(exc, "search request")) from exc
        except RecursionError as exc:  # a value nested thousands of levels deep, anywhere in the request
            raise InvalidRequestError(
                "search request nests too deeply (thousands of levels); flatten the filter or the values"
            ) from exc
        return validated

    def _prepare(
        self, request: Any, fields: dict[str, Any], scope: Scope | Mapping[str, Any] | None = None
    ) -> tuple[SearchRequest, RowSet | None]:
        self._check_open()
        req = self.make_request(request, **fields)
        return req, self._resolve_filter(req.metadata_filter, _bound(scope), req.as_of)

    def _resolve_filter(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> RowSet | None:
        """The rowids a search may return: the metadata filter, the bound scope fields and the facts valid at
        ``as_of`` (Unix seconds; ``valid_from <= as_of < valid_to``, an absent bound is open), all resolved from
        the filter index (cached per filter until the next write). None when nothing restricts.

        Raises:
            InvalidFilterError: the metadata filter is malformed, or names a scope field no chunk searched has
                as metadata (:func:`~hybrid_memory.scopes.check_scope_keys`).
        """
        allowed = self._filters.resolve(metadata_filter, system_filter(scope, as_of))
        self._check_scope_keys(metadata_filter, scope)
        if scope and allowed is not None:  # a scoped search scores with its scope's statistics (issue 35)
            population = allowed if metadata_filter is None and as_of is None else \
                self._filters.resolve(None, system_filter(scope, None))
            if population is not None:
                allowed.population = population
        return allowed

    def _check_scope_keys(self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None,
                          catch_up: bool = False) -> None:
        """:func:`~hybrid_memory.scopes.check_scope_keys` against the filter index; ``catch_up``: apply other
        processes' commits first (a search has), only when the filter names a scope field."""
        if not metadata_filter:  # the common search: nothing to check, nothing to build
            return
        within = system_filter(scope, None)

        def holds(name: str) -> bool:
            if catch_up:
                self._catch_up()
            return self._filters.holds_metadata_key(name, within)

        check_scope_keys(metadata_filter, holds, scoped=bool(scope))

    def _recency(self, recency: RecencyPrior | bool | None) -> RecencyPrior | None:
        if recency is None or recency is True:
            return self.recency_prior if recency is None else (self.recency_prior or RecencyPrior())
        if recency is False:
            return None
        if not isinstance(recency, RecencyPrior):
            raise InvalidRequestError(f"recency must be a RecencyPrior, True, False or None, got {recency!r}")
        return recency

    def _with_prior(self, req: SearchRequest, result: HybridResult, prior: RecencyPrior | None) -> HybridResult:
        """The recency prior as a post-fusion step: fused scores + bounded bonus, re-sorted, cut to top_k."""
        if prior is None or not result.hits:
            return result
        rows = self._store.get([h.key for h in result.hits])
        times = {c.chunk_id: c.valid_from if c.valid_from is not None else c.created_at for c in rows}
        now = req.as_of if req.as_of is not None else time.time()
        hits = apply_recency_prior(result.hits, times, prior, now, req.top_k)
        return dataclasses.replace(result, hits=hits)

    def _search_args(self, req: SearchRequest, allowed: RowSet | None, prior: RecencyPrior | None = None) -> dict[str, Any]:
        params = req.hybrid_params
        # every top_k up to RANK_FLOOR searches as top_k RANK_FLOOR does (same candidates, same guard bound),
        # so its results are the first top_k of those: the first result never depends on a small top_k
        ranked = max(req.top_k, RANK_FLOOR)
        depth = ranked * self.candidate_multiplier
        return {
            # with a recency prior the fused list is kept to the candidate depth, so the prior can reorder it
            "top_k": req.top_k if prior is None else depth,
            "depth": depth,
            "weights": {"sparse": params.sparse_weight, "dense": params.dense_weight},
            "allowed": allowed,
            "rrf_k": params.rrf_k_constant,
            "fusion": params.fusion,
            "max_df": ranked,
        }

    def _response(self, req: SearchRequest, result: HybridResult) -> SearchResponse:
        # fusion ran on chunk ids (identity and tie-breaks); text, source and metadata are loaded for the
        # winners only, by rowid, so they are those of the version scored. A rowid another process replaced
        # during this search falls back to the chunk's current version; a chunk deleted meanwhile is left out.
        by_rowid = self._store.hit_rows([hit.doc_id for hit in result.hits])
        gone = [hit.key for hit in result.hits if hit.doc_id not in by_rowid]
        current = {c.chunk_id: (c.text, c.source, c.metadata) for c in self._store.get(gone)} if gone else {}
        return build_response(req, result, lambda hit: by_rowid.get(hit.doc_id) or current.get(hit.key))

    def search(
        self,
        request: SearchRequest | Mapping[str, Any] | str | None = None,
        /,
        *,
        query_vector: np.ndarray | Sequence[float] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        recency: RecencyPrior | bool | None = None,
        **fields: Any,
    ) -> SearchResponse:
        """Hybrid search: BM25 and dense retrieval run concurrently, each restricted by the metadata filter,
        the scope and ``as_of``, then are fused and cut to ``top_k``.

        Args:
            request: a :class:`SearchRequest`, its JSON as a mapping, or the search text.
            query_vector: the query's embedding, float32 (dim,), when the caller already has it (for example
                LlamaIndex's ``QueryBundle.embedding``); None embeds ``search_text`` with the memory's embedder.
            scope: only chunks of this scope are candidates (what :meth:`scoped` views pass).
            recency: a :class:`~hybrid_memory.temporal.RecencyPrior` for this call, True (the memory's, else the
                default prior), False (off), or None (the memory's ``recency_prior``, off by default). Applied
                after fusion: see :class:`~hybrid_memory.temporal.RecencyPrior`.
            **fields: request fields overriding ``request`` (``top_k``, ``metadata_filter``, ``as_of``,
                ``query_id``, ``hybrid_params``, or the shortcuts ``dense_weight``, ``sparse_weight``,
                ``rrf_k_constant``, ``fusion``, which override those of ``hybrid_params``). ``search_text`` is
                not overridden: given in ``request`` too, it must be the same text (else InvalidRequestError).

        Each engine returns ``candidate_multiplier × max(top_k, RANK_FLOOR)`` candidates (:data:`RANK_FLOOR`: the results of any top_k up to 10 are the first top_k of the same list); an engine whose weight is 0 is not
        run. Results are ordered by score descending, ties by chunk_id.

        Consistency: every write that returned before this call began, in this process or any other, is
        searched (other processes' commits are applied first, from the store's change log). Within this
        process a search and a write never overlap on the indexes: each result's text, source and metadata
        are those of the version that was scored. A write committed by another process while this search
        runs may not be seen by it; if it replaced a scored chunk, the result carries the chunk's new text,
        source and metadata with the old version's scores (the chunk is never missed); if it deleted one,
        that chunk is left out.

        Raises:
            InvalidRequestError: a request field is invalid (the message names it), ``search_text=`` differs
                from the request's text, or ``query_vector`` has the wrong shape.
            InvalidFilterError: the metadata filter is malformed.
        """
        self._check_open()
        prior = self._recency(recency)
        self._catch_up()
        with self._index_lock.read():
            self._check_open()  # close() may have run meanwhile; it waits for searches holding this lock
            req, allowed = self._prepare(request, fields, scope)
            query = self._query(req, query_vector)
            result = self._searcher.search(query, **self._search_args(req, allowed, prior))
            return self._response(req, self._with_prior(req, result, prior))

    async def asearch(
        self,
        request: SearchRequest | Mapping[str, Any] | str | None = None,
        /,
        *,
        query_vector: np.ndarray | Sequence[float] | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        recency: RecencyPrior | bool | None = None,
        **fields: Any,
    ) -> SearchResponse:
        """Async :meth:`search`: both engines run in worker threads under ``asyncio.gather``; the event loop
        is never blocked. Same arguments, result and errors."""
        self._check_open()
        prior = self._recency(recency)
        await asyncio.to_thread(self._catch_up)
        await self._acquire_read_async()
        try:
            self._check_open()
            req, allowed = await asyncio.to_thread(self._prepare, request, fields, scope)
            query = self._query(req, query_vector)
            result = await self._searcher.asearch(query, **self._search_args(req, allowed, prior))
            return await asyncio.to_thread(lambda: self._response(req, self._with_prior(req, result, prior)))
        finally:
            self._index_lock.release_read()

    async def _acquire_read_async(self) -> None:
        """Take the index lock shared without blocking the event loop; if the caller is cancelled while
        waiting, the hold taken meanwhile is released."""
        task = asyncio.ensure_future(asyncio.to_thread(self._index_lock.acquire_read))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(lambda t: t.cancelled() or t.exception() or self._index_lock.release_read())
            raise


    def _query(self, req: SearchRequest, query_vector: np.ndarray | Sequence[float] | None) -> Query:
        if query_vector is None:
            return Query(req.search_text)
        return Query(req.search_text, checked_query_vector(query_vector, self._dense.dim))

    # -- lifecycle ----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until background index maintenance (a BM25 merge, IVF training) has finished. Searches never
        need this: they are correct meanwhile; it is for benchmarks and tests that want a settled index."""
        self._sparse.wait()
        self._dense.wait()

    def persist(self) -> None:
        """Save the derived indexes next to the store, after applying other processes' changes.

        The store itself needs no saving: each write is committed when it returns (durable as
        ``synchronous`` says). Saves of several processes are serialised by an inter-process file lock
        (``.indexes.lock``), go through unique temporary names and are swapped in whole; a save older than
        the one on disk (a lower change-log position) is skipped. Raises StoreBusyError when another
        process holds the lock for more than 10 minutes.
        """
        self._check_open()
        if self.path is None:
            return
        self._catch_up()
        if not self._dirty:
            return
        self._sparse.wait()
        self._dense.wait()
        self._save_indexes()

    def _save_indexes(self) -> None:
        """Write bm25/ and dense.faiss under the file lock; readers (other threads) may search meanwhile.
        Raises DiskFullError when the disk is full (the half-written folders are removed; the old ones stay)."""
        try:
            self._save_indexes_unchecked()
        except OSError as exc:
            if not is_disk_full(exc) or isinstance(exc, DiskFullError):
                raise
            raise DiskFullError(
                f"saving the indexes: the disk holding the memory at {self.path} is full ({exc.strerror or exc}); "
                f"every acknowledged write is in the store ({self._store.count()} chunks), and the indexes, derived "
                "from it, are rebuilt at the next open; free disk space (searches still work)"
            ) from exc

    def _save_indexes_unchecked(self) -> None:
        with self._index_lock.read(), self._index_files():
            self._remove_stale_temporaries()
            saved = self._saved_state()
            if saved.get("seq", -1) > self._seq:
                logger.debug("index files on disk are newer (seq %s > %s); not overwritten", saved["seq"], self._seq)
            else:
                # unchanged big files (BM25 main segment, dense base) are hard-linked from the current folders
                self._save_dir_atomically("bm25", lambda folder: self._sparse.save(folder, previous=self.path / "bm25"))
                self._save_dir_atomically("dense", lambda folder: self._dense.save(folder, previous=self.path / "dense"))
                self._save_dir_atomically("filters", lambda folder: self._filters.save(folder, self._seq))
                (self.path / "dense.faiss").unlink(missing_ok=True)  # the flat index of earlier versions
                self._write_saved_state({"seq": self._seq, "saved_at": time.time(), "pid": os.getpid()})
            self._dirty = False

    def _saved_state(self) -> dict[str, Any]:
        """indexes.json, or {} when it is missing or damaged: a ``seq`` that is not a whole number, or one
        beyond the store's change log (no save can be newer than the store), is treated as no state at all."""
        try:
            state = json.loads((self.path / "indexes.json").read_text())
        except (OSError, ValueError):
            return {}
        seq = state.get("seq") if isinstance(state, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= self._store.last_seq():
            logger.warning("ignoring damaged %s (seq %r); the index files will be saved again", self.path / "indexes.json", seq)
            return {}
        return state

    def _write_saved_state(self, state: Mapping[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".indexes-", suffix=".tmp", dir=self.path)
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.path / "indexes.json")

    def _remove_stale_temporaries(self) -> None:
        """Leftovers of a save that was killed (caller holds the file lock, so no save is running)."""
        for stale in [*self.path.glob(".bm25-*"), *self.path.glob(".dense-*"), *self.path.glob(".filters-*"),
                      *self.path.glob(".indexes-*"),
                      *(self.path / f"{name}.{kind}" for name in ("bm25", "dense") for kind in ("tmp", "old"))]:
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            elif stale.exists():
                stale.unlink(missing_ok=True)

    def _save_dir_atomically(self, name: str, save: Any) -> None:
        """``save(directory)`` into a uniquely named folder, then swap it in for ``name`` (caller holds the
        file lock, so no other process loads between the two renames; a crash between them only means a
        rebuild, and the leftovers are removed by the next save)."""
        final = self.path / name
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", suffix=".tmp", dir=self.path))
        old = tmp.with_suffix(".old")
        try:
            save(tmp)
            if final.exists():
                final.rename(old)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)

    def stats(self) -> dict[str, Any]:
        """Counts and parameters: chunks, BM25 segments, vectors, embedder, path."""
        self._check_open()
        return {
            "path": str(self.path) if self.path else None,
            "chunks": self._store.count(),
            "bm25_documents": len(self._sparse),
            "bm25_delta_documents": self._sparse.delta_size,
            "dense_vectors": len(self._dense),
            "dense": self._dense.info(),
            "embedder": {"name": self.embedder.name, "dim": int(self.embedder.dim)},
            "bm25": self._sparse.config(),
            "candidate_multiplier": self.candidate_multiplier,
            "change_log_seq": self._seq,
            "last_open_sync": self.last_sync,
        }

    @property
    def bm25_params(self) -> dict[str, float]:
        """The BM25 parameters this memory ranks with, read only: ``{"k1": ..., "b": ..., "avgdl": ...}``.

        ``k1`` and ``b`` are the ones it was opened with (not persisted: give the same ones when reopening);
        ``avgdl`` is the average chunk length, in tokens of the library's tokenizer, that BM25's length
        normalisation divides by (the main segment's mean; before its first merge the delta's; 1.0 for an empty
        memory), after applying other processes' commits. A BM25 merge running in the background (after a bulk
        load) changes ``avgdl`` when it ends: call :meth:`flush` first when the value must last. A Qdrant copy
        written with these ranks as this memory does: ``memory.flush()``, ``QdrantBackend.edge(path,
        **memory.bm25_params)``, then ``export_to_qdrant(memory, backend)``. A new dict each call: changing it
        changes nothing.

        Raises:
            MemoryClosedError: the memory is closed.
        """
        self._check_open()
        self._catch_up()
        with self._index_lock.read():
            self._check_open()
            return {"k1": float(self._sparse.k1), "b": float(self._sparse.b), "avgdl": float(self._sparse.avgdl)}

    def close(self) -> None:
        """Persist the indexes and release the store. Idempotent.

        Safe against other threads: a write or search already running finishes first (close waits for the
        write lock and for the index lock alone); a call that starts later, or was still waiting for those
        locks, raises :class:`~hybrid_memory.MemoryClosedError`.
        """
        if self._closed:
            return
        try:
            self._sparse.wait()
            self._dense.wait()
            self.persist()
        finally:
            with self._write_lock:
                self._closed = True
                self._sparse.wait()  # a merge a write started meanwhile reads texts from the store
                self._dense.wait()
                with self._index_lock.write():
                    self._executor.shutdown(wait=True)
                    self._store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryClosedError(f"this memory is closed; {self._reopen_hint()}")

    def _reopen_hint(self) -> str:
        """How to open this memory again (the closed-memory message's fix)."""
        if self.path is not None:
            return f"open it again with HybridMemory.open(path) ({self.path})"
        return "open it again with HybridMemory.open(path) for a folder; an in-RAM memory's chunks are gone with it"

    def __enter__(self) -> HybridMemory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "in-memory"
        return f"HybridMemory({where!r}, embedder={self.embedder.name!r})"


def _page_after(after: int | None, limit: int) -> int:
    """The keyset position a page starts after (-1: the first page): :func:`hybrid_memory.limits.check_page`."""
    return check_page(after, limit)


def _checked_filter(metadata_filter: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The filter, validated now (iter_chunks is lazy); a value nested thousands of levels deep is an
    InvalidFilterError, never a RecursionError."""
    try:
        validate_filter(metadata_filter)
    except RecursionError as exc:
        raise InvalidFilterError(
            "metadata filter nests too deeply (thousands of levels); flatten its values"
        ) from exc
    return metadata_filter


def _bound(scope: Scope | Mapping[str, Any] | None) -> dict[str, str] | None:
    """The bound fields of a scope argument, or None."""
    scope = as_scope(scope)
    return scope.bound() if scope is not None else None


def _instant(value: Any) -> float | None:
    """``as_of`` as Unix seconds. Raises InvalidRequestError naming the field."""
    try:
        return to_timestamp(value, "as_of")
    except (ValueError, OverflowError) as exc:
        raise InvalidRequestError(f"as_of: {exc}") from exc
