"""Scope-local statistics on the Qdrant backends (issue 35, class 2): a scoped search scores with its scope's counts.

On the embedded backend a scoped search reads BM25's ``N``, ``df`` and ``avgdl`` and the default fusion's
calibration from its scope's chunks only (:mod:`hybrid_memory.engines.bm25.local`). On Qdrant three things were
memory-wide: Qdrant's IDF modifier (it counts every point of the collection, and no query can leave it out), the
client-side :class:`~hybrid_memory.backends.qdrant.calibration.CorpusStats` (document frequencies and dense moments
behind the surprises) and the exact-match guard's one-term document-frequency queries (run over the collection).
Here, for a scoped search (a :class:`~hybrid_memory.backends.qdrant.backend.QdrantFilter` with a ``population``):

* **BM25.** The sparse leg and its cross-scores query the plain vector
  :data:`~hybrid_memory.backends.qdrant.collection.TF` (the ``bm25`` vector's values, no modifier) with weights
  ``q_t = count(t, q) * idf_s(t)``, ``idf_s(t) = ln(1 + (N_s - df_s(t) + 0.5) / (df_s(t) + 0.5))`` (Lucene BM25,
  the formula Qdrant's modifier applies), ``N_s`` the scope's points and ``df_s(t)`` those of them holding the
  token's sparse index: Qdrant then ranks by ``sum_t q_t * value(t, d)``, BM25 over the scope's own statistics, and
  every score is a function of the scope's chunks. A query token no chunk of the scope holds gets no weight (it is
  left out of the query). Why not multiply the modifier's idf away (``q_t = idf_s / idf_collection``)? The
  collection's idf is not known exactly client-side (it counts deleted points until Qdrant's optimizer rebuilds a
  segment, and no request returns its ``N``), and even when known, Qdrant's float32 product would carry its value
  into the last bits of every score.
* **avgdl stays the shard's constant.** The tf part of each stored value, ``tf / (tf + k1 (1 - b + b |d| /
  avgdl))``, is computed when the point is written with the backend's fixed ``avgdl`` (256, Qdrant's ``Bm25``
  default, or the mean length ``export-qdrant`` recorded); a scope's own mean length would mean rewriting its
  points whenever it changes. A fixed number is no leak: nothing another scope writes changes it. The scores then
  differ from the embedded backend's scoped ones (which use the scope's mean length) by that normalisation only.
* **Surprises.** The BM25 surprise reads ``df_s`` and ``N_s``, the dense surprise the exact moments
  (:class:`~hybrid_memory.engines.calibration.VectorMoments`) of the scope's dense vectors, and ``n`` is the count
  of the scope's points the search's filter allows (as before).
* **Exact-match guard.** The identifiers' one-term document-frequency queries carry the scope's filter.

The population of a scoped search is every chunk of its scope, whatever the metadata filter and ``as_of`` (the
embedded rule). :class:`ScopeStats` holds one scope's ``N_s``, ``df_s`` (a dict sparse index -> points) and
moments; :class:`ScopeRegistry` keeps the :data:`SCOPES_KEPT` most recently searched scopes, each built by one
scroll of the scope's points (its ``bm25`` indices and dense vectors; about 0.1 ms a point on Edge) the first time a
search of that scope needs it, and kept in step with this backend's writes: an upsert reads the vectors the points
held (one ``retrieve``, only of points some kept scope holds) and counts them out of the scopes that held them and
the new ones into the scopes whose fields they carry; a delete counts out; a payload-only write that moves a point
into or out of a kept scope drops that scope (rebuilt on its next search). A write touching no kept scope costs a
set look-up a point. Memory: the (dim + 1, dim) float64 moment sums per kept scope (1.2 MB at 384-d; 16 scopes:
19 MB) and its df dict (~100 bytes a distinct token) and member ids. On a collection reached through
qdrant-client (shared with other writers) a kept scope's point count is compared with the scope's ``count`` at most
every :data:`~hybrid_memory.backends.qdrant.calibration.DRIFT_SECONDS` and rebuilt on a difference
(the limits of that check are :mod:`~hybrid_memory.backends.qdrant.calibration`'s).

What stays collection-wide: Qdrant's HNSW index over the dense vectors (built over every point: which of a scope's
chunks an approximate dense search finds can depend on other scopes' vectors; Qdrant searches a filter of small
cardinality exactly, by its full-scan threshold, so a small scope's dense leg is exact), and the unscoped view
(memory-wide statistics, its scores unchanged: the ``bm25`` vector with Qdrant's IDF modifier).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...engines.calibration import MOMENTS_MAX_DIM, VectorMoments
from .calibration import DRIFT_SECONDS, SCROLL_PAGE
from .collection import DENSE, SPARSE, Point, PointId, Record

__all__ = ["SCOPES_KEPT", "ScopeRegistry", "ScopeStats", "canonical_unit", "scope_idf"]

logger = logging.getLogger(__name__)

SCOPES_KEPT = 16
"""Scopes whose statistics a backend keeps (least recently searched dropped first; rebuilt by one scroll)."""


def scope_idf(n: int, df: int) -> float:
    """Lucene BM25 idf ``ln(1 + (n - df + 0.5) / (df + 0.5))``, float64 (Qdrant's IDF modifier; Kamphuis et al.
    2020)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def canonical_unit(vectors: np.ndarray) -> np.ndarray:
    """float32 (n, dim): each row moved to one representative of its orbit under qdrant-client local mode's
    normalisation, for that mode's scoped scores and moments.

    qdrant-client's local mode (1.20, ``qdrant_client.local.distances.cosine_similarity``) divides its stored
    vectors by their float32 norms in place on every dense search ("a no-op in practice": not in float32), so a
    stored vector steps along ``v -> v / |v|`` each time any dense query runs, and about 6 % of vectors (random
    384-d ones, measured) never settle, flipping between two neighbours: a scope's cosines then moved by a float32
    ulp with the number of dense searches other scopes' writes had run (the deduplication's nearest search). Here
    that step is applied 16 times (past the 1 to 4 steps in which a vector reaches its fixed point or 2-cycle) and
    the lexicographically smaller of the cycle's two members is kept: the same row for every point of one orbit.
    """
    v = np.array(vectors, dtype=np.float32, ndmin=2)
    for _ in range(16):
        norm = np.linalg.norm(v, axis=-1)[:, np.newaxis]
        v = v / np.where(norm != 0.0, norm, np.float32(1e-8))
    norm = np.linalg.norm(v, axis=-1)[:, np.newaxis]
    w = v / np.where(norm != 0.0, norm, np.float32(1e-8))
    differ = w != v
    first = differ.argmax(axis=1)
    rows = np.arange(len(v))
    take_w = differ.any(axis=1) & (w[rows, first] < v[rows, first])
    v[take_w] = w[take_w]
    return v


