"""Duplicates caught on write: exact (same content hash in the same scope) and near (cosine AND token overlap).

Agents write the same fact twice ("User prefers dark mode" after every session). On :meth:`HybridMemory.write`,
``add`` and ``upsert``, every chunk whose id is *new* is checked against the chunks stored in exactly the same
scope (all four scope fields equal) and against the earlier chunks of the same call. Writing to an id that is
already stored is an edit and is never treated as a duplicate.

Only a chunk that is **valid when the new one starts** can be its duplicate: valid at the new chunk's
``valid_from``, or at the time of the write when it states none (``valid_from <= t < valid_to``, a missing
bound open, the semantics of ``as_of``). A fact whose validity ended (closed by :meth:`HybridMemory.supersede`
or written with a ``valid_to``) is history: writing the same text again later states it anew ("Dana works on
Apollo" again after a spell on Zeus) and is stored, as Graphiti keeps an invalidated edge and adds a new one.

* **exact**: the sha256 of the text equals a stored chunk's (one indexed lookup, no embedding);
* **near** (only when the policy asks, ``near=True``): cosine similarity of the L2-normalised vectors
  ``>= cosine_threshold`` **and** Jaccard overlap of the BM25 token sets (the memory's tokenizer: stemmed,
  stop words removed) ``>= overlap_threshold``. Both must hold: embeddings alone call "moved to project
  Apollo" and "moved to project Zeus" near-identical, while the token overlap (4 of 6 tokens) tells them apart.
  Defaults: cosine 0.95, the conservative end of SemDeDup's thresholds (Abbas et al. 2023, "SemDeDup:
  data-efficient learning at web scale through semantic deduplication", ε = 1 − cosine ∈ [0.05, 0.3]); Jaccard
  0.8, the near-duplicate threshold of Lee et al. 2022 ("Deduplicating training data makes language models
  better", MinHash at Jaccard 0.8, after Broder 1997). Not tuned on any benchmark here.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ._exceptions import InvalidRequestError

__all__ = [
    "DEFAULT_COSINE_THRESHOLD",
    "DEFAULT_OVERLAP_THRESHOLD",
    "DedupPolicy",
    "WriteDecision",
    "WriteResult",
    "as_policy",
    "token_overlap",
]

DEFAULT_COSINE_THRESHOLD = 0.95
"""SemDeDup's conservative end (Abbas et al. 2023): cosine >= 0.95 between L2-normalised embeddings."""
DEFAULT_OVERLAP_THRESHOLD = 0.8
"""Jaccard >= 0.8 of token sets, the near-duplicate threshold of Lee et al. 2022 (after Broder 1997)."""

Action = Literal["keep", "skip", "merge"]
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
        return DedupPolicy(value, near=value != "keep")
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


def valid_at(interval: Interval, at: float) -> bool:
    """Whether ``at`` (Unix seconds) lies in the half-open interval, a None bound open (``as_of``'s test)."""
    start, end = interval
    return (start is None or start <= at) and (end is None or end > at)


def find_exact(
    new: Sequence[tuple[int, str, str, ScopeKey, Interval, float]],
    stored_hashes: Callable[[list[str], ScopeKey, float], Mapping[str, str]],
) -> dict[int, Match]:
    """Exact duplicates among new chunks.

    Args:
        new: ``(position, chunk_id, content_hash, scope key, validity interval, at)`` of every chunk whose id is
            not stored yet, in input order; ``at`` (Unix seconds) is when it starts: its ``valid_from``, else
            the time of the write.
        stored_hashes: ``(hashes, scope key, at) -> {hash: stored chunk_id}`` among the chunks of exactly that
            scope valid at ``at``.

    Returns:
        position -> :class:`Match`; a stored chunk wins over an earlier chunk of the same call, which must be
        valid at ``at`` as well (the module docstring).
    """
    by_key: dict[tuple[ScopeKey, float], list[tuple[int, str]]] = {}
    for position, _, digest, scope, _, at in new:
        by_key.setdefault((scope, at), []).append((position, digest))
    stored: dict[int, str] = {}
    for (scope, at), rows in by_key.items():
        hits = stored_hashes(list(dict.fromkeys(digest for _, digest in rows)), scope, at)
        stored.update((position, hits[digest]) for position, digest in rows if digest in hits)
    found: dict[int, Match] = {}
    earlier: dict[tuple[str, ScopeKey], list[tuple[str, Interval]]] = {}
    for position, chunk_id, digest, scope, interval, at in new:
        if position in stored:
            found[position] = Match(stored[position], "exact", stored=True)
            continue
        same = earlier.setdefault((digest, scope), [])
        first = next((other for other, other_interval in same if valid_at(other_interval, at)), None)
        if first is not None:
            found[position] = Match(first, "exact", stored=False)
        else:
            same.append((chunk_id, interval))
    return found


def find_near(
    new: Sequence[tuple[int, str, ScopeKey, Interval, float]],
    vectors: Mapping[int, np.ndarray],
    tokens: Mapping[int, list[str]],
    policy: DedupPolicy,
    search_scope: Callable[[np.ndarray, ScopeKey, float], list[tuple[str, float, list[str]]]],
) -> dict[int, Match]:
    """Near-duplicates among new chunks (cosine AND token overlap, see the module docstring).

    Args:
        new: ``(position, chunk_id, scope key, validity interval, at)`` of the new chunks still unmatched, in
            input order (``at`` as in :func:`find_exact`).
        vectors: position -> L2-normalised float32 (dim,) vector.
        tokens: position -> BM25 tokens of the text.
        policy: thresholds.
        search_scope: ``(vector, scope key, at) -> [(stored chunk_id, cosine, tokens)]``, the few nearest stored
            chunks of exactly that scope valid at ``at``, best first.

    Returns:
        position -> :class:`Match` with the cosine and overlap; the best-cosine qualifying chunk wins, stored
        chunks before earlier chunks of the same call.
    """
    found: dict[int, Match] = {}
    earlier: list[tuple[int, str, ScopeKey, Interval]] = []
    for position, chunk_id, scope, interval, at in new:
        vector = vectors[position]
        match = None
        for other_id, cosine, other_tokens in search_scope(vector, scope, at):
            if cosine < policy.cosine_threshold:
                break
            overlap = token_overlap(tokens[position], other_tokens)
            if overlap >= policy.overlap_threshold:
                match = Match(other_id, "near", stored=True, cosine=float(cosine), overlap=overlap)
                break
        if match is None:
            best = None
            for other_pos, other_id, other_scope, other_interval in earlier:
                if other_scope != scope or not valid_at(other_interval, at):
                    continue
                cosine = float(np.dot(vector, vectors[other_pos]))
                if cosine < policy.cosine_threshold:
                    continue
                overlap = token_overlap(tokens[position], tokens[other_pos])
                if overlap >= policy.overlap_threshold and (best is None or cosine > best.cosine):
                    best = Match(other_id, "near", stored=False, cosine=cosine, overlap=overlap)
            match = best
        if match is not None:
            found[position] = match
        else:
            earlier.append((position, chunk_id, scope, interval))
    return found
