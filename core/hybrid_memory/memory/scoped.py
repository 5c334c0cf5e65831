"""ScopedMemory: a view of a :class:`~hybrid_memory.HybridMemory` bound to one :class:`~hybrid_memory.scopes.Scope`.

What a view guarantees (every read pre-filtered by the scope before both engines rank, every write stamped with
it, ids of other scopes invisible, narrowing only) is described in :mod:`hybrid_memory.scopes`, which holds
:class:`~hybrid_memory.scopes.Scope` and the checks; the view only forwards to the memory with ``scope=``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._exceptions import HybridMemoryError, InvalidRequestError, ScopeError
from ..isolation import IdSpace, cursor_seal
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
    def _change_position(self) -> tuple[int, int] | None: ...
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
                f"scope must be a Scope or a mapping of {', '.join(SCOPE_FIELDS)}, got {type(scope).__name__}"
            )
        extra = as_scope(
            {**(dict(scope) if isinstance(scope, Mapping) else (scope.bound() if scope else {})), **fields}
        )
        return ScopedMemory(self._memory, self.scope.narrow(extra or Scope()))

    def make_request(self, request: Any = None, /, **fields: Any) -> SearchRequest:
        """:meth:`HybridMemory.make_request` (validates a request; the scope is not part of it)."""
        return self._memory.make_request(request, **fields)

    # -- ids (hybrid_memory.isolation) --------------------------------------------------------------
    @property
    def _ids(self) -> IdSpace:
        return IdSpace(self.scope.key())

    @contextlib.contextmanager
    def _shown_errors(self) -> Iterator[None]:
        """Re-raise a library error with this scope's id prefix taken off the ids it quotes."""
        try:
            yield
        except HybridMemoryError as exc:
            text = str(exc)
            shown = self._ids.shown_text(text)
            if shown == text:
                raise
            try:
                replacement = type(exc)(shown)
            except TypeError:  # an error class with another constructor: keep it as it is
                raise exc from None
            raise replacement.with_traceback(exc.__traceback__) from exc.__cause__

    def _present(self, chunk_ids: Iterable[str]) -> set[str]:
        """Which candidate stored ids of ``chunk_ids`` are stored in this scope (one look-up of both candidates of
        every id, whatever other scopes hold)."""
        space = self._ids
        wanted = list(dict.fromkeys(c for cid in chunk_ids for c in space.candidates(cid)))
        if not wanted:
            return set()
        return {c.chunk_id for c in self._memory.get(wanted, scope=self.scope)}

    def _resolve(self, chunk_ids: Iterable[str] | str) -> list[str]:
        """The stored ids of this scope that the caller's ids name (both candidates of each, when both are
        stored), in the order given."""
        ids = [chunk_ids] if isinstance(chunk_ids, str) else chunk_ids
        if not isinstance(ids, Iterable):
            return ids  # the memory refuses it with its message
        ids = list(ids)
        if not all(isinstance(i, str) for i in ids):
            return ids  # the memory refuses it with its message
        present, space = self._present(ids), self._ids
        return [c for cid in ids for c in space.candidates(cid) if c in present]

    def _targets(self, chunks: Iterable[Chunk | Mapping[str, Any]]) -> tuple[list[Any], list[str | None]]:
        """The chunks with their ids mapped to the stored ids they are written under, and the caller's ids (None
        where a chunk has no usable id: the memory refuses it with its message)."""
        if isinstance(chunks, (Chunk, Mapping, str)) or not isinstance(chunks, Iterable):
            return chunks, []  # type: ignore[return-value]  # the memory refuses one chunk with its message
        items = list(chunks)
        given: list[str | None] = []
        for item in items:
            cid = (
                item.chunk_id
                if isinstance(item, Chunk)
                else (item.get("chunk_id") if isinstance(item, Mapping) else None)
            )
            given.append(cid if isinstance(cid, str) and cid else None)
        present, space = self._present([g for g in given if g is not None]), self._ids
        out: list[Any] = []
        for item, cid in zip(items, given, strict=True):
            if cid is None:
                out.append(item)
                continue
            target = space.target(cid, present)
            if isinstance(item, Chunk):
                out.append(item.model_copy(update={"chunk_id": target}))
            else:
                out.append({**item, "chunk_id": target})
        return out, given

    def _shown_chunk(self, chunk: StoredChunk) -> StoredChunk:
        """A stored chunk as this scope shows it (its id, ``superseded_by`` and ``merged_ids``)."""
        space = self._ids
        update: dict[str, Any] = {"chunk_id": space.shown(chunk.chunk_id)}
        if chunk.superseded_by is not None:
            update["superseded_by"] = space.shown(chunk.superseded_by)
        if chunk.merged_ids:
            update["merged_ids"] = space.shown_list(chunk.merged_ids)
        return chunk.model_copy(update=update)

    def _shown_result(self, result: WriteResult, given: Sequence[str | None]) -> WriteResult:
        from ..dedup import WriteDecision, WriteResult

        space = self._ids
        decisions = []
        for i, d in enumerate(result.decisions):
            named = given[i] if i < len(given) else None
            caller_id = named if named is not None else space.shown(d.chunk_id)
            stored = caller_id if d.stored_id == d.chunk_id else space.shown(d.stored_id)
            duplicate = None if d.duplicate_of is None else space.shown(d.duplicate_of)
            decisions.append(
                WriteDecision(
                    caller_id, d.action, stored, duplicate_of=duplicate, kind=d.kind, cosine=d.cosine, overlap=d.overlap
                )
            )
        return WriteResult(decisions)

    def _shown_response(self, response: SearchResponse) -> SearchResponse:
        space = self._ids
        results = [r.model_copy(update={"chunk_id": space.shown(r.chunk_id)}) for r in response.results]
        return response.model_copy(update={"results": results})

    # -- writes -----------------------------------------------------------------------------------
    def add(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        **extra: Any,
    ) -> list[str]:
        """:meth:`HybridMemory.add` in this scope (bound fields stamped, ids namespaced to the scope). Raises
        ScopeError for a chunk that states another scope, DuplicateChunkError for an id this scope holds."""
        self._no_extra("add", extra)
        return self._write_view("add", chunks, vectors, dedup, replace=False).ids

    def upsert(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        **extra: Any,
    ) -> list[str]:
        """:meth:`HybridMemory.upsert` in this scope; an id another scope holds is a fresh id here."""
        self._no_extra("upsert", extra)
        return self._write_view("upsert", chunks, vectors, dedup, replace=True).ids

    def write(
        self,
        chunks: Iterable[Chunk | Mapping[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        dedup: DedupPolicy | str | None = None,
        replace: bool = True,
        **extra: Any,
    ) -> WriteResult:
        """:meth:`HybridMemory.write` in this scope: the dedup decision for every chunk."""
        self._no_extra("write", extra)
        return self._write_view("write", chunks, vectors, dedup, replace=replace)

    def _write_view(self, call: str, chunks: Any, vectors: Any, dedup: Any, *, replace: bool) -> WriteResult:
        if isinstance(chunks, (Chunk, Mapping, str)) or not isinstance(chunks, Iterable):
            getattr(self._memory, call)(chunks, vectors=vectors, dedup=dedup, scope=self.scope)  # refused there
        mapped, given = self._targets(chunks)
        with self._shown_errors():
            result = self._memory.write(mapped, vectors=vectors, dedup=dedup, replace=replace, scope=self.scope)
        return self._shown_result(result, given)

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        **extra: Any,
    ) -> list[str]:
        """:meth:`HybridMemory.add_texts` in this scope (ids default to random uuid4 hex)."""
        self._no_extra("add_texts", extra)
        if isinstance(texts, str) or not hasattr(texts, "__len__"):
            return self._memory.add_texts(texts, metadatas, ids, sources, scope=self.scope)  # refused there
        n = len(texts)
        for name, values in (("metadatas", metadatas), ("ids", ids), ("sources", sources)):
            if values is not None and len(values) != n:
                raise InvalidRequestError(f"{name} has {len(values)} items for {n} texts; give one per text")
        return self.upsert(
            [
                {
                    "chunk_id": ids[i] if ids is not None else uuid.uuid4().hex,
                    "text": texts[i],
                    "source": sources[i] if sources is not None else "",
                    "metadata": dict(metadatas[i]) if metadatas is not None else {},
                }
                for i in range(n)
            ]
        )

    def supersede(
        self,
        old_ids: Iterable[str] | str,
        new_chunk: Chunk | Mapping[str, Any],
        *,
        vector: np.ndarray | None = None,
        **extra: Any,
    ) -> str:
        """:meth:`HybridMemory.supersede` in this scope: old ids of other scopes are unknown here."""
        self._no_extra("supersede", extra)
        ids = [old_ids] if isinstance(old_ids, str) else old_ids
        resolved = ids
        if isinstance(ids, Iterable) and not isinstance(ids, Mapping):
            ids = list(ids)
            if all(isinstance(i, str) for i in ids):
                present, space = self._present(ids), self._ids
                # an unknown id stays as given (namespaced), so the memory's "unknown" message names it
                resolved = [next((c for c in space.candidates(i) if c in present), space.own(i)) for i in ids]
        mapped, given = self._targets([new_chunk])
        with self._shown_errors():
            stored = self._memory.supersede(resolved, mapped[0], vector=vector, scope=self.scope)
        return given[0] if given and given[0] is not None else self._ids.shown(stored)

    def delete(self, chunk_ids: Iterable[str] | str, **extra: Any) -> int:
        """Delete chunks of this scope by id (a list; a lone str is one id); ids of other scopes are ignored like
        unknown ids."""
        self._no_extra("delete", extra)
        with self._shown_errors():
            return self._memory.delete(self._resolve(chunk_ids), scope=self.scope)

    # -- reads ------------------------------------------------------------------------------------
    def get(self, chunk_ids: Iterable[str] | str, **extra: Any) -> list[StoredChunk]:
        """Chunks of this scope, in the order given (a list; a lone str is one id); unknown ids and ids of other
        scopes are skipped."""
        self._no_extra("get", extra)
        with self._shown_errors():
            return [self._shown_chunk(c) for c in self._memory.get(self._resolve(chunk_ids), scope=self.scope)]

    def count(self, metadata_filter: Mapping[str, Any] | None = None, *, as_of: Any = None, **extra: Any) -> int:
        """Number of this scope's chunks matching the filter (valid at ``as_of`` when given)."""
        self._no_extra("count", extra)
        return self._memory.count(metadata_filter, scope=self.scope, as_of=as_of)

    def __len__(self) -> int:
        return self.count()

    def iter_chunks(
        self, metadata_filter: Mapping[str, Any] | None = None, *, as_of: Any = None, **extra: Any
    ) -> Iterator[StoredChunk]:
        """This scope's chunks matching the filter, in the memory's iteration order."""
        self._no_extra("iter_chunks", extra)
        chunks = self._memory.iter_chunks(metadata_filter, scope=self.scope, as_of=as_of)
        return (self._shown_chunk(c) for c in chunks)

    def page_chunks(
        self,
        metadata_filter: Mapping[str, Any] | None = None,
        *,
        after: str | None = None,
        limit: int = 100,
        as_of: Any = None,
        **extra: Any,
    ) -> tuple[list[StoredChunk], str | None]:
        """:meth:`HybridMemory.page_chunks` of this scope's chunks: ``(page, cursor of the next page or None)``.

        The cursor is opaque and bound to this scope (:class:`~hybrid_memory.isolation.CursorSeal`): it reveals
        nothing of other scopes' writes, and lasts while the memory stays open.

        Raises:
            InvalidRequestError: ``after`` is not a cursor this view gave (forged, altered, of another scope, or
                from before a reopen), or a bad ``limit``.
        """
        self._no_extra("page_chunks", extra)
        seal, key = cursor_seal(self._memory), self.scope.key()
        position = None if after is None else seal.open(after, key)
        page, last = self._memory.page_chunks(
            metadata_filter, after=position, limit=limit, scope=self.scope, as_of=as_of
        )
        return [self._shown_chunk(c) for c in page], None if last is None else seal.seal(last, key)

    def chunk_hashes(self, **extra: Any) -> dict[str, str]:
        """chunk_id -> content hash of this scope's chunks (what the graph layer diffs against)."""
        self._no_extra("chunk_hashes", extra)
        space = self._ids
        return {space.shown(k): v for k, v in self._memory.chunk_hashes(scope=self.scope).items()}

    def _change_position(self) -> tuple[int, int] | None:
        """Internal, for the graph layer only: the memory's :meth:`HybridMemory._change_position
        <hybrid_memory.HybridMemory._change_position>` (None: unknown, read again). It is memory-wide, so it moves
        when another scope writes; a scoped caller is never shown it (no public method, no MCP tool returns it,
        :mod:`hybrid_memory.isolation`), and the graph layer uses it only to decide whether to read this scope's
        :meth:`chunk_hashes` again, never to answer: what a scoped ``global_search`` serves is the same whoever
        wrote. Its one trace is time: the first ``global_search`` after any write reads this scope's hashes again
        (a cost of this scope's size), as the first search after another process's write applies that write.
        Raises MemoryClosedError once the memory is closed."""
        return self._memory._change_position()

    def search(
        self,
        request: SearchRequest | Mapping[str, Any] | str | None = None,
        /,
        *,
        query_vector: np.ndarray | Sequence[float] | None = None,
        recency: RecencyPrior | None | bool = None,
        **fields: Any,
    ) -> SearchResponse:
        """:meth:`HybridMemory.search` restricted to this scope before both engines rank. ``fields`` are
        request fields; a ``scope`` among them is refused (InvalidRequestError): the view is bound already."""
        self._no_scope("search", fields)
        return self._shown_response(
            self._memory.search(request, query_vector=query_vector, scope=self.scope, recency=recency, **fields)
        )

    async def asearch(
        self,
        request: SearchRequest | Mapping[str, Any] | str | None = None,
        /,
        *,
        query_vector: np.ndarray | Sequence[float] | None = None,
        recency: RecencyPrior | None | bool = None,
        **fields: Any,
    ) -> SearchResponse:
        """:meth:`HybridMemory.asearch` restricted to this scope."""
        self._no_scope("asearch", fields)
        return self._shown_response(
            await self._memory.asearch(request, query_vector=query_vector, scope=self.scope, recency=recency, **fields)
        )

    def stats(self) -> dict[str, Any]:
        """``{"scope": bound fields, "chunks": count}`` (engine internals are the memory's, not the view's)."""
        return {"scope": self.scope.bound(), "chunks": self.count()}

    def __repr__(self) -> str:
        return f"ScopedMemory({self._memory!r}, scope={self.scope.bound()!r})"
