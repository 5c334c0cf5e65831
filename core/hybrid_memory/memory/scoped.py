"""ScopedMemory: a view of a :class:`~hybrid_memory.HybridMemory` bound to one :class:`~hybrid_memory.scopes.Scope`.

What a view guarantees (every read pre-filtered by the scope before both engines rank, every write stamped with
it, ids of other scopes invisible, narrowing only) is described in :mod:`hybrid_memory.scopes`, which holds
:class:`~hybrid_memory.scopes.Scope` and the checks; the view only forwards to the memory with ``scope=``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._exceptions import InvalidRequestError, ScopeError
from ..models import SCOPE_FIELDS, Chunk, SearchRequest, SearchResponse, StoredChunk
from ..scopes import Scope, as_scope

if TYPE_CHECKING:
    from pathlib import Path

    from ..dedup import DedupPolicy, WriteResult
    from ..temporal import RecencyPrior

__all__ = ["ScopedMemory"]


class _Memory(Protocol):
    """What a view calls on its :class:`~hybrid_memory.HybridMemory` (each with ``scope=``): named here so that this
    module needs no import of the facade, which imports it (no circle, not even a type-only one)."""

    path: Path | None
    embedder: Any

    def make_request(self, *args: Any, **kwargs: Any) -> SearchRequest: ...
    def add(self, *args: Any, **kwargs: Any) -> list[str]: ...
    def upsert(self, *args: Any, **kwargs: Any) -> list[str]: ...
    def write(self, *args: Any, **kwargs: Any) -> WriteResult: ...
    def add_texts(self, *args: Any, **kwargs: Any) -> list[str]: ...
    def supersede(self, *args: Any, **kwargs: Any) -> str: ...
    def delete(self, *args: Any, **kwargs: Any) -> int: ...
    def get(self, *args: Any, **kwargs: Any) -> list[StoredChunk]: ...
    def count(self, *args: Any, **kwargs: Any) -> int: ...
    def iter_chunks(self, *args: Any, **kwargs: Any) -> Iterator[StoredChunk]: ...
    def page_chunks(self, *args: Any, **kwargs: Any) -> tuple[list[StoredChunk], int | None]: ...
    def chunk_hashes(self, *args: Any, **kwargs: Any) -> dict[str, str]: ...
    def search(self, *args: Any, **kwargs: Any) -> SearchResponse: ...
    async def asearch(self, *args: Any, **kwargs: Any) -> SearchResponse: ...


class ScopedMemory:
    """A view of a :class:`HybridMemory` bound to one :class:`Scope` (see the module docstring).

    Made by :meth:`HybridMemory.scoped`; it has the memory's read and write API, each restricted to the scope.
    The view does not own the memory: closing the memory closes every view of it.
    """

    def __init__(self, memory: _Memory, scope: Scope) -> None:
        if not scope:
            raise ScopeError(f"a scoped view needs at least one bound field of {', '.join(SCOPE_FIELDS)}")
        self._memory = memory
        self.scope = scope

    # -- arguments a view does not take ---------------------------------------------------------------
    def _no_scope(self, method: str, fields: Mapping[str, Any]) -> None:
        """Refuse ``scope=`` (a view is bound to its scope already; the memory's methods take it, views not)."""
        if "scope" in fields:
            raise InvalidRequestError(
                f"{method}() of a scoped view takes no scope argument: this view is already bound to "
                f"{self.scope.bound()}; drop scope=, narrow it with view.scoped(...), or call {method}() on the "
                "unscoped HybridMemory"
            )

    def _no_extra(self, method: str, extra: Mapping[str, Any]) -> None:
        """Refuse keyword arguments the method does not take with an InvalidRequestError naming them (not the
        TypeError Python would raise)."""
        self._no_scope(method, extra)
        if extra:
            raise InvalidRequestError(
                f"{method}() of a scoped view got unexpected keyword argument(s) {', '.join(sorted(map(str, extra)))}; "
                f"see help(ScopedMemory.{method}) for the arguments it takes"
            )

    # -- identity ---------------------------------------------------------------------------------
    @property
    def path(self) -> Any:
        """The memory's folder (None in RAM)."""
        return self._memory.path

    @property
    def embedder(self) -> Any:
        """The memory's embedder."""
        return self._memory.embedder

    @property
    def graph_path(self) -> Any:
        """Folder of this scope's own graph: ``<memory>/graph_scopes/<scope.key()>`` (None in RAM)."""
        return None if self._memory.path is None else self._memory.path / "graph_scopes" / self.scope.key()

    def scoped(self, scope: Scope | Mapping[str, Any] | None = None, /, **fields: str) -> ScopedMemory:
        """A narrower view (more fields bound). Raises ScopeError when a field would be re-bound."""
        if scope is not None and not isinstance(scope, (Mapping, Scope)):
            raise InvalidRequestError(
                f"scope must be a Scope or a mapping of {', '.join(SCOPE_FIELDS)}, got {type(scope).__name__}")
        extra = as_scope({**(dict(scope) if isinstance(scope, Mapping) else (scope.bound() if scope else {})), **fields})
        return ScopedMemory(self._memory, self.scope.narrow(extra or Scope()))

    def make_request(self, request: Any = None, /, **fields: Any) -> SearchRequest:
        """:meth:`HybridMemory.make_request` (validates a request; the scope is not part of it)."""
        return self._memory.make_request(request, **fields)

    # -- writes -----------------------------------------------------------------------------------
    def add(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
            dedup: DedupPolicy | str | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.add` in this scope (bound fields stamped). Raises ScopeError as described."""
        self._no_extra("add", extra)
        return self._memory.add(chunks, vectors=vectors, dedup=dedup, scope=self.scope)

    def upsert(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
               dedup: DedupPolicy | str | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.upsert` in this scope; ids of other scopes are refused (ScopeError)."""
        self._no_extra("upsert", extra)
        return self._memory.upsert(chunks, vectors=vectors, dedup=dedup, scope=self.scope)

    def write(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
              dedup: DedupPolicy | str | None = None, replace: bool = True, **extra: Any) -> WriteResult:
        """:meth:`HybridMemory.write` in this scope: the dedup decision for every chunk."""
        self._no_extra("write", extra)
        return self._memory.write(chunks, vectors=vectors, dedup=dedup, replace=replace, scope=self.scope)

    def add_texts(self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]] | None = None,
                  ids: Sequence[str] | None = None, sources: Sequence[str] | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.add_texts` in this scope."""
        self._no_extra("add_texts", extra)
        return self._memory.add_texts(texts, metadatas, ids, sources, scope=self.scope)

    def supersede(self, old_ids: Iterable[str] | str, new_chunk: Chunk | Mapping[str, Any], *,
                  vector: np.ndarray | None = None, **extra: Any) -> str:
        """:meth:`HybridMemory.supersede` in this scope: old ids of other scopes are unknown here."""
        self._no_extra("supersede", extra)
        return self._memory.supersede(old_ids, new_chunk, vector=vector, scope=self.scope)

    def delete(self, chunk_ids: Iterable[str] | str, **extra: Any) -> int:
        """Delete chunks of this scope by id (a list; a lone str is one id); ids of other scopes are ignored like
        unknown ids."""
        self._no_extra("delete", extra)
        return self._memory.delete(chunk_ids, scope=self.scope)

    # -- reads ------------------------------------------------------------------------------------
    def get(self, chunk_ids: Iterable[str] | str, **extra: Any) -> list[StoredChunk]:
        """Chunks of this scope, in the order given (a list; a lone str is one id); unknown ids and ids of other
        scopes are skipped."""
        self._no_extra("get", extra)
        return self._memory.get(chunk_ids, scope=self.scope)

    def count(self, metadata_filter: Mapping[str, Any] | None = None, *, as_of: Any = None, **extra: Any) -> int:
        """Number of this scope's chunks matching the filter (valid at ``as_of`` when given)."""
        self._no_extra("count", extra)
        return self._memory.count(metadata_filter, scope=self.scope, as_of=as_of)

    def __len__(self) -> int:
        return self.count()

    def iter_chunks(self, metadata_filter: Mapping[str, Any] | None = None, *, as_of: Any = None,
                    **extra: Any) -> Iterator[StoredChunk]:
        """This scope's chunks matching the filter, in the memory's iteration order."""
        self._no_extra("iter_chunks", extra)
        return self._memory.iter_chunks(metadata_filter, scope=self.scope, as_of=as_of)

    def page_chunks(self, metadata_filter: Mapping[str, Any] | None = None, *, after: int | None = None,
                    limit: int = 100, as_of: Any = None, **extra: Any) -> tuple[list[StoredChunk], int | None]:
        """:meth:`HybridMemory.page_chunks` of this scope's chunks: ``(page, position of the next page or None)``."""
        self._no_extra("page_chunks", extra)
        return self._memory.page_chunks(metadata_filter, after=after, limit=limit, scope=self.scope, as_of=as_of)

    def chunk_hashes(self, **extra: Any) -> dict[str, str]:
        """chunk_id -> content hash of this scope's chunks (what the graph layer diffs against)."""
        self._no_extra("chunk_hashes", extra)
        return self._memory.chunk_hashes(scope=self.scope)

    def search(self, request: SearchRequest | Mapping[str, Any] | str | None = None, /, *,
               query_vector: np.ndarray | Sequence[float] | None = None,
               recency: RecencyPrior | None | bool = None, **fields: Any) -> SearchResponse:
        """:meth:`HybridMemory.search` restricted to this scope before both engines rank. ``fields`` are
        request fields; a ``scope`` among them is refused (InvalidRequestError): the view is bound already."""
        self._no_scope("search", fields)
        return self._memory.search(request, query_vector=query_vector, scope=self.scope, recency=recency, **fields)

    async def asearch(self, request: SearchRequest | Mapping[str, Any] | str | None = None, /, *,
                      query_vector: np.ndarray | Sequence[float] | None = None,
                      recency: RecencyPrior | None | bool = None, **fields: Any) -> SearchResponse:
        """:meth:`HybridMemory.asearch` restricted to this scope."""
        self._no_scope("asearch", fields)
        return await self._memory.asearch(request, query_vector=query_vector, scope=self.scope, recency=recency,
                                          **fields)

    def stats(self) -> dict[str, Any]:
        """``{"scope": bound fields, "chunks": count}`` (engine internals are the memory's, not the view's)."""
        return {"scope": self.scope.bound(), "chunks": self.count()}

    def __repr__(self) -> str:
        return f"ScopedMemory({self._memory!r}, scope={self.scope.bound()!r})"

