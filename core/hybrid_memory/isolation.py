"""What keeps one scope from learning anything about another: ids namespaced per scope, and opaque paging cursors.

**Ids (issue 35, class 1).** A memory stores every chunk under one key, its *stored id*. A :class:`~hybrid_memory.
scopes.ScopedMemory` does not write the caller's id as the stored id: it writes it under the view's namespace,
``"<scope key>:<id>"`` (:meth:`~hybrid_memory.scopes.Scope.key`, ``"s-"`` + 16 hex digits of the sha256 of the bound
fields), and shows it back with the prefix taken off. So an id another scope holds is never the id this view
writes: a write of any id answers the same way (it is written, in this scope) whether or not another scope holds
it, and no read, count, error or timing depends on it (the view looks up the same two keys in every case). A
derived id (the LangChain adapter's ``doc-`` ids of id-less documents) is namespaced the same way, so computing
another scope's derived id reveals nothing.

How a view maps the id ``e`` a caller gives (:class:`IdSpace`):

* reads (``get``, ``delete``, ``supersede``'s old ids) find the stored ids ``"<key>:e"`` and ``e`` itself, each
  only when the chunk is in the view's scope (``e`` itself covers chunks stored before this scheme, chunks the
  administrator wrote, and chunks of a narrower view, which this view shows by their full stored id);
* writes go to ``"<key>:e"`` when it is stored, else to ``e`` when that is stored *in this scope* (a chunk written
  before this scheme keeps its id), else to ``"<key>:e"``: a chunk of another scope stored under ``e`` is never
  touched, never refused, never reported;
* every id shown (results, pages, ``get``, write results, ``superseded_by``, ``merged_ids``, ``chunk_hashes``,
  error messages) has the view's own prefix taken off; ids of narrower views keep theirs, so every chunk a view
  sees has a name it can read and write by.

The unscoped :class:`~hybrid_memory.HybridMemory` is the administrator's view and shows **stored ids**: two scopes
that both wrote ``"x"`` hold ``"s-…:x"`` and ``"s-…:x"`` (different keys), and an unscoped ``get("x")`` returns
the chunk stored under ``"x"`` itself (one written unscoped, or before this scheme), or nothing. Memories written
before stay readable with no migration: their scoped chunks keep their plain ids, which their views still read and
update (the second rule).

**Cursors (class 7).** A page position of the memory is a memory-wide insertion position, so the gap between two
positions counts every scope's writes. A view's cursor is the position sealed (:class:`CursorSeal`): encrypted with
a keystream of HMAC-SHA256 under a random key of the memory object (a fresh nonce per cursor) and authenticated,
with the view's scope key, by HMAC-SHA256 (encrypt-then-MAC, RFC 2104 HMAC). It reveals nothing, and a cursor
that was forged, altered, or given by a view of another scope is refused with an :class:`~hybrid_memory.
_exceptions.InvalidRequestError`. Cursors last as long as the memory object stays open (the key is not stored):
after a reopen, start the listing again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from ._exceptions import InvalidRequestError

__all__ = ["CursorSeal", "IdSpace", "cursor_seal"]

#: between the scope key and the caller's id in a stored id
SEPARATOR = ":"


class IdSpace:
    """The id namespace of one scope key (see the module docstring).

    Args:
        key: the scope's :meth:`~hybrid_memory.scopes.Scope.key` (``"s-"`` + 16 hex digits).
    """

    def __init__(self, key: str) -> None:
        self.prefix = key + SEPARATOR

    def own(self, chunk_id: str) -> str:
        """The stored id this scope writes a new chunk ``chunk_id`` under: ``"<key>:<chunk_id>"``."""
        return self.prefix + chunk_id

    def candidates(self, chunk_id: str) -> tuple[str, str]:
        """The two stored ids a caller's ``chunk_id`` may name, in order of preference."""
        return self.prefix + chunk_id, chunk_id

    def shown(self, stored_id: str) -> str:
        """The id a caller of this scope sees for a stored id: the scope's prefix taken off when it has it."""
        return stored_id.removeprefix(self.prefix)

    def target(self, chunk_id: str, present: set[str]) -> str:
        """The stored id a write of ``chunk_id`` goes to, given ``present``: the candidates stored *in this scope*
        (only those: a chunk of another scope is never a target)."""
        own, plain = self.candidates(chunk_id)
        if own in present or plain not in present:
            return own
        return plain

    def shown_text(self, text: str) -> str:
        """A message with this scope's prefix taken off every id it quotes."""
        return text.replace(self.prefix, "")

    def shown_list(self, ids: Iterable[str] | None) -> list[str]:
        """:meth:`shown` of each id."""
        return [self.shown(i) for i in ids or ()]


