"""What :class:`~hybrid_memory.HybridMemory` needs from a storage and retrieval backend.

The embedded backend is the memory's own code path (SQLite store, bm25s, FAISS, Roaring filter index; see
:mod:`hybrid_memory.memory.hybrid`): it is not routed through this protocol. A backend given to the constructor
(``HybridMemory(backend=...)``) is driven by :class:`~hybrid_memory.memory.backend_memory.BackendMemory`, which keeps
everything above storage unchanged: request validation, scopes, the write rules (upsert keeps unstated scope
and validity, an unchanged text is not re-embedded, ids held by another scope are refused), the
:class:`~hybrid_memory.search.searcher.HybridSearcher` with every fusion method of
:data:`~hybrid_memory.fusion.FUSION_METHODS`, the response, and so the adapters and the MCP server.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..search.engine import Engine
from ..models import StoredChunk

__all__ = ["Backend", "ChunkVersion"]


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


@runtime_checkable
class Backend(Protocol):
    """Storage plus the two retrieval legs. Ids in and out are chunk ids; engines use int64 document ids that
    :meth:`keys` maps back to chunk ids. Implementations must be thread-safe."""

    name: str
    """Short name for stats and logs, e.g. ``"qdrant-edge"``."""

    def open(self, dim: int) -> None:
        """Create the collection or check its schema for vectors of ``dim`` dimensions (idempotent).

        Raises:
            StoreFormatError: the stored schema differs (dimension, distance, sparse modifier).
        """
        ...

    def engines(self, embedder: Any) -> dict[str, Engine]:
        """The ``"sparse"`` and ``"dense"`` engines the hybrid searcher runs (their ``allowed`` is what
        :meth:`resolve` returned)."""
        ...

    def keys(self, ids: Sequence[int]) -> Mapping[int, str]:
        """Engine ids -> chunk ids (ids it cannot map are left out)."""
        ...

    def resolve(self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None,
                as_of: float | None) -> Any:
        """The backend's form of the metadata filter, the bound scope fields and ``as_of`` (None: all chunks).

        Raises:
            InvalidFilterError: malformed, or not expressible exactly on this backend (names the operator).
        """
        ...

    def get(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """Stored chunks by id (unknown ids left out)."""
        ...

    def hit_rows(self, chunk_ids: Sequence[str], ids: Sequence[int] | None = None) -> dict[str, tuple[str, str | None, dict[str, Any]]]:
        """chunk_id -> (text, source, metadata) of stored chunks (unknown ids left out): what a search result
        shows, read for the top_k only. ``ids``: the chunks' engine ids (a search's hits), when at hand."""
        ...

    def find_hashes(
        self, digests: Sequence[str], scope_values: Mapping[str, str | None], exclude: Collection[str] = ()
    ) -> dict[str, list[tuple[str, float | None, float | None]]]:
        """content_hash -> ``[(chunk_id, valid_from, valid_to), ...]``, oldest first, of the stored chunks with
        that hash in exactly that scope, other than the ``exclude`` ids."""
        ...

    def write(self, versions: Sequence[ChunkVersion]) -> None:
        """Write chunk versions in one batch (vector None: keep the stored vectors, replace the payload)."""
        ...

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Delete chunks by id (unknown ids are no error)."""
        ...

    def count(self, resolved: Any) -> int:
        """Chunks matching a :meth:`resolve` result."""
        ...

    def iter_chunks(self, resolved: Any, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Chunks matching a :meth:`resolve` result, in order of first insertion, read in batches."""
        ...

    def page_chunks(self, resolved: Any, after: int, limit: int) -> tuple[list[StoredChunk], int | None]:
        """One keyset page of :meth:`iter_chunks`: up to ``limit`` chunks after position ``after`` (-1: the
        start), and the position of the last one when more follow (else None)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counts and configuration."""
        ...

    def close(self) -> None:
        """Release the collection. Idempotent."""
        ...
