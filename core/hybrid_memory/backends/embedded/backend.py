"""EmbeddedBackend: a memory's chunks in a folder (or in RAM), with both retrieval engines in process.

The folder holds ``manifest.json`` (format version and embedder, also kept in the store), the SQLite store
(:class:`~hybrid_memory.backends.embedded.store.SQLiteStore`, the source of truth, with its change log), and the
derived index files: the Roaring-bitmap filter index
(:class:`~hybrid_memory.backends.embedded.filter_index.FilterIndex`, ``filters/``), BM25
(:class:`~hybrid_memory.engines.bm25.index.BM25Index`, ``bm25/``) and FAISS
(:class:`~hybrid_memory.engines.dense.index.FaissIndex`, ``dense/``), with ``indexes.json`` saying at which change-log
position they were saved. The indexes are rebuilt from the store when missing, stale or damaged (reconcile on
open), follow other processes' commits from the change log (:meth:`EmbeddedBackend.catch_up`), and follow this
process's writes through one funnel, a :class:`~hybrid_memory.changes.ChangeSet`.

It implements :class:`~hybrid_memory.backends.base.Backend`: :class:`~hybrid_memory.HybridMemory` holds one as
``memory.backend`` and keeps everything above storage (request validation, scopes, the write rules, dedup
decisions, time, the hybrid searcher) to itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from ..._exceptions import DiskFullError, InvalidRequestError, StoreBusyError, StoreFormatError, is_disk_full
from ..._rwlock import ReadWriteLock
from ...changes import ChangeSet
from ...dedup import covers
from ...embedders import DEFAULT_MODEL_NAME, Embedder, HashingEmbedder
from ...engines.bm25.index import BM25Index
from ...engines.dense.index import FaissIndex
from ...engines.rowset import RowSet
from ...filters import system_filter
from ...models import SCOPE_FIELDS, StoredChunk
from ...onnx_embedder import OnnxEmbedder
from ...paths import EDGE_CONFIG, INDEX_LOCK, STORE_FILE, check_store_present
from ...search.engine import DenseEngine, Engine, Query, SparseEngine
from ...tokenizer import TechnicalTokenizer
from ..base import NearSearch, P, StoredState, check_embedder
from .filter_index import FilterIndex
from .store import CommitResult, NewRow, SQLiteStore, WriteConflict

__all__ = ["FORMAT_VERSION", "NEAR_POOL", "NEAR_POOL_MAX", "EmbeddedBackend", "Listing"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of the memory directory layout, saved in manifest.json and checked on open."""

NEAR_POOL = 16
"""Stored neighbours a near-duplicate check reads per new chunk, before keeping the (at most 5) whose validity
covers the new chunk's: the 5 nearest of the scope as before, with room for superseded versions of the same
fact, which sit nearest to it and are left out."""

NEAR_POOL_MAX = 256
"""The deepest a near-duplicate check reads (x4 from :data:`NEAR_POOL` while too few neighbours cover the new
chunk): many closed versions of one fact no longer hide its open one, as the Qdrant backend's filtered query
does not."""

_INDEX_LOCK_TIMEOUT = 600.0
"""Seconds a save or load of the derived index files waits for another process's save (then StoreBusyError)."""

_WRITE_RETRIES = 20
"""How often a write is prepared again when another process changed the same chunks meanwhile."""


@dataclass(frozen=True)
class Listing:
    """A listing's restriction as the caller gave it (validated): :meth:`EmbeddedBackend.listing`."""

    metadata_filter: Mapping[str, Any] | None
    scope: Mapping[str, str] | None
    as_of: float | None


