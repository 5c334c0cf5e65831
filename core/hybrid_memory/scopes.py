"""Scopes: whose memory a chunk is, and views of a memory that cannot read or write outside one scope.

Every chunk has four optional scope fields, ``tenant``, ``user_id``, ``agent_id`` and ``session_id``, stored in
indexed SQLite columns. A :class:`Scope` binds some of them (``Scope(tenant="acme", user_id="u1")``); a chunk is
*in* the scope when every bound field equals the chunk's (an unbound field is free, so a tenant's scope holds all
of its users' chunks, and a chunk without a ``user_id`` is *not* in a user's scope: sharing is explicit).

:meth:`HybridMemory.scoped` returns a :class:`ScopedMemory`: the scope is a pre-filter of every read (search,
asearch, get, iter_chunks, count, chunk_hashes) applied before both engines rank, as the metadata filter is,
and every write is stamped with it. A scope is not a filter a caller can forget or widen:

* writes get the bound fields stamped; a chunk that brings a different value for a bound field is refused
  (:class:`ScopeError`), nothing is written;
* ids are namespaced per scope (:mod:`hybrid_memory.isolation`): a view writes the caller's id under its own
  namespace and shows it back as given, so an id another scope holds is a fresh id here (written, never refused),
  and nothing a view returns depends on what other scopes hold; paging cursors are opaque and bound to the scope;
* ``view.scoped(...)`` can only narrow (bind more fields), never change a bound one.

The unscoped :class:`HybridMemory` itself is the administrator's view: it reads every scope, by stored ids
(``"<scope key>:<id>"`` for chunks a view wrote; see :mod:`hybrid_memory.isolation`).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import shlex
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ._exceptions import HybridMemoryError, InvalidFilterError, InvalidRequestError, ScopeError
from .isolation import IdSpace, cursor_seal
from .models import SCOPE_FIELDS, Chunk, SearchRequest, SearchResponse, StoredChunk, _scope_value, validation_message

if TYPE_CHECKING:
    from .dedup import DedupPolicy, WriteResult
    from .memory.hybrid import HybridMemory
    from .temporal import RecencyPrior

__all__ = ["SCOPE_FIELDS", "Scope", "ScopedMemory", "as_scope", "check_scope_keys", "check_scope_values"]


class Scope(BaseModel):
    """Bound scope fields; a field left None is unbound (free)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    @field_validator("tenant", "user_id", "agent_id", "session_id")
    @classmethod
    def _usable(cls, value: str | None, info: Any) -> str | None:
        if isinstance(value, str):
            _no_control_character(value, info.field_name)
            _no_surrounding_space(value, info.field_name)
        return _scope_value(value, info.field_name)

    def bound(self) -> dict[str, str]:
        """The bound fields only, in :data:`SCOPE_FIELDS` order: ``{"user_id": "u1"}``."""
        return {name: getattr(self, name) for name in SCOPE_FIELDS if getattr(self, name) is not None}

    def __bool__(self) -> bool:
        return bool(self.bound())

    def contains(self, values: Mapping[str, str | None]) -> bool:
        """True when every bound field equals ``values[field]`` (a chunk's scope values)."""
        return all(values.get(name) == value for name, value in self.bound().items())

    def narrow(self, other: Scope) -> Scope:
        """This scope with ``other``'s bound fields added. Raises ScopeError if they contradict."""
        merged = self.bound()
        for name, value in other.bound().items():
            if name in merged and merged[name] != value:
                raise ScopeError(
                    f"this view is bound to {name}={merged[name]!r}; it cannot be re-bound to {value!r} (a scoped "
                    "view only narrows; scope the unscoped memory instead)"
                )
            merged[name] = value
        return Scope(**merged)

    def key(self) -> str:
        """A stable, path-safe name of the scope: ``"all"`` when unbound, else ``"s-"`` + 16 hex digits of the
        sha256 of its bound fields as JSON (used to keep one graph folder per scope)."""
        bound = self.bound()
        if not bound:
            return "all"
        digest = hashlib.sha256(json.dumps(bound, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
        return "s-" + digest[:16]

    def stamp(self, chunk: Chunk) -> Chunk:
        """The chunk with the bound fields filled in. Raises ScopeError when it carries another value."""
        update = {}
        for name, value in self.bound().items():
            own = getattr(chunk, name)
            if own is None:
                update[name] = value
            elif own != value:
                raise ScopeError(
                    f"chunk {chunk.chunk_id!r} has {name}={own!r} but this view is bound to {name}={value!r}; "
                    f"leave {name} out (the view stamps it) or write through a view of that scope"
                )
        return chunk.model_copy(update=update) if update else chunk


def _no_control_character(value: str, field: str) -> None:
    """Refuse a scope value holding a control character (Unicode category Cc: C0 such as ``\\n``, ``\\t``,
    ``\\x00``, DEL and C1) or a line / paragraph separator (Zl, Zp): a scope value is an id on one line, and one
    read from a file or a prompt with its new line would bind a scope no chunk is in, with no word. Nor an
    invisible format character (Cf: a zero-width space, a byte-order mark, a bidirectional mark), which prints
    like the id without it.

    Chunks already stored with such a value still open and read (the check is the scope's, not the stored
    chunk's); only a new scope that binds one is refused.

    Raises:
        ValueError: the message names the field, the character and its position, and the fix.
    """
    for position, char in enumerate(value):
        category = unicodedata.category(char)
        if char == "\x00":
            raise ValueError(f"{field} holds a NUL character at position {position}; remove it, or leave {field} "
                             f"out (None) for no {field}")
        if category in ("Cc", "Zl", "Zp"):
            kind = {"Zl": "line separator", "Zp": "paragraph separator"}.get(category, "control character")
            # the strip hint only where strip() removes it: a new line read with the value, at its end
            hint = " (value.strip() drops a trailing new line)" if char not in value.strip() else ""
            raise ValueError(
                f"{field} holds the {kind} {char!r} at position {position}; a scope value is an id on one line: "
                f"remove it{hint}, or leave {field} out (None) for no {field}"
            )
        if category == "Cf":
            raise ValueError(
                f"{field} holds the invisible format character {char!r} ({unicodedata.name(char, 'unnamed')}) at "
                f"position {position}; a scope value is an id, and one that prints like another would bind a scope "
                f"no chunk is in: remove it, or leave {field} out (None) for no {field}"
            )


def _no_surrounding_space(value: str, field: str) -> None:
    """Refuse a scope value with white space at its start or end (``" u1 "``): the same rule on every entry point
    (a chunk written from Python, ``scoped()`` and ``scope=`` of a search, ``--scope`` / ``--user-id`` of the
    command line, ``mcp --scope``), so a value is never stored under one spelling and searched under another.
    Refused, never stripped: a stored key is not changed silently. Chunks already stored with such a value still
    read and delete by id through the unscoped memory (the check is the new scope's or the new chunk's).

    Raises:
        ValueError: the message names the field, the value and the fix.
    """
    if value and not value.strip():  # only white space: blank, so the fix is not "give ''" (refused too)
        raise ValueError(f"{field} must not be blank (white space only), got {value!r}; leave it out (None) for no {field}")
    if value != value.strip():
        raise ValueError(
            f"{field} must not have white space at its start or end, got {value!r}; a scope value is an id: give "
            f"{field}={value.strip()!r} (value.strip()), or leave {field} out (None) for no {field}"
        )


def check_scope_values(chunk: Chunk) -> None:
    """Refuse a chunk to be written whose scope field holds a control character or a line / paragraph separator
    (:func:`_no_control_character`): no :class:`Scope` can bind that value, so no scoped view (``scoped()``,
    ``--scope``, ``mcp --scope``) could ever read the chunk; or white space at its start or end
    (:func:`_no_surrounding_space`), which no scope binds either. Chunks already stored with one still read.

    Raises:
        InvalidRequestError: the message names the field, the value (or the character and its position) and the
            fix.
    """
    for name in SCOPE_FIELDS:
        value = getattr(chunk, name, None)
        if isinstance(value, str):
            try:
                _no_control_character(value, name)
            except ValueError as exc:
                raise InvalidRequestError(f"{exc} (got {value!r})") from None
            try:
                _no_surrounding_space(value, name)
            except ValueError as exc:
                raise InvalidRequestError(str(exc)) from None


def as_scope(scope: Scope | Mapping[str, Any] | None) -> Scope | None:
    """A :class:`Scope` from a Scope, a mapping (``{"user_id": "u1"}``) or None; None for an unbound scope.

    Raises:
        InvalidRequestError: an unknown field or a blank value; the message names it.
    """
    if scope is None or isinstance(scope, Scope):
        return scope or None
    if not isinstance(scope, Mapping):
        raise InvalidRequestError(f"scope must be a Scope or a mapping of {', '.join(SCOPE_FIELDS)}, got {scope!r}")
    unknown = [name for name in scope if name not in SCOPE_FIELDS]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(str(name), SCOPE_FIELDS, n=1, cutoff=0.7)  # userid, tenant_id; not team
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidRequestError(
            f"invalid scope: {name!r} is not a scope field{hint}; the scope fields are {', '.join(SCOPE_FIELDS)} "
            "(metadata keys are filtered with metadata_filter instead)"
        )
    try:
        result = Scope.model_validate(dict(scope))
    except ValidationError as exc:
        raise InvalidRequestError(validation_message(exc, "scope")) from exc
    return result or None


def _scope_keys(node: Any, found: list[tuple[str, Any]]) -> None:
    """Append ``(name, condition)`` for each scope field a (validated) filter names as a key, in its order."""
    if not isinstance(node, Mapping):
        return
    for name, value in node.items():
        if name in ("$and", "$or") and isinstance(value, (list, tuple)):
            for item in value:
                _scope_keys(item, found)
        elif name == "$not":
            _scope_keys(value, found)
        elif name in SCOPE_FIELDS:
            found.append((name, value))


def check_scope_keys(
    metadata_filter: Mapping[str, Any] | None, holds_key: Callable[[str], bool], *, scoped: bool = False
) -> None:
    """Refuse a metadata filter that names a scope field (``{"tenant": "acme"}``) as a key when no chunk searched
    has that key in its metadata: scope fields are stored apart from metadata, so such a filter tests a key no
    chunk has (and a user who wrote chunks with ``tenant="acme"`` would get 0 results and no word). When some
    chunk's metadata does hold the key (``tenant`` is a legitimate metadata key too), the filter is left alone and
    runs with its usual semantics.

    Args:
        metadata_filter: a filter already validated (its nesting is bounded); only its keys are walked, never
            its values (an ``$in`` list of any length costs nothing).
        holds_key: ``name -> bool``, whether some chunk searched has the metadata key (the filter index's
            ``holds_metadata_key``, a bitmap look-up).
        scoped: the search is restricted to a scope (the message then says "in this scope").

    Raises:
        InvalidFilterError: naming the key and the fix for Python (``memory.scoped(...)``) and the command line
            (``--scope FIELD=VALUE`` of ``hybrid-memory search`` and ``hybrid-memory mcp``).
    """
    if not metadata_filter:
        return
    found: list[tuple[str, Any]] = []
    _scope_keys(metadata_filter, found)
    for name, condition in found:
        if holds_key(name):
            continue
        if isinstance(condition, Mapping) and set(condition) == {"$eq"}:
            condition = condition["$eq"]
        known = isinstance(condition, str)
        python = f"{name}={condition!r}" if known else f"{name}=..."
        shell = shlex.quote(condition) if known else "VALUE"
        where = "this scope" if scoped else "this memory"
        raise InvalidFilterError(
            f"metadata_filter key {name!r} is a scope field, not metadata: no chunk in {where} has {name!r} in its "
            f"metadata (scope fields are stored apart from it), so this filter tests a key no chunk has. Restrict by "
            f"scope instead: memory.scoped({python}) in Python, --scope {name}={shell} on the command line "
            f"(hybrid-memory search, and hybrid-memory mcp for an MCP server) (scope fields: {', '.join(SCOPE_FIELDS)})"
        )


class ScopedMemory:
    """A view of a :class:`HybridMemory` bound to one :class:`Scope` (see the module docstring).

    Made by :meth:`HybridMemory.scoped`; it has the memory's read and write API, each restricted to the scope.
    The view does not own the memory: closing the memory closes every view of it.
    """

    def __init__(self, memory: HybridMemory, scope: Scope) -> None:
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
            cid = item.chunk_id if isinstance(item, Chunk) else (
                item.get("chunk_id") if isinstance(item, Mapping) else None)
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
        from .dedup import WriteDecision, WriteResult

        space = self._ids
        decisions = []
        for i, d in enumerate(result.decisions):
            named = given[i] if i < len(given) else None
            caller_id = named if named is not None else space.shown(d.chunk_id)
            stored = caller_id if d.stored_id == d.chunk_id else space.shown(d.stored_id)
            duplicate = None if d.duplicate_of is None else space.shown(d.duplicate_of)
            decisions.append(WriteDecision(caller_id, d.action, stored, duplicate_of=duplicate, kind=d.kind,
                                           cosine=d.cosine, overlap=d.overlap))
        return WriteResult(decisions)

    def _shown_response(self, response: SearchResponse) -> SearchResponse:
        space = self._ids
        results = [r.model_copy(update={"chunk_id": space.shown(r.chunk_id)}) for r in response.results]
        return response.model_copy(update={"results": results})

    # -- writes -----------------------------------------------------------------------------------
    def add(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
            dedup: DedupPolicy | str | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.add` in this scope (bound fields stamped, ids namespaced to the scope). Raises
        ScopeError for a chunk that states another scope, DuplicateChunkError for an id this scope holds."""
        self._no_extra("add", extra)
        return self._write_view("add", chunks, vectors, dedup, replace=False).ids

    def upsert(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
               dedup: DedupPolicy | str | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.upsert` in this scope; an id another scope holds is a fresh id here."""
        self._no_extra("upsert", extra)
        return self._write_view("upsert", chunks, vectors, dedup, replace=True).ids

    def write(self, chunks: Iterable[Chunk | Mapping[str, Any]], *, vectors: np.ndarray | None = None,
              dedup: DedupPolicy | str | None = None, replace: bool = True, **extra: Any) -> WriteResult:
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

    def add_texts(self, texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]] | None = None,
                  ids: Sequence[str] | None = None, sources: Sequence[str] | None = None, **extra: Any) -> list[str]:
        """:meth:`HybridMemory.add_texts` in this scope (ids default to random uuid4 hex)."""
        self._no_extra("add_texts", extra)
        if isinstance(texts, str) or not hasattr(texts, "__len__"):
            return self._memory.add_texts(texts, metadatas, ids, sources, scope=self.scope)  # refused there
        n = len(texts)
        for name, values in (("metadatas", metadatas), ("ids", ids), ("sources", sources)):
            if values is not None and len(values) != n:
                raise InvalidRequestError(f"{name} has {len(values)} items for {n} texts; give one per text")
        return self.upsert([
            {"chunk_id": ids[i] if ids is not None else uuid.uuid4().hex, "text": texts[i],
             "source": sources[i] if sources is not None else "",
             "metadata": dict(metadatas[i]) if metadatas is not None else {}}
            for i in range(n)
        ])

    def supersede(self, old_ids: Iterable[str] | str, new_chunk: Chunk | Mapping[str, Any], *,
                  vector: np.ndarray | None = None, **extra: Any) -> str:
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

    def iter_chunks(self, metadata_filter: Mapping[str, Any] | None = None, *, as_of: Any = None,
                    **extra: Any) -> Iterator[StoredChunk]:
        """This scope's chunks matching the filter, in the memory's iteration order."""
        self._no_extra("iter_chunks", extra)
        chunks = self._memory.iter_chunks(metadata_filter, scope=self.scope, as_of=as_of)
        return (self._shown_chunk(c) for c in chunks)

    def page_chunks(self, metadata_filter: Mapping[str, Any] | None = None, *, after: str | None = None,
                    limit: int = 100, as_of: Any = None, **extra: Any) -> tuple[list[StoredChunk], str | None]:
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
        page, last = self._memory.page_chunks(metadata_filter, after=position, limit=limit, scope=self.scope,
                                              as_of=as_of)
        return [self._shown_chunk(c) for c in page], None if last is None else seal.seal(last, key)

    def chunk_hashes(self, **extra: Any) -> dict[str, str]:
        """chunk_id -> content hash of this scope's chunks (what the graph layer diffs against)."""
        self._no_extra("chunk_hashes", extra)
        space = self._ids
        return {space.shown(k): v for k, v in self._memory.chunk_hashes(scope=self.scope).items()}

    def search(self, request: SearchRequest | Mapping[str, Any] | str | None = None, /, *,
               query_vector: np.ndarray | Sequence[float] | None = None,
               recency: RecencyPrior | None | bool = None, **fields: Any) -> SearchResponse:
        """:meth:`HybridMemory.search` restricted to this scope before both engines rank. ``fields`` are
        request fields; a ``scope`` among them is refused (InvalidRequestError): the view is bound already."""
        self._no_scope("search", fields)
        return self._shown_response(
            self._memory.search(request, query_vector=query_vector, scope=self.scope, recency=recency, **fields))

    async def asearch(self, request: SearchRequest | Mapping[str, Any] | str | None = None, /, *,
                      query_vector: np.ndarray | Sequence[float] | None = None,
                      recency: RecencyPrior | None | bool = None, **fields: Any) -> SearchResponse:
        """:meth:`HybridMemory.asearch` restricted to this scope."""
        self._no_scope("asearch", fields)
        return self._shown_response(await self._memory.asearch(
            request, query_vector=query_vector, scope=self.scope, recency=recency, **fields))

    def stats(self) -> dict[str, Any]:
        """``{"scope": bound fields, "chunks": count}`` (engine internals are the memory's, not the view's)."""
        return {"scope": self.scope.bound(), "chunks": self.count()}

    def __repr__(self) -> str:
        return f"ScopedMemory({self._memory!r}, scope={self.scope.bound()!r})"

