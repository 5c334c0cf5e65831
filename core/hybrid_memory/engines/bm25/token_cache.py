"""TokenCache: every BM25 document's token ids, kept so a merge never re-tokenizes, cheap to load and save.

A mapping doc id (int) -> int32 token-id array, like a dict, in two parts:

* a **base**, as saved: three arrays (doc ids, lengths, all token ids one document after another), read in one
  go; a document's tokens are a view of the one array, found by binary search over the sorted doc ids, so a
  reopen creates no Python object per document (a dict of a million array views took over a second);
* the documents added since (a dict), and a mask of the base documents removed or replaced since.

:meth:`export` gives the three arrays back for a save with numpy passes, not one call per document.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import numpy as np

__all__ = ["EXTRA_MAX", "TokenCache"]

EXTRA_MAX = 1024
""":meth:`TokenCache.gather` first folds the documents added since into the base when they are more than this and
more than an eighth of the base: each costs a dict look-up in a gather, a base document a share of a numpy pass."""


class TokenCache(MutableMapping):
    """doc id -> int32 token ids (one array per document), over an optional saved base.

    Args:
        doc_ids: int64 (n,), distinct: the base documents, in saved order.
        lengths: int64 (n,): their token counts.
        data: int32 (lengths.sum(),): their token ids, one document after another.

    Raises:
        ValueError: the three arrays disagree (lengths of another size, a total other than ``len(data)``, a
            repeated or negative doc id).

    Not thread-safe by itself: :class:`~hybrid_memory.engines.bm25.index.BM25Index` calls it under its lock.
    """

    def __init__(
        self, doc_ids: np.ndarray | None = None, lengths: np.ndarray | None = None, data: np.ndarray | None = None
    ) -> None:
        doc_ids = np.zeros(0, np.int64) if doc_ids is None else np.asarray(doc_ids, dtype=np.int64)
        lengths = np.zeros(0, np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
        data = np.zeros(0, np.int32) if data is None else np.asarray(data, dtype=np.int32)
        if len(lengths) != len(doc_ids) or int(lengths.sum()) != len(data) or (len(lengths) and lengths.min() < 0):
            raise ValueError(
                f"{len(doc_ids)} doc ids, {len(lengths)} lengths summing to {int(lengths.sum())}, {len(data)} token ids"
            )
        self._order = np.argsort(doc_ids, kind="stable")
        self._sorted = doc_ids[self._order]
        if len(doc_ids) and (self._sorted[0] < 0 or (np.diff(self._sorted) == 0).any()):
            raise ValueError("base doc ids must be distinct and >= 0")
        self._ids = doc_ids
        self._lengths = lengths
        self._ends = np.cumsum(lengths)
        self._data = data
        self._gone = np.zeros(len(doc_ids), dtype=bool)  # by base position: removed or replaced since
        self._n_gone = 0
        self._extra: dict[int, np.ndarray] = {}

    def _position(self, doc_id: int) -> int:
        """Base position of a live base document, else -1."""
        i = int(np.searchsorted(self._sorted, doc_id))
        if i < len(self._sorted) and self._sorted[i] == doc_id:
            position = int(self._order[i])
            if not self._gone[position]:
                return position
        return -1

    def __getitem__(self, doc_id: int) -> np.ndarray:
        found = self._extra.get(doc_id)
        if found is not None:
            return found
        position = self._position(doc_id)
        if position < 0:
            raise KeyError(doc_id)
        end = int(self._ends[position])
        return self._data[end - int(self._lengths[position]) : end]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._extra or (isinstance(doc_id, (int, np.integer)) and self._position(int(doc_id)) >= 0)

    def __setitem__(self, doc_id: int, tokens: np.ndarray) -> None:
        doc_id = int(doc_id)
        position = self._position(doc_id)
        if position >= 0:
            self._gone[position] = True
            self._n_gone += 1
        self._extra[doc_id] = tokens

    def __delitem__(self, doc_id: int) -> None:
        if self._extra.pop(doc_id, None) is not None:
            return
        position = self._position(int(doc_id))
        if position < 0:
            raise KeyError(doc_id)
        self._gone[position] = True
        self._n_gone += 1

    def __iter__(self) -> Iterator[int]:
        live = self._ids if not self._n_gone else self._ids[~self._gone]
        yield from live.tolist()
        yield from list(self._extra)

    def __len__(self) -> int:
        return len(self._ids) - self._n_gone + len(self._extra)

    def gather(self, doc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The token ids of many documents at once, for statistics over a set of documents
        (:mod:`hybrid_memory.engines.bm25.local`).

        Args:
            doc_ids: int64 (m,) document ids.

        Returns:
            ``(present bool (m,), lengths int64 (m,), data int32 (t,), owner int64 (t,))``: which ids are live
            documents here, their token counts (0 where absent), every token id of theirs, and for each the
            position in ``doc_ids`` of its document (tokens of base documents first, then of those added since).
            Base documents are gathered with numpy passes; documents added since cost one dict look-up each.
        """
        doc_ids = np.asarray(doc_ids, dtype=np.int64)
        if len(self._extra) > max(EXTRA_MAX, len(self._ids) // 8):
            self._consolidate()
        m = len(doc_ids)
        present = np.zeros(m, dtype=bool)
        lengths = np.zeros(m, dtype=np.int64)
        datas, owners = [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
        if len(self._sorted) and m:
            i = np.searchsorted(self._sorted, doc_ids).clip(max=len(self._sorted) - 1)
            position = self._order[i]
            hit = (self._sorted[i] == doc_ids) & ~self._gone[position]
            where = np.flatnonzero(hit)
            counts = self._lengths[position[where]]
            starts = self._ends[position[where]] - counts
            present[where] = True
            lengths[where] = counts
            total = int(counts.sum())
            if total:
                offsets = np.cumsum(counts) - counts
                index = np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, counts)
                datas.append(self._data[index])
                owners.append(np.repeat(where, counts))
        if self._extra:
            get = self._extra.get
            for j in np.flatnonzero(~present).tolist():
                found = get(int(doc_ids[j]))
                if found is not None:
                    present[j] = True
                    lengths[j] = len(found)
                    datas.append(np.asarray(found, dtype=np.int32))
                    owners.append(np.full(len(found), j, dtype=np.int64))
        return present, lengths, np.concatenate(datas), np.concatenate(owners)

    def lengths_of(self, doc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(present bool (m,), lengths int64 (m,))`` of the int64 ``doc_ids``: which are live documents here and
        their token counts (0 where absent), with numpy passes over the base and a dict look-up per other id."""
        doc_ids = np.asarray(doc_ids, dtype=np.int64)
        if len(self._extra) > max(EXTRA_MAX, len(self._ids) // 8):
            self._consolidate()
        m = len(doc_ids)
        present = np.zeros(m, dtype=bool)
        lengths = np.zeros(m, dtype=np.int64)
        if len(self._sorted) and m:
            i = np.searchsorted(self._sorted, doc_ids).clip(max=len(self._sorted) - 1)
            position = self._order[i]
            hit = (self._sorted[i] == doc_ids) & ~self._gone[position]
            present[hit] = True
            lengths[hit] = self._lengths[position[hit]]
        if self._extra:
            get = self._extra.get
            for j in np.flatnonzero(~present).tolist():
                found = get(int(doc_ids[j]))
                if found is not None:
                    present[j] = True
                    lengths[j] = len(found)
        return present, lengths

    def _consolidate(self) -> None:
        """Fold the documents added since into the base (one pass over every token, O(total tokens)), so
        :meth:`gather` reads them with numpy passes too; what the cache holds is unchanged."""
        ids, lengths, data = self.export()
        self.__init__(ids, lengths, data)  # type: ignore[misc]

    def export(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(doc_ids int64 (n,), lengths int64 (n,), data int32 (lengths.sum(),))`` of every document, in
        iteration order: what the constructor takes back."""
        if self._n_gone:
            keep = ~self._gone
            lengths = self._lengths[keep]
            data = self._data[np.repeat(keep, self._lengths)]  # each kept document's run of tokens
            ids = self._ids[keep]
        else:
            ids, lengths, data = self._ids, self._lengths, self._data
        if self._extra:
            arrays = list(self._extra.values())
            ids = np.concatenate([ids, np.fromiter(self._extra, dtype=np.int64, count=len(arrays))])
            lengths = np.concatenate([lengths, np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))])
            data = np.concatenate([data, *[np.asarray(a, dtype=np.int32) for a in arrays]])
        return ids, lengths, data
