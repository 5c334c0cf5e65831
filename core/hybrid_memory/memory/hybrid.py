"""HybridMemory: the long-term memory an agent adds to, searches, and reopens days later.

A memory composes exactly one backend (``memory.backend``, :class:`~hybrid_memory.backends.base.Backend`), as
qdrant-client's ``QdrantClient`` holds its local or remote client: the embedded
:class:`~hybrid_memory.backends.embedded.backend.EmbeddedBackend` (a folder, or RAM: SQLite store, BM25, FAISS) or
the one given as ``backend=`` (:class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend`). Above it, on every
backend alike, this facade keeps request validation, scopes, the write rules and dedup decisions
(:mod:`hybrid_memory.memory.write_plan`), time (validity, ``as_of``, the recency prior) and the store-free
:class:`~hybrid_memory.search.searcher.HybridSearcher`.

Flow: chunks are validated, planned by the write rules against the stored versions, embedded (only when their
text changed) and applied by the backend (embedded: written to the SQLite store, the source of truth, then to
the BM25 and FAISS indexes derived from it). A search resolves the metadata filter, the scope and ``as_of`` to
the backend's ``allowed`` set (embedded: store rowids), runs BM25 and dense retrieval concurrently, each
restricted to it, and fuses the two runs (``hybrid_params.fusion``: the query-adaptive default or weighted RRF,
see :mod:`hybrid_memory.fusion`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from pydantic import ValidationError

from .._exceptions import (
    DuplicateChunkError,
    InvalidFilterError,
    InvalidRequestError,
    MemoryClosedError,
    MemoryNotFoundError,
)
from .._options import check_memory_options
from ..backends.base import Backend, check_embedder
from ..backends.embedded.backend import FORMAT_VERSION, EmbeddedBackend
from ..dedup import DedupPolicy, WriteResult, as_policy
from ..embedders import Embedder
from ..embedders import query_vector as checked_query_vector
from ..engines.dense.index import DENSE_KINDS
from ..filters import check_metadata, validate_filter
from ..limits import check_page
from ..models import (
    _SHORT,
    SCOPE_FIELDS,
    Chunk,
    SearchRequest,
    SearchResponse,
    StoredChunk,
    build_response,
    validation_message,
)
from ..paths import EDGE_CONFIG, STORE_FILE, memory_files_without_store, memory_path
from ..scopes import Scope, as_scope, check_scope_keys, check_scope_values
from ..search.engine import Query
from ..search.searcher import HybridResult, HybridSearcher
from ..temporal import RecencyPrior, apply_recency_prior, to_timestamp
from .scoped import ScopedMemory
from .write_plan import WritePlan, check_chunk_list, check_vectors, embed_checked, plan_supersede, plan_write

__all__ = ["FORMAT_VERSION", "RANK_FLOOR", "HybridMemory"]

logger = logging.getLogger(__name__)

RANK_FLOOR = 10
"""A search for any ``top_k`` up to this ranks as one for ``top_k = RANK_FLOOR``: each engine returns
``candidate_multiplier x max(top_k, RANK_FLOOR)`` candidates and the exact-match guard's bound is
``max(top_k, RANK_FLOOR)`` documents, so the results of ``top_k = 1 .. 10`` are the first ``top_k`` of the same
list. Fusion depends on the candidates: without a floor, ``top_k = 1`` fused 2 candidates per engine and could
put first what ``top_k = 5`` put third. 10 is the cut of nDCG@10 (BEIR), the depth the fusion is measured at
(``benchmarks/fusion_eval.py``). Above it, deeper candidate lists can still reorder the first results."""

_INSTANCES = itertools.count(1)
"""Numbers the memory objects of this process (never reused, unlike ``id()``): the first half of
:meth:`HybridMemory._change_position`."""

_SHORTCUTS = ("dense_weight", "sparse_weight", "rrf_k_constant", "fusion")


class HybridMemory:
    """Hybrid BM25 + dense memory, persisted in a folder: the query-adaptive fusion by default, weighted
    Reciprocal Rank Fusion and the other methods of ``hybrid_memory.fusion.FUSION_METHODS`` by name.

    Args:
        path: memory directory (created if absent; reopened if it holds a memory). None keeps the memory
            in process memory only (or, with ``backend``, in the backend).
        backend: a :class:`~hybrid_memory.backends.base.Backend` to store and search in instead of the embedded
            one, e.g. a :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend` (see :meth:`qdrant`); closed
            by :meth:`close`. With it, only ``embedder``, ``candidate_multiplier``, ``dedup``, ``recency_prior``
            and ``show_progress`` apply (the others configure the embedded indexes: InvalidRequestError), and the
            embedder's dimension fixes the collection's (checked on open). None (default): an
            :class:`~hybrid_memory.backends.embedded.backend.EmbeddedBackend` over ``path``.
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
        dense_index: ``"auto"`` (default: an exact scan below :data:`~hybrid_memory.engines.dense.index.ANN_MIN`
            vectors, a FAISS IVF index with 8-bit codes and exact re-ranking above), ``"flat"`` (always exact) or
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
        StoreFormatError: the directory was written by another format version or another embedder, or it holds
            a memory's index files or manifest but not its ``store.sqlite3`` (the store was lost: no empty store is
            created over them; the message says to restore it from a backup).
        InvalidRequestError: a numeric option of the wrong type or out of its range (``k1="x"``, ``b=2``,
            ``compact_min=-1``, ``compact_ratio=5``, ``faiss_threads=0``, ``busy_timeout="x"``, a bool for an int,
            ``show_progress="yes"``), before the folder is created; ``path`` is a file, cannot be created
            (``/proc/nope``, a path below a file), is a folder this process cannot write, holds a Qdrant Edge shard, or
            is not a str / os.PathLike
            (``HybridMemory(5)``) or is empty; the message names the path and the fix.
            With ``backend``: a ``path`` too, or an option of the embedded indexes.

    Thread-safe: searches may run from many threads while others write. Several processes may open one
    directory and all may write (SQLite serialises the write transactions); each search first applies what
    other processes committed (see :meth:`search`), from the store's change log, never by a rebuild.
    """

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

        memory_options = {
            k: options.pop(k)
            for k in ("candidate_multiplier", "dedup", "recency_prior", "show_progress")
            if k in options
        }
        if edge_path is not None:
            cluster = [
                k
                for k in ("shard_number", "replication_factor", "write_consistency_factor", "write_ordering")
                if k in options
            ]
            if cluster:
                raise InvalidRequestError(f"{cluster} configure a Qdrant cluster; an Edge shard takes none of them")
            backend = QdrantBackend.edge(edge_path, **options)
        else:
            backend = QdrantBackend.client(client_or_url, collection=collection, api_key=api_key, **options)
        return cls(backend=backend, embedder=embedder, **memory_options)

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        backend: Backend | None = None,
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
        embedded = {
            "k1": (k1, 1.5),
            "b": (b, 0.75),
            "compact_min": (compact_min, 500),
            "compact_ratio": (compact_ratio, 0.1),
            "faiss_threads": (faiss_threads, 1),
            "dense_index": (dense_index, "auto"),
            "background_compaction": (background_compaction, True),
            "synchronous": (synchronous, "full"),
            "busy_timeout": (busy_timeout, 30.0),
        }
        if backend is not None:
            if path is not None:
                raise InvalidRequestError(
                    f"a memory on a backend keeps no directory (got path {path!r}); pass backend=... alone, or a "
                    "path alone for the embedded memory"
                )
            given = [
                name
                for name, (value, default) in embedded.items()
                if type(value) is not type(default) or value != default
            ]
            if given:
                raise InvalidRequestError(
                    f"{', '.join(given)} configure the embedded memory's own indexes; a memory on a backend takes "
                    "embedder, candidate_multiplier, dedup, recency_prior and show_progress (configure the backend "
                    "itself, e.g. QdrantBackend.edge(path, k1=...))"
                )
            check_memory_options(candidate_multiplier=candidate_multiplier, show_progress=show_progress)
        else:
            if dense_index not in DENSE_KINDS:
                raise InvalidRequestError(f"dense_index must be one of {DENSE_KINDS}, got {dense_index!r}")
            check_memory_options(
                k1=k1,
                b=b,
                candidate_multiplier=candidate_multiplier,
                compact_min=compact_min,
                compact_ratio=compact_ratio,
                faiss_threads=faiss_threads,
                busy_timeout=busy_timeout,
                show_progress=show_progress,
                background_compaction=background_compaction,
            )
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
            check_embedder(embedder)  # before any folder exists: a refused call leaves nothing behind
        if backend is None:
            backend = EmbeddedBackend(
                self.path,
                k1=k1,
                b=b,
                compact_min=compact_min,
                compact_ratio=compact_ratio,
                faiss_threads=faiss_threads,
                dense_index=dense_index,
                background_compaction=background_compaction,
                show_progress=show_progress,
                synchronous=synchronous,
                busy_timeout=busy_timeout,
            )
        self._backend: Backend = backend
        self.embedder = backend.embedder_for(embedder)
        self._write_lock = threading.RLock()  # one local writer at a time (embedding happens under it)
        self._closed = False
        self._instance = next(_INSTANCES)
        backend.open(int(self.embedder.dim))
        self._searcher = HybridSearcher(backend.engines(self.embedder), backend.keys, executor=backend.executor)

    @property
    def backend(self) -> Backend:
        """The one backend this memory stores and searches in (read only): an
        :class:`~hybrid_memory.backends.embedded.backend.EmbeddedBackend` for a folder or RAM, else the one given
        as ``backend=`` (e.g. a :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend`)."""
        return self._backend

    @property
    def last_sync(self) -> dict[str, Any]:
        """What opening reconciled (per index: rebuilt, added, removed); {} on a backend without local indexes."""
        return getattr(self._backend, "last_sync", {})

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False, **kwargs: Any) -> HybridMemory:
        """Open the memory directory at ``path``; keyword arguments as for the constructor.

        Raises:
            MemoryNotFoundError: there is no memory at ``path`` (a mistyped path must not silently give an empty
                memory) unless ``create=True``; a :class:`StoreFormatError` and a ``FileNotFoundError``.
            StoreFormatError: as the constructor; with ``create=True`` too, a folder that holds a memory's index
                files or manifest but not its ``store.sqlite3`` (the store was lost: the message says to restore it
                from a backup; nothing is created over it).
            InvalidRequestError: ``path`` is a regular file (a memory is a folder; for its ``store.sqlite3`` the
                message names the folder), not a str / os.PathLike, or empty; or it holds a Qdrant Edge shard
                (the message says to open it with ``HybridMemory.qdrant(edge_path=...)``).
        """
        folder = memory_path(path)
        if (
            not create
            and not (folder / STORE_FILE).exists()
            and not memory_files_without_store(folder)  # a lost store: the constructor names the fix
            and not (folder / EDGE_CONFIG).exists()  # a shard: the constructor names HybridMemory.qdrant
        ):
            raise MemoryNotFoundError(
                f"no memory at {folder}; create one with HybridMemory({str(folder)!r}) or "
                f"HybridMemory.open(..., create=True)"
            )
        return cls(folder, **kwargs)

    # -- manifest -----------------------------------------------------------------------------------
    # -- index sync ---------------------------------------------------------------------------------
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
        counts = Counter(c.chunk_id for c in valid)
        repeated = sorted(chunk_id for chunk_id, n in counts.items() if n > 1)
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
        items = cast(list[Chunk], list(chunks)) if checked else self._validate_chunks(chunks)
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
        closes: Sequence[tuple[str, Mapping[str, Any]]] = (),
        checked: bool = False,
    ) -> WriteResult:
        """The write rules (:func:`~hybrid_memory.memory.write_plan.plan_write`) planned against the versions the
        backend stores now, then applied by it (:meth:`Backend.apply_write
        <hybrid_memory.backends.base.Backend.apply_write>`); ``closes``: system-field updates by chunk id (a
        supersede's closed facts), in the same batch."""
        scope, policy, items, vectors = self._prepare_write(
            chunks, vectors, dedup, scope, int(self.embedder.dim), checked
        )
        if not items:
            return WriteResult([])
        backend = self._backend
        tokenize = backend.tokenize

        def plan(stored: Mapping[str, tuple[str, Mapping[str, Any]]]) -> WritePlan:
            return plan_write(
                items,
                stored,
                vectors=vectors,
                replace=replace,
                policy=policy,
                scope=scope,
                embed=self._embed,
                find_hashes=backend.find_hashes,
                near_search=lambda: backend.near_search(tokenize, policy.cosine_threshold),
                tokenize=tokenize,
            )

        with self._write_lock:
            self._check_open()
            done = backend.apply_write([c.chunk_id for c in items], plan, closes)
        return done.result()

    def _embed(self, texts: list[str]) -> np.ndarray:
        return embed_checked(self.embedder, texts, int(self.embedder.dim))

    @contextlib.contextmanager
    def bulk(self) -> Iterator[HybridMemory]:
        """Defer index maintenance to the end of the block, for loading many batches.

        Inside the block every added chunk is searchable at once (from the BM25 delta segment and the exact
        vector scan or the current IVF index). The BM25 main segment is rebuilt in the background only when
        the delta reaches its memory bound (:meth:`BM25Index.needs_compaction` with ``bulk=True``; a
        geometric schedule, so a load of n chunks rebuilds O(n log n + n² / 100k) documents in all), and
        once more at the end; IVF training waits for the end of the block and runs in the background
        (:meth:`flush` waits for it). Blocks nest; the outermost one compacts. On a backend that indexes as it
        stores (Qdrant) there is nothing to defer; the block runs unchanged.
        """
        with self._backend.bulk(lambda: self._closed):
            yield self

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
        bound = _bound(scope)
        with self._write_lock:
            if bound is not None:
                found = self._backend.get(ids, scope=bound)
                ids = [c for c in dict.fromkeys(ids) if c in found]
            return self._backend.delete(ids)

    # -- reads --------------------------------------------------------------------------------------
    def get(
        self, chunk_ids: Iterable[str] | str, *, scope: Scope | Mapping[str, Any] | None = None
    ) -> list[StoredChunk]:
        """Stored chunks in the order of ``chunk_ids`` (a list of ids; a lone str is one id); unknown ids (and ids
        outside ``scope``) are skipped. Raises InvalidRequestError as :meth:`delete` does."""
        self._check_open()
        ids = self._ids_argument(chunk_ids)
        found = self._backend.get(ids, scope=_bound(scope))
        return [found[c] for c in ids if c in found]

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
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        *,
        scope: Scope | Mapping[str, Any] | None = None,
        as_of: Any = None,
    ) -> int:
        """Number of stored chunks matching the filter (all when None), in ``scope``, valid at ``as_of`` (Unix
        seconds, datetime or ISO string). Raises InvalidFilterError, InvalidRequestError.

        Resolved from the in-memory filter index (Roaring bitmaps, after applying other processes' commits, as a
        search does), not by a SQL scan of the metadata: the same rows the same filter gives a search. Without
        any restriction it is the store's row count."""
        self._check_open()
        metadata_filter, bound, instant = _checked_filter(metadata_filter), _bound(scope), _instant(as_of)
        self._check_scope_keys(metadata_filter, bound, catch_up=True)
        return self._backend.count(self._backend.listing(metadata_filter, bound, instant))

    def __len__(self) -> int:
        return self.count()

    def iter_chunks(
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        *,
        scope: Scope | Mapping[str, Any] | None = None,
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
        return self._backend.iter_chunks(self._backend.listing(metadata_filter, bound, _instant(as_of)))

    def page_chunks(
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        *,
        after: int | None = None,
        limit: int = 100,
        scope: Scope | Mapping[str, Any] | None = None,
        as_of: Any = None,
    ) -> tuple[list[StoredChunk], int | None]:
        """One page of :meth:`iter_chunks` (same order, filter, scope and ``as_of``), by keyset: the chunks after
        position ``after`` (None: the first page), at most ``limit`` (1..10,000), and the position to pass as
        ``after`` for the next page (None on the last). A position is an opaque int; it stays valid while
        chunks are added or deleted (none is skipped or repeated because others moved), and each page costs
        one indexed range read, whatever its number. Raises InvalidFilterError, InvalidRequestError."""
        self._check_open()
        start = _page_after(after, limit)
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound, catch_up=True)  # SQL listings: no search caught up
        return self._backend.page_chunks(self._backend.listing(metadata_filter, bound, _instant(as_of)), start, limit)

    def chunk_hashes(self, *, scope: Scope | Mapping[str, Any] | None = None) -> dict[str, str]:
        """chunk_id -> sha256 of the text, for every stored chunk in ``scope`` (all when None), for change
        detection by derived layers."""
        self._check_open()
        return self._backend.chunk_hashes(_bound(scope))

    def _change_position(self) -> tuple[int, int] | None:
        """Internal (the graph layer's cache of :meth:`chunk_hashes`; not public, not an MCP tool): ``(number of
        this memory object in the process, the backend's change position)``, equal between two calls exactly when
        no write was committed to the memory meanwhile, by this process or another on the same folder; or None
        when the backend has none (Qdrant: read again every time). See :meth:`Backend.change_position
        <hybrid_memory.backends.base.Backend.change_position>`; read it before the data it vouches for.

        Memory-wide: it moves when any scope writes, which is why it is internal (a scoped caller must not learn
        when other scopes write; :mod:`hybrid_memory.isolation`).

        Raises:
            MemoryClosedError: the memory is closed.
        """
        self._check_open()
        position = self._backend.change_position()
        return None if position is None else (self._instance, position)

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
                f"scope must be a Scope or a mapping of {', '.join(SCOPE_FIELDS)}, got {type(scope).__name__}"
            )
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
            found = list(self._backend.get(old, scope=_bound(scope)))
            systems = self._backend.system_of(found)
            chunk, closes = plan_supersede(old, chunk, systems, time.time())
            vectors = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(1, -1)
            self._write([chunk], vectors, replace=True, dedup="keep", scope=scope, closes=closes, checked=True)
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
        data: dict[str, Any]
        if isinstance(request, SearchRequest):
            data = request.model_dump()
        elif isinstance(request, str):
            data = {"search_text": request}
        elif isinstance(request, Mapping):
            data = dict(request)
        elif request is None:
            if "search_text" not in fields:  # search(None): "got {}" named nothing the caller passed
                raise InvalidRequestError(
                    "invalid search request: got None (and no search_text=); pass a request dict or SearchRequest, "
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
    ) -> tuple[SearchRequest, Any]:
        self._check_open()
        req = self.make_request(request, **fields)
        return req, self._resolve_filter(req.metadata_filter, _bound(scope), req.as_of)

    def _resolve_filter(
        self,
        metadata_filter: Mapping[str, Any] | None,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> Any:
        """The ``allowed`` set of a search (:meth:`Backend.resolve <hybrid_memory.backends.base.Backend.resolve>`):
        the metadata filter, the bound scope fields and the facts valid at ``as_of`` (Unix seconds;
        ``valid_from <= as_of < valid_to``, an absent bound is open); embedded, the rowids from the filter index
        (cached per filter until the next write). None when nothing restricts.

        Raises:
            InvalidFilterError: the metadata filter is malformed, or names a scope field no chunk searched has
                as metadata (:func:`~hybrid_memory.scopes.check_scope_keys`).
        """
        allowed = self._backend.resolve(metadata_filter, scope, as_of)
        self._check_scope_keys(metadata_filter, scope)
        return allowed

    def _check_scope_keys(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, catch_up: bool = False
    ) -> None:
        """:func:`~hybrid_memory.scopes.check_scope_keys` against the backend (the filter index's key bitmaps, a
        count on Qdrant); ``catch_up``: apply other processes' commits first (a search has), only when the filter
        names a scope field."""
        if not metadata_filter:  # the common search: nothing to check, nothing to build
            return

        def holds(name: str) -> bool:
            return self._backend.holds_metadata_key(name, scope, catch_up)

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
        rows = self._backend.get([h.key for h in result.hits])
        times = {c.chunk_id: c.valid_from if c.valid_from is not None else c.created_at for c in rows.values()}
        now = req.as_of if req.as_of is not None else time.time()
        hits = apply_recency_prior(result.hits, times, prior, now, req.top_k)
        return dataclasses.replace(result, hits=hits)

    def _search_args(self, req: SearchRequest, allowed: Any, prior: RecencyPrior | None = None) -> dict[str, Any]:
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
        # winners only (embedded: by rowid, so they are those of the version scored; a rowid another process
        # replaced during this search falls back to the chunk's current version); a chunk deleted meanwhile is
        # left out
        rows = self._backend.hit_rows([hit.key for hit in result.hits], [hit.doc_id for hit in result.hits])
        return build_response(req, result, lambda hit: rows.get(hit.key))

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

        Each engine returns ``candidate_multiplier × max(top_k, RANK_FLOOR)`` candidates (:data:`RANK_FLOOR`: the
        results of any top_k up to 10 are the first top_k of the same list); an engine whose weight is 0 is not run.
        Results are ordered by score descending, ties by chunk_id.

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
        self._backend.catch_up()
        with self._backend.index_lock.read():
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
        await asyncio.to_thread(self._backend.catch_up)
        await self._acquire_read_async()
        try:
            self._check_open()
            req, allowed = await asyncio.to_thread(self._prepare, request, fields, scope)
            query = self._query(req, query_vector)
            result = await self._searcher.asearch(query, **self._search_args(req, allowed, prior))
            return await asyncio.to_thread(lambda: self._response(req, self._with_prior(req, result, prior)))
        finally:
            self._backend.index_lock.release_read()

    async def _acquire_read_async(self) -> None:
        """Take the index lock shared without blocking the event loop; if the caller is cancelled while
        waiting, the hold taken meanwhile is released."""
        lock = self._backend.index_lock
        task = asyncio.ensure_future(asyncio.to_thread(lock.acquire_read))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:

            def release_when_acquired(t: asyncio.Future[None]) -> None:
                if not t.cancelled() and t.exception() is None:
                    lock.release_read()

            task.add_done_callback(release_when_acquired)
            raise

    def _query(self, req: SearchRequest, query_vector: np.ndarray | Sequence[float] | None) -> Query:
        if query_vector is None:
            query = Query(req.search_text)
        else:
            query = Query(req.search_text, checked_query_vector(query_vector, int(self.embedder.dim)))
        return self._backend.prepare_query(query, req.hybrid_params)

    # -- lifecycle ----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until background index maintenance (a BM25 merge, IVF training) has finished. Searches never
        need this: they are correct meanwhile; it is for benchmarks and tests that want a settled index. Nothing
        runs in the background on a backend such as Qdrant."""
        self._backend.flush()

    def persist(self) -> None:
        """Save the derived indexes next to the store, after applying other processes' changes.

        The store itself needs no saving: each write is committed when it returns (durable as
        ``synchronous`` says). Saves of several processes are serialised by an inter-process file lock
        (``.indexes.lock``), go through unique temporary names and are swapped in whole; a save older than
        the one on disk (a lower change-log position) is skipped. Raises StoreBusyError when another
        process holds the lock for more than 10 minutes. On a backend such as Qdrant there is nothing to save:
        it stored every write when it returned.
        """
        self._check_open()
        self._backend.persist()

    def stats(self) -> dict[str, Any]:
        """Counts and parameters: ``path`` (the memory folder or an Edge shard's; None in RAM or for a server
        collection), ``chunks``, the backend's (embedded: BM25 segments, vectors, the change-log position, what
        opening reconciled; Qdrant: the collection, points, BM25 configuration), the embedder,
        ``candidate_multiplier``."""
        self._check_open()
        folder = self._backend.path
        return {
            "path": None if folder is None else str(folder),
            "chunks": self.count(),
            **self._backend.stats(),
            "embedder": {"name": self.embedder.name, "dim": int(self.embedder.dim)},
            "candidate_multiplier": self.candidate_multiplier,
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
        changes nothing. On Qdrant, the :class:`~hybrid_memory.backends.qdrant.backend.SparseEncoder`'s (what sparse
        vectors are written with).

        Raises:
            MemoryClosedError: the memory is closed.
        """
        self._check_open()
        return self._backend.bm25_params()

    def close(self) -> None:
        """Persist the indexes and release the backend's store. Idempotent.

        Safe against other threads: a write or search already running finishes first (close waits for the
        write lock and for the index lock alone); a call that starts later, or was still waiting for those
        locks, raises :class:`~hybrid_memory.MemoryClosedError`.
        """
        if self._closed:
            return
        try:
            self._backend.flush()
            self._backend.persist()
        finally:
            with self._write_lock:
                self._closed = True
                self._backend.close()

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryClosedError(f"this memory is closed; {self._reopen_hint()}")

    def _reopen_hint(self) -> str:
        """How to open this memory again (the closed-memory message's fix)."""
        return self._backend.reopen_hint()

    def __enter__(self) -> HybridMemory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if not isinstance(self._backend, EmbeddedBackend):
            return f"HybridMemory(backend={self._backend.name!r}, embedder={self.embedder.name!r})"
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
        raise InvalidFilterError("metadata filter nests too deeply (thousands of levels); flatten its values") from exc
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