class ScopeStats:
    """``N``, document frequencies and dense moments of one scope's points (module docstring).

    Args:
        scope: the bound scope fields (``{"tenant": "acme", "user_id": "ann"}``), matched against a point's
            system fields.
        flt: the scope's Qdrant REST filter.
        dim: the dense dimension (no moments above :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM`).
    """

    def __init__(self, scope: Mapping[str, str], flt: Mapping[str, Any], dim: int, local: bool = False) -> None:
        self.local = local
        """qdrant-client's local mode: dense vectors counted as :func:`canonical_unit` rows."""
        self.scope = dict(scope)
        self.filter = dict(flt)
        self.points = 0
        self.df: dict[int, int] = {}
        self.members: set[PointId] = set()
        self.moments: VectorMoments | None = VectorMoments(dim) if dim <= MOMENTS_MAX_DIM else None
        self.checked = time.monotonic()

    def holds(self, payload: Mapping[str, Any]) -> bool:
        """Whether a point's payload (its ``doc`` JSON text's system fields) carries this scope's field values."""
        doc = payload.get("doc")
        if not isinstance(doc, str):
            return False
        sys = json.loads(doc).get("sys") or {}
        return all(sys.get(name) == value for name, value in self.scope.items())

    def count(self, records: Sequence[Record | Point], sign: int) -> None:
        """Count the points' ``bm25`` indices and dense vectors in (``sign`` 1) or out (-1)."""
        rows = [r.dense for r in records if r.dense is not None]
        if self.moments is not None and rows:
            block = np.asarray(rows, dtype=np.float32)
            if self.local:
                block = canonical_unit(block)
            (self.moments.add if sign > 0 else self.moments.remove)(block)
        df = self.df
        for r in records:
            for key in r.sparse[0] if r.sparse else ():
                value = df.get(key, 0) + sign
                if value > 0:
                    df[key] = value
                else:
                    df.pop(key, None)
            if sign > 0:
                self.members.add(r.id)
            else:
                self.members.discard(r.id)
        self.points += sign * len(records)

    def dfs(self, indices: Sequence[int]) -> list[int]:
        """The scope's points holding each sparse index (0 for none)."""
        get = self.df.get
        return [get(int(i), 0) for i in indices]