class CursorSeal:
    """Seals a memory-wide page position into an opaque, scope-bound cursor and opens it again.

    A cursor is ``"c"`` + urlsafe base64 (no padding) of ``nonce (8 bytes) || position XOR keystream (8 bytes) ||
    tag (16 bytes)``: keystream = the first 8 bytes of HMAC-SHA256(key, "cursor-stream" || nonce), tag = the first
    16 bytes of HMAC-SHA256(key, "cursor-tag" || scope key || nonce || ciphertext). 44 characters, whatever the
    position. Key: 32 random bytes (``os.urandom``), one per memory object.
    """

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else os.urandom(32)

    def _stream(self, nonce: bytes) -> bytes:
        return hmac.new(self._key, b"cursor-stream" + nonce, hashlib.sha256).digest()[:8]

    def _tag(self, scope_key: str, nonce: bytes, body: bytes) -> bytes:
        message = b"cursor-tag" + scope_key.encode("utf-8") + b"\x00" + nonce + body
        return hmac.new(self._key, message, hashlib.sha256).digest()[:16]

    def seal(self, position: int, scope_key: str) -> str:
        """The cursor of ``position`` (a memory position, 0 <= position < 2**64) for the scope ``scope_key``."""
        nonce = os.urandom(8)
        body = bytes(a ^ b for a, b in zip(struct.pack(">Q", position), self._stream(nonce), strict=True))
        raw = nonce + body + self._tag(scope_key, nonce, body)
        return "c" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def open(self, cursor: Any, scope_key: str) -> int:
        """The position sealed in ``cursor`` by :meth:`seal` for the same scope.

        Raises:
            InvalidRequestError: not a str, not a cursor of this form, altered or forged, sealed for another scope,
                or by another memory object (reopened since): start the listing again without a cursor.
        """
        refused = InvalidRequestError(
            f"cursor {str(cursor)[:48]!r} is not one this server gave (a scoped view's cursors are opaque, bound to "
            "its scope, and last while the memory stays open); start the listing again without a cursor"
        )
        if not isinstance(cursor, str) or len(cursor) != 44 or not cursor.startswith("c") or not cursor.isascii():
            raise refused
        try:
            raw = base64.urlsafe_b64decode(cursor[1:] + "=")
        except (ValueError, TypeError):
            raise refused from None
        if len(raw) != 32:
            raise refused
        nonce, body, tag = raw[:8], raw[8:16], raw[16:]
        if not hmac.compare_digest(tag, self._tag(scope_key, nonce, body)):
            raise refused
        return struct.unpack(">Q", bytes(a ^ b for a, b in zip(body, self._stream(nonce), strict=True)))[0]


def cursor_seal(memory: Any) -> CursorSeal:
    """The :class:`CursorSeal` of a memory object (made on first use, kept on the object for its lifetime)."""
    seal = memory.__dict__.get("_cursor_seal")
    if seal is None:
        seal = memory.__dict__.setdefault("_cursor_seal", CursorSeal())
    return seal


def shown_mapping(space: IdSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping keyed by stored ids, keyed by shown ids."""
    return {space.shown(k): v for k, v in values.items()}
