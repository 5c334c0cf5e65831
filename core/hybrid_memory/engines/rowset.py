"""Sets of document ids an engine may return: :class:`RowSet` (an allowed set with cached array and bitmap forms),
shared by the engines, the filter index that builds them and the searcher that passes them on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RowSet", "as_rowset", "id_bounds"]


def id_bounds(ids: np.ndarray) -> tuple[int, int]:
    """(min, max) of a non-empty int64 array: Python's builtins over a list for a few ids (a search's
    candidates), where numpy's reductions cost microseconds each, numpy's for many."""
    if len(ids) <= 256:
        listed = ids.tolist()
        return min(listed), max(listed)
    return int(ids.min()), int(ids.max())


class RowSet:
    """An immutable set of document ids that results must belong to (a resolved metadata filter).

    Args:
        ids: int64 ids (any order, duplicates allowed unless ``sorted_unique``).
        sorted_unique: the caller guarantees ``ids`` is ascending without duplicates (skips a sort).

    A set is backed by a sorted int64 array, or by a Roaring bitmap (:meth:`from_bitmap`, what the filter index
    returns); each form is derived from the other on first use. The derived forms engines need are built once
    per set and cached on it, so a set that a filter cache hands out again costs nothing to rebuild:
    :attr:`ids`, :meth:`mask` (a dense boolean array over the id range, for gathering a bm25s
    ``weight_mask``), :meth:`contains` (its last large answer is kept for the same id array) and
    :meth:`faiss_selector` (a FAISS ``IDSelectorBitmap``). Lazy fills are idempotent, so concurrent engine
    threads may race on them safely.
    """

    __slots__ = ("_bitmap", "_contains", "_ids", "_len", "_mask", "_packed", "_selector", "population")

    def __init__(self, ids: np.ndarray | Sequence[int], *, sorted_unique: bool = False) -> None:
        array = np.asarray(ids, dtype=np.int64)
        self._ids: np.ndarray | None = array if sorted_unique else np.unique(array)
        self._ids.setflags(write=False)
        self._len = len(self._ids)
        self._bitmap: Any = None
        self._mask: np.ndarray | None = None
        self._packed: np.ndarray | None = None
        self._selector: Any = None
        self._contains: tuple[np.ndarray, np.ndarray] | None = None
        self.population: RowSet | None = None
        """The scope's rows, whose statistics a scoped search scores with (:mod:`hybrid_memory.engines.bm25.local`);
        None: the memory-wide statistics."""

    @classmethod
    def from_bitmap(cls, bitmap: Any) -> RowSet:
        """A set over a ``pyroaring`` bitmap of non-negative ids, which the caller never mutates afterwards."""
        self = cls.__new__(cls)
        self._ids = None
        self._len = len(bitmap)
        self._bitmap = bitmap
        self._mask = self._packed = self._selector = self._contains = None
        self.population = None
        return self

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"RowSet({len(self)} ids)"

    @property
    def ids(self) -> np.ndarray:
        """The ids, int64 (n,), ascending, read-only."""
        if self._ids is None:
            ids = np.frombuffer(self._bitmap.to_array(), dtype=np.uint32).astype(np.int64)
            ids.setflags(write=False)
            self._ids = ids
        return self._ids

    def bitmap(self) -> Any:
        """The set as a ``pyroaring.BitMap`` (built once from the ids when the set was made from an array)."""
        if self._bitmap is None:
            from pyroaring import BitMap

            self._bitmap = BitMap(self.ids.astype(np.uint32))
        return self._bitmap

    def mask(self) -> np.ndarray:
        """bool (max id + 1,): ``mask()[i]`` is True exactly when id ``i`` is in the set (built once)."""
        if self._mask is None:
            ids = self.ids
            size = int(ids[-1]) + 1 if len(ids) else 0
            mask = np.zeros(size, dtype=bool)
            mask[ids] = True
            mask.setflags(write=False)
            self._mask = mask
        return self._mask

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """bool (len(ids),): which of the int64 ``ids`` are in the set; O(len(ids)) once the mask exists.

        The answer for a large array (over 4,096 ids, such as an engine's whole id list) is kept, read-only, and
        returned again while the same array object is asked about, so a cached set costs nothing per query.
        """
        ids = np.asarray(ids, dtype=np.int64)
        cached = self._contains
        if cached is not None and cached[0] is ids:
            return cached[1]
        mask = self.mask()
        out = np.zeros(len(ids), dtype=bool)
        inside = (ids >= 0) & (ids < len(mask))
        out[inside] = mask[ids[inside]]
        if len(ids) > 4096:
            out.setflags(write=False)
            self._contains = (ids, out)
        return out

    def faiss_selector(self) -> Any:
        """A FAISS ``IDSelectorBitmap`` over the set (built once; keeps its bitmap alive with it)."""
        if self._selector is None:
            import faiss

            mask = self.mask()
            # IDSelectorBitmap reads bit (id & 7) of byte (id >> 3): little bit order
            packed = np.packbits(mask, bitorder="little") if len(mask) else np.zeros(1, dtype=np.uint8)
            selector = faiss.IDSelectorBitmap(len(packed), faiss.swig_ptr(packed))
            selector.hm_bits = packed  # type: ignore[attr-defined]  # a SWIG object takes attributes; the selector owns its bits, even if another thread's build wins the race
            self._packed = packed
            self._selector = selector
        return self._selector

    def intersect(self, other: RowSet | None) -> RowSet:
        """The ids in both sets (``other`` None means all ids: returns self)."""
        if other is None:
            return self
        if self._bitmap is not None and other._bitmap is not None:
            return RowSet.from_bitmap(self._bitmap & other._bitmap)
        return RowSet(np.intersect1d(self.ids, other.ids, assume_unique=True), sorted_unique=True)


def as_rowset(allowed: RowSet | np.ndarray | Sequence[int] | None) -> RowSet | None:
    """``allowed`` as a :class:`RowSet` (int64 ids are wrapped; None stays None, meaning all ids)."""
    if allowed is None or isinstance(allowed, RowSet):
        return allowed
    return RowSet(allowed)
