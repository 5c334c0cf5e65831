"""ChangeSet: the one record by which every derived index follows the store.

The store (SQLite) is the source of truth; the BM25 index, the vector index and any other derived index
(a metadata filter index, ...) change only by applying a :class:`ChangeSet`, whether it comes from this
process's own write or from catching up with what another process committed. One funnel keeps every
index in step with the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ChangeSet"]


@dataclass(frozen=True)
class ChangeSet:
    """What changed in the store, in rowids (never reused: a new text version gets a new rowid).

    Apply order: ``removed`` first, then ``added``, then ``metadata_updated``, then ``system_updated``.
    """

    removed: Sequence[int] = ()
    """Rowids that are no longer stored (deleted, or replaced by a new version)."""
    added_rowids: Sequence[int] | np.ndarray = ()
    """New rowids, int64 (n,)."""
    added_texts: Sequence[str] = ()
    """Their texts, one per new rowid."""
    added_vectors: np.ndarray | None = None
    """Their L2-normalised vectors, float32 (n, dim); None only when nothing is added."""
    added_metadata: Sequence[Mapping[str, Any]] = ()
    """Their metadata, one per new rowid."""
    metadata_updated: Sequence[tuple[int, Mapping[str, Any]]] = field(default_factory=tuple)
    """``(rowid, new metadata)`` for rows whose text (and so rowid and vectors) did not change."""
    added_system: Sequence[Mapping[str, Any] | None] = ()
    """The system fields (the store's SYSTEM_COLUMNS: scope, valid_from/valid_to, ...) of each added rowid, or
    empty when none are known; the filter index indexes scope and validity times from them."""
    system_updated: Sequence[tuple[int, Mapping[str, Any]]] = field(default_factory=tuple)
    """``(rowid, {column: value})`` partial updates of system fields of kept rows (e.g. a superseded fact's
    ``valid_to``); applied last."""

    def __post_init__(self) -> None:
        n = len(self.added_rowids)
        if len(self.added_texts) != n or len(self.added_metadata) != n:
            raise ValueError(
                f"{n} added rowids with {len(self.added_texts)} texts and {len(self.added_metadata)} metadata"
            )
        if n and (self.added_vectors is None or len(self.added_vectors) != n):
            raise ValueError(f"{n} added rowids need {n} vectors")
        if len(self.added_system) not in (0, n):
            raise ValueError(f"{n} added rowids with {len(self.added_system)} system field mappings")

    def __bool__(self) -> bool:
        return bool(
            len(self.removed) or len(self.added_rowids) or len(self.metadata_updated) or len(self.system_updated)
        )
