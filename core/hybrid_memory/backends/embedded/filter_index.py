"""The metadata filter index: filters resolve from in-memory bitmaps kept in step with the store, not by a scan.

Design (an inverted index of compressed bitmaps, as search engines keep for structured fields; the bitmaps are
Roaring bitmaps, Lemire et al., "Roaring bitmaps: implementation of an optimized software library", 2018,
through ``pyroaring``):

* **terms**: one bitmap of rowids per ``(key, typed value)`` for strings, booleans, null and lists. A scalar
  gives one term; a list gives a term for the whole list (``$eq [...]``) and one per element (MongoDB's element
  matching);
* **numbers**: per key, a sorted float64 array of its numbers (scalars and list elements) with their rowids,
  split into about 128 blocks that each keep a bitmap of their rows. Equality, ``$in`` and ``$gt/$gte/$lt/$lte``
  are a ``searchsorted`` to a position range, answered by the whole blocks inside it plus the two partial ends;
  changes go to a small per-key delta (at most 2,048 entries) merged into the array when full. Integers beyond
  2**53, which float64 does not hold exactly, sit on an exact side list. A key with few distinct numbers (at most
  16,384, at least 8 rows each on average: a severity, a shard) also keeps a bitmap per value, so ``$in`` is a
  union of bitmaps; a near-unique number (a timestamp) costs 16 bytes a row, not a bitmap;
* **exists**: per key, a bitmap of the rows that have it; a missing key is ``universe - exists``;
* **universe**: the bitmap of live rowids, for ``$not``, ``$ne``, ``$nin``, missing keys;
* **strings in order**: per key, its sorted distinct strings (``bisect``); a string range is the union of their
  term bitmaps;
* a **forward map** rowid -> the term ids it holds (CSR arrays after a rebuild, a dict for later changes), so
  removing a row or replacing its metadata touches only its own terms.

Every operator has exactly the semantics of :mod:`hybrid_memory.filters`, whose SQL compiler is the reference;
both evaluate the same parsed tree (:func:`~hybrid_memory.filters.parse_filter`), and the tests compare the two on
fixed cases and on randomized metadata, filters and change sequences.

**Saved** with the other derived indexes (``filters/``: ``meta.json`` and ``arrays.npz``, Roaring's portable
bitmap format and plain arrays, no pickle) together with the change-log position it reflects; an open loads it
and replays the log from that position (in-place metadata updates keep their rowid, so a rowid diff alone would
miss them), and rebuilds it from the store in one pass when it is missing, damaged, or older than the log keeps.

Resolved filters are cached per canonical tree as :class:`~hybrid_memory.search.engine.RowSet` (which caches its
ids, dense mask and FAISS selector once built), so a repeated broad filter costs a dictionary lookup; every
change bumps :attr:`FilterIndex.generation` and clears the cache.

API (the memory uses exactly this)::

    index = FilterIndex()
    seq = index.load(folder)       # the change-log position it was saved at, or None (then rebuild)
    index.save(folder, seq)
    index.rebuild(rows)            # one pass: (rowid, metadata, system), metadata a mapping or its JSON text,
                                   # system a mapping of system fields or None (SQLiteStore.filter_rows())
    index.apply(changes)           # a ChangeSet: the ONLY way the memory updates it (EmbeddedBackend._apply_changes)
    index.add(rowids, metadatas, systems=None)       # a rowid already indexed is replaced as a whole
    index.update(rowid, metadata=None, system=None)  # replaces the given namespace(s), keeps the other
    index.update_system(rowid, partial)              # replaces only the system fields named in partial
    index.remove(rowids)
    index.resolve(metadata_filter, system_filter=None) -> RowSet | None   # None: nothing restricts
    index.resolve_node(node) -> RowSet                                    # a parsed tree
    index.holds_metadata_key(name, system_filter=None) -> bool           # some (scoped) row has that key

**System fields** (the memory's own per-chunk fields: :data:`INDEXED_SYSTEM_FIELDS`, the scope ``tenant``,
``user_id``, ``agent_id``, ``session_id`` and the validity times ``valid_from``, ``valid_to`` in Unix seconds)
live in their own key namespace (``"s"``; user metadata is ``"m"``), so they never collide with a user metadata
key of the same name. They are indexed from ``add(..., systems=[...])``, ``update(rowid, system=...)``,
``update_system``, the third element of each ``rebuild`` row, and from a ChangeSet's ``added_system`` (one
mapping per added rowid) and ``system_updated`` (``(rowid, partial mapping)``). A None value is an absent field.
A search filters them with ``resolve(metadata_filter, system_filter)``, the system filter in the same language
(:func:`hybrid_memory.filters.system_filter` builds it from a bound scope and ``as_of``, with the semantics of the
store's
``scope_sql``); the two filters are ANDed.

Rowids must fit in 32 bits (Roaring bitmaps); larger ones are refused with InvalidRequestError. Thread-safe:
one lock guards changes and resolution.
"""

from __future__ import annotations

import array
import bisect
import json
import logging
import os
import threading
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pyroaring import BitMap

from ..._exceptions import InvalidRequestError
from ...engines.rowset import RowSet
from ...filters import LIST, METADATA, NULL, NUMBER, OBJECT, SYSTEM, TEXT, Node, parse_filter, typed, untyped

