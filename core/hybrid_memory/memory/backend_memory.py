"""BackendMemory: :class:`~hybrid_memory.HybridMemory` over a :class:`~hybrid_memory.backends.base.Backend`.

``HybridMemory(backend=...)`` and ``HybridMemory.qdrant(...)`` construct this subclass. It inherits the
request handling, the search and asearch flow, scoped views and the response unchanged, and replaces what
touched the embedded store: the write path (the same rules: an upsert keeps the scope and validity fields it
does not state, an unchanged text keeps its vector and is not re-embedded, ids held outside a scope are
refused, exact duplicates are reported), reads, counts, deletes, ``supersede``, and filter resolution (to the
backend's filter instead of a RowSet of rowids). The searcher is the core's
:class:`~hybrid_memory.search.searcher.HybridSearcher` over the backend's engines: fusion stays client-side, with
every method of :data:`~hybrid_memory.fusion.FUSION_METHODS`.

Dedup runs as in the embedded memory (exact duplicates by a ``content_hash`` payload filter, near duplicates by
the dense leg restricted to exactly the chunk's scope). Not on a backend: index files (``persist`` and
``flush`` have nothing to do: the backend stores every write when it returns) and the multi-process change
log (several processes share one Qdrant collection directly; an Edge shard belongs to one process). Writes
are serialised within the process; two processes writing the same chunk id to one collection race (the last
upsert wins), where the embedded store detects the conflict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._exceptions import InvalidRequestError
from .._options import check_memory_options
from .._rwlock import ReadWriteLock
from ..dedup import DedupPolicy, WriteResult, as_policy
from ..embedders import Embedder
from ..onnx_embedder import OnnxEmbedder
from ..embedders import query_vector as checked_query_vector
from ..search.engine import Query
from ..fusion import FUSION_METHODS
from .hybrid import HybridMemory, _bound, _checked_filter, _instant, _page_after
from ..models import SCOPE_FIELDS, TIME_FIELDS, Chunk, SearchRequest, SearchResponse, StoredChunk, build_response
from ..scopes import Scope, as_scope, check_scope_keys
from ..search.searcher import HybridResult, HybridSearcher
from ..temporal import RecencyPrior, apply_recency_prior
from .write_plan import embed_checked, plan_supersede, plan_write
from ..backends.base import Backend, ChunkVersion

__all__ = ["BackendMemory"]

logger = logging.getLogger(__name__)


def _system(chunk: StoredChunk) -> dict[str, Any]:
    """Scope and time fields, superseded_by and merged of a stored chunk (what the write rules read)."""
    values: dict[str, Any] = {name: getattr(chunk, name) for name in (*SCOPE_FIELDS, *TIME_FIELDS)}
    values["superseded_by"] = chunk.superseded_by
    values["merged"] = [[i, s] for i, s in zip(chunk.merged_ids, chunk.merged_sources, strict=True)]
    return values


class BackendMemory(HybridMemory):
    """A hybrid memory whose chunks, vectors and both engines live in a backend (e.g. Qdrant).

    Args:
        path: must be None (the backend holds the data).
        backend: the :class:`~hybrid_memory.backends.base.Backend`, e.g.
            :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend`; closed by :meth:`close`.
        embedder: as for :class:`HybridMemory` (default all-MiniLM-L6-v2); its dimension fixes the
            collection's (checked on open).
        candidate_multiplier, dedup, recency_prior, show_progress: as for :class:`HybridMemory`.

    Raises:
        StoreFormatError: the collection's schema does not fit (dimension, distance, sparse modifier).
        InvalidRequestError: a path was given, or a bad parameter.
    """

    def __init__(
        self,
        path: Any = None,
        *,
        backend: Backend,
        embedder: Embedder | None = None,
        candidate_multiplier: int = 2,
        dedup: DedupPolicy | str = "keep",
        recency_prior: RecencyPrior | None = None,
        show_progress: bool = False,
    ) -> None:
        if path is not None:
            raise InvalidRequestError(
                f"a memory on a backend keeps no directory (got path {path!r}); pass backend=... alone, or a "
                "path alone for the embedded memory"
            )
        check_memory_options(candidate_multiplier=candidate_multiplier, show_progress=show_progress)
        if recency_prior is not None and not isinstance(recency_prior, RecencyPrior):
            raise InvalidRequestError(f"recency_prior must be a RecencyPrior or None, got {recency_prior!r}")
        self.path = None
        self.backend = backend
        self.candidate_multiplier = candidate_multiplier
        self.show_progress = show_progress
        self.dedup = as_policy(dedup, DedupPolicy())
        self.recency_prior = recency_prior
        self.embedder = embedder if embedder is not None else OnnxEmbedder()
        self.last_sync: dict[str, Any] = {}
        self._write_lock = threading.RLock()
        self._index_lock = ReadWriteLock()
        self._closed = False
        backend.open(int(self.embedder.dim))
        # Qdrant runs both legs of a query in one batched request: no local thread pool
        self._searcher = HybridSearcher(backend.engines(self.embedder), backend.keys, executor=None)

    # -- writes -------------------------------------------------------------------------------------
    def _embed(self, texts: list[str]) -> np.ndarray:
        return embed_checked(self.embedder, texts, int(self.embedder.dim))

    def _write(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        vectors: np.ndarray | None,
        *,
        replace: bool,
        dedup: DedupPolicy | str | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
        extra_updates: Sequence[tuple[str, Mapping[str, Any]]] = (),
        checked: bool = False,
    ) -> WriteResult:
        scope, policy, items, vectors = self._prepare_write(chunks, vectors, dedup, scope, int(self.embedder.dim),
                                                            checked)
        if not items and not extra_updates:
            return WriteResult([])
        with self._write_lock:
            payloads = self.backend.payloads([c.chunk_id for c in items] + [cid for cid, _ in extra_updates])
            stored = {cid: self.backend._chunk(p) for cid, p in payloads.items()}
            systems = {cid: _system(c) for cid, c in stored.items()}
            tokenize = self.backend.encoder.tokenizer.tokenize
            plan = plan_write(
                items, {c.chunk_id: (stored[c.chunk_id].content_hash, systems[c.chunk_id]) for c in items
                        if c.chunk_id in stored},
                vectors=vectors, replace=replace, policy=policy, scope=scope,
                embed=self._embed, find_hashes=self.backend.find_hashes,
                near_search=lambda: self._near_search(tokenize), tokenize=tokenize,
            )
            items = plan.items
            vector_of = dict(zip(plan.changed, plan.vectors, strict=True))
            now = time.time()
            versions = []
            for i, c in enumerate(items):
                if i in plan.dropped:
                    continue
                prev = stored.get(c.chunk_id)
                system = plan.system(i)
                version = StoredChunk(
                    **c.model_dump(), content_hash=plan.hashes[i],
                    created_at=prev.created_at if prev else now, updated_at=now,
                    superseded_by=system["superseded_by"],
                    merged_ids=[m[0] for m in system["merged"]], merged_sources=[m[1] for m in system["merged"]],
                )
                versions.append(ChunkVersion(version, vector_of.get(i)))
            targets = plan.merge_targets()
            if targets:
                more = self.backend.payloads(list(targets))
                payloads.update(more)
                for cid, payload in more.items():
                    target = self.backend._chunk(payload)
                    versions.append(ChunkVersion(target.model_copy(update={
                        "merged_ids": [*target.merged_ids, *(r[0] for r in targets[cid])],
                        "merged_sources": [*target.merged_sources, *(r[1] for r in targets[cid])],
                    }), None))
            for cid, update in extra_updates:
                versions.append(ChunkVersion(stored[cid].model_copy(update=dict(update)), None))
            seqs = {cid: int(p["seq"]) for cid, p in payloads.items()}
            self.backend.write(versions, seqs)
        logger.debug("stored %d chunks on %s (%d vectors written, %d duplicates dropped)", len(items), self.backend.name,
                     len(plan.changed), len(plan.dropped))
        return plan.result()

    def _near_search(self, tokenize: Any) -> Any:
        """``(vector, scope key, span) -> [(chunk_id, cosine, tokens)]``: the 5 nearest stored chunks of exactly
        that scope whose validity covers the span (the dense leg with both as filter), as the embedded memory's
        near-duplicate search."""

        def search(vector: np.ndarray, key: tuple, span: tuple) -> list[tuple[str, float, list[str]]]:
            found = self.backend.nearest(vector, dict(zip(SCOPE_FIELDS, key, strict=True)), 5, span)
            return [(cid, score, tokenize(text)) for cid, score, text in found]

        return search

    def supersede(
        self,
        old_ids: Iterable[str] | str,
        new_chunk: Chunk | Mapping[str, Any],
        *,
        vector: np.ndarray | None = None,
        scope: Scope | Mapping[str, Any] | None = None,
    ) -> str:
        """As :meth:`HybridMemory.supersede`: write ``new_chunk`` and close the validity of the facts it
        replaces (``valid_to`` = its ``valid_from``, ``superseded_by`` = its id) in the same batch."""
        self._check_open()
        old = self._ids_argument(old_ids, "old_ids")
        if not old:
            raise InvalidRequestError("old_ids is empty: give the ids of the facts the new chunk replaces")
        chunk = self._validate_chunks([new_chunk])[0]
        if chunk.chunk_id in old:
            raise InvalidRequestError(f"cannot supersede itself: {chunk.chunk_id!r}; give the new fact a new id")
        with self._write_lock:
            stored = {c.chunk_id: _system(c) for c in self.get(old, scope=scope)}
            chunk, closes = plan_supersede(old, chunk, stored, time.time())
            vectors = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(1, -1)
            self._write([chunk], vectors, replace=True, dedup="keep", scope=scope, extra_updates=closes, checked=True)
        return chunk.chunk_id

    def delete(self, chunk_ids: Iterable[str] | str, *, scope: Scope | Mapping[str, Any] | None = None) -> int:
        """Delete chunks by id (a list; a lone str is one id); unknown ids, and ids outside ``scope``, are ignored.
        Returns how many were. Raises InvalidRequestError as :meth:`HybridMemory.delete` does."""
        self._check_open()
        ids = self._ids_argument(chunk_ids)
        with self._write_lock:
            found = [c.chunk_id for c in self.get(ids, scope=scope)]
            self.backend.delete(found)
        return len(found)

    @contextlib.contextmanager
    def bulk(self) -> Iterator[HybridMemory]:
        """Nothing to defer on a backend (it indexes as it stores); kept so loaders run unchanged."""
        yield self

    def _reopen_hint(self) -> str:
        """How to open this memory again: on the same Qdrant Edge shard or collection."""
        backend = self.backend
        shard = getattr(backend, "path", None)
        if shard is not None:
            return f"open it again with HybridMemory.qdrant(edge_path={str(shard)!r})"
        collection = getattr(getattr(backend, "collection", None), "name", "hybrid_memory")
        target = str(getattr(getattr(backend, "collection", None), "target", ""))
        target = target.removeprefix("local mode ")  # qdrant-client's local mode: its folder, or :memory:
        if target in ("", ":memory:"):
            return "a qdrant-client ':memory:' collection's chunks are gone with it"
        return f"open it again with HybridMemory.qdrant({target!r}, collection={collection!r})"

    # -- reads --------------------------------------------------------------------------------------
    def get(self, chunk_ids: Iterable[str] | str, *, scope: Scope | Mapping[str, Any] | None = None) -> list[StoredChunk]:
        """Stored chunks in the order of ``chunk_ids`` (a list; a lone str is one id); unknown ids (and ids outside
        ``scope``) are skipped."""
        self._check_open()
        ids = self._ids_argument(chunk_ids)
        bound = as_scope(scope)
        found = self.backend.get(ids)
        return [found[c] for c in dict.fromkeys(ids) if c in found and (bound is None or bound.contains(_system(found[c])))]

    def count(self, metadata_filter: Mapping[str, Any] | None = None, *, scope: Scope | Mapping[str, Any] | None = None,
              as_of: Any = None) -> int:
        """Number of stored chunks matching the filter, in ``scope``, valid at ``as_of``."""
        self._check_open()
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound)
        return self.backend.count(self.backend.resolve(metadata_filter, bound, _instant(as_of)))

    def iter_chunks(self, metadata_filter: Mapping[str, Any] | None = None, *,
                    scope: Scope | Mapping[str, Any] | None = None, as_of: Any = None) -> Iterator[StoredChunk]:
        """Stored chunks matching the filter, in ``scope``, valid at ``as_of``, in order of first insertion."""
        self._check_open()
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound)
        return self.backend.iter_chunks(self.backend.resolve(metadata_filter, bound, _instant(as_of)))

    def page_chunks(
        self, metadata_filter: Mapping[str, Any] | None = None, *, after: int | None = None, limit: int = 100,
        scope: Scope | Mapping[str, Any] | None = None, as_of: Any = None,
    ) -> tuple[list[StoredChunk], int | None]:
        """One page of :meth:`iter_chunks` (same order, filter, scope and ``as_of``), by keyset: at most ``limit``
        (1..10,000) chunks after position ``after`` (None: the first page), and the position to pass as ``after``
        for the next page (None on the last). A position is the chunk's first-insertion ``seq``, so it stays
        valid while chunks are added or deleted; each page reads the ids of every matching chunk (a scroll), then
        the page's chunks. Raises InvalidFilterError, InvalidRequestError."""
        self._check_open()
        start = _page_after(after, limit)
        metadata_filter, bound = _checked_filter(metadata_filter), _bound(scope)
        self._check_scope_keys(metadata_filter, bound)
        resolved = self.backend.resolve(metadata_filter, bound, _instant(as_of))
        return self.backend.page_chunks(resolved, start, limit)

    def chunk_hashes(self, *, scope: Scope | Mapping[str, Any] | None = None) -> dict[str, str]:
        """chunk_id -> sha256 of the text, for every stored chunk in ``scope``."""
        return {c.chunk_id: c.content_hash for c in self.iter_chunks(scope=scope)}

    # -- search (the inherited search/asearch run these) --------------------------------------------
    def _catch_up(self) -> bool:
        return False  # no change log: the backend is the one copy

    def _resolve_filter(self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None = None,
                        as_of: float | None = None) -> Any:
        resolved = self.backend.resolve(metadata_filter, scope, as_of)
        self._check_scope_keys(metadata_filter, scope)
        return resolved

    def _check_scope_keys(self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None,
                          catch_up: bool = False) -> None:
        """:func:`~hybrid_memory.scopes.check_scope_keys` as the embedded memory runs it: whether some chunk in
        ``scope`` holds the key is one count of ``{name: {"$exists": True}}`` in the backend (asked only for a
        filter key that is a scope field's name)."""
        if not metadata_filter:
            return

        def holds(name: str) -> bool:
            return self.backend.count(self.backend.resolve({name: {"$exists": True}}, scope, None)) > 0

        check_scope_keys(metadata_filter, holds, scoped=bool(scope))

    def _query(self, req: SearchRequest, query_vector: np.ndarray | Sequence[float] | None) -> Query:
        dim = int(self.embedder.dim)
        if query_vector is None:
            query = Query(req.search_text)
        else:
            query = Query(req.search_text, checked_query_vector(query_vector, dim))
        params = req.hybrid_params
        query.cache["qdrant_legs"] = tuple(
            name for name, w in (("sparse", params.sparse_weight), ("dense", params.dense_weight)) if w > 0
        )
        # only the adaptive fusion reads the exact-match guard: the others need not fetch its inputs
        query.cache["qdrant_guard"] = FUSION_METHODS[params.fusion].identifiers
        return query

    def _with_prior(self, req: SearchRequest, result: HybridResult, prior: RecencyPrior | None) -> HybridResult:
        if prior is None or not result.hits:
            return result
        rows = self.backend.get([h.key for h in result.hits])
        times = {c.chunk_id: c.valid_from if c.valid_from is not None else c.created_at for c in rows.values()}
        now = req.as_of if req.as_of is not None else time.time()
        return dataclasses.replace(result, hits=apply_recency_prior(result.hits, times, prior, now, req.top_k))

    def _response(self, req: SearchRequest, result: HybridResult) -> SearchResponse:
        # only what a result shows, for the top_k alone (the legs carried ids and scores only); a chunk
        # deleted during the search is left out
        rows = self.backend.hit_rows([hit.key for hit in result.hits], [hit.doc_id for hit in result.hits])
        return build_response(req, result, lambda hit: rows.get(hit.key))

    # -- lifecycle ----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Nothing runs in the background on a backend."""

    def persist(self) -> None:
        """Nothing to save: the backend stored every write when it returned."""
        self._check_open()

    def stats(self) -> dict[str, Any]:
        """Counts and parameters: ``path`` (an Edge shard's folder; None for a server collection), the backend's,
        the embedder, candidate_multiplier."""
        self._check_open()
        folder = getattr(self.backend, "path", None)
        return {"path": None if folder is None else str(folder), "chunks": self.count(), **self.backend.stats(),
                "embedder": {"name": self.embedder.name, "dim": int(self.embedder.dim)},
                "candidate_multiplier": self.candidate_multiplier}

    @property
    def bm25_params(self) -> dict[str, float]:
        """The BM25 parameters the backend writes sparse vectors with, read only: ``{"k1": ..., "b": ...,
        "avgdl": ...}`` (for Qdrant, its :class:`~hybrid_memory.backends.qdrant.backend.SparseEncoder`'s). A new dict each
        call.

        Raises:
            MemoryClosedError: the memory is closed.
            InvalidRequestError: the backend keeps no BM25 encoder.
        """
        self._check_open()
        encoder = getattr(self.backend, "encoder", None)
        if encoder is None:
            raise InvalidRequestError(f"the {type(self.backend).__name__} backend keeps no BM25 parameters")
        return {"k1": float(encoder.k1), "b": float(encoder.b), "avgdl": float(encoder.avgdl)}

    def close(self) -> None:
        """Close the backend. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.backend.close()

    def __repr__(self) -> str:
        return f"HybridMemory(backend={self.backend.name!r}, embedder={self.embedder.name!r})"