class ScopeRegistry:
    """The kept :class:`ScopeStats` of one collection, built on first use and kept in step with this backend's
    writes (module docstring). Thread-safe: builds and writes are serialised by one lock.

    Args:
        collection: the :class:`~hybrid_memory.backends.qdrant.collection.Collection`.
        dim: the dense dimension.
        shared: other writers may change the collection (qdrant-client): each kept scope's count is checked every
            :data:`~hybrid_memory.backends.qdrant.calibration.DRIFT_SECONDS`.
    """

    def __init__(self, collection: Any, dim: int, *, shared: bool) -> None:
        self.collection = collection
        self.dim = int(dim)
        self.shared = bool(shared)
        self._kept: OrderedDict[str, ScopeStats] = OrderedDict()
        self._lock = threading.RLock()

    def get(self, scope: Mapping[str, str], flt: Mapping[str, Any]) -> ScopeStats:
        """The statistics of the scope whose filter is ``flt``, built by one scroll of its points when not kept
        (or, on a shared collection, when its count changed).

        Raises:
            BackendUnavailableError: the collection could not be read.
        """
        key = json.dumps(flt, sort_keys=True, default=str)
        with self._lock:
            held = self._kept.get(key)
            if held is not None and self.shared and time.monotonic() - held.checked >= DRIFT_SECONDS:
                held.checked = time.monotonic()
                if self.collection.count(held.filter) != held.points:
                    held = None
            if held is None:
                held = self._build(scope, flt)
                self._kept[key] = held
                while len(self._kept) > SCOPES_KEPT:
                    self._kept.popitem(last=False)
            self._kept.move_to_end(key)
            return held

    def snapshot(
        self, scope: Mapping[str, str], flt: Mapping[str, Any], indices: Sequence[int]
    ) -> tuple[int, dict[int, int], VectorMoments | None]:
        """One consistent reading of a scope for a query: ``(N_s, {sparse index: df_s} of ``indices``, the scope's
        moments)`` (:meth:`get`; the moments object is the kept one, read under its own lock)."""
        with self._lock:
            stats = self.get(scope, flt)
            return stats.points, dict(zip((int(i) for i in indices), stats.dfs(indices), strict=True)), stats.moments

    def _build(self, scope: Mapping[str, str], flt: Mapping[str, Any]) -> ScopeStats:
        stats = ScopeStats(scope, flt, self.dim, bool(getattr(self.collection, "local", False)))
        vectors = [DENSE, SPARSE] if stats.moments is not None else [SPARSE]
        offset = None
        started = time.perf_counter()
        while True:
            records, offset = self.collection.scroll(flt, SCROLL_PAGE, offset, False, vectors)
            stats.count(records, 1)
            if offset is None:
                break
        logger.debug(
            "scope statistics of %s: %d points in %.1f ms", scope, stats.points, 1e3 * (time.perf_counter() - started)
        )
        return stats

    def upsert(self, points: Sequence[Point], write: Callable[[Sequence[Point]], None]) -> None:
        """``write(points)``, then the kept scopes count out the vectors the points held (read before, for points
        a kept scope holds) and in the new ones. A write that raises drops every kept scope (it may be partly
        applied)."""
        with self._lock:
            if not self._kept:
                write(points)
                return
            last = list({p.id: p for p in points}.values())
            kept = list(self._kept.values())
            held = [p.id for p in last if any(p.id in s.members for s in kept)]
            old = (
                {r.id: r for r in self.collection.retrieve(held, vectors=self._vectors(), payload=False)}
                if held
                else {}
            )
            try:
                write(points)
            except BaseException:
                self._kept.clear()
                raise
            for stats in kept:
                out = [old[p.id] for p in last if p.id in stats.members and p.id in old]
                if len(out) != sum(p.id in stats.members for p in last):  # a member gone meanwhile: recount
                    self._drop(stats)
                    continue
                stats.count(out, -1)
                stats.count([p for p in last if stats.holds(p.payload)], 1)

    def delete(self, ids: Sequence[PointId], delete: Callable[[Sequence[PointId]], None]) -> None:
        """``delete(ids)``, counting out of the kept scopes the vectors of the points they held."""
        with self._lock:
            if not self._kept:
                delete(ids)
                return
            kept = list(self._kept.values())
            unique = list(dict.fromkeys(ids))
            held = [i for i in unique if any(i in s.members for s in kept)]
            old = (
                {r.id: r for r in self.collection.retrieve(held, vectors=self._vectors(), payload=False)}
                if held
                else {}
            )
            try:
                delete(ids)
            except BaseException:
                self._kept.clear()
                raise
            for stats in kept:
                stats.count([old[i] for i in held if i in stats.members and i in old], -1)

    def set_payload(self, point_id: PointId, payload: Mapping[str, Any], write: Callable[[], None]) -> None:
        """``write()`` (a payload-only write, vectors kept); a kept scope the point enters or leaves is dropped."""
        with self._lock:
            try:
                write()
            except BaseException:
                self._kept.clear()
                raise
            for stats in list(self._kept.values()):
                if (point_id in stats.members) != stats.holds(payload):
                    self._drop(stats)

    def clear(self) -> None:
        """Forget every kept scope (rebuilt on their next search)."""
        with self._lock:
            self._kept.clear()

    def _drop(self, stats: ScopeStats) -> None:
        for key, held in list(self._kept.items()):
            if held is stats:
                del self._kept[key]

    def _vectors(self) -> list[str]:
        return [DENSE, SPARSE] if self.dim <= MOMENTS_MAX_DIM else [SPARSE]
