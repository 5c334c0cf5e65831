"""Scopes: whose memory a chunk is, and the checks every view of one scope applies.

Every chunk has four optional scope fields, ``tenant``, ``user_id``, ``agent_id`` and ``session_id``, stored in
indexed SQLite columns. A :class:`Scope` binds some of them (``Scope(tenant="acme", user_id="u1")``); a chunk is
*in* the scope when every bound field equals the chunk's (an unbound field is free, so a tenant's scope holds all
of its users' chunks, and a chunk without a ``user_id`` is *not* in a user's scope: sharing is explicit).

:meth:`HybridMemory.scoped` returns a :class:`~hybrid_memory.memory.scoped.ScopedMemory`: the scope is a pre-filter of
every read (search,
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

import difflib
import hashlib
import json
import shlex
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ._exceptions import InvalidFilterError, InvalidRequestError, ScopeError
from .models import SCOPE_FIELDS, Chunk, _scope_value, validation_message

__all__ = ["SCOPE_FIELDS", "Scope", "as_scope", "check_scope_keys", "check_scope_values"]


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
            raise ValueError(
                f"{field} holds a NUL character at position {position}; remove it, or leave {field} "
                f"out (None) for no {field}"
            )
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
        raise ValueError(
            f"{field} must not be blank (white space only), got {value!r}; leave it out (None) for no {field}"
        )
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
