"""Duplicates caught on write: exact (same content hash in the same scope) and near (cosine AND token overlap).

Agents write the same fact twice ("User prefers dark mode" after every session). On :meth:`HybridMemory.write`,
``add`` and ``upsert``, every chunk whose id is *new* is checked against the chunks stored in exactly the same
scope (all four scope fields equal) and against the earlier chunks of the same call. Writing to an id that is
already stored is an edit and is never treated as a duplicate.

* **exact**: the sha256 of the text equals a stored chunk's (one indexed lookup, no embedding);
* **near** (only when the policy asks, ``near=True``): cosine similarity of the L2-normalised vectors
  ``>= cosine_threshold`` **and** Jaccard overlap of the BM25 token sets (the memory's tokenizer: stemmed,
  stop words removed) ``>= overlap_threshold``. Both must hold: embeddings alone call "moved to project
  Apollo" and "moved to project Zeus" near-identical, while the token overlap (4 of 6 tokens) tells them apart.
  Defaults: cosine 0.95, the conservative end of SemDeDup's thresholds (Abbas et al. 2023, "SemDeDup:
  data-efficient learning at web scale through semantic deduplication", ε = 1 − cosine ∈ [0.05, 0.3]); Jaccard
  0.8, the near-duplicate threshold of Lee et al. 2022 ("Deduplicating training data makes language models
  better", MinHash at Jaccard 0.8, after Broder 1997). Not tuned on any benchmark here.

Only a chunk whose validity **covers the new chunk's** can be its duplicate (the new one would add nothing):
the stored ``[valid_from, valid_to)`` holds the new chunk's whole interval, a missing bound open. A new chunk
that states no ``valid_from`` is read as stating the fact from the time of the write (an agent that gives no
start says it holds now), or, when its ``valid_to`` is already past, as the fact up to that end. So a fact
whose validity ended (closed by :meth:`HybridMemory.supersede` or written with a ``valid_to``) is history:
writing the same text again later states it anew ("Dana works on Apollo" again after a spell on Zeus) and is
stored, as Graphiti keeps an invalidated edge and adds a new one; so is a restatement that runs past the
stored fact's end, or a past fact the stored one does not reach back to.

The stored chunks are taken as this call leaves them: an id the call rewrites (an upsert, or a ``valid_to``
set on it) is compared in its new version, as one of the call's chunks, never in the version it replaces.

What happens to a duplicate is the policy's ``action``:

* ``keep``: written anyway under its own id (the decision still says what it duplicates);
* ``skip``: not written; the write result points to the stored chunk that holds the content;
* ``merge``: not written as a chunk of its own; its id and source are recorded on the stored chunk
  (``StoredChunk.merged_ids`` / ``merged_sources``), which is kept as it is.

Default of :class:`HybridMemory` writes: ``DedupPolicy("keep")`` (exact duplicates reported by ``write``, nothing
changes for ``add``/``upsert``): corpora such as BEIR legitimately hold one text under several ids, and an
existing caller's ``add`` must keep storing what it is given. Agents' entry points opt in: the MCP server's
``add_memory`` uses ``skip`` with near-duplicates on.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from ._exceptions import InvalidRequestError

__all__ = [
    "DEFAULT_COSINE_THRESHOLD",
    "DEFAULT_OVERLAP_THRESHOLD",
    "DedupPolicy",
    "WriteDecision",
    "WriteResult",
    "as_policy",
    "content_hash",
    "token_overlap",
]

DEFAULT_COSINE_THRESHOLD = 0.95
"""SemDeDup's conservative end (Abbas et al. 2023): cosine >= 0.95 between L2-normalised embeddings."""
DEFAULT_OVERLAP_THRESHOLD = 0.8
"""Jaccard >= 0.8 of token sets, the near-duplicate threshold of Lee et al. 2022 (after Broder 1997)."""

Action = Literal["keep", "skip", "merge"]


def content_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text: the key exact duplicates share (stored per chunk by every backend)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_ACTIONS = ("keep", "skip", "merge")


