"""What :class:`~hybrid_memory.HybridMemory` needs from a storage and retrieval backend.

A memory composes exactly one backend (``memory.backend``), as qdrant-client's ``QdrantClient`` holds its local
or remote client and httpx's ``Client`` its transport: :class:`~hybrid_memory.backends.embedded.backend.EmbeddedBackend`
(a folder: SQLite store, bm25s, FAISS, Roaring filter index) for ``HybridMemory(path)`` and ``HybridMemory()``, or the
one given to ``HybridMemory(backend=...)``, e.g. :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend`. The
memory keeps everything above storage the same on every backend: request validation, scopes, the write rules
(:mod:`hybrid_memory.memory.write_plan`: an upsert keeps unstated scope and validity, an unchanged text is not
re-embedded, ids held by another scope are refused, duplicates are found and kept, skipped or merged), time, the
:class:`~hybrid_memory.search.searcher.HybridSearcher` with every fusion method of
:data:`~hybrid_memory.fusion.FUSION_METHODS`, the response, and so the adapters and the MCP server.

Two forms of a restriction pass through the protocol, each opaque to the memory: what :meth:`Backend.resolve`
returns (the ``allowed`` set a search hands its engines: a :class:`~hybrid_memory.search.engine.RowSet` of rowids,
a Qdrant filter) and what :meth:`Backend.listing` returns (what :meth:`Backend.count`, :meth:`Backend.iter_chunks`
and :meth:`Backend.page_chunks` read).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from .._exceptions import InvalidRequestError
from .._rwlock import ReadWriteLock
from ..embedders import Embedder
from ..models import SCOPE_FIELDS, TIME_FIELDS, Chunk, StoredChunk
from ..search.engine import Engine, Query

__all__ = ["Backend", "ChunkPlan", "ChunkVersion", "NearSearch", "P", "StoredState", "check_embedder", "system_values"]

StoredState = tuple[str, Mapping[str, Any]]
"""What the write rules read of a stored chunk: ``(content_hash, system fields)``, the system fields being the
scope fields, ``valid_from``, ``valid_to``, ``superseded_by`` and ``merged`` (``[[chunk_id, source], ...]``)."""

NearSearch = Callable[[np.ndarray, tuple, tuple], list[tuple[str, float, list[str]]]]
"""``(vector float32 (dim,), scope key, span) -> [(chunk_id, cosine, tokens)]``: the (at most 5) nearest stored
chunks of exactly that scope (the key: the values of :data:`~hybrid_memory.models.SCOPE_FIELDS`, None for
absent) whose validity covers the span (:func:`~hybrid_memory.dedup.covers`), best first, for near-duplicate
detection (:func:`~hybrid_memory.dedup.find_near`)."""


@dataclass(frozen=True)
class ChunkVersion:
    """One chunk version to write.

    Attributes:
        chunk: the stored form (text, source, metadata, scope and time fields, hash, created/updated times,
            superseded_by, merged ids).
        vector: float32 (dim,), L2-normalised, or None when the text is unchanged and the stored vectors are
            kept (a metadata-only change: no embedding, no vector write).
    """

    chunk: StoredChunk
    vector: np.ndarray | None


class ChunkPlan(Protocol):
    """A write as the write rules decided it (:class:`~hybrid_memory.memory.write_plan.WritePlan`), by position in
    the batch: what a backend stores."""

    items: list[Chunk]
    """The chunks as they will be stored."""
    hashes: list[str]
    """sha256 hex of each item's text."""
    changed: list[int]
    """Positions written with a new vector (new ids, changed texts, or all when vectors were given)."""
    vectors: np.ndarray
    """float32 (len(changed), dim), L2-normalised: row j for position ``changed[j]``."""
    unchanged: list[int]
    """Positions whose stored text and vector stay (source, metadata and system fields replaced)."""
    dropped: set[int]
    """Positions not written (duplicates skipped or merged)."""

    def system(self, position: int) -> dict[str, Any]:
        """The system fields position ``position`` is stored with."""
        ...

    def merge_targets(self) -> dict[str, list[list[str]]]:
        """chunk_id of a stored chunk this write does not store -> ``[[merged chunk_id, its source], ...]`` to
        append to its ``merged`` list."""
        ...


P = TypeVar("P", bound=ChunkPlan)
"""The plan type a caller's ``plan`` callback returns; :meth:`Backend.apply_write` returns that same plan."""


def system_values(chunk: StoredChunk) -> dict[str, Any]:
    """Scope and time fields, ``superseded_by`` and ``merged`` (``[[chunk_id, source], ...]``) of a stored chunk:
    what the write rules read (the system fields of :data:`StoredState`)."""
    values: dict[str, Any] = {name: getattr(chunk, name) for name in (*SCOPE_FIELDS, *TIME_FIELDS)}
    values["superseded_by"] = chunk.superseded_by
    values["merged"] = [[i, s] for i, s in zip(chunk.merged_ids, chunk.merged_sources, strict=True)]
    return values