if TYPE_CHECKING:  # pragma: no cover
    from ...changes import ChangeSet

__all__ = ["INDEXED_SYSTEM_FIELDS", "FilterIndex"]

logger = logging.getLogger(__name__)

INDEXED_SYSTEM_FIELDS = ("tenant", "user_id", "agent_id", "session_id", "valid_from", "valid_to")
"""The system fields the index keeps (the store's other system columns are not filtered on)."""
_MAX_ROWID = 2**32 - 1
_EXACT = 2**53
"""Integers with a larger magnitude are not exact in float64: their tests run on an exact side list."""
_CACHE_SIZE = 256
"""Resolved filters kept per generation (least recently used dropped first)."""
_DELTA_MAX = 2048
"""Entries a number column's delta holds before it is merged into the sorted array (a query scans the delta)."""
_BY_VALUE_MAX = 16384
"""Most distinct values a number column keeps a bitmap for each (and at least 8 rows a value on average)."""
_BLOCKS = 128
"""Blocks a number column is cut into; a range costs at most this many block unions plus two partial blocks."""
FORMAT_VERSION = 1
"""Version of the saved layout (``filters/meta.json``, ``filters/arrays.npz``); another version is rebuilt."""


def _system_part(system: Mapping[str, Any] | None) -> dict[str, Any]:
    if not system:
        return {}
    return {name: system[name] for name in INDEXED_SYSTEM_FIELDS if system.get(name) is not None}


def _as_bitmap(rows: np.ndarray) -> BitMap:
    """BitMap of int rowids (any order, duplicates allowed). Roaring builds ~4x faster from sorted input:
    many rows are sorted through a dense mask (O(max rowid)), few by np.sort (O(n log n))."""
    if not len(rows):
        return BitMap()
    top = int(rows.max())
    if len(rows) * 4 > top:
        mask = np.zeros(top + 1, dtype=bool)
        mask[rows] = True
        ordered = np.flatnonzero(mask)
    else:
        ordered = np.sort(rows)
    return BitMap(array.array("I", ordered.astype(np.uint32).tobytes()))