@dataclass(frozen=True)
class DedupPolicy:
    """What a write does with duplicates.

    Args:
        action: ``keep``, ``skip`` or ``merge`` (see the module docstring).
        near: also look for near-duplicates (one dense search per new chunk in its scope); exact duplicates are
            always looked for (an indexed hash lookup).
        cosine_threshold: near-duplicate cosine bound, in (0, 1] (default 0.95, SemDeDup).
        overlap_threshold: near-duplicate token-set Jaccard bound, in (0, 1] (default 0.8, Lee et al. 2022).
    """

    action: Action = "keep"
    near: bool = False
    cosine_threshold: float = DEFAULT_COSINE_THRESHOLD
    overlap_threshold: float = DEFAULT_OVERLAP_THRESHOLD

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise InvalidRequestError(f"dedup action must be one of {', '.join(_ACTIONS)}, got {self.action!r}")
        for name in ("cosine_threshold", "overlap_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InvalidRequestError(f"{name} must be a number in (0, 1], got {value!r}")


def as_policy(value: DedupPolicy | str | None, default: DedupPolicy) -> DedupPolicy:
    """A policy from a :class:`DedupPolicy`, an action name or None (the default).

    ``"keep"`` looks for exact duplicates only; ``"skip"`` and ``"merge"`` look for near-duplicates too.

    Raises:
        InvalidRequestError: an unknown action name or type.
    """
    if value is None:
        return default
    if isinstance(value, DedupPolicy):
        return value
    if isinstance(value, str) and value in _ACTIONS:
        return DedupPolicy(cast(Action, value), near=value != "keep")
    raise InvalidRequestError(f"dedup must be a DedupPolicy or one of {', '.join(_ACTIONS)}, got {value!r}")


@dataclass(frozen=True)
class WriteDecision:
    """What a write did with one chunk."""

    chunk_id: str
    """The id the caller gave."""
    action: Literal["written", "kept", "skipped", "merged"]
    """``written``: no duplicate; ``kept``: a duplicate written anyway (policy keep); ``skipped`` / ``merged``:
    a duplicate not written (merged: recorded on ``duplicate_of``)."""
    stored_id: str
    """Id of the chunk that holds the content after the write (``chunk_id``, or ``duplicate_of``)."""
    duplicate_of: str | None = None
    """The stored (or earlier in the same call) chunk it duplicates, else None."""
    kind: Literal["exact", "near"] | None = None
    """How it was recognised."""
    cosine: float | None = None
    """Cosine similarity to ``duplicate_of`` (1.0 for exact duplicates when not computed: None)."""
    overlap: float | None = None
    """Token-set Jaccard overlap with ``duplicate_of`` (near duplicates)."""


@dataclass(frozen=True)
class WriteResult:
    """The decisions of one write, in input order."""

    decisions: list[WriteDecision] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        """Where each chunk's content is stored, in input order (what ``add``/``upsert`` return)."""
        return [d.stored_id for d in self.decisions]

    @property
    def written(self) -> list[str]:
        """Ids written as chunks of their own (``written`` and ``kept``)."""
        return [d.chunk_id for d in self.decisions if d.action in ("written", "kept")]

    @property
    def duplicates(self) -> list[WriteDecision]:
        """Decisions about duplicates, whatever was done with them."""
        return [d for d in self.decisions if d.duplicate_of is not None]


def token_overlap(a: Sequence[str], b: Sequence[str]) -> float:
    """Jaccard overlap ``|A ∩ B| / |A ∪ B|`` of two token sets, in [0, 1]; 1.0 when both are empty."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


@dataclass
class Match:
    """A duplicate found for one new chunk (internal to the write path)."""

    duplicate_of: str
    kind: Literal["exact", "near"]
    stored: bool
    """True when ``duplicate_of`` is a stored chunk, False when it is earlier in the same call."""
    cosine: float | None = None
    overlap: float | None = None


ScopeKey = tuple[Any, ...]
Interval = tuple[float | None, float | None]
"""``(valid_from, valid_to)`` in Unix seconds, the half-open ``[valid_from, valid_to)``; None is unbounded."""
Span = tuple[float, float | None]
"""The interval a new chunk is compared on (:func:`dedup_span`): a start always, an end or None (open)."""


def dedup_span(valid_from: float | None, valid_to: float | None, now: float) -> Span:
    """The interval a new chunk is compared on (the module docstring): its own ``[valid_from, valid_to)``, a
    missing start read as ``now`` (Unix seconds, the write's time), or, for a fact whose ``valid_to`` is at or
    before ``now``, as the last instant before that end (``math.nextafter``, so a stored fact starting at that
    end does not cover it)."""
    if valid_from is not None:
        return valid_from, valid_to
    if valid_to is None or valid_to > now:
        return now, valid_to
    return math.nextafter(valid_to, -math.inf), valid_to


def covers(stored: Interval, span: Span) -> bool:
    """Whether the stored interval holds all of ``span`` (:func:`dedup_span`): its start is open or at most the
    span's start, and its end is open, or, when the span ends, at least the span's end."""
    start, end = stored
    return (start is None or start <= span[0]) and (end is None or (span[1] is not None and end >= span[1]))


def covering_filter(span: Span) -> dict[str, Any]:
    """The system-field filter of the stored chunks whose validity :func:`covers` ``span`` (in the filter
    language of :mod:`hybrid_memory.filters`, an absent field written None, as ``system_filter`` writes it)."""
    start, end = span
    ends = {"valid_to": None} if end is None else {"$or": [{"valid_to": None}, {"valid_to": {"$gte": end}}]}
    return {"$and": [{"$or": [{"valid_from": None}, {"valid_from": {"$lte": start}}]}, ends]}


CLOSED_SCAN_MAX = 64
"""At most this many chunks of one text in one scope with a closed validity (a ``valid_to``) are tested for
covering a new chunk, per text, scope and call, the oldest first; the one with an open end that starts first
is always tested. A text repeated thousands of times with intervals of its own (log lines with their instants)
made every new copy test every earlier one; past the bound a covered copy may be stored again, nothing is lost."""

NEAR_CALL_CANDIDATES = 16
"""At most this many of the call's earlier chunks over the cosine bound are tested (covering, token overlap)
for a chunk, the nearest first, as the stored search reads the few nearest (identical texts with intervals of
their own made every copy test every earlier one)."""

NEAR_BLOCK = 256
"""Chunks of one call whose cosines with the call's earlier chunks of their scope are computed in one matrix
product (float32 (NEAR_BLOCK, n)), instead of one matrix-vector product per chunk."""


class _Holders:
    """The chunks of one text in one scope that a new chunk of that text may duplicate: the open-ended one
    that starts first, and up to :data:`CLOSED_SCAN_MAX` closed ones, in the order added."""

    __slots__ = ("closed", "open")

    def __init__(self) -> None:
        self.open: tuple[float, str] | None = None
        self.closed: list[tuple[str, Interval]] = []

    def add(self, chunk_id: str, interval: Interval) -> None:
        start, end = interval
        if end is None:
            key = -math.inf if start is None else start
            if self.open is None or key < self.open[0]:  # ties keep the one added first
                self.open = (key, chunk_id)
        elif len(self.closed) < CLOSED_SCAN_MAX:
            self.closed.append((chunk_id, interval))

    def covering(self, span: Span) -> str | None:
        """The chunk whose validity :func:`covers` ``span``: the open-ended one starting first, else the first
        closed one; None when neither does."""
        if self.open is not None and self.open[0] <= span[0]:
            return self.open[1]
        return next((cid for cid, interval in self.closed if covers(interval, span)), None)


def find_exact(
    new: Sequence[tuple[int, str, str, ScopeKey, Interval, Span]],
    stored_hashes: Callable[[list[str], ScopeKey], Mapping[str, Sequence[tuple[str, float | None, float | None]]]],
    rewritten: Sequence[tuple[str, str, ScopeKey, Interval]] = (),
    *,
    in_call: bool = True,
) -> dict[int, Match]:
    """Exact duplicates among new chunks.

    Args:
        new: ``(position, chunk_id, content_hash, scope key, validity interval, span)`` of every chunk whose id
            is not stored yet, in input order; ``span`` from :func:`dedup_span`.
        stored_hashes: ``(hashes, scope key) -> {hash: [(stored chunk_id, valid_from, valid_to), ...]}``, oldest
            first, the stored chunks of exactly that scope with that hash, leaving out the ids this call
            rewrites (one look-up per scope: chunks with their own ``valid_from`` each have a span of their own).
        rewritten: ``(chunk_id, content_hash, scope key, validity interval)`` of the stored ids this call
            rewrites, as the call writes them.
        in_call: also match chunks of the same call; False leaves that to :func:`find_near`, which decides the
            call's chunks in one pass with the near-duplicates (a chunk matched to one that is then dropped as a
            near-duplicate would point at a chunk never written).

    Returns:
        position -> :class:`Match`: a stored chunk whose validity :func:`covers` the span (:class:`_Holders`'
        choice), else a chunk of the same call that does (one it rewrites, else an earlier new one).
    """
    by_scope: dict[ScopeKey, list[str]] = {}
    for _, _, digest, scope, _, _ in new:
        by_scope.setdefault(scope, []).append(digest)
    stored: dict[tuple[str, ScopeKey], _Holders] = {}
    for scope, digests in by_scope.items():
        for digest, rows in stored_hashes(list(dict.fromkeys(digests)), scope).items():
            holders = stored.setdefault((digest, scope), _Holders())
            for cid, start, end in rows:
                holders.add(cid, (start, end))
    found: dict[int, Match] = {}
    calls: dict[tuple[str, ScopeKey], _Holders] = {}
    for chunk_id, digest, scope, interval in rewritten:
        calls.setdefault((digest, scope), _Holders()).add(chunk_id, interval)
    for position, chunk_id, digest, scope, interval, span in new:
        stored_holders = stored.get((digest, scope))
        held = stored_holders.covering(span) if stored_holders is not None else None
        if held is not None:
            found[position] = Match(held, "exact", stored=True)
        elif in_call:
            same = calls.setdefault((digest, scope), _Holders())
            first = same.covering(span)
            if first is not None:
                found[position] = Match(first, "exact", stored=False)
            else:
                same.add(chunk_id, interval)
    return found


def find_near(
    new: Sequence[tuple[int, str, str, ScopeKey, Interval, Span]],
    vectors: Mapping[int, np.ndarray],
    tokens: Mapping[int, list[str]],
    policy: DedupPolicy,
    search_scope: Callable[[np.ndarray, ScopeKey, Span], list[tuple[str, float, list[str]]]],
    rewritten: Sequence[tuple[int | None, str, str, ScopeKey, Interval]] = (),
) -> dict[int, Match]:
    """Duplicates among new chunks not matched to a stored exact duplicate: exact ones within the call, and
    near ones (cosine AND token overlap, see the module docstring), decided in one pass in input order, so a
    chunk is only ever matched to a chunk that is written (or stored).

    Args:
        new: ``(position, chunk_id, content_hash, scope key, validity interval, span)`` of those chunks, in input
            order (``span`` as in :func:`find_exact`).
        vectors: position -> L2-normalised float32 (dim,) vector, for ``new`` and the rewritten positions.
        tokens: position -> BM25 tokens of the text, for ``new`` and the rewritten positions.
        policy: thresholds.
        search_scope: ``(vector, scope key, span) -> [(stored chunk_id, cosine, tokens)]``, the few nearest
            stored chunks of exactly that scope whose stored validity covers ``span``, best first.
        rewritten: ``(position when it gets a new vector, else None; chunk_id; content_hash; scope key; validity
            interval)`` of the stored ids this call rewrites, as the call writes them. A stored hit with a new
            vector is left out of the stored search (its new version is compared as a chunk of the call); one
            keeping its vector counts only if its new scope and validity qualify.

    Returns:
        position -> :class:`Match`. For each chunk, in order: an exact duplicate in the call (as in
        :func:`find_exact`), else the first qualifying stored near-duplicate, else the best-cosine qualifying
        near-duplicate in the call (ties: the earliest).
    """
    by_id = {cid: (pos, scope, interval) for pos, cid, _, scope, interval in rewritten}
    exact: dict[tuple[str, ScopeKey], _Holders] = {}
    rows: dict[ScopeKey, list[tuple[int, str, Interval]]] = {}
    for pos, cid, digest, scope, interval in rewritten:
        exact.setdefault((digest, scope), _Holders()).add(cid, interval)
        if pos is not None:
            rows.setdefault(scope, []).append((pos, cid, interval))
    seeded = {scope: len(r) for scope, r in rows.items()}
    for position, chunk_id, _, scope, interval, _ in new:
        rows.setdefault(scope, []).append((position, chunk_id, interval))
    pools = {scope: _ScopePool(r, vectors, seeded.get(scope, 0)) for scope, r in rows.items()}
    index = {row[0]: k for pool in pools.values() for k, row in enumerate(pool.rows) if k >= pool.seeded}
    found: dict[int, Match] = {}
    for position, chunk_id, digest, scope, interval, span in new:
        held = exact.get((digest, scope))
        first = held.covering(span) if held is not None else None
        if first is not None:
            found[position] = Match(first, "exact", stored=False)
            continue
        match = None
        for other_id, cosine, other_tokens in search_scope(vectors[position], scope, span):
            if cosine < policy.cosine_threshold:
                break
            if other_id in by_id:
                other_pos, other_scope, other_interval = by_id[other_id]
                if other_pos is not None or other_scope != scope or not covers(other_interval, span):
                    continue
            overlap = token_overlap(tokens[position], other_tokens)
            if overlap >= policy.overlap_threshold:
                match = Match(other_id, "near", stored=True, cosine=float(cosine), overlap=overlap)
                break
        pool, k = pools[scope], index[position]
        if match is None:
            cosines = pool.cosines_before(k)
            close = np.flatnonzero(pool.kept[:k] & (cosines >= policy.cosine_threshold))
            if len(close) > NEAR_CALL_CANDIDATES:  # the nearest only, as the stored search reads a few
                close = close[np.argsort(-cosines[close], kind="stable")[:NEAR_CALL_CANDIDATES]]
            for j in sorted(close.tolist(), key=lambda j: (-float(cosines[j]), j)):  # best cosine first, ties earliest
                other_pos, other_id, other_interval = pool.rows[j]
                if (
                    covers(other_interval, span)
                    and token_overlap(tokens[position], tokens[other_pos]) >= policy.overlap_threshold
                ):
                    match = Match(
                        other_id,
                        "near",
                        stored=False,
                        cosine=float(cosines[j]),
                        overlap=token_overlap(tokens[position], tokens[other_pos]),
                    )
                    break
        if match is not None:
            found[position] = match
        else:
            pool.kept[k] = True
            exact.setdefault((digest, scope), _Holders()).add(chunk_id, interval)
    return found


class _ScopePool:
    """The chunks of one call in one scope, in order (the rewritten ones with new vectors first, always kept),
    their vectors in one float32 (n, dim) matrix, and which of them are kept (written). The cosines of a chunk
    with the earlier ones come from a float32 (:data:`NEAR_BLOCK`, n) block product computed once per block."""

    def __init__(self, rows: list[tuple[int, str, Interval]], vectors: Mapping[int, np.ndarray], seeded: int) -> None:
        self.rows = rows
        self.seeded = seeded
        self.matrix = np.array([vectors[pos] for pos, _, _ in rows], dtype=np.float32).reshape(len(rows), -1)
        self.kept = np.zeros(len(rows), dtype=bool)
        self.kept[:seeded] = True
        self._start = 0
        self._block: np.ndarray | None = None

    def cosines_before(self, k: int) -> np.ndarray:
        """float32 (k,): the cosines of row ``k`` with rows 0 .. k-1."""
        block = self._block
        if block is None or not self._start <= k < self._start + len(block):
            end = min(k + NEAR_BLOCK, len(self.rows))
            block = self._block = self.matrix[k:end] @ self.matrix[:end].T
            self._start = k
        return block[k - self._start, :k]