def check_embedder(embedder: Any) -> None:
    """Refuse an ``embedder=`` that does not follow the Embedder protocol (a model name, a class), naming the fix.

    Raises:
        InvalidRequestError: an attribute of the protocol is missing.
    """
    if isinstance(embedder, str):  # a model name, as other libraries take it
        raise InvalidRequestError(
            f"embedder must be an Embedder object, not a model name ({embedder!r:.80}); leave it out for the packaged "
            "all-MiniLM-L6-v2 (OnnxEmbedder()), or pass SentenceTransformerEmbedder(model_path=...) from the "
            "[torch] extra for another sentence-transformers model"
        )
    for attribute in ("name", "dim", "embed_documents", "embed_query"):
        if not hasattr(embedder, attribute):
            given = (
                f"the class {embedder.__name__}"
                if isinstance(embedder, type)
                else f"{type(embedder).__name__} {embedder!r}"[:120]
            )
            raise InvalidRequestError(
                f"embedder {given} lacks {attribute!r}; it must follow the Embedder protocol (name, dim, "
                "embed_documents, embed_query): pass an instance such as OnnxEmbedder() (the packaged "
                "all-MiniLM-L6-v2) or HashingEmbedder(384), or leave embedder out for the default"
            )


@runtime_checkable
class Backend(Protocol):
    """Storage plus the two retrieval legs, driven by one :class:`~hybrid_memory.HybridMemory`. Ids in and out
    are chunk ids; engines rank int64 document ids that :meth:`keys` maps back to chunk ids. Implementations
    must be thread-safe for searches; the memory serialises its writes (one at a time per process)."""

    name: str
    """Short name for stats and logs, e.g. ``"embedded"``, ``"qdrant-edge"``."""

    index_lock: ReadWriteLock
    """Searches hold it shared from resolving the filter to reading the results; a backend applying a change to
    in-process indexes holds it alone."""

    @property
    def executor(self) -> Executor | None:
        """Threads the hybrid searcher runs the two engines in, or None (both legs in one request, as Qdrant's
        batch)."""
        ...

    @property
    def path(self) -> Path | None:
        """The folder the data lives in (a memory folder, an Edge shard), or None (RAM, a server)."""
        ...

    # -- opening --------------------------------------------------------------------------------------
    def embedder_for(self, embedder: Embedder | None) -> Embedder:
        """The embedder to use: ``embedder`` (checked against what the data was built with, where recorded), or
        the backend's default for None (the recorded one, else the offline all-MiniLM-L6-v2).

        Raises:
            StoreFormatError: the data was built with another embedder (name or dimension) or format.
            InvalidRequestError: ``embedder`` does not follow the Embedder protocol.
        """
        ...

    def open(self, dim: int) -> None:
        """Create the collection or indexes, or check their schema, for vectors of ``dim`` dimensions.

        Raises:
            StoreFormatError: the stored schema differs (dimension, distance, sparse modifier).
        """
        ...

    def engines(self, embedder: Embedder) -> Mapping[str, Engine]:
        """The ``"sparse"`` and ``"dense"`` engines the hybrid searcher runs (their ``allowed`` is what
        :meth:`resolve` returned)."""
        ...

    def keys(self, ids: Sequence[int]) -> Mapping[int, str]:
        """Engine ids -> chunk ids (ids it cannot map are left out)."""
        ...

    def tokenize(self, text: str) -> list[str]:
        """The BM25 tokens of ``text`` (for the near-duplicate token overlap)."""
        ...

    # -- search ---------------------------------------------------------------------------------------
    def catch_up(self) -> bool:
        """Apply changes other processes committed (an embedded folder's change log); True when some were read.
        A backend that is the one copy (a server) returns False."""
        ...

    def prepare_query(self, query: Query, hybrid_params: Any) -> Query:
        """Announce to the engines, in ``query.cache``, what the request's
        :class:`~hybrid_memory.models.HybridParams` need (e.g. which legs run); returns ``query``."""
        ...

    def resolve(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
    ) -> Any:
        """The ``allowed`` set a search hands its engines for the metadata filter, the bound scope fields and the
        facts valid at ``as_of`` (Unix seconds), or None when nothing restricts. Caller holds :attr:`index_lock`
        shared.

        Raises:
            InvalidFilterError: malformed, or not expressible exactly on this backend (names the operator).
        """
        ...

    def holds_metadata_key(self, name: str, scope: Mapping[str, str] | None, catch_up: bool = False) -> bool:
        """Whether some chunk in ``scope`` has ``name`` as a metadata key (the scope-key check of
        :func:`~hybrid_memory.scopes.check_scope_keys`); ``catch_up``: apply other processes' commits first."""
        ...

    def hit_rows(
        self, chunk_ids: Sequence[str], ids: Sequence[int] | None = None
    ) -> dict[str, tuple[str, str | None, dict[str, Any]]]:
        """chunk_id -> (text, source, metadata) of stored chunks (unknown ids left out): what a search result
        shows, read for the top_k only. ``ids``: the chunks' engine ids (a search's hits), when at hand."""
        ...

    # -- writes ---------------------------------------------------------------------------------------
    def apply_write(
        self,
        chunk_ids: Sequence[str],
        plan: Callable[[Mapping[str, StoredState]], P],
        closes: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> P:
        """Read the stored state of ``chunk_ids`` (``{chunk_id: (content_hash, system fields)}`` of the stored
        ones), call ``plan`` with it (the write rules; they may embed and call :meth:`find_hashes` and
        :meth:`near_search`), and store what the plan says in one batch: the changed positions with their new
        vectors, the unchanged ones' source, metadata and system fields, the merge targets' ``merged`` lists, and
        the ``closes`` (system-field updates by chunk id: a supersede's closed facts). Returns the plan applied.
        A backend that detects concurrent writers may call ``plan`` again.

        Raises:
            StoreBusyError: other processes kept changing the same chunks (embedded).
            whatever ``plan`` raises (nothing is written then).
        """
        ...

    def find_hashes(
        self, digests: Sequence[str], scope_values: Mapping[str, str | None], exclude: Collection[str] = ()
    ) -> dict[str, list[tuple[str, float | None, float | None]]]:
        """content_hash -> ``[(chunk_id, valid_from, valid_to), ...]``, oldest first, of the stored chunks with
        that hash in exactly that scope, other than the ``exclude`` ids."""
        ...

    def near_search(self, tokenize: Callable[[str], list[str]], cosine_floor: float) -> NearSearch:
        """The near-duplicate search of one write (:data:`NearSearch`); ``cosine_floor``: the policy's threshold
        (a backend reading neighbours in rounds may stop below it)."""
        ...

    def delete(self, chunk_ids: Sequence[str]) -> int:
        """Delete chunks by id (unknown ids are no error). Returns how many were stored."""
        ...

    @contextlib.contextmanager
    def bulk(self, closed: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Defer index maintenance to the end of the block (nothing to defer on a backend that indexes as it
        stores). ``closed``: whether the memory was closed meanwhile."""
        ...

    # -- reads ----------------------------------------------------------------------------------------
    def get(self, chunk_ids: Sequence[str], scope: Mapping[str, str] | None = None) -> dict[str, StoredChunk]:
        """Stored chunks by id (unknown ids, and ids outside the bound ``scope`` fields, left out)."""
        ...

    def system_of(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> system fields (as in :data:`StoredState`) of the stored ids."""
        ...

    def listing(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
    ) -> Any:
        """The restriction :meth:`count`, :meth:`iter_chunks` and :meth:`page_chunks` read (validated filter).

        Raises:
            InvalidFilterError: not expressible exactly on this backend.
        """
        ...

    def count(self, resolved: Any) -> int:
        """Chunks matching a :meth:`listing` (or :meth:`resolve`) result."""
        ...

    def iter_chunks(self, resolved: Any, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Chunks matching a :meth:`listing` result, in order of first insertion, read in batches."""
        ...

    def page_chunks(self, resolved: Any, after: int, limit: int) -> tuple[list[StoredChunk], int | None]:
        """One keyset page of :meth:`iter_chunks`: up to ``limit`` chunks after position ``after`` (-1: the
        start), and the position of the last one when more follow (else None)."""
        ...

    def chunk_hashes(self, scope: Mapping[str, str] | None) -> dict[str, str]:
        """chunk_id -> sha256 hex of the text, of every stored chunk in ``scope`` (all when None)."""
        ...

    def change_position(self) -> int | None:
        """A cheap position of the stored data that moves on every committed write that changes a chunk (add,
        upsert, delete, metadata or system update, supersede), by this process or any other writing to the same
        data; equal positions of one backend mean :meth:`chunk_hashes` would answer the same. Read it *before*
        the data it vouches for (then a write in between only makes the next read look stale).

        Memory-wide, not per scope: it moves when any scope writes, so it is never shown to a scoped caller
        (:meth:`HybridMemory._change_position <hybrid_memory.HybridMemory._change_position>` is internal). None:
        the backend has no cheap reliable position; a caller must then read again every time.

        Raises:
            MemoryClosedError: the backend was closed (embedded).
        """
        ...

    # -- lifecycle ------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Wait until background index maintenance has finished (nothing on a backend without any)."""
        ...

    def persist(self) -> None:
        """Save derived state (index files) after applying other processes' changes; nothing where every write
        is stored when it returns.

        Raises:
            StoreBusyError: another process held the index files' lock too long (embedded).
        """
        ...

    def stats(self) -> dict[str, Any]:
        """Counts and configuration."""
        ...

    def bm25_params(self) -> dict[str, float]:
        """``{"k1", "b", "avgdl"}`` the backend ranks (or writes sparse vectors) with; a new dict each call."""
        ...

    def reopen_hint(self) -> str:
        """How to open this data again (the fix a closed memory's error names)."""
        ...

    def close(self) -> None:
        """Release the store or collection. Idempotent."""
        ...
