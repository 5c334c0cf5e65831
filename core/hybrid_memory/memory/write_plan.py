"""The write rules of a memory, as one plan that every storage backend applies.

:func:`plan_write` decides, for one batch of chunks and the versions stored now, everything that does not
depend on where chunks are stored:

- an upsert keeps the stored scope and validity fields it does not state (:func:`keep_unstated`);
- ids held outside the caller's scope are refused (:class:`ScopeError`), and so are existing ids on ``add``
  (:class:`DuplicateChunkError`);
- exact duplicates (same sha256 text in exactly the same scope) and, when the policy asks, near duplicates
  (:func:`hybrid_memory.dedup.find_near`) are kept, skipped or merged;
- which chunks need a new vector: new ids, changed texts, or all when the caller passes vectors; an unchanged
  text keeps its stored vector and is not re-embedded (a metadata-only change).

:func:`plan_supersede` checks and plans the closing of facts that a new one replaces.
:class:`~hybrid_memory.HybridMemory`
runs the rules above its backend: every :class:`~hybrid_memory.backends.base.Backend` (embedded, Qdrant) applies the
plans to its storage (``Backend.apply_write``); none restates a rule.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._exceptions import DimensionMismatchError, DuplicateChunkError, InvalidRequestError, ScopeError
from ..dedup import (
    DedupPolicy,
    Match,
    Span,
    WriteDecision,
    WriteResult,
    content_hash,
    dedup_span,
    find_exact,
    find_near,
)
from ..embedders import Embedder, holds_bool, l2_normalize
from ..models import SCOPE_FIELDS, TIME_FIELDS, Chunk
from ..scopes import Scope
from ..temporal import iso_utc

__all__ = [
    "WritePlan",
    "check_chunk_list",
    "check_vectors",
    "embed_checked",
    "inherit_scope",
    "keep_unstated",
    "plan_supersede",
    "plan_write",
    "system_fields",
]

logger = logging.getLogger(__name__)

_KEPT_ON_UPSERT = (*SCOPE_FIELDS, *TIME_FIELDS)

#: ``(vector float32 (dim,), scope key, span) -> [(chunk_id, cosine, tokens)]``: the nearest stored chunks of
#: exactly that scope whose validity covers the span (:func:`~hybrid_memory.dedup.dedup_span`), for
#: near-duplicate detection
NearSearch = Callable[[np.ndarray, tuple, Span], list[tuple[str, float, list[str]]]]


def keep_unstated(chunk: Chunk, stored: Mapping[str, Any] | None) -> Chunk:
    """A new version of a stored chunk keeps the stored scope and validity fields that it does not state
    itself (an unscoped re-ingest or edit must not strip a chunk's owner, nor reopen a closed fact); a field
    given explicitly, even as None, wins.

    Raises:
        InvalidRequestError: the stated bound and the kept one would leave the validity interval empty.
    """
    if stored is None:
        return chunk
    kept = {
        name: stored[name]
        for name in _KEPT_ON_UPSERT
        if name not in chunk.model_fields_set and stored.get(name) is not None
    }
    if not kept:
        return chunk
    out = chunk.model_copy(update=kept)
    if out.valid_from is not None and out.valid_to is not None and out.valid_to <= out.valid_from:
        kept_name, given = ("valid_from", "valid_to") if "valid_from" in kept else ("valid_to", "valid_from")
        raise InvalidRequestError(
            f"chunk {chunk.chunk_id!r}: its {given} {iso_utc(getattr(out, given))} and the stored {kept_name} "
            f"{iso_utc(getattr(out, kept_name))} it keeps leave the interval [valid_from, valid_to) empty; give "
            f"{kept_name} too (None to clear it), or another {given}; nothing was written"
        )
    return out


def inherit_scope(chunk: Chunk, replaced: Sequence[Mapping[str, Any]]) -> Chunk:
    """The superseding fact takes the scope of the facts it replaces when it states no scope field itself and
    they all share one scope (so the owner's ``as_of`` searches keep finding the fact)."""
    if any(name in chunk.model_fields_set for name in SCOPE_FIELDS) or not replaced:
        return chunk
    scopes = {tuple(row.get(name) for name in SCOPE_FIELDS) for row in replaced}
    if len(scopes) != 1:
        return chunk
    values = dict(zip(SCOPE_FIELDS, scopes.pop(), strict=True))
    return chunk.model_copy(update={k: v for k, v in values.items() if v is not None})


def system_fields(chunk: Chunk, previous: Mapping[str, Any] | None, merges: Mapping[str, list[list[str]]]) -> dict:
    """Scope and event-time fields of a chunk version, with ``merged`` ([[chunk_id, source], ...]: merges
    recorded earlier on the id, then this write's) and ``superseded_by`` (kept while the fact stays closed)."""
    system: dict[str, Any] = {**chunk.scope_values(), "valid_from": chunk.valid_from, "valid_to": chunk.valid_to}
    previous = previous or {}
    system["merged"] = list(previous.get("merged") or []) + list(merges.get(chunk.chunk_id, []))
    system["superseded_by"] = previous.get("superseded_by") if chunk.valid_to is not None else None
    return system


def check_chunk_list(chunks: Any, call: str) -> None:
    """Refuse one chunk (a :class:`Chunk`, a mapping or a str) or a non-iterable where ``call`` (``"add"``,
    ``"upsert"``, ``"write"``) takes a list of chunks; the advice names that call.

    Raises:
        InvalidRequestError: the message names what was given and the call to make: ``write([chunk])``.
    """
    if isinstance(chunks, (Chunk, Mapping, str)) or not isinstance(chunks, Iterable):
        raise InvalidRequestError(
            f"chunks must be a list of Chunk objects or mappings, got {type(chunks).__name__}; wrap one chunk "
            f"in a list: {call}([chunk])"
        )


def check_vectors(vectors: Any, n: int, dim: int, ids: Sequence[str] | None = None) -> np.ndarray:
    """Caller-given vectors as float32 (n, dim); ``ids``, the chunk ids of the rows, name a bad row's chunk.

    Accepted: real numbers (ints or floats, a list of rows, a numpy array, a torch tensor). Complex numbers are
    refused (numpy would drop the imaginary part with only a ComplexWarning, as :func:`~hybrid_memory.embedders.
    query_vector` refuses them too), and so are strings, booleans and other non-numbers.

    Raises:
        DimensionMismatchError: another shape, or rows of unequal lengths.
        InvalidRequestError: not real numbers (the message names the first bad element: its row, its chunk, its
            column, its type and value), or NaN or infinite values (after the cast to float32); the message names
            the first bad row, its chunk and how many rows are bad.

    All-zero rows are accepted (a placeholder, see :mod:`hybrid_memory.engines.dense.index`: never returned by dense
    search)
    with a warning logged naming their chunks: they are found by BM25 only.
    """
    fix = (
        "nothing was stored: give real numbers, float32 rows of the memory's dimension, or leave vectors= out to "
        "embed the texts with the memory's embedder"
    )
    if callable(getattr(vectors, "detach", None)) and callable(getattr(vectors, "cpu", None)):
        vectors = vectors.detach().cpu()  # a torch tensor, perhaps requiring grad or on a GPU: read its values only
    try:
        given = np.asarray(vectors)
    except (TypeError, ValueError) as exc:  # rows of unequal lengths (numpy refuses a ragged array)
        raise DimensionMismatchError(
            f"vectors must have shape ({n}, {dim}) (one row per chunk, the memory's dimension), got rows of unequal "
            f"lengths ({type(vectors).__name__}); {fix}"
        ) from exc
    if given.dtype.kind == "c":
        raise InvalidRequestError(
            f"vectors hold complex numbers (dtype {given.dtype}); an embedding is real: pass their real part if that "
            f"is what you mean (vectors.real); {fix}"
        )
    if given.dtype.kind not in "iuf" or holds_bool(vectors):  # numpy reads [[True, 2.0]] as floats
        where, bad = _first_non_number(vectors, given)
        if bad is not _NONE:
            raise InvalidRequestError(
                f"vectors must be real numbers, got {type(vectors).__name__} holding {type(bad).__name__} "
                f"{bad!r:.40}{_element(where, ids)} (dtype {given.dtype}); {fix}"
            )
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: reported below, not warned
        vectors = given.astype(np.float32, copy=False)
    if vectors.ndim != 2 or vectors.shape != (n, dim):
        raise DimensionMismatchError(
            f"vectors must have shape ({n}, {dim}) (one row per chunk, the memory's dimension), got {vectors.shape}"
        )
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        first = int(bad[0])
        which = f" (chunk {ids[first]!r})" if ids is not None and first < len(ids) else ""
        raise InvalidRequestError(
            f"vectors row {first}{which} holds NaN or infinite values as float32 ({len(bad)} of {n} rows do); "
            "nothing was stored: give finite rows (np.isfinite(vectors).all(axis=1) finds the bad ones), or leave "
            "vectors= out to embed the texts with the memory's embedder"
        )
    _warn_zero_rows(vectors, ids)
    return vectors


def _element(where: tuple[int, ...], ids: Sequence[str] | None) -> str:
    """`` at row 0 (chunk 'n0'), column 7`` for a 2-d position, `` at index (0, 1, 2)`` for another."""
    if len(where) != 2:
        return f" at index {where}" if where else ""
    row, column = where
    which = f" (chunk {ids[row]!r})" if ids is not None and row < len(ids) else ""
    return f" at row {row}{which}, column {column}"


def _warn_zero_rows(vectors: np.ndarray, ids: Sequence[str] | None) -> None:
    """Log a warning naming the chunks (the first five and the count) whose given vector is all zeros: such a
    vector has no direction, so dense search never returns the chunk (see :mod:`hybrid_memory.engines.dense.index`) and
    only
    BM25 finds it. Accepted, not refused: callers send placeholders on purpose."""
    zero = np.flatnonzero(~vectors.any(axis=1))
    if not len(zero):
        return
    names = [repr(ids[i]) if ids is not None and i < len(ids) else f"row {i}" for i in zero[:5].tolist()]
    more = ", ..." if len(zero) > 5 else ""
    logger.warning(
        "vectors= holds all-zero rows for %d of %d chunks (%s%s): an all-zero vector has no direction, so dense "
        "search never returns those chunks and they are found by BM25 only; pass the embedder's vectors for them, "
        "or leave vectors= out to embed the texts with the memory's embedder",
        len(zero),
        len(vectors),
        ", ".join(names),
        more,
    )


_NONE = object()


def _first_non_number(vectors: Any, given: np.ndarray) -> tuple[tuple[int, ...], Any]:
    """``(position, value)`` of the first element of a non-numeric array that is not a real number (a ``str``, a
    ``bool``, ``None`` ...), the value as the caller gave it; ``((), _NONE)`` when every element is one (an object
    array of floats, or empty). A list or tuple is walked as given, not as ``given``: numpy reads a row of floats
    holding one string all as text (``[0.5, "0.1"]`` -> ``['0.5', '0.1']``), which would blame the first float."""
    import numbers

    nested = isinstance(vectors, (list, tuple))
    for where in np.ndindex(given.shape):
        if nested:
            value = vectors
            for index in where:
                value = value[index]
        else:
            value = given[where]
        value = value.item() if isinstance(value, np.generic) else value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            if value is None and (given.dtype.kind == "O" or nested):
                continue  # None casts to NaN, which the finite check below reports with its row
            return tuple(int(i) for i in where), value
    return (), _NONE


def embed_checked(embedder: Embedder, texts: Sequence[str], dim: int) -> np.ndarray:
    """``embedder.embed_documents(texts)`` checked and L2-normalised: float32 (len(texts), dim).

    Raises:
        DimensionMismatchError: the embedder returned another shape.
        InvalidRequestError: NaN or infinite values (nothing is stored).
    """
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    vectors = np.asarray(embedder.embed_documents(list(texts)), dtype=np.float32)
    if vectors.shape != (len(texts), dim):
        raise DimensionMismatchError(
            f"embedder {embedder.name!r} returned shape {vectors.shape} for {len(texts)} texts; "
            f"expected ({len(texts)}, {dim})"
        )
    if not np.isfinite(vectors).all():
        bad = int((~np.isfinite(vectors).all(axis=1)).sum())
        raise InvalidRequestError(
            f"embedder {embedder.name!r} returned NaN or infinite values for {bad} of {len(texts)} texts; "
            "nothing was stored (check the embedder, or pass vectors= yourself)"
        )
    return l2_normalize(vectors)


@dataclass
class WritePlan:
    """What one write does, by position in the batch.

    Attributes:
        items: the chunks as they will be stored (unstated scope and validity fields filled from the stored
            versions).
        hashes: sha256 hex of each item's text.
        stored: the stored system fields by chunk id, for the ids already stored.
        changed: positions written with a new vector (new ids, changed texts, or every position when vectors
            were given), in batch order.
        vectors: float32 (len(changed), dim), L2-normalised, row j for position ``changed[j]``.
        unchanged: positions whose stored text and vector stay (source, metadata and system fields replaced).
        dropped: positions not written (duplicates skipped or merged).
        matches: the duplicate found for a position, if any.
        merges: chunk_id of a kept chunk -> [[merged chunk_id, its source], ...] of this write.
        policy: the dedup policy applied.
    """

    items: list[Chunk]
    hashes: list[str]
    stored: dict[str, Mapping[str, Any]]
    changed: list[int]
    vectors: np.ndarray
    unchanged: list[int]
    dropped: set[int]
    matches: dict[int, Match]
    merges: dict[str, list[list[str]]]
    policy: DedupPolicy
    written_ids: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.written_ids = {self.items[i].chunk_id for i in (*self.changed, *self.unchanged)}

    def system(self, position: int) -> dict:
        """The system fields (scope, validity, merged, superseded_by) position ``position`` is stored with."""
        chunk = self.items[position]
        return system_fields(chunk, self.stored.get(chunk.chunk_id), self.merges)

    def merge_targets(self) -> dict[str, list[list[str]]]:
        """Merges into chunks this write does not itself store: their ``merged`` lists must be extended."""
        return {cid: refs for cid, refs in self.merges.items() if cid not in self.written_ids}

    def result(self) -> WriteResult:
        """One :class:`~hybrid_memory.dedup.WriteDecision` per input position."""
        decisions = []
        for i, chunk in enumerate(self.items):
            match = self.matches.get(i)
            if match is None:
                decisions.append(WriteDecision(chunk.chunk_id, "written", chunk.chunk_id))
                continue
            kinds: dict[str, Literal["kept", "skipped", "merged"]] = {
                "keep": "kept",
                "skip": "skipped",
                "merge": "merged",
            }
            action = kinds[self.policy.action]
            decisions.append(
                WriteDecision(
                    chunk.chunk_id,
                    action,
                    chunk.chunk_id if action == "kept" else match.duplicate_of,
                    duplicate_of=match.duplicate_of,
                    kind=match.kind,
                    cosine=match.cosine,
                    overlap=match.overlap,
                )
            )
        return WriteResult(decisions)


def plan_write(
    items: Sequence[Chunk],
    stored: Mapping[str, tuple[str, Mapping[str, Any]]],
    *,
    vectors: np.ndarray | None,
    replace: bool,
    policy: DedupPolicy,
    scope: Scope | None,
    embed: Callable[[list[str]], np.ndarray],
    find_hashes: Callable[[list[str], dict[str, str | None], Sequence[str]], Mapping[str, list[tuple[str, Any, Any]]]],
    near_search: Callable[[], NearSearch],
    tokenize: Callable[[str], list[str]],
    now: float | None = None,
) -> WritePlan:
    """Plan a write of validated, scope-stamped ``items`` against the versions stored now.

    Args:
        items: the batch (ids unique within it).
        stored: chunk_id -> (content_hash, system fields) of the ids already stored.
        vectors: caller-given float32 (len(items), dim) (checked by :func:`check_vectors`), or None to embed
            the changed texts with ``embed``.
        replace: upsert (True) or add (False: stored ids are refused).
        policy: what to do with duplicates (:class:`~hybrid_memory.dedup.DedupPolicy`).
        scope: the caller's scope; stored ids outside it are refused.
        embed: texts -> float32 (n, dim), L2-normalised (:func:`embed_checked`).
        find_hashes: (digests, scope fields, excluded ids) -> {digest: [(chunk_id, valid_from, valid_to), ...]},
            oldest first, of the stored chunks in exactly that scope other than the excluded ids (the ones this
            call rewrites); :func:`~hybrid_memory.dedup.find_exact` keeps those whose validity covers the new
            chunk's.
        near_search: builds the near-duplicate search (only called when the policy looks for near ones).
        tokenize: the BM25 tokenizer, for the near-duplicate token overlap.
        now: the time of the write, Unix seconds (None: ``time.time()``), where a new chunk without
            ``valid_from`` starts for the duplicate check (:mod:`hybrid_memory.dedup`).

    Raises:
        ScopeError: an id is stored outside ``scope``; nothing is written.
        DuplicateChunkError: ``replace`` is False and an id is stored.
        DimensionMismatchError, InvalidRequestError: from ``embed``.
    """
    systems = {cid: system for cid, (_, system) in stored.items()}
    items = [keep_unstated(c, systems.get(c.chunk_id)) for c in items]
    if scope is not None:
        foreign = sorted(cid for cid in stored if not scope.contains(systems[cid]))
        if foreign:
            raise ScopeError(
                f"chunk ids {foreign[:5]} are not available in this scope (the memory holds them outside "
                "it); choose other ids, for example uuid4 ones; nothing was written"
            )
    if stored and not replace:
        raise DuplicateChunkError(f"chunk ids already stored: {sorted(stored)[:5]}; use upsert() to replace them")
    hashes = [content_hash(c.text) for c in items]
    scope_keys = [tuple(c.scope_values().values()) for c in items]
    new_positions = [i for i, c in enumerate(items) if c.chunk_id not in stored]
    rewrites = [i for i, c in enumerate(items) if c.chunk_id in stored]
    intervals = [(c.valid_from, c.valid_to) for c in items]
    when = time.time() if now is None else now
    spans = {i: dedup_span(*intervals[i], when) for i in new_positions}
    excluded = [items[i].chunk_id for i in rewrites]  # compared as this call writes them, not as stored
    matches: dict[int, Match] = find_exact(
        [(i, items[i].chunk_id, hashes[i], scope_keys[i], intervals[i], spans[i]) for i in new_positions],
        lambda digests, key: find_hashes(digests, dict(zip(SCOPE_FIELDS, key, strict=True)), excluded),
        [(items[i].chunk_id, hashes[i], scope_keys[i], intervals[i]) for i in rewrites],
        in_call=not policy.near,  # with near ones on, find_near decides the call's chunks in one pass
    )
    dropped = {i for i in matches if policy.action != "keep"}
    changed = [
        i
        for i, c in enumerate(items)
        if i not in dropped and (vectors is not None or c.chunk_id not in stored or stored[c.chunk_id][0] != hashes[i])
    ]
    if vectors is not None:
        new_vectors = (
            l2_normalize(np.asarray(vectors, dtype=np.float32)[changed])
            if changed
            else np.zeros((0, np.asarray(vectors).shape[1]), np.float32)
        )
    else:
        new_vectors = embed([items[i].text for i in changed])
    if policy.near:
        vector_of = {i: new_vectors[j] for j, i in enumerate(changed)}
        candidates = [
            (i, items[i].chunk_id, hashes[i], scope_keys[i], intervals[i], spans[i])
            for i in new_positions
            if i not in matches
        ]
        if candidates:
            rewritten = [
                (i if i in vector_of else None, items[i].chunk_id, hashes[i], scope_keys[i], intervals[i])
                for i in rewrites
            ]
            compared = [row[0] for row in candidates] + [i for i in rewrites if i in vector_of]
            near = find_near(
                candidates, vector_of, {i: tokenize(items[i].text) for i in compared}, policy, near_search(), rewritten
            )
            matches.update(near)
            if policy.action != "keep" and near:
                dropped |= set(near)
                keep = [j for j, i in enumerate(changed) if i not in dropped]
                changed = [changed[j] for j in keep]
                new_vectors = new_vectors[keep]
    changed_set = set(changed)
    unchanged = [i for i in range(len(items)) if i not in changed_set and i not in dropped]
    merges: dict[str, list[list[str]]] = {}
    if policy.action == "merge":
        for i in sorted(dropped):
            merges.setdefault(matches[i].duplicate_of, []).append([items[i].chunk_id, items[i].source])
    return WritePlan(items, hashes, systems, changed, new_vectors, unchanged, dropped, matches, merges, policy)


def plan_supersede(
    old: Sequence[str],
    chunk: Chunk,
    stored: Mapping[str, Mapping[str, Any]],
    now: float,
) -> tuple[Chunk, list[tuple[str, dict[str, Any]]]]:
    """Check a supersede and plan it: the new fact as it will be written, and per old id the update that
    closes it (``valid_to`` = the new fact's ``valid_from``, or the old ``valid_to`` when earlier;
    ``superseded_by`` = the new id). Bi-temporal invalidation as in Graphiti's edges.

    Args:
        old: the ids replaced (unique, not the new id).
        chunk: the new fact, validated and scope-stamped.
        stored: old chunk_id -> its system fields (scope, ``valid_from``, ``valid_to``, ``superseded_by``),
            for the old ids found (in the caller's scope).
        now: Unix seconds, the new fact's ``valid_from`` when it states none.

    Raises:
        InvalidRequestError: an old id is unknown, already superseded (history is never rewritten), or valid
            from the new fact's start or later (its interval would be empty); nothing is written.
    """
    missing = [cid for cid in old if cid not in stored]
    if missing:
        raise InvalidRequestError(f"cannot supersede unknown chunk ids {missing[:5]}; nothing was written")
    closed = [(cid, stored[cid]["superseded_by"]) for cid in old if stored[cid].get("superseded_by")]
    if closed:
        cid, newer = closed[0]
        raise InvalidRequestError(
            f"chunk {cid!r} was already superseded by {newer!r}; supersede {newer!r} instead (a fact's "
            "history is never rewritten); nothing was written"
        )
    chunk = inherit_scope(chunk, [stored[cid] for cid in old])
    start = chunk.valid_from if chunk.valid_from is not None else now
    late = [cid for cid in old if stored[cid].get("valid_from") is not None and stored[cid]["valid_from"] >= start]
    if late:
        raise InvalidRequestError(
            f"chunks {late[:5]} are valid from {iso_utc(stored[late[0]]['valid_from'])}, not before the new "
            f"fact's valid_from {iso_utc(start)}; give the new chunk a later valid_from"
        )
    closes = [
        (
            cid,
            {
                "valid_to": min(start, stored[cid]["valid_to"]) if stored[cid].get("valid_to") is not None else start,
                "superseded_by": chunk.chunk_id,
            },
        )
        for cid in old
    ]
    return chunk.model_copy(update={"valid_from": start}), closes