def _sorted_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ids of ``a`` not in ``b``, both int64 ascending without duplicates (a store's rowids, an index's ids).

    A binary search of each id of ``a`` in ``b``: O(n log n) without the hashing and sorting
    ``np.setdiff1d`` does (0.03 s instead of ~1.8 s for two 1M-id arrays on the reference machine).
    """
    if not len(a) or not len(b):
        return a.copy()
    pos = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return a[b[pos] != a]


class EmbeddedBackend:
    """A memory folder (or an in-RAM memory): SQLite store, filter index, BM25 and FAISS, in this process.

    Made by :class:`~hybrid_memory.HybridMemory` for ``HybridMemory(path)`` and ``HybridMemory()``, with the
    options the memory's constructor checked (see there for each: ``k1``, ``b``, ``compact_min``,
    ``compact_ratio``, ``faiss_threads``, ``dense_index``, ``background_compaction``, ``show_progress``,
    ``synchronous``, ``busy_timeout``). The constructor checks the folder and opens the store;
    :meth:`embedder_for` checks the embedder against the manifest; :meth:`open` builds the indexes (load, then
    reconcile with the store).

    Args:
        path: the memory folder, already normalised (:func:`~hybrid_memory.paths.memory_path`); None: in RAM.

    Raises:
        InvalidRequestError: ``path`` holds a Qdrant Edge shard, cannot be created, or is not writable.
        StoreFormatError: the store is missing while the folder holds a memory's other files (the manifest, the
            index files: :func:`~hybrid_memory.paths.check_store_present`; nothing is created or removed), or is
            not a readable SQLite database.

    Thread-safe: searches (holding :attr:`index_lock` shared) run while a write applies its changes (holding it
    alone); writes are serialised by a lock of their own.
    """

    name = "embedded"

    def __init__(
        self,
        path: Path | None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        compact_min: int = 500,
        compact_ratio: float = 0.1,
        faiss_threads: int | None = 1,
        dense_index: str = "auto",
        background_compaction: bool = True,
        show_progress: bool = False,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = path
        self.show_progress = show_progress
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
        self.store = self._open_store(synchronous=synchronous, busy_timeout=busy_timeout)
        self.sparse = BM25Index(TechnicalTokenizer(), k1=k1, b=b, compact_min=compact_min, compact_ratio=compact_ratio)
        self._faiss_threads = None if faiss_threads is None else int(faiss_threads)  # FAISS takes no numpy int
        self._dense_kind = dense_index
        self.dense: FaissIndex  # made by open(dim)
        self.embedder: Embedder | None = None
        self._write_lock = threading.RLock()  # one local writer at a time; guards the bulk depth too
        self.index_lock = ReadWriteLock()  # searches share it; applying a change to the indexes takes it alone
        self._files_lock = FileLock(str(self.path / INDEX_LOCK)) if self.path is not None else None
        self.executor: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-memory")
        self._dirty = False
        self._bulk_depth = 0
        self._background_compaction = background_compaction
        self.seq = 0  # change-log position the indexes reflect
        self._data_version: int | None = None  # PRAGMA data_version when they were brought there
        self.last_sync: dict[str, Any] = {}
        self.filters = FilterIndex()
        self._filters_rebuilt = False
        self._engines: dict[str, Engine] | None = None

    def _open_store(self, **options: Any) -> SQLiteStore:
        if self.path is None:
            return SQLiteStore(None, **options)
        db = self.path / STORE_FILE
        check_store_present(self.path)  # never a new, empty store beside a lost one's files
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

    # -- manifest -----------------------------------------------------------------------------------
    def embedder_for(self, embedder: Embedder | None) -> Embedder:
        """The embedder this memory is built with: ``embedder`` checked against the manifest (recorded there
        for a new memory), or, for None, the one the manifest names when it is a :class:`HashingEmbedder`, else
        the offline all-MiniLM-L6-v2.

        Raises:
            StoreFormatError: another format version, or another embedder (name or dimension) than recorded.
            InvalidRequestError: ``embedder`` does not follow the Embedder protocol.
        """
        saved = self.store.get_meta("manifest")
        if saved is not None and saved.get("format_version") != FORMAT_VERSION:
            raise StoreFormatError(
                f"memory at {self.path} has format version {saved.get('format_version')}, this hybrid-memory "
                f"reads version {FORMAT_VERSION}; re-ingest it with this version"
            )
        chosen: Embedder
        if embedder is not None:
            chosen = embedder
        elif (saved or {}).get("embedder", {}).get("name", "").startswith("hashing-"):
            chosen = HashingEmbedder(int(saved["embedder"]["dim"]))
        else:
            chosen = OnnxEmbedder()
        check_embedder(chosen)
        info = {"name": str(chosen.name), "dim": int(chosen.dim)}
        if saved is None:
            manifest = {"format_version": FORMAT_VERSION, "embedder": info, "created_at": time.time()}
            self.store.set_meta("manifest", manifest)
            self._write_manifest_file(manifest)
        elif saved["embedder"] == info:
            self._write_manifest_file(saved)  # the readable copy; the store's own copy is the one checked
        if saved is not None and saved["embedder"] != info:
            name, dim = saved["embedder"]["name"], saved["embedder"]["dim"]
            if name == DEFAULT_MODEL_NAME:
                same = (
                    "leave embedder= out, and leave out --hashing-dim on the CLI: the default OnnxEmbedder is that "
                    "model"
                )
            elif str(name).startswith("onnx:"):
                same = f"embedder=OnnxEmbedder(model_dir=<the {str(name)[5:]!r} folder>)"
            elif str(name).startswith("hashing-"):
                same = f"embedder=HashingEmbedder({dim}), or --hashing-dim {dim} on the CLI"
            else:
                same = (
                    f"embedder=<the {name!r} model>, for instance SentenceTransformerEmbedder(model_path=DIR) from the "
                    "[torch] extra"
                )
            raise StoreFormatError(
                f"memory at {self.path} was built with embedder {name!r} (dim {dim}), not {info['name']!r} "
                f"(dim {info['dim']}); open it with the same embedder ({same}), or ingest into a new directory to "
                "switch models"
            )
        self.embedder = chosen
        return chosen

    def _write_manifest_file(self, manifest: Mapping[str, Any]) -> None:
        if self.path is not None:
            (self.path / "manifest.json").write_text(json.dumps(manifest, indent=2))

    def open(self, dim: int) -> None:
        """Make the FAISS index for vectors of ``dim`` dimensions, load the saved indexes and reconcile them with
        the store (see :meth:`_sync_indexes`). Call once, after :meth:`embedder_for`."""
        self.dense = self._new_dense(dim)
        self._sync_indexes()

    def engines(self, embedder: Embedder) -> dict[str, Engine]:
        """``{"sparse": SparseEngine over BM25, "dense": DenseEngine over FAISS}``, ranking store rowids (their
        ``allowed`` is a :meth:`resolve` result, a :class:`RowSet`)."""
        self._engines = {"sparse": SparseEngine(self.sparse), "dense": DenseEngine(self.dense, embedder)}
        return self._engines

    def keys(self, ids: Sequence[int]) -> Mapping[int, str]:
        """Store rowids -> chunk ids (rowids no longer stored left out)."""
        return self.store.chunk_ids_by_rowid(ids)

    def tokenize(self, text: str) -> list[str]:
        """The BM25 tokens of ``text`` (the library's :class:`TechnicalTokenizer`)."""
        return self.sparse.tokenizer.tokenize(text)

    def prepare_query(self, query: Query, hybrid_params: Any) -> Query:
        """Nothing to announce: the in-process engines read the query as it is."""
        return query

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
        self._data_version = self.store.data_version()
        store_ids, self.seq = self.store.snapshot()
        if self.path is not None:
            self.store.memoize_keys()  # searches then read candidate ids from memory, not cold pages
        loaded: dict[str, Any] = {"bm25": False, "dense": False}
        if self.path is not None:
            with self._index_files():
                loaded["bm25"] = self.sparse.load(self.path / "bm25")
                loaded["dense"] = self.dense.load(self.path / "dense")
                loaded["filters_seq"] = self.filters.load(self.path / "filters")
        self.last_sync = self._reconcile(store_ids, loaded)
        rebuilt = any(report["rebuilt"] for report in self.last_sync.values()) or self._filters_rebuilt
        self._dirty = any(
            report["rebuilt"] or report["added"] or report["removed"] for report in self.last_sync.values()
        )
        if rebuilt and self.path is not None and len(store_ids):
            try:
                self._save_indexes()
            except DiskFullError as exc:  # open anyway: the rebuilt indexes serve from memory (issue 35)
                logger.warning(
                    "%s; the memory is open and answers searches, its rebuilt indexes kept in memory "
                    "only; writes fail until disk space is freed",
                    exc,
                )

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
        changes, last = (None, -1) if saved_seq is None else self.store.changes_since(saved_seq)
        if changes is None or saved_seq is None or saved_seq > last:
            self.filters.rebuild(self.store.filter_rows())
            return bool(len(store_ids))
        self.filters.apply(changes)
        live = self.filters.rowids()
        self.filters.remove(_sorted_difference(live, store_ids))
        missing = _sorted_difference(store_ids, live)
        if len(missing):
            self.filters.add_rows(self.store.filter_rows(rowids=missing))
        return False

    def _reconcile_sparse(self, store_ids: np.ndarray, loaded: bool) -> dict[str, Any]:
        live = self.sparse.ids()
        missing = _sorted_difference(store_ids, live)
        if not loaded or len(missing) > self.sparse.compact_min:
            found, texts, _ = self.store.index_rows(store_ids, 0)
            if len(found):
                logger.info("building BM25 index over %d stored chunks", len(found))
            self.sparse.build(found, texts, show_progress=self.show_progress)
            return {"rebuilt": bool(len(found)), "added": 0, "removed": 0}
        extra = _sorted_difference(live, store_ids)
        self.sparse.remove(extra)
        found, texts, _ = self.store.index_rows(missing, 0)
        if len(found):
            self.sparse.add(found, texts)
        return {"rebuilt": False, "added": len(found), "removed": len(extra)}

    def _reconcile_dense(self, store_ids: np.ndarray, loaded: bool) -> dict[str, Any]:
        if not loaded:
            self.dense = self._new_dense(self.dense.dim)
            if self._engines is not None and self.embedder is not None:
                self._engines["dense"] = DenseEngine(self.dense, self.embedder)
        live = self.dense.ids()
        extra = _sorted_difference(live, store_ids)
        self.dense.remove(extra)
        missing = _sorted_difference(store_ids, live)
        added = 0
        for start in range(0, len(missing), 50_000):  # in batches: the store's blobs never pile up in memory
            found, _, vectors = self.store.index_rows(missing[start : start + 50_000], self.dense.dim)
            if len(found):
                self.dense.add(found, vectors)
            added += len(found)
        self.dense.maintain(background=self._background_compaction)
        return {"rebuilt": not loaded and bool(len(store_ids)), "added": added, "removed": len(extra)}

    def catch_up(self) -> bool:
        """Apply what other processes committed since the indexes' change-log position; cheap when nothing
        was (one ``PRAGMA data_version``). Returns True when something was read."""
        if self.path is None or self.store.data_version() == self._data_version:
            return False
        with self.index_lock.write():
            version = self.store.data_version()
            if version == self._data_version:
                return False
            changes, seq = self.store.changes_since(self.seq)
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
            store_ids, seq = self.store.snapshot()
            logger.debug("reconciled: %s", self._reconcile(store_ids, {}))
            self.seq = seq
            self._dirty = True
            return
        if changes:
            self._apply_changes(changes)
            self._dirty = True
        self.seq = max(self.seq, seq)

    def _new_dense(self, dim: int) -> FaissIndex:
        return FaissIndex(int(dim), kind=self._dense_kind, omp_threads=self._faiss_threads)

    # -- writes -------------------------------------------------------------------------------------
    def apply_write(
        self,
        chunk_ids: Sequence[str],
        plan: Callable[[Mapping[str, StoredState]], P],
        closes: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> P:
        """Plan a write against the versions stored now and commit it in one transaction; prepared again
        (up to 20 times) when another process changed the same chunks meanwhile. See the protocol.

        Raises:
            StoreBusyError: other processes kept changing the same chunks during every attempt.
        """
        with self._write_lock:
            for _attempt in range(_WRITE_RETRIES):
                try:
                    return self._write_once(chunk_ids, plan, closes)
                except WriteConflict:
                    logger.debug("chunks changed by another process while this write was prepared; preparing again")
        raise StoreBusyError(
            f"other processes kept changing the same chunks during {_WRITE_RETRIES} attempts of this write; retry it"
        )

    def _write_once(
        self,
        chunk_ids: Sequence[str],
        make_plan: Callable[[Mapping[str, StoredState]], P],
        closes: Sequence[tuple[str, Mapping[str, Any]]],
    ) -> P:
        """Prepare the write against the rows stored now, then commit it unless another process changed
        those rows meanwhile (WriteConflict: the caller prepares it again). Caller holds the write lock."""
        existing = self.store.lookup(list(chunk_ids))
        systems = self.store.system_of(list(existing)) if existing else {}
        plan = make_plan({cid: (digest, systems[cid]) for cid, (_, digest) in existing.items()})
        items, changed, new_vectors, unchanged = plan.items, plan.changed, plan.vectors, plan.unchanged
        old_rowids = [existing[items[i].chunk_id][0] for i in changed if items[i].chunk_id in existing]
        new_rows = [
            NewRow(
                items[i].chunk_id,
                items[i].text,
                items[i].source,
                items[i].metadata,
                new_vectors[j],
                system=plan.system(i),
            )
            for j, i in enumerate(changed)
        ]
        updates = [(existing[items[i].chunk_id][0], items[i].source, items[i].metadata) for i in unchanged]
        system_updates = [(existing[items[i].chunk_id][0], plan.system(i)) for i in unchanged]
        merge_targets = plan.merge_targets()
        if merge_targets:
            stored = self.store.system_of(list(merge_targets))
            system_updates += [
                (stored[cid]["rowid"], {"merged": stored[cid]["merged"] + refs})
                for cid, refs in merge_targets.items()
                if cid in stored
            ]
        if closes:
            closed = self.store.system_of([cid for cid, _ in closes])
            system_updates += [(closed[cid]["rowid"], dict(update)) for cid, update in closes if cid in closed]
        expected = {c.chunk_id: existing.get(c.chunk_id) for c in items}
        with self.index_lock.write():
            result = self.store.write(
                new_rows,
                replace_rowids=old_rowids,
                metadata_updates=updates,
                system_updates=system_updates,
                since_seq=self.seq,
                expected=expected,
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
                    system_updated=system_updates,
                ),
            )
        logger.debug(
            "stored %d chunks (%d re-indexed, %d duplicates dropped)", len(items), len(changed), len(plan.dropped)
        )
        return plan

    def _committed(self, result: CommitResult, ours: ChangeSet) -> None:
        """After a local commit (caller holds the index lock alone): first what other processes committed
        before it (read in the same transaction), then this write."""
        if result.pending is None:  # fell behind the log: the reconciled snapshot already holds this write
            self._follow(None, result.seq)
            return
        self._follow(result.pending, self.seq)
        self._apply_changes(ours)
        self.seq = result.seq
        self._dirty = True

    def near_search(self, tokenize: Callable[[str], list[str]], cosine_floor: float) -> NearSearch:
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
                rowsets[key] = self.filters.resolve(None, exact) or RowSet(np.zeros(0, np.int64), sorted_unique=True)
            if not len(rowsets[key]):
                return []
            depth = NEAR_POOL
            while True:
                hits = self.dense.search(vector, depth, rowsets[key])
                names = self.store.chunk_ids_by_rowid([rowid for rowid, _ in hits])
                systems = self.store.system_of(list(names.values()))
                kept = [
                    (r, score)
                    for r, score in hits
                    if r in names
                    and names[r] in systems
                    and covers((systems[names[r]]["valid_from"], systems[names[r]]["valid_to"]), span)
                ][:5]
                # closed versions of the same fact crowd the nearest: read deeper while they fill the pool
                if len(kept) == 5 or len(hits) < depth or depth >= NEAR_POOL_MAX or hits[-1][1] < cosine_floor:
                    break
                depth *= 4
            texts = dict(zip([r for r, _ in kept], self.store.texts([r for r, _ in kept]), strict=True))
            return [(names[r], score, tokenize(texts[r])) for r, score in kept]

        return search

    def find_hashes(
        self, digests: Sequence[str], scope_values: Mapping[str, str | None], exclude: Collection[str] = ()
    ) -> dict[str, list[tuple[str, float | None, float | None]]]:
        """content_hash -> ``[(chunk_id, valid_from, valid_to), ...]``, oldest first (the store's index)."""
        return self.store.find_hashes(digests, scope_values, exclude)

    def _apply_changes(self, changes: ChangeSet) -> None:
        """The one funnel by which every derived index follows the store (caller holds the write lock)."""
        if not changes:
            return
        self.filters.apply(changes)
        self.sparse.remove(changes.removed)
        self.dense.remove(changes.removed)
        if len(changes.added_rowids):
            assert changes.added_vectors is not None  # ChangeSet.__post_init__ checks: one vector per added row
            self.dense.add(changes.added_rowids, changes.added_vectors)
            self.sparse.add(changes.added_rowids, changes.added_texts)
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._bulk_depth:
            # a bulk load merges the BM25 delta in the background whenever it reaches its memory bound, so a
            # million-chunk load never holds a million documents of Python postings
            if self.sparse.needs_compaction(bulk=True):
                self.sparse.compact(self.store.texts, background=True)
            return
        if self.sparse.needs_compaction():
            self.sparse.compact(self.store.texts, background=self._background_compaction)
        if self.dense.needs_maintenance():
            self.dense.maintain(background=self._background_compaction)

    @contextlib.contextmanager
    def bulk(self, closed: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Defer index maintenance to the end of the block (see :meth:`HybridMemory.bulk
        <hybrid_memory.HybridMemory.bulk>`): the BM25 main segment is rebuilt in the background only when the
        delta reaches its memory bound, and once more at the end; IVF training waits for the end of the
        outermost block. ``closed``: whether the memory was closed meanwhile (then nothing is compacted)."""
        with self._write_lock:
            self._bulk_depth += 1
        try:
            yield
        finally:
            with self._write_lock:
                self._bulk_depth -= 1
                if not self._bulk_depth and not closed():
                    if self.dense.needs_maintenance():
                        # IVF training runs beside the BM25 merge (FAISS releases the GIL)
                        self.dense.maintain(background=True)
                    self.sparse.wait()
                    if self.sparse.needs_compaction() or self.sparse.delta_size >= self.sparse.compact_min:
                        self.sparse.compact(self.store.texts, show_progress=self.show_progress)

    def delete(self, chunk_ids: Sequence[str]) -> int:
        """Delete chunks by id from the store and every index (unknown ids are no error). Returns how many
        were stored."""
        with self._write_lock, self.index_lock.write():
            result = self.store.delete(list(chunk_ids), since_seq=self.seq)
            self._committed(result, ChangeSet(removed=result.rowids))
        return len(result.rowids)

    # -- reads --------------------------------------------------------------------------------------
    def get(self, chunk_ids: Sequence[str], scope: Mapping[str, str] | None = None) -> dict[str, StoredChunk]:
        """Stored chunks by id (unknown ids, and ids outside ``scope``, left out)."""
        return {c.chunk_id: c for c in self.store.get(list(chunk_ids), scope=scope)}

    def system_of(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> system fields (scope, validity, superseded_by, merged) of stored ids."""
        return self.store.system_of(list(chunk_ids))

    def resolve(
        self,
        metadata_filter: Mapping[str, Any] | None,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> RowSet | None:
        """The rowids a search may return: the metadata filter, the bound scope fields and the facts valid at
        ``as_of`` (Unix seconds; ``valid_from <= as_of < valid_to``, an absent bound is open), all resolved from
        the filter index (cached per filter until the next write). None when nothing restricts. Caller holds
        :attr:`index_lock` shared.

        Raises:
            InvalidFilterError: the metadata filter is malformed.
        """
        allowed = self.filters.resolve(metadata_filter, system_filter(scope, as_of))
        if scope and allowed is not None:  # a scoped search scores with its scope's statistics (issue 35)
            population = (
                allowed
                if metadata_filter is None and as_of is None
                else self.filters.resolve(None, system_filter(scope, None))
            )
            if population is not None:
                allowed.population = population
        return allowed

    def holds_metadata_key(self, name: str, scope: Mapping[str, str] | None, catch_up: bool = False) -> bool:
        """Whether some chunk in ``scope`` has ``name`` as a metadata key (the filter index's key bitmaps);
        ``catch_up``: apply other processes' commits first."""
        if catch_up:
            self.catch_up()
        return self.filters.holds_metadata_key(name, system_filter(scope, None))

    def listing(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
    ) -> Listing:
        """The restriction as given: :meth:`count` resolves it from the filter index, :meth:`iter_chunks` and
        :meth:`page_chunks` read it by SQL."""
        return Listing(metadata_filter, scope, as_of)

    def count(self, resolved: Listing | RowSet | None) -> int:
        """Chunks matching a :meth:`listing` or :meth:`resolve` result. A listing is resolved from the in-memory
        filter index (Roaring bitmaps, after applying other processes' commits, as a search does), not by a SQL
        scan of the metadata: the same rows the same filter gives a search. Without any restriction it is the
        store's row count."""
        if isinstance(resolved, Listing):
            if not resolved.metadata_filter and not resolved.scope and resolved.as_of is None:
                return self.store.count()
            self.catch_up()
            with self.index_lock.read():
                resolved = self.resolve(resolved.metadata_filter, resolved.scope, resolved.as_of)
        return self.store.count() if resolved is None else len(resolved)

    def iter_chunks(self, resolved: Listing, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Stored chunks matching a :meth:`listing`, in order of first insertion, read lazily in batches by SQL
        (see :meth:`SQLiteStore.iter_chunks <hybrid_memory.backends.embedded.store.SQLiteStore.iter_chunks>`)."""
        return self.store.iter_chunks(resolved.metadata_filter, batch_size, scope=resolved.scope, as_of=resolved.as_of)

    def page_chunks(self, resolved: Listing, after: int, limit: int) -> tuple[list[StoredChunk], int | None]:
        """One keyset page of :meth:`iter_chunks`: one indexed range read (see :meth:`SQLiteStore.page_chunks
        <hybrid_memory.backends.embedded.store.SQLiteStore.page_chunks>`)."""
        return self.store.page_chunks(resolved.metadata_filter, resolved.scope, resolved.as_of, after, limit)

    def chunk_hashes(self, scope: Mapping[str, str] | None) -> dict[str, str]:
        """chunk_id -> content hash of every stored chunk in ``scope`` (all when None), in insertion order."""
        return self.store.chunk_hashes(scope)

    def change_position(self) -> int:
        """The store's change-log position (:meth:`SQLiteStore.last_seq
        <hybrid_memory.backends.embedded.store.SQLiteStore.last_seq>`): the ``seq`` of the last committed write of
        any process on this folder, one read of ``sqlite_sequence`` (microseconds). Every write that changes a
        chunk logs to ``changes`` in its own transaction, and the log's ``AUTOINCREMENT`` sequence never goes
        back (pruning the log keeps it), so the position moves on every such commit and on nothing else. Read from
        the store, not :attr:`seq` (the indexes' position), so it needs no :meth:`catch_up`: :meth:`chunk_hashes`
        reads the store too.

        Raises:
            MemoryClosedError: the store is closed.
        """
        return self.store.last_seq()

    def hit_rows(
        self, chunk_ids: Sequence[str], ids: Sequence[int] | None = None
    ) -> dict[str, tuple[str, str | None, dict[str, Any]]]:
        """chunk_id -> (text, source, metadata) of the version scored: read by rowid (``ids``, a search's hits),
        so they are those of the version scored. A rowid another process replaced meanwhile falls back to the
        chunk's current version; a chunk deleted meanwhile is left out."""
        if ids is None:
            return {c.chunk_id: (c.text, c.source, c.metadata) for c in self.store.get(list(chunk_ids))}
        by_rowid = self.store.hit_rows(ids)
        out: dict[str, tuple[str, str | None, dict[str, Any]]] = {
            cid: by_rowid[rowid] for cid, rowid in zip(chunk_ids, ids, strict=True) if rowid in by_rowid
        }
        gone = [cid for cid in chunk_ids if cid not in out]
        if gone:
            out.update({c.chunk_id: (c.text, c.source, c.metadata) for c in self.store.get(gone)})
        return out

    # -- lifecycle ----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until background index maintenance (a BM25 merge, IVF training) has finished."""
        self.sparse.wait()
        self.dense.wait()

    def persist(self) -> None:
        """Save the derived indexes next to the store, after applying other processes' changes.

        Saves of several processes are serialised by an inter-process file lock (``.indexes.lock``), go
        through unique temporary names and are swapped in whole; a save older than the one on disk (a lower
        change-log position) is skipped. Raises StoreBusyError when another process holds the lock for more
        than 10 minutes. Nothing to do in RAM.
        """
        if self.path is None:
            return
        self.catch_up()
        if not self._dirty:
            return
        self.sparse.wait()
        self.dense.wait()
        self._save_indexes()

    def _folder(self) -> Path:
        """The memory folder the index files are saved in (persist returns before any save in RAM).

        Raises:
            InvalidRequestError: an in-RAM memory (no folder).
        """
        if self.path is None:
            raise InvalidRequestError("an in-RAM memory has no folder to save index files in")
        return self.path

    def _save_indexes(self) -> None:
        """Write bm25/, dense/ and filters/ under the file lock; readers (other threads) may search meanwhile.
        Raises DiskFullError when the disk is full (the half-written folders are removed; the old ones stay)."""
        try:
            self._save_indexes_unchecked()
        except OSError as exc:
            if not is_disk_full(exc) or isinstance(exc, DiskFullError):
                raise
            raise DiskFullError(
                f"saving the indexes: the disk holding the memory at {self.path} is full ({exc.strerror or exc}); "
                f"every acknowledged write is in the store ({self.store.count()} chunks), and the indexes, derived "
                "from it, are rebuilt at the next open; free disk space (searches still work)"
            ) from exc

    def _save_indexes_unchecked(self) -> None:
        home = self._folder()
        with self.index_lock.read(), self._index_files():
            self._remove_stale_temporaries()
            saved = self._saved_state()
            if saved.get("seq", -1) > self.seq:
                logger.debug("index files on disk are newer (seq %s > %s); not overwritten", saved["seq"], self.seq)
            else:
                # unchanged big files (BM25 main segment, dense base) are hard-linked from the current folders
                self._save_dir_atomically("bm25", lambda folder: self.sparse.save(folder, previous=home / "bm25"))
                self._save_dir_atomically("dense", lambda folder: self.dense.save(folder, previous=home / "dense"))
                self._save_dir_atomically("filters", lambda folder: self.filters.save(folder, self.seq))
                (home / "dense.faiss").unlink(missing_ok=True)  # the flat index of earlier versions
                self._write_saved_state({"seq": self.seq, "saved_at": time.time(), "pid": os.getpid()})
            self._dirty = False

    def _saved_state(self) -> dict[str, Any]:
        """indexes.json, or {} when it is missing or damaged: a ``seq`` that is not a whole number, or one
        beyond the store's change log (no save can be newer than the store), is treated as no state at all."""
        folder = self._folder()
        try:
            state = json.loads((folder / "indexes.json").read_text())
        except (OSError, ValueError):
            return {}
        seq = state.get("seq") if isinstance(state, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= self.store.last_seq():
            logger.warning(
                "ignoring damaged %s (seq %r); the index files will be saved again", folder / "indexes.json", seq
            )
            return {}
        return state

    def _write_saved_state(self, state: Mapping[str, Any]) -> None:
        folder = self._folder()
        fd, tmp = tempfile.mkstemp(prefix=".indexes-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, folder / "indexes.json")

    def _remove_stale_temporaries(self) -> None:
        """Leftovers of a save that was killed (caller holds the file lock, so no save is running)."""
        folder = self._folder()
        for stale in [
            *folder.glob(".bm25-*"),
            *folder.glob(".dense-*"),
            *folder.glob(".filters-*"),
            *folder.glob(".indexes-*"),
            *(folder / f"{name}.{kind}" for name in ("bm25", "dense") for kind in ("tmp", "old")),
        ]:
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            elif stale.exists():
                stale.unlink(missing_ok=True)

    def _save_dir_atomically(self, name: str, save: Any) -> None:
        """``save(directory)`` into a uniquely named folder, then swap it in for ``name`` (caller holds the
        file lock, so no other process loads between the two renames; a crash between them only means a
        rebuild, and the leftovers are removed by the next save)."""
        folder = self._folder()
        final = folder / name
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", suffix=".tmp", dir=folder))
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
        """BM25 and FAISS counts (``bm25_documents``, ``bm25_delta_documents``, ``dense_vectors``), the dense
        index's info, the BM25 configuration, ``change_log_seq`` and ``last_open_sync`` (what reconcile on open
        rebuilt, added and removed)."""
        return {
            "bm25_documents": len(self.sparse),
            "bm25_delta_documents": self.sparse.delta_size,
            "dense_vectors": len(self.dense),
            "dense": self.dense.info(),
            "bm25": self.sparse.config(),
            "change_log_seq": self.seq,
            "last_open_sync": self.last_sync,
        }

    def bm25_params(self) -> dict[str, float]:
        """``{"k1", "b", "avgdl"}`` of the BM25 index, after applying other processes' commits."""
        self.catch_up()
        with self.index_lock.read():
            return {"k1": float(self.sparse.k1), "b": float(self.sparse.b), "avgdl": float(self.sparse.avgdl)}

    def close(self) -> None:
        """Wait for background maintenance, shut the search threads down and close the store (the memory
        persisted first and holds its write lock, so no write of this process runs)."""
        with self._write_lock:
            self.sparse.wait()  # a merge a write started meanwhile reads texts from the store
            self.dense.wait()
            with self.index_lock.write():
                if self.executor is not None:
                    self.executor.shutdown(wait=True)
                self.store.close()

    def reopen_hint(self) -> str:
        """How to open this memory again (the closed-memory message's fix)."""
        if self.path is not None:
            return f"open it again with HybridMemory.open(path) ({self.path})"
        return "open it again with HybridMemory.open(path) for a folder; an in-RAM memory's chunks are gone with it"