def _decompose(value: Any) -> tuple[list[tuple], list[int | float]]:
    """A value's term values (typed; strings, booleans, null, lists) and its numbers (scalars and list elements)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return [typed(value)], []
    if isinstance(value, (int, float)):
        return [], [value]
    if isinstance(value, Mapping):
        return [], []  # nested objects: stored, seen by $exists only
    whole = typed(value)
    terms, numbers = [whole], []
    for element in whole[1]:
        if element[0] == NUMBER:
            numbers.append(element[1])
        elif element[0] != OBJECT:
            terms.append(element)
    return list(dict.fromkeys(terms)), numbers


class _Numbers:
    """The numbers of one key (scalars and list elements) with their rows, exact for every stored value."""

    __slots__ = ("big", "block_size", "blocks", "by_value", "delta", "delta_entries", "rows", "stale", "values")

    def __init__(self, values: np.ndarray, rows: np.ndarray, big: list[tuple[int, int]]) -> None:
        order = np.argsort(values, kind="stable")
        self.values = np.ascontiguousarray(values[order], dtype=np.float64)
        self.rows = np.ascontiguousarray(rows[order], dtype=np.int64)
        self.big = big
        n = len(self.values)
        self.block_size = max(1024, -(-n // _BLOCKS))
        self.blocks = [_as_bitmap(self.rows[i : i + self.block_size]) for i in range(0, n, self.block_size)]
        self.by_value: dict[float, BitMap] | None = None
        """A bitmap per distinct value when the key has few (sev, shard: not a timestamp), for fast $in."""
        if n:
            starts = np.flatnonzero(np.diff(self.values)) + 1
            if len(starts) + 1 <= _BY_VALUE_MAX and n >= 8 * (len(starts) + 1):
                bounds = [0, *starts.tolist(), n]
                self.by_value = {float(self.values[a]): _as_bitmap(self.rows[a:b]) for a, b in pairwise(bounds)}
        self.stale = BitMap()
        """Rows whose entries in the sorted array or side list no longer hold (their value was replaced)."""
        self.delta: dict[int, tuple] = {}
        """rowid -> its numbers, for rows changed since the last merge."""
        self.delta_entries = 0

    @classmethod
    def empty(cls) -> _Numbers:
        return cls(np.zeros(0), np.zeros(0, dtype=np.int64), [])

    def put(self, rowid: int, numbers: Sequence[int | float]) -> None:
        self.delta[rowid] = tuple(numbers)
        self.delta_entries += len(numbers)

    def void(self, rowid: int) -> None:
        """The row's numbers no longer hold (replaced or removed)."""
        numbers = self.delta.pop(rowid, None)
        if numbers is not None:
            self.delta_entries -= len(numbers)
        self.stale.add(rowid)  # its entries in the sorted array, if any, are void too

    def merged(self, universe: BitMap) -> _Numbers:
        """A new column: the live, non-stale entries of this one plus its delta."""
        dead = self.stale
        keep_v, keep_r = self.values, self.rows
        if len(dead) and len(keep_r):
            mask = np.zeros(int(max(keep_r.max(), dead.max())) + 1, dtype=bool)
            mask[np.frombuffer(dead.to_array(), dtype=np.uint32)] = True
            keep = ~mask[keep_r]
            keep_v, keep_r = keep_v[keep], keep_r[keep]
        big = [(v, r) for v, r in self.big if r not in dead]
        extra_v, extra_r = [], []
        for rowid, numbers in self.delta.items():
            if rowid not in universe:
                continue
            for v in numbers:
                if isinstance(v, int) and abs(v) > _EXACT:
                    big.append((v, rowid))
                else:
                    extra_v.append(float(v))
                    extra_r.append(rowid)
        values = np.concatenate([keep_v, np.asarray(extra_v, dtype=np.float64)])
        rows = np.concatenate([keep_r, np.asarray(extra_r, dtype=np.int64)])
        return _Numbers(values, rows, big)

    def _position(self, x: int | float, after: bool) -> int:
        """First index whose value is > x (``after``) or >= x, exactly, although x may be an int that float64
        rounds: one exact comparison of the rounded ``fx`` with ``x`` picks searchsorted's side."""
        fx = float(x)
        side: Literal["left", "right"]
        if fx == x:
            side = "right" if after else "left"
        else:
            side = "left" if fx > x else "right"
        return int(np.searchsorted(self.values, fx, side=side))

    def _finish(self, out: BitMap, test: Any) -> BitMap:
        if len(self.stale):
            out -= self.stale
        for v, rowid in self.big:
            if rowid not in self.stale and test(v):
                out.add(rowid)
        for rowid, numbers in self.delta.items():
            for v in numbers:
                if test(v):
                    out.add(rowid)
                    break
        return out

    def select(self, op: str, x: int | float) -> BitMap:
        """Rows with a number satisfying ``number op x``, op one of ``$gt $gte $lt $lte``."""
        n = len(self.values)
        if op in ("$gt", "$gte"):
            lo, hi = self._position(x, after=op == "$gt"), n
        else:
            lo, hi = 0, self._position(x, after=op == "$lte")
        test = _COMPARE[op]
        return self._finish(self._range(lo, hi), lambda v: test(v, x))

    def equal(self, xs: Sequence[int | float]) -> BitMap:
        """Rows with a number equal to one of ``xs`` (int and float compare by value, exactly)."""
        exact = [x for x in xs if float(x) == x]
        wanted = set(xs)
        if self.by_value is not None:
            parts = [self.by_value[float(x)] for x in exact if float(x) in self.by_value]
            out = BitMap.union(*parts) if len(parts) > 1 else (BitMap(parts[0]) if parts else BitMap())
            return self._finish(out, lambda v: v in wanted)
        lo = np.searchsorted(self.values, np.asarray(exact, dtype=np.float64), side="left")
        hi = np.searchsorted(self.values, np.asarray(exact, dtype=np.float64), side="right")
        # ints beyond 2**53 that float64 rounds equal no array entry exactly; the side list answers them
        found = hi > lo
        lo, hi = lo[found], hi[found]
        lengths = hi - lo
        total = int(lengths.sum())
        if total == 0:
            out = BitMap()
        elif total <= 4 * self.block_size or len(lo) == 1 or total < len(lo) * self.block_size:
            if len(lo) == 1:
                out = self._range(int(lo[0]), int(hi[0]))
            else:  # gather every position range at once: offsets trick, no Python loop
                starts = np.zeros(len(lengths), dtype=np.int64)
                np.cumsum(lengths[:-1], out=starts[1:])
                positions = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, lengths)
                out = _as_bitmap(self.rows[positions])
        else:
            out = BitMap.union(*(self._range(int(a), int(b)) for a, b in zip(lo, hi, strict=True)))
        wanted = set(xs)
        return self._finish(out, lambda v: v in wanted)

    def _range(self, lo: int, hi: int) -> BitMap:
        if lo >= hi:
            return BitMap()
        size = self.block_size
        first, last = -(-lo // size), hi // size  # whole blocks [first, last)
        if first >= last:
            return _as_bitmap(self.rows[lo:hi])
        parts = self.blocks[first:last]
        parts.append(_as_bitmap(self.rows[lo : first * size]))
        parts.append(_as_bitmap(self.rows[last * size : hi]))
        return BitMap.union(*parts)


_COMPARE = {
    "$gt": lambda v, x: v > x,
    "$gte": lambda v, x: v >= x,
    "$lt": lambda v, x: v < x,
    "$lte": lambda v, x: v <= x,
}


class FilterIndex:
    """In-memory index of metadata (and system fields) by rowid; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.generation = 0
        """Bumped by every change; resolved filters cached under an older generation are dropped."""
        self._cache: OrderedDict[Node, RowSet] = OrderedDict()
        self._clear()

    def _clear(self) -> None:
        self._universe = BitMap()
        self._term_ids: dict[tuple, int] = {}
        self._terms_by_id: list[tuple] = []
        self._bitmaps: list[BitMap] = []
        self._texts: dict[tuple, list[str]] = {}
        self._numbers: dict[tuple, _Numbers] = {}
        self._exists: dict[tuple, BitMap] = {}
        self._csr_rows = np.zeros(0, dtype=np.int64)
        self._csr_offsets = np.zeros(1, dtype=np.int64)
        self._csr_terms = np.zeros(0, dtype=np.int32)
        self._forward: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        """Number of live rows."""
        return len(self._universe)

    def _new_term(self, term: tuple, *, keep_order: bool = True) -> int:
        tid = len(self._terms_by_id)
        self._term_ids[term] = tid
        self._terms_by_id.append(term)
        self._bitmaps.append(BitMap())
        key, (kind, value) = term
        if kind == TEXT and keep_order:
            bisect.insort(self._texts.setdefault(key, []), value)
        return tid

    @staticmethod
    def _check_rowid(rowid: int) -> int:
        rowid = int(rowid)
        if not 0 <= rowid <= _MAX_ROWID:
            raise InvalidRequestError(f"rowid {rowid} is outside 0..2**32-1, which the filter index (Roaring) holds")
        return rowid

    # -- building -----------------------------------------------------------------------------------
    def rebuild(self, rows: Iterable[tuple[int, Mapping[str, Any] | str, Mapping[str, Any] | None]]) -> None:
        """Replace the whole index by ``rows`` in one pass: ``(rowid, metadata, system)``, ascending rowids,
        metadata a mapping or its JSON text (as the store holds it), system a mapping or None.

        Raises:
            InvalidRequestError: rowids out of order or beyond 32 bits.
        """
        with self._lock:
            self._clear()
            members: list[array.array] = []
            numbers: dict[tuple, tuple[array.array, array.array, list]] = {}
            objects: dict[tuple, array.array] = {}
            texts: dict[tuple, dict[str, int]] = {}
            keys: dict[tuple[str, str], tuple] = {}
            csr_rows, csr_offsets, csr_terms = array.array("q"), array.array("q", [0]), array.array("i")
            term_ids, new_term = self._term_ids, self._new_term
            last = -1
            for rowid, metadata, system in rows:
                if rowid <= last:
                    raise InvalidRequestError("FilterIndex.rebuild needs rows in ascending rowid order, each once")
                last = rowid
                if isinstance(metadata, str):
                    metadata = json.loads(metadata)
                csr_rows.append(rowid)
                parts = ((METADATA, metadata), (SYSTEM, _system_part(system))) if system else ((METADATA, metadata),)
                for namespace, mapping in parts:
                    for name, value in mapping.items():
                        key = keys.get((namespace, name))
                        if key is None:
                            key = keys[(namespace, name)] = (namespace, name)
                        kind = type(value)
                        if kind is str:  # the common case, kept short: one dict lookup, two appends
                            by_value = texts.get(key)
                            if by_value is None:
                                by_value = texts[key] = {}
                            tid = by_value.get(value)
                            if tid is None:
                                tid = by_value[value] = new_term((key, (TEXT, value)), keep_order=False)
                                members.append(array.array("I"))
                            members[tid].append(rowid)
                            csr_terms.append(tid)
                            continue
                        if kind is dict:
                            objects.setdefault(key, array.array("I")).append(rowid)
                            continue
                        if kind is int or kind is float:
                            term_values, nums = [], [value]
                        elif kind is list and all(type(e) is str for e in value):  # tags, labels: no recursion
                            elements = [(TEXT, e) for e in dict.fromkeys(value)]
                            term_values, nums = [(LIST, tuple((TEXT, e) for e in value)), *elements], []
                        else:
                            term_values, nums = _decompose(value)
                        for t in term_values:
                            term = (key, t)
                            tid = term_ids.get(term)
                            if tid is None:
                                tid = new_term(term, keep_order=False)
                                members.append(array.array("I"))
                                if t[0] == TEXT:
                                    texts.setdefault(key, {})[t[1]] = tid
                            members[tid].append(rowid)
                            csr_terms.append(tid)
                        if nums:
                            column = numbers.get(key)
                            if column is None:
                                column = numbers[key] = (array.array("d"), array.array("q"), [])
                            for v in nums:
                                if type(v) is int and abs(v) > _EXACT:
                                    column[2].append((v, rowid))
                                else:
                                    column[0].append(v)
                                    column[1].append(rowid)
                        elif not term_values:  # an empty mapping subclass or similar: present only
                            objects.setdefault(key, array.array("I")).append(rowid)
                csr_offsets.append(len(csr_terms))
            if last > _MAX_ROWID:
                raise InvalidRequestError(f"rowid {last} is outside 0..2**32-1, which the filter index (Roaring) holds")
            self._bitmaps = [BitMap(m) for m in members]
            del members
            self._universe = _as_bitmap(np.frombuffer(csr_rows, dtype=np.int64))
            for key, (values, rowids, big) in numbers.items():
                self._numbers[key] = _Numbers(
                    np.frombuffer(values, dtype=np.float64), np.frombuffer(rowids, dtype=np.int64), big
                )
            by_key: dict[tuple, list[BitMap]] = {}
            for tid, (key, _) in enumerate(self._terms_by_id):
                by_key.setdefault(key, []).append(self._bitmaps[tid])
            for key, numbers_column in self._numbers.items():
                by_key.setdefault(key, []).extend([*numbers_column.blocks, BitMap(r for _, r in numbers_column.big)])
            for key, rowids in objects.items():
                by_key.setdefault(key, []).append(BitMap(rowids))
            self._exists = {
                key: BitMap.union(*parts) if len(parts) > 1 else BitMap(parts[0]) for key, parts in by_key.items()
            }
            self._texts = {key: sorted(by_value) for key, by_value in texts.items()}
            self._csr_rows = np.frombuffer(csr_rows, dtype=np.int64).copy()
            self._csr_offsets = np.frombuffer(csr_offsets, dtype=np.int64).copy()
            self._csr_terms = np.frombuffer(csr_terms, dtype=np.int32).copy()
            self._bump()
            logger.debug(
                "filter index: %d rows, %d terms, %d number keys",
                len(self._universe),
                len(self._bitmaps),
                len(self._numbers),
            )

    def add_rows(self, rows: Iterable[tuple[int, Mapping[str, Any] | str, Mapping[str, Any] | None]]) -> None:
        """Index rows given as :meth:`rebuild` takes them (metadata may be JSON text), without clearing."""
        with self._lock:
            for rowid, metadata, system in rows:
                self.add([rowid], [json.loads(metadata) if isinstance(metadata, str) else metadata], [system])

    def rowids(self) -> np.ndarray:
        """The live rowids, int64 (n,), ascending."""
        with self._lock:
            return np.frombuffer(self._universe.to_array(), dtype=np.uint32).astype(np.int64)

    # -- saving ---------------------------------------------------------------------------------------
    def save(self, directory: str | Path, seq: int) -> None:
        """Write the index into ``directory`` (created): ``meta.json`` (format, ``seq``, terms and keys as JSON)
        and ``arrays.npz`` (Roaring's portable serialisation of every bitmap, the number columns and the
        forward map as plain arrays; no pickle). ``seq`` is the store's change-log position the index reflects;
        :meth:`load` returns it, so the caller replays only later changes."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for key, column in list(self._numbers.items()):
                if column.delta or len(column.stale):
                    self._numbers[key] = column.merged(self._universe)
            if self._forward:
                self._compact_forward()
            blobs = [b.serialize() for b in self._bitmaps]
            exists_keys = list(self._exists)
            exists_blobs = [self._exists[k].serialize() for k in exists_keys]
            number_keys = list(self._numbers)
            columns = [self._numbers[k] for k in number_keys]
            meta = {
                "format": FORMAT_VERSION,
                "seq": int(seq),
                "rows": len(self._universe),
                "terms": [[ns, name, t[0], untyped(t)] for (ns, name), t in self._terms_by_id],
                "exists_keys": [list(k) for k in exists_keys],
                "number_keys": [list(k) for k in number_keys],
                "big": [[[v, r] for v, r in c.big] for c in columns],
            }
            arrays: dict[str, Any] = {  # np.savez types its **kwds against allow_pickle: bool too
                "term_blobs": np.frombuffer(b"".join(blobs), dtype=np.uint8),
                "term_offsets": np.cumsum([0, *map(len, blobs)], dtype=np.int64),
                "exists_blobs": np.frombuffer(b"".join(exists_blobs), dtype=np.uint8),
                "exists_offsets": np.cumsum([0, *map(len, exists_blobs)], dtype=np.int64),
                "universe": np.frombuffer(self._universe.serialize(), dtype=np.uint8),
                "num_values": np.concatenate([c.values for c in columns]) if columns else np.zeros(0),
                "num_rows": np.concatenate([c.rows for c in columns]) if columns else np.zeros(0, np.int64),
                "num_offsets": np.cumsum([0, *(len(c.values) for c in columns)], dtype=np.int64),
                "csr_rows": self._csr_rows,
                "csr_offsets": self._csr_offsets,
                "csr_terms": self._csr_terms,
            }
        meta["crc32"] = {name: _crc32(array) for name, array in arrays.items()}
        np.savez(directory / "arrays.npz", **arrays)
        with open(directory / "meta.json", "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
            fh.flush()
            os.fsync(fh.fileno())

    def load(self, directory: str | Path) -> int | None:
        """Replace the index by the one saved in ``directory``. Returns its change-log position, or None (the
        index left empty) when nothing usable is there: missing, damaged (an unreadable file, arrays whose CRC-32
        differs from the one ``meta.json`` recorded at the save, or a layout the two files disagree on:
        :func:`_check_saved`), or another format version."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT_VERSION:
                return None
            with np.load(directory / "arrays.npz", allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
            _check_saved(meta, arrays)
            with self._lock:
                self._clear()
                blob, offsets = arrays["term_blobs"].tobytes(), arrays["term_offsets"]
                for tid, (ns, name, kind, value) in enumerate(meta["terms"]):
                    term = ((ns, name), typed(value) if kind == LIST else (kind, value))
                    self._term_ids[term] = tid
                    self._terms_by_id.append(term)
                    self._bitmaps.append(BitMap.deserialize(blob[offsets[tid] : offsets[tid + 1]]))
                    if kind == TEXT:
                        self._texts.setdefault((ns, name), []).append(value)
                for texts in self._texts.values():
                    texts.sort()
                blob, offsets = arrays["exists_blobs"].tobytes(), arrays["exists_offsets"]
                for i, (ns, name) in enumerate(meta["exists_keys"]):
                    self._exists[(ns, name)] = BitMap.deserialize(blob[offsets[i] : offsets[i + 1]])
                values, rows, offsets = arrays["num_values"], arrays["num_rows"], arrays["num_offsets"]
                for i, (ns, name) in enumerate(meta["number_keys"]):
                    big = [(int(v) if isinstance(v, int) else v, int(r)) for v, r in meta["big"][i]]
                    self._numbers[(ns, name)] = _Numbers(
                        values[offsets[i] : offsets[i + 1]], rows[offsets[i] : offsets[i + 1]], big
                    )
                self._universe = BitMap.deserialize(arrays["universe"].tobytes())
                self._csr_rows = arrays["csr_rows"].astype(np.int64)
                self._csr_offsets = arrays["csr_offsets"].astype(np.int64)
                self._csr_terms = arrays["csr_terms"].astype(np.int32)
                if len(self._universe) != meta["rows"] or len(self._csr_offsets) != len(self._csr_rows) + 1:
                    raise ValueError("row counts disagree")
                self._bump()
            return int(meta["seq"])
        except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zipfile.BadZipFile) as exc:
            # EOFError: numpy on an empty npz; BadZipFile: a cut one
            if (directory / "meta.json").exists():
                logger.warning("filter index in %s is unreadable (%s); rebuilding it from the store", directory, exc)
            with self._lock:
                self._clear()
                self._bump()
            return None

    # -- changes ------------------------------------------------------------------------------------
    def apply(self, changes: ChangeSet) -> None:
        """Follow one ChangeSet: ``removed``, ``added_*`` (with ``added_system``), ``metadata_updated``, then
        ``system_updated``. The memory calls this from ``_apply_changes`` and nowhere else."""
        if not changes:
            return
        with self._lock:
            self.remove(changes.removed)
            if len(changes.added_rowids):
                self.add(changes.added_rowids, changes.added_metadata, changes.added_system or None)
            for rowid, metadata in changes.metadata_updated:
                self.update(rowid, metadata=metadata)
            for rowid, partial in changes.system_updated:
                if any(name in partial for name in INDEXED_SYSTEM_FIELDS):
                    self.update_system(rowid, partial)

    def add(
        self,
        rowids: Sequence[int] | np.ndarray,
        metadatas: Sequence[Mapping[str, Any]],
        systems: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Index new rows (a rowid already indexed is replaced as a whole). Raises InvalidRequestError for a
        rowid beyond 32 bits."""
        with self._lock:
            for i, rowid in enumerate(rowids):
                rowid = self._check_rowid(rowid)
                if rowid in self._universe:
                    self._drop_namespace(rowid, METADATA)
                    self._drop_namespace(rowid, SYSTEM)
                self._universe.add(rowid)
                self._put(rowid, METADATA, metadatas[i])
                if systems is not None and systems[i]:
                    self._put(rowid, SYSTEM, _system_part(systems[i]))
            self._bump()

    def update(
        self, rowid: int, metadata: Mapping[str, Any] | None = None, system: Mapping[str, Any] | None = None
    ) -> None:
        """Replace a live row's metadata and/or system fields (None keeps that part); unknown rowids are ignored."""
        with self._lock:
            rowid = int(rowid)
            if rowid not in self._universe:
                return
            for namespace, mapping in ((METADATA, metadata), (SYSTEM, system)):
                if mapping is not None:
                    self._drop_namespace(rowid, namespace)
                    self._put(rowid, namespace, mapping if namespace == METADATA else _system_part(mapping))
            self._bump()

    def update_system(self, rowid: int, partial: Mapping[str, Any]) -> None:
        """Replace only the system fields named in ``partial`` (a None value clears one); others stay."""
        with self._lock:
            rowid = int(rowid)
            if rowid not in self._universe:
                return
            names = [name for name in partial if name in INDEXED_SYSTEM_FIELDS]
            self._drop_keys(rowid, {(SYSTEM, name) for name in names})
            self._put(rowid, SYSTEM, _system_part({name: partial[name] for name in names}))
            self._bump()

    def remove(self, rowids: Iterable[int]) -> None:
        """Unindex rows; rowids not indexed are ignored."""
        with self._lock:
            for rowid in rowids:
                rowid = int(rowid)
                if rowid in self._universe:
                    self._drop_namespace(rowid, METADATA)
                    self._drop_namespace(rowid, SYSTEM)
                    self._universe.discard(rowid)
                    self._forward[rowid] = ()  # shadows any CSR entry; compaction drops it
            self._bump()

    def _put(self, rowid: int, namespace: str, mapping: Mapping[str, Any]) -> None:
        """Index one namespace of a live row (whose entries of that namespace were dropped)."""
        tids = list(self._forward_of(rowid))
        for name, value in mapping.items():
            key = (namespace, name)
            exists = self._exists.get(key)
            if exists is None:
                exists = self._exists[key] = BitMap()
            exists.add(rowid)
            term_values, numbers = _decompose(value)
            for t in term_values:
                tid = self._term_ids.get((key, t))
                if tid is None:
                    tid = self._new_term((key, t))
                self._bitmaps[tid].add(rowid)
                tids.append(tid)
            if numbers:
                column = self._numbers.get(key)
                if column is None:
                    column = self._numbers[key] = _Numbers.empty()
                column.put(rowid, numbers)
                if column.delta_entries > _DELTA_MAX:
                    self._numbers[key] = column.merged(self._universe)
        self._forward[rowid] = tuple(tids)
        if len(self._forward) > max(65536, len(self._csr_rows) // 4):
            self._compact_forward()

    def _drop_namespace(self, rowid: int, namespace: str) -> None:
        self._drop_keys(rowid, None, namespace)

    def _drop_keys(self, rowid: int, keys: set[tuple] | None, namespace: str | None = None) -> None:
        """Take a row's entries for ``keys`` (or for every key of ``namespace``) out of every structure."""

        def chosen(key: tuple) -> bool:
            return key in keys if keys is not None else key[0] == namespace

        kept = []
        for tid in self._forward_of(rowid):
            if chosen(self._terms_by_id[tid][0]):
                self._bitmaps[tid].discard(rowid)
            else:
                kept.append(tid)
        self._forward[rowid] = tuple(kept)
        for key, exists in self._exists.items():
            if chosen(key):
                exists.discard(rowid)
        for key, column in self._numbers.items():
            if chosen(key):
                column.void(rowid)

    def _forward_of(self, rowid: int) -> tuple[int, ...]:
        tids = self._forward.get(rowid)
        if tids is not None:
            return tids
        i = int(np.searchsorted(self._csr_rows, rowid))
        if i < len(self._csr_rows) and self._csr_rows[i] == rowid:
            return tuple(self._csr_terms[self._csr_offsets[i] : self._csr_offsets[i + 1]].tolist())
        return ()

    def _compact_forward(self) -> None:
        """Fold the forward dict into the CSR arrays (live rows only), keeping memory at 4 bytes a term."""
        alive = np.frombuffer(self._universe.to_array(), dtype=np.uint32).astype(np.int64)
        pending = np.fromiter(self._forward, dtype=np.int64, count=len(self._forward))
        keep = np.isin(self._csr_rows, alive, assume_unique=True) & ~np.isin(self._csr_rows, pending)
        lengths = np.diff(self._csr_offsets)
        extra = array.array("i")
        f_starts, f_lengths, live = [], [], []
        base = len(self._csr_terms)
        for rowid, tids in self._forward.items():
            if rowid not in self._universe:
                continue
            live.append(rowid)
            f_starts.append(base + len(extra))
            f_lengths.append(len(tids))
            extra.extend(tids)
        rows = np.concatenate([self._csr_rows[keep], np.asarray(live, dtype=np.int64)])
        starts = np.concatenate([self._csr_offsets[:-1][keep], np.asarray(f_starts, dtype=np.int64)])
        seg = np.concatenate([lengths[keep], np.asarray(f_lengths, dtype=np.int64)])
        terms = np.concatenate([self._csr_terms, np.frombuffer(extra, dtype=np.int32)])
        order = np.argsort(rows, kind="stable")
        rows, starts, seg = rows[order], starts[order], seg[order]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(seg, out=offsets[1:])
        gather = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, seg)
        self._csr_rows, self._csr_offsets, self._csr_terms = rows, offsets, terms[gather]
        self._forward = {}

    def clear_cache(self) -> None:
        """Forget every resolved filter (benchmarks use it to time resolution as after a write)."""
        with self._lock:
            self._cache.clear()

    def _bump(self) -> None:
        self.generation += 1
        self._cache.clear()

    # -- resolution ---------------------------------------------------------------------------------
    def resolve(
        self, metadata_filter: Mapping[str, Any] | None, system_filter: Mapping[str, Any] | None = None
    ) -> RowSet | None:
        """The live rows matching both filters (one language; the system filter addresses system fields).

        Returns:
            A :class:`RowSet` (cached per canonical filter until the next change; never mutated), or None when
            neither filter restricts anything (None or ``{}``).

        Raises:
            InvalidFilterError: a filter is malformed (see :func:`~hybrid_memory.filters.parse_filter`).
        """
        node = parse_filter(metadata_filter)
        if system_filter:
            system = parse_filter(system_filter, SYSTEM)
            node = system if node == ("all",) else ("and", (node, system))
        if node == ("all",):
            return None
        return self.resolve_node(node)

    def resolve_node(self, node: Node) -> RowSet:
        """The live rows matching a parsed filter tree, as a cached :class:`RowSet`."""
        with self._lock:
            cached = self._cache.get(node)
            if cached is not None:
                self._cache.move_to_end(node)
                return cached
            result = RowSet.from_bitmap(self._eval(node) & self._universe)
            self._cache[node] = result
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
            return result

    def holds_metadata_key(self, name: str, system_filter: Mapping[str, Any] | None = None) -> bool:
        """Whether some live row has the metadata key ``name`` (among the rows matching ``system_filter``, a
        scope, when given): the key's ``exists`` bitmap, intersected with the scope's rows; no row is read.

        Raises:
            InvalidFilterError: a malformed system filter.
        """
        with self._lock:
            exists = self._exists.get((METADATA, name))
            if not exists:
                return False
            if not system_filter:
                return True
            return exists.intersect(self._eval(parse_filter(system_filter, SYSTEM)))

    def _term(self, key: tuple, t: tuple) -> BitMap:
        tid = self._term_ids.get((key, t))
        return self._bitmaps[tid] if tid is not None else BitMap()

    def _missing(self, key: tuple) -> BitMap:
        exists = self._exists.get(key)
        return self._universe - exists if exists is not None else self._universe

    def _equal(self, key: tuple, values: Sequence[tuple]) -> BitMap:
        numbers = [v for kind, v in values if kind == NUMBER]
        parts = [self._term(key, t) for t in values if t[0] != NUMBER]
        if numbers and key in self._numbers:
            parts.append(self._numbers[key].equal(numbers))
        if (NULL, None) in values:
            parts.append(self._missing(key))
        if not parts:
            return BitMap()
        return parts[0] if len(parts) == 1 else BitMap.union(*parts)

    def _eval(self, node: Node) -> BitMap:
        """Rows matching the node; may return an internal bitmap (callers never mutate the result)."""
        kind = node[0]
        if kind == "all":
            return self._universe
        if kind == "and":
            parts = sorted((self._eval(child) for child in node[1]), key=len)
            return BitMap.intersection(*parts)
        if kind == "or":
            return BitMap.union(*(self._eval(child) for child in node[1]))
        if kind == "not":
            return self._universe - self._eval(node[1])
        key = node[1]
        if kind == "exists":
            return self._exists.get(key, BitMap()) if node[2] else self._missing(key)
        if kind == "eq":
            return self._equal(key, (node[2],))
        if kind == "in":
            return self._equal(key, node[2])
        if kind == "cmp":
            op, (value_kind, value) = node[2], node[3]
            if value_kind == NUMBER:
                column = self._numbers.get(key)
                return column.select(op, value) if column is not None else BitMap()
            return self._text_range(key, op, value)
        raise AssertionError(f"unknown filter node {node!r}")  # pragma: no cover

    def _text_range(self, key: tuple, op: str, value: str) -> BitMap:
        texts = self._texts.get(key, [])
        if op == "$gt":
            chosen = texts[bisect.bisect_right(texts, value) :]
        elif op == "$gte":
            chosen = texts[bisect.bisect_left(texts, value) :]
        elif op == "$lt":
            chosen = texts[: bisect.bisect_left(texts, value)]
        else:
            chosen = texts[: bisect.bisect_right(texts, value)]
        return BitMap.union(*(self._term(key, (TEXT, t)) for t in chosen)) if chosen else BitMap()

    def stats(self) -> dict[str, int]:
        """Counts for diagnostics: live rows, terms, keys with numbers, forward entries pending, generation."""
        with self._lock:
            return {
                "rows": len(self._universe),
                "terms": len(self._bitmaps),
                "number_keys": len(self._numbers),
                "forward_pending": len(self._forward),
                "generation": self.generation,
            }


def _crc32(array: np.ndarray) -> int:
    """CRC-32 (``zlib.crc32``) of an array's bytes in C order: a damaged or stale array, of any shape, reads
    otherwise."""
    return zlib.crc32(np.ascontiguousarray(array).view(np.uint8).reshape(-1))  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only


def _check_saved(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Raise ValueError unless ``meta.json`` and ``arrays.npz`` of one save agree: every array's CRC-32 as the save
    recorded it (saves before the checksums carry none: the layout alone is checked), and the layout, each
    list of ``meta`` spanning its arrays exactly (one offset more than entries, offsets from 0, non-decreasing,
    ending at the data's length). Damage that leaves both files readable would otherwise load silently and
    answer filters wrongly on every open (a fresh user's finding: ``num_values`` cut from 8 to 4 entries, or
    ``"terms": []`` written into ``meta.json``, each gave wrong ids with no warning)."""
    recorded = meta.get("crc32")
    if recorded is not None:
        if set(recorded) != set(arrays) or any(_crc32(arrays[name]) != int(crc) for name, crc in recorded.items()):
            raise ValueError(
                "arrays.npz does not match the checksums meta.json recorded (damaged, or from another save)"
            )
    spans = (
        ("terms", "term_offsets", ("term_blobs",)),
        ("exists_keys", "exists_offsets", ("exists_blobs",)),
        ("number_keys", "num_offsets", ("num_values", "num_rows")),
    )
    for entries, offsets_name, data_names in spans:
        offsets = arrays[offsets_name]
        ends = {len(arrays[name]) for name in data_names}
        if (
            len(offsets) != len(meta[entries]) + 1
            or offsets[0] != 0
            or len(ends) != 1
            or offsets[-1] != ends.pop()
            or (len(offsets) > 1 and bool((np.diff(offsets) < 0).any()))
        ):
            raise ValueError(f"meta.json's {entries} and arrays.npz's {offsets_name} disagree")
    if len(meta["big"]) != len(meta["number_keys"]):
        raise ValueError("meta.json's big and number_keys disagree")
    csr = arrays["csr_offsets"]
    if len(csr) != len(arrays["csr_rows"]) + 1 or csr[0] != 0 or csr[-1] != len(arrays["csr_terms"]):
        raise ValueError("arrays.npz's forward map is not consistent")
