"""Dense engine: inner-product search over L2-normalised float32 vectors, exact or approximate (FAISS IVF).

With unit vectors the inner product is the cosine similarity. Ids are the store's int64 rowids.

Layout (one job: rank ids by inner product with a query, restricted to an allowed set):

* Every vector lives in an in-memory float32 matrix, one row per *slot*; ``slot_of[id]`` finds it. This
  matrix serves the **exact** path (a matmul over the allowed rows only), :meth:`FaissIndex.score` (a
  gather plus a matvec) and the exact re-rank of approximate candidates.
* Above ``ann_min`` live vectors (``kind="auto"``) or always (``kind="ivf"``) an **approximate** index is
  kept too: FAISS ``IndexIVFScalarQuantizer`` with 8-bit codes and inner-product metric (Jégou, Douze and
  Schmid 2011, "Product quantization for nearest neighbor search", the IVF part; Johnson, Douze and Jégou
  2019, "Billion-scale similarity search with GPUs", for FAISS). IVF rather than HNSW because it takes
  cheap incremental adds, filtered search through an ``IDSelector`` and removals, which HNSW does not.
  Its 8-bit codes cost a quarter of float32; the approximate scores only pick candidates, which are then
  re-scored exactly from the float32 matrix, so every score this module returns is an exact inner product.
* A filtered search is either an exact scan of the allowed rows or the IVF with the filter as a FAISS
  selector (excluded vectors skipped while scanning: filter before ranking), whichever a cost model
  (:data:`ROW_COST`) says is cheaper: exact for narrow filters, where the IVF would test every stored id of
  many lists against the filter to find few eligible ones; IVF for broad ones. ``nprobe`` is widened in
  inverse proportion to the fraction the filter allows (:data:`FILTER_PROBE_EXPONENT`).
* **Writes without a scan.** A removal is a tombstone: the id leaves ``slot_of`` and the alive bitmap at
  once (O(1)); searches skip it through the selector. The IVF entries of tombstones are dropped in
  batches by a background compaction (as Lucene merges away deleted documents). An add appends (or reuses
  a freed slot) and is assigned to its IVF list (one quantizer search), so it is searchable at once.
* The IVF is (re)trained in the background when the live count first reaches ``ann_min`` and whenever it
  has grown ``retrain_growth`` times since the last training, so ``nlist`` tracks ``sqrt(n)``; searches
  keep using the current index (or the exact scan) meanwhile.

**All-zero vectors carry no dense evidence.** A stored vector of all zeros (a placeholder a caller sent, or a
bag-of-words embedding of a text without a known token) has no direction: its inner product with every query
is 0, which says nothing about relevance, yet a fusion that standardises the dense scores would read 0 as far
below the list and sink a chunk that BM25 alone found. So such a row is held (it keeps its place in the store,
the id map and saves) but :meth:`FaissIndex.search` never returns it and :meth:`FaissIndex.score` gives it
``nan``, the value of an id without a vector: the searcher then drops the cross-score and the chunk is judged
by its other engine only, as an all-zero *query* vector already skips the dense engine. Refusing such vectors
at write time was the alternative; it would break callers that send placeholder vectors for chunks they have
no embedding of, and an embedder can produce one itself (a text of stop words for a hashing embedder).

Saved as immutable, token-named base files (``vectors.<token>.npy``, ``ivf.<token>.faiss``; ``numpy.save``
and ``faiss.write_index``, no pickle) plus the rows written since (``delta_*.npy``), ``slot_ids.npy`` and
``manifest.json``; a save links unchanged base files instead of rewriting them (:meth:`FaissIndex.save`), and a
reopened index is used as saved, without retraining.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._checksums import file_checksums, verify_files
from ..._exceptions import DimensionMismatchError, InvalidRequestError
from ..calibration import MOMENTS_MAX_DIM, VectorMoments, gaussian_surprise
from ..rowset import RowSet, as_rowset, id_bounds

__all__ = [
    "ANN_MIN",
    "CODE_COST",
    "DELTA_FRACTION",
    "DENSE_KINDS",
    "EXACT_MIN",
    "IVF_REWRITE_FRACTION",
    "ROW_COST",
    "FaissIndex",
]

logger = logging.getLogger(__name__)

_FORMAT_VERSION = 2

DELTA_FRACTION = 1 / 8
"""A save writes the vectors base file anew when the rows written since it exceed this fraction of the slots;
below, it links the base and writes those rows only (:meth:`FaissIndex.save`). Loading then costs at most 1/8
more reading than a fresh base; saves after few writes cost only the delta."""

IVF_REWRITE_FRACTION = 0.01
IVF_REWRITE_MIN = 1_000
"""A save writes the IVF file anew when the adds and removals since it was written exceed
``max(IVF_REWRITE_MIN, IVF_REWRITE_FRACTION × entries)``; below, it links the file and :meth:`FaissIndex.load`
replays them (one quantizer search per added vector: 10,000 re-adds at 1M vectors with 2,048 lists cost about
a second on one core, against about as long to write the 400 MB file)."""

DENSE_KINDS = ("auto", "flat", "ivf")
"""``auto``: exact below :data:`ANN_MIN` live vectors, IVF above; ``flat``: always exact; ``ivf``: always IVF
(trained once there are enough vectors to train on, exact until then)."""

ANN_MIN = 20_000
"""Live vectors from which ``kind="auto"`` keeps an IVF index. Below it an exact scan costs about a
millisecond or two (384-d float32 on this project's 2-core reference machine; ``benchmarks/scale.py``) and
IVF training would cost more than it saves."""

EXACT_MIN = 1_024
"""A filtered search with at most this many allowed ids is always an exact scan of their rows."""

ROW_COST = 19.0
CODE_COST = 19.0
"""The cost model that picks, per filtered search, an exact scan of the allowed rows or the IVF with the filter
as a selector (:meth:`FaissIndex._exact_is_cheaper`), in units of the IVF's cost to test one stored id of a
probed list against the filter's bitmap. Scoring one allowed row exactly (``faiss.fvec_inner_products_by_idx``
over the float32 row, then the top-k cut) costs ``ROW_COST``; scoring one eligible IVF code (8-bit decode, dot,
heap) costs ``CODE_COST``; both scale with the dimension over 384. Measured as thread CPU time (a loaded
machine inflates wall clock) on the 2-core reference machine, 1M 384-d vectors of ``benchmarks/scale.py``,
2,048 lists, one thread: 0.30 µs per exact row (50k-100k allowed rows), 16 ns per tested id and 0.30 µs per
eligible code (IVF at 1-10% shares, 80 candidates). The model's choices there: IVF at 5% and above, exact at 3%
and below (measured 10.9 vs 14.9 ms at 5%, 10.1 vs 11.5 ms at 3%, 9.8 vs 4.8 ms at 1%)."""

FILTER_PROBE_EXPONENT = 0.5
"""A filter passing a fraction ``f`` of the vectors probes ``nprobe / sqrt(f)`` lists (at most all).

Probing ``nprobe / f`` would visit as many *eligible* vectors as an unfiltered search, but the unfiltered
``nprobe`` is set by boundary effects (true neighbours just across a Voronoi cell's border), not by a count:
the filtered top-10 of an uncorrelated filter lie among the unfiltered top ``10 / f``, whose radius grows only
as ``(1 / f) ** (1 / intrinsic dimension)``. The square root keeps ``nprobe · sqrt(f) · n / nlist`` eligible
candidates, at least 30 times the 80-deep re-rank at 10% and 100k vectors. Measured recall@10 against exact
(``benchmarks/scale.py`` vectors, IVF path forced): 1M vectors, 2,048 lists: 1.0 at 50, 25, 10, 5, 3 and 1%;
100k vectors, 512 lists: 1.0 at 50%, 0.983 at 10%, 0.90 at 3% (where the cost model takes the exact path).
``nprobe / f`` costs 2.9x more CPU at 10% of 1M (29 vs 10 ms) for the same recall there."""

FILTER_MIN_CANDIDATES = 4_096
"""A filtered IVF search probes enough lists to meet at least this many eligible vectors on average (50 times
its 80-deep re-rank). The square-root rule alone reads too few where lists are short: at 30k vectors (256
lists of 117) a 10% filter met 1,200 and recall@10 fell to 0.885; with the floor it probes every list there
(and the cost model then prefers the exact scan). At 1M vectors the square-root rule already meets more."""

_MIN_TRAIN_PER_LIST = 39
"""FAISS warns below 39 training points per centroid (``faiss/Clustering.cpp``); no training below that."""


def default_nlist(n: int) -> int:
    """IVF list count for ``n`` vectors: the power of two nearest ``2 sqrt(n)``, clamped to [16, 4096].

    FAISS's guideline is ``nlist`` between ``4 sqrt(n)`` and ``16 sqrt(n)`` (faiss wiki, "Guidelines to
    choose an index"); ``2 sqrt(n)`` keeps k-means training on ``64 × nlist`` points within about half a
    minute on one core at 1M vectors, and the per-query ``nprobe`` (:meth:`FaissIndex._nprobe`) restores
    recall.
    """
    if n < 1:
        return 16
    return int(min(4096, max(16, 2 ** round(math.log2(2 * math.sqrt(n))))))


class FaissIndex:
    """Inner-product index keyed by int64 ids: exact scan below a size, FAISS IVF-SQ8 plus exact re-rank above.

    Args:
        dim: vector dimension.
        kind: ``"auto"`` (default), ``"flat"`` or ``"ivf"``; see :data:`DENSE_KINDS`.
        omp_threads: OpenMP threads FAISS may use per search; 1 by default (measured on 2 cores in
            ``benchmarks/scale.py``: one thread is faster for single queries, and the sparse engine runs in
            the other core meanwhile). OpenMP's count is per thread, so it is set in every thread that searches.
        ann_min: live vectors from which ``kind="auto"`` builds the IVF index (default :data:`ANN_MIN`).
        exact_max: filtered searches with at most this many allowed ids are exact, the others go to the IVF;
            None (default): chosen per search by estimated cost (:data:`ROW_COST`), exact at most
            :data:`EXACT_MIN` ids.
        nprobe: IVF lists probed by an unfiltered search; None: ``max(32, nlist // 16)`` (recall@10 >= 0.97
            against exact search on the clustered vectors of ``benchmarks/scale.py``). Filtered searches
            probe more (``nprobe / fraction allowed``, at most ``nlist``).
        rerank: approximate candidates re-scored exactly, as a multiple of ``k`` (default 4).
        retrain_growth: retrain when the live count reaches this multiple of the count at the last training.
        compact_min: tombstones in the IVF that trigger a compaction (also reached at 5% of its entries).

    Raises:
        ValueError: ``dim`` < 1, or another argument out of range.
        InvalidRequestError: ``kind`` is not one of :data:`DENSE_KINDS`.

    Thread-safe: one lock guards the index; exact scans and FAISS searches run with it held (FAISS does
    not allow an add during a search), training runs without it.
    """

    def __init__(
        self,
        dim: int,
        *,
        kind: str = "auto",
        omp_threads: int | None = 1,
        ann_min: int = ANN_MIN,
        exact_max: int | None = None,
        nprobe: int | None = None,
        rerank: int = 4,
        retrain_growth: float = 4.0,
        compact_min: int = 1000,
    ) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if kind not in DENSE_KINDS:
            raise InvalidRequestError(f"dense index kind must be one of {DENSE_KINDS}, got {kind!r}")
        if (
            ann_min < 1
            or (exact_max is not None and exact_max < 0)
            or rerank < 1
            or retrain_growth <= 1
            or (nprobe is not None and nprobe < 1)
        ):
            raise ValueError(
                "ann_min >= 1, exact_max >= 0, rerank >= 1, retrain_growth > 1 and nprobe >= 1 are required"
            )
        self.dim = dim
        self.kind = kind
        self.omp_threads = omp_threads
        self.ann_min = ann_min
        self.exact_max = exact_max
        self.nprobe = nprobe
        self.rerank = rerank
        self.retrain_growth = retrain_growth
        self.compact_min = compact_min
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._building = False
        self._reset()

    # -- state --------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._writes = getattr(self, "_writes", 0) + 1  # any change of the rows: a cached scan is stale
        self._vectors = _Rows(self.dim)  # float32 rows by slot
        self._slot_ids = np.zeros(0, dtype=np.int64)  # id per slot, -1 free
        self._n_slots = 0  # high-water mark of used slots
        self._free: list[int] = []
        self._slot_of = np.zeros(0, dtype=np.int64)  # by id: slot, -1 absent
        self._alive_bits = np.zeros(1, dtype=np.uint8)  # by id, little bit order (FAISS IDSelectorBitmap)
        self._alive_selector: Any = None
        self._n_alive = 0
        self._ivf: Any = None
        self._trained_n = 0
        self._tombstones: list[int] = []  # ids removed but still in the IVF's lists
        self._added_during_build: list[int] = []
        # persistence (see save): the vectors file the matrix's first rows came from and the rows overwritten
        # since, and the IVF file the index came from and how many adds/removals it has had since
        self._base_name: str | None = None
        self._base_rows = 0
        self._dirty = np.zeros(0, dtype=bool)  # by slot < _base_rows: overwritten since the base was written
        self._zero = np.zeros(0, dtype=bool)  # by id: the live vector is all zeros (no dense evidence)
        self._n_zero = 0
        self._ivf_file: str | None = None
        self._ivf_changes = 0
        self._file_crcs: dict[str, list[int]] = {}  # CRC-32s of the immutable base and IVF files (_checksums)
        # exact corpus moments of the live vectors, for the surprise (none above MOMENTS_MAX_DIM)
        self._moments = VectorMoments(self.dim) if self.dim <= MOMENTS_MAX_DIM else None

    def __len__(self) -> int:
        """Number of live vectors."""
        return self._n_alive

    @property
    def approximate(self) -> bool:
        """True when an IVF index serves unfiltered searches."""
        return self._ivf is not None

    def info(self) -> dict[str, Any]:
        """Kind, live vectors, whether the IVF is in service, its nlist, nprobe and pending tombstones."""
        with self._lock:
            ivf = self._ivf
            return {
                "kind": self.kind,
                "vectors": self._n_alive,
                "approximate": ivf is not None,
                "nlist": int(ivf.nlist) if ivf is not None else None,
                "nprobe": self._nprobe() if ivf is not None else None,
                "trained_on": self._trained_n,
                "tombstones": len(self._tombstones),
            }

    def _check(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise DimensionMismatchError(
                f"vectors must have shape (n, {self.dim}) for this memory, got {vectors.shape}; use the "
                f"embedder the memory was created with"
            )
        if not np.isfinite(vectors).all():
            raise ValueError("vectors contain NaN or infinite values")
        return np.ascontiguousarray(vectors)

    def ids(self) -> np.ndarray:
        """Live ids, int64 (n,), ascending."""
        with self._lock:
            return np.flatnonzero(self._slot_of >= 0).astype(np.int64)

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        """Slots of int64 ``ids`` (-1 for ids not held), int64 (len(ids),)."""
        slot_of = self._slot_of
        out = np.full(len(ids), -1, dtype=np.int64)
        inside = (ids >= 0) & (ids < len(slot_of))
        out[inside] = slot_of[ids[inside]]
        return out

    def _grow_ids(self, max_id: int) -> None:
        if max_id < len(self._slot_of):
            return
        size = max(max_id + 1, int(len(self._slot_of) * 1.5) + 1024)
        slot_of = np.full(size, -1, dtype=np.int64)
        slot_of[: len(self._slot_of)] = self._slot_of
        self._slot_of = slot_of
        bits = np.zeros((size + 7) // 8, dtype=np.uint8)
        bits[: len(self._alive_bits)] = self._alive_bits
        self._alive_bits = bits
        self._alive_selector = None
        zero = np.zeros(size, dtype=bool)
        zero[: len(self._zero)] = self._zero
        self._zero = zero

    def _grow_slots(self, needed: int) -> None:
        """Room for ``needed`` slots (caller holds the lock); see :meth:`_Rows.reserve`."""
        if needed <= self._vectors.capacity:
            return
        self._vectors.reserve(needed)
        size = self._vectors.capacity
        slot_ids = np.full(size, -1, dtype=np.int64)
        slot_ids[: self._n_slots] = self._slot_ids[: self._n_slots]
        self._slot_ids = slot_ids

    def _selector_alive(self) -> Any:
        import faiss

        if self._alive_selector is None:
            self._alive_selector = faiss.IDSelectorBitmap(len(self._alive_bits), faiss.swig_ptr(self._alive_bits))
        return self._alive_selector

    # -- writes -------------------------------------------------------------------------------------
    def add(self, ids: Sequence[int] | np.ndarray, vectors: np.ndarray) -> None:
        """Add float32 (n, dim) vectors (L2-normalised by the caller) under new int64 ids (n,), >= 0.

        Searchable on return; an all-zero vector is held but never returned nor scored (module docstring). Cost: a copy
        into the matrix plus, with an IVF, one quantizer search per vector.

        Raises:
            DimensionMismatchError: the vectors' dimension is not ``dim``.
            ValueError: ids and vectors differ in number, an id is negative, repeated or already held.
        """
        vectors = self._check(vectors)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        if not len(ids):
            return
        if ids.min() < 0 or len(np.unique(ids)) != len(ids):
            raise ValueError("ids must be distinct and >= 0")
        with self._lock:
            self._writes += 1
            if (self._slots(ids) >= 0).any():
                raise ValueError("some ids are already in the dense index; remove them first")
            n = len(ids)
            reuse = [self._free.pop() for _ in range(min(n, len(self._free)))]
            fresh = n - len(reuse)
            self._grow_slots(self._n_slots + fresh)
            slots = np.array(reuse + list(range(self._n_slots, self._n_slots + fresh)), dtype=np.int64)
            self._n_slots += fresh
            self._vectors.put(slots, vectors)
            self._slot_ids[slots] = ids
            if self._moments is not None:
                self._moments.add(vectors)
            if reuse and self._base_rows:
                old = np.asarray(reuse, dtype=np.int64)
                self._dirty[old[old < self._base_rows]] = True
            self._grow_ids(int(ids.max()))
            self._slot_of[ids] = slots
            np.bitwise_or.at(self._alive_bits, ids >> 3, (1 << (ids & 7)).astype(np.uint8))
            self._n_alive += n
            zero = ~vectors.any(axis=1)
            if zero.any():
                self._zero[ids[zero]] = True
                self._n_zero += int(zero.sum())
            if self._ivf is not None:
                self._ivf.add_with_ids(vectors, ids)
                self._ivf_changes += n
            if self._building:
                self._added_during_build.extend(ids.tolist())

    def remove(self, ids: Sequence[int] | np.ndarray) -> None:
        """Remove ids (unknown ids are ignored): a tombstone, O(1) each, no scan of the index."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return
        with self._lock:
            self._writes += 1
            ids = np.unique(ids)
            slots = self._slots(ids)
            held = slots >= 0
            ids, slots = ids[held], slots[held]
            if not len(ids):
                return
            if self._moments is not None:
                self._moments.remove(self._vectors.gather(slots))
            self._slot_of[ids] = -1
            np.bitwise_and.at(self._alive_bits, ids >> 3, (~(1 << (ids & 7))).astype(np.uint8))
            self._slot_ids[slots] = -1
            self._free.extend(slots.tolist())
            self._n_alive -= len(ids)
            if self._n_zero:
                self._n_zero -= int(self._zero[ids].sum())
                self._zero[ids] = False
            if self._ivf is not None or self._building:
                self._tombstones.extend(ids.tolist())
                self._ivf_changes += len(ids)

    # -- maintenance: training and compaction --------------------------------------------------------
    def _wants_ann(self) -> bool:
        if self.kind == "flat":
            return False
        n = self._n_alive
        if self.kind == "ivf":
            enough = n >= _MIN_TRAIN_PER_LIST * default_nlist(n)
        else:
            enough = n >= self.ann_min
        if not enough:
            return False
        return self._ivf is None or n >= self.retrain_growth * max(self._trained_n, 1)

    def needs_maintenance(self) -> bool:
        """True when the IVF should be (re)trained or its tombstones compacted."""
        with self._lock:
            if self._building:
                return False
            return self._wants_ann() or self._needs_compaction()

    def _needs_compaction(self) -> bool:
        if self._ivf is None or not self._tombstones:
            return False
        return len(self._tombstones) >= max(self.compact_min, 0.05 * int(self._ivf.ntotal))

    def maintain(self, *, background: bool = False) -> bool:
        """Train (or retrain) the IVF index if due, else compact its tombstones if due.

        Training samples ``min(n, 64 × nlist)`` live vectors (seeded, so reproducible), trains 8-bit
        scalar quantisation and k-means centroids (FAISS ``IndexIVFScalarQuantizer``), adds every live
        vector, then swaps the new index in, adding the vectors that arrived meanwhile. Searches and writes go
        on during training (they use the previous index or the exact scan).

        Args:
            background: run in a thread and return at once (see :meth:`wait`); not a daemon thread, so the
                interpreter waits for it at exit instead of tearing FAISS down under it (as for the BM25 merge).

        Returns:
            True when work was started (or done), False when nothing was due or a build is running.
        """
        with self._lock:
            if self._building:
                return False
            if self._wants_ann():
                self._building = True
                work = self._train
            elif self._needs_compaction():
                self._compact_tombstones()
                return True
            else:
                return False
        if not background:
            work()
            return True
        self._thread = threading.Thread(target=work, name="faiss-ivf-training", daemon=False)
        self._thread.start()
        return True

    def wait(self) -> None:
        """Block until a background training (if any) has finished."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _train(self) -> None:
        import faiss

        try:
            with self._lock:
                self._added_during_build = []
                live = np.flatnonzero(self._slot_ids[: self._n_slots] >= 0)
                snapshot_ids = self._slot_ids[live].copy()
                n = len(live)
                nlist = default_nlist(n)
                rng = np.random.default_rng(0)
                sample = np.sort(rng.choice(n, size=min(n, 64 * nlist), replace=False))
                # the matrix is read under the lock only (it may be resized in place meanwhile): copies
                training = self._vectors.gather(live[sample])
            if self.omp_threads is not None:
                set_omp_threads(self.omp_threads)
            logger.info("training FAISS IVF index: %d vectors, nlist %d, %d training points", n, nlist, len(sample))
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
            )
            index.cp.seed = 1234
            index.train(training)
            del training
            for start in range(0, n, 65536):
                part = live[start : start + 65536]
                with self._lock:
                    block = self._vectors.gather(part)
                # a slot freed and reused meanwhile holds another vector now; it is indexed under its old id,
                # a tombstone by now (compacted at the swap), and the new id comes in with the later adds
                index.add_with_ids(block, snapshot_ids[start : start + 65536])
                del block
            with self._lock:
                later = np.array(self._added_during_build, dtype=np.int64)
                if len(later):
                    slots = self._slots(later)
                    later, slots = later[slots >= 0], slots[slots >= 0]
                    if len(later):
                        index.add_with_ids(self._vectors.gather(slots), later)
                self._ivf = index
                self._ivf_file = None  # a new index: the next save writes it whole
                self._trained_n = n
                self._added_during_build = []
                # every tombstone so far may be in the new lists (it was live in the snapshot or is in `later`)
                self._compact_tombstones()
            logger.info("FAISS IVF index in service: %d vectors", int(index.ntotal))
        except Exception:  # pragma: no cover - logged; searches stay exact or on the previous index
            logger.exception("FAISS IVF training failed; the dense index keeps serving from its current state")
        finally:
            with self._lock:
                self._building = False

    def _compact_tombstones(self) -> None:
        """Drop tombstoned ids from the IVF lists in one pass (caller holds the lock)."""
        import faiss

        if self._ivf is None or not self._tombstones:
            self._tombstones = [] if self._ivf is not None else self._tombstones
            return
        dead = np.unique(np.array(self._tombstones, dtype=np.int64))
        dead = dead[self._slots(dead) < 0]  # an id is never reused, but be safe
        if len(dead):
            mask = np.zeros(int(dead.max()) + 1, dtype=bool)
            mask[dead] = True
            bits = np.packbits(mask, bitorder="little")
            if self.omp_threads is not None:
                set_omp_threads(self.omp_threads)
            removed = self._ivf.remove_ids(faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits)))
            logger.debug("compacted %d tombstones out of the IVF index", removed)
        self._tombstones = []

    # -- search -------------------------------------------------------------------------------------
    def _nprobe(self, fraction: float = 1.0) -> int:
        """Lists to probe when ``fraction`` (f) of the vectors are allowed, at most nlist: ``base`` unfiltered;
        filtered, ``max(base / sqrt(f), FILTER_MIN_CANDIDATES / (f × mean list size))`` (see
        :data:`FILTER_PROBE_EXPONENT` and :data:`FILTER_MIN_CANDIDATES`).
        """
        nlist = int(self._ivf.nlist)
        base = self.nprobe if self.nprobe is not None else max(32, nlist // 16)
        if fraction >= 1.0:
            return int(min(nlist, base))
        fraction = max(fraction, 1e-9)
        list_size = max(1.0, int(self._ivf.ntotal) / nlist)
        wanted = max(base / fraction**FILTER_PROBE_EXPONENT, FILTER_MIN_CANDIDATES / (fraction * list_size))
        return int(min(nlist, math.ceil(wanted)))

    def _exact_is_cheaper(self, n_allowed: int, nprobe: int) -> bool:
        """Whether an exact scan of ``n_allowed`` rows costs less than probing ``nprobe`` IVF lists for them
        (caller holds the lock). IVF: every stored id of the probed lists is tested against the filter, the
        allowed ones are scored from their codes; exact: every allowed row is scored. See :data:`ROW_COST`."""
        if self.exact_max is not None:
            return n_allowed <= self.exact_max
        if n_allowed <= EXACT_MIN:
            return True
        scale = self.dim / 384
        scanned = int(self._ivf.ntotal) * nprobe / int(self._ivf.nlist)
        eligible = scanned * min(1.0, n_allowed / max(self._n_alive, 1))
        return n_allowed * ROW_COST * scale <= scanned + eligible * CODE_COST * scale

    @staticmethod
    def _top(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top ``k`` by score descending then id ascending (ties at the cut broken by id)."""
        if len(scores) > k:
            part = np.argpartition(-scores, k - 1)[:k]
            kth = scores[part].min()
            keep = np.flatnonzero(scores >= kth)
            ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))[:k]
        return [(int(ids[i]), float(scores[i])) for i in order]

    def _top_directed(self, ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        """:meth:`_top` of the live ``ids`` whose vector is not all zeros (caller holds the lock)."""
        if self._n_zero:
            keep = ~self._zero[ids]
            ids, scores = ids[keep], scores[keep]
        return self._top(ids, scores, k)

    def search(
        self, query: np.ndarray, k: int, allowed: RowSet | np.ndarray | None = None, *, cache: dict | None = None
    ) -> list[tuple[int, float]]:
        """Top ``k`` ids by inner product with the query, among ``allowed``.

        Exact when no IVF is in service or the allowed set is small (``exact_max``); otherwise the IVF
        proposes ``rerank × k`` candidates (skipping excluded and removed ids while it scans) and they are
        re-scored exactly from the float32 vectors.

        Args:
            query: float32 (dim,), L2-normalised.
            k: number of results wanted, >= 1.
            allowed: the ids that may be returned (the resolved metadata filter, a RowSet or int64 ids); None for all.

        Returns:
            ``(id, inner product)`` pairs (float32 products as float), score descending then id ascending;
            fewer than k when fewer vectors are eligible. All-zero vectors are never eligible (no direction,
            no evidence: module docstring).
        """
        import faiss

        allowed = as_rowset(allowed)
        raw = query
        query = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1))
        if cache is not None:
            cache["dense_query"] = (raw, query[0])  # score() of the same vector object skips the check
        if self.omp_threads is not None:
            # OpenMP's thread count is per calling thread: set it in the thread that searches (an executor
            # thread that never called this would use every core, 6-10x slower for one query)
            set_omp_threads(self.omp_threads)
        if k < 1:
            return []
        with self._lock:
            if self._n_alive == 0 or (allowed is not None and len(allowed) == 0):
                return []
            if self._ivf is None:
                return self._search_exact(query[0], k, allowed, cache)
            fraction = 1.0 if allowed is None else min(1.0, len(allowed) / self._n_alive)
            nprobe = self._nprobe(fraction)
            if allowed is not None and self._exact_is_cheaper(len(allowed), nprobe):
                return self._search_exact(query[0], k, allowed, cache)
            if allowed is not None:
                selector = allowed.faiss_selector()  # removed ids are dropped at the re-rank below
            elif self._tombstones:
                selector = self._selector_alive()
            else:
                selector = None
            # SWIG's constructor takes the fields as keywords (faiss's class_wrappers); its stubs do not say so
            params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)  # type: ignore[call-arg]
            # all-zero rows the IVF may propose are dropped at the re-rank: probe as many more (at most rerank × k)
            depth = min(self.rerank * k + min(self._n_zero, self.rerank * k), self._n_alive)
            _, labels = self._ivf.search(query, depth, params=params)
            labels = labels[0][labels[0] >= 0]
            slots = self._slots(labels)
            held = slots >= 0
            labels, slots = labels[held], slots[held]
            scores = self._vectors.dot(slots, query[0])
            return self._top_directed(labels, scores, k)

    def _search_exact(
        self, query: np.ndarray, k: int, allowed: RowSet | None, cache: dict | None = None
    ) -> list[tuple[int, float]]:
        """Exact scan over the allowed rows only (caller holds the lock). A scan of every row leaves its
        scores in ``cache`` (see :meth:`score`)."""
        # a broad set: one contiguous scan of every row, then keep the allowed live ones (scoring over 60% of the
        # rows one by one costs more than scoring them all: 0.29 vs 0.175 µs a row)
        broad = allowed is not None and len(allowed) * 5 > self._n_slots * 3
        if allowed is None or broad:
            scores = self._vectors.dot_prefix(self._n_slots, query)
            if cache is not None:
                cache["dense_scan"] = (self, self._writes, scores)
        if allowed is None:
            ids = self._slot_ids[: self._n_slots]
            if self._free:
                live = ids >= 0
                ids, scores = ids[live], scores[live]
            return self._top_directed(ids, scores, k)
        if broad:
            ids = self._slot_ids[: self._n_slots]
            keep = allowed.contains(ids)
            return self._top_directed(ids[keep], scores[keep], k)
        ids = allowed.ids
        slots = self._slots(ids)
        held = slots >= 0
        if not held.all():
            ids, slots = ids[held], slots[held]
        if not len(ids):
            return []
        return self._top_directed(ids, self._vectors.dot(slots, query), k)

    def score(self, query: np.ndarray, ids: np.ndarray, *, cache: dict | None = None) -> np.ndarray:
        """Exact inner products of the float32 (dim,) ``query`` with the vectors of int64 ``ids``.

        Returns float64 (len(ids),); ids not in the index, and ids whose vector is all zeros (no dense
        evidence: module docstring), score ``nan``. One gather and one matvec; a gather only, when ``cache``
        (a per-query dict, ``Query.cache``) holds the scores of every row from an exact :meth:`search` of the
        same query with no write since.
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        scan = cache.get("dense_scan") if cache is not None else None
        with self._lock:
            if scan is None or scan[0] is not self or scan[1] != self._writes:
                scan = None  # the cached scan scored this query (the cache is the query's) with no write since
                checked = cache.get("dense_query") if cache is not None else None
                if checked is not None and checked[0] is query:
                    query = checked[1]  # the vector search() checked
                else:
                    query = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]
            slots = self._held_slots(ids)
            if slots is not None:  # the common case: a search's candidates, every id held
                out = (
                    scan[2][slots].astype(np.float64)
                    if scan is not None
                    else self._vectors.dot(slots, query).astype(np.float64)
                )
                if self._n_zero:
                    out[self._zero[ids]] = np.nan
                return out
            out = np.full(len(ids), np.nan)
            slots = self._slots(ids)
            held = slots >= 0
            if held.any():
                out[held] = (
                    scan[2][slots[held]] if scan is not None else self._vectors.dot(slots[held], query)
                ).astype(np.float64)
                if self._n_zero:
                    zero = np.zeros(len(ids), dtype=bool)
                    zero[held] = self._zero[ids[held]]
                    out[zero] = np.nan
        return out

    def _held_slots(self, ids: np.ndarray) -> np.ndarray | None:
        """The slots of int64 ``ids`` when every one is held, else None (a few numpy calls: no -1 fill);
        caller holds the lock."""
        slot_of = self._slot_of
        if not len(ids):
            return None
        low, high = id_bounds(ids)
        if low < 0 or high >= len(slot_of):
            return None
        slots = slot_of.take(ids)
        return slots if id_bounds(slots)[0] >= 0 else None

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """float32 (len(ids), dim) copies of the vectors of int64 ``ids``. Raises KeyError for an id not held."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        with self._lock:
            slots = self._slots(ids)
            if (slots < 0).any():
                raise KeyError(f"ids not in the dense index: {ids[slots < 0][:5].tolist()}")
            return self._vectors.gather(slots)

    def surprise(
        self, query: np.ndarray, top: float, n: int | None = None, *, cache: dict | None = None
    ) -> float | None:
        """The surprise of the inner product ``top`` as the query's best, in nats
        (:func:`~hybrid_memory.engines.calibration.gaussian_surprise`): the chance scores are normal with the mean and
        variance of the float32 (dim,) ``query``'s inner products over every live vector (all-zero ones left out;
        exact moments, :class:`~hybrid_memory.engines.calibration.VectorMoments`), among ``n`` documents (the allowed
        set's size; None: the live vectors). None with fewer than two directed vectors, no spread, or vectors of
        more than :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM` dimensions (no moments kept). Costs one
        (dim, dim) matvec, or none when :meth:`prepare_surprise` of the same query object left it in ``cache``."""
        moments = self._moments
        if moments is None:
            return None
        held = cache.get("dense_chance") if cache is not None else None
        if held is not None and held[0] is query and held[1] is moments and held[2] == moments.version:
            chance = held[3]  # prepared by prepare_surprise (another thread, during this index's search)
        else:
            chance = moments.chance(np.asarray(query, dtype=np.float32).reshape(-1))
        if chance is None:
            return None
        return gaussian_surprise(top, chance[0], chance[1], moments.count if n is None else n)

    def prepare_surprise(self, query: np.ndarray, *, cache: dict) -> None:
        """Work out what :meth:`surprise` of the float32 (dim,) ``query`` needs before the top is known (the
        chance moments, the (dim + 1, dim) matvec) and keep it in ``cache`` (a per-query dict) for the same query
        object and the same moments; :meth:`surprise` then costs a few float operations. The hybrid searcher calls
        it in a worker thread that finished its own engine while this index still searches in the caller's."""
        moments = self._moments
        if moments is None:
            return
        version = moments.version
        chance = moments.chance(np.asarray(query, dtype=np.float32).reshape(-1))
        cache["dense_chance"] = (query, moments, version, chance)

    # -- persistence --------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """What must match for a saved index to be reused as is."""
        return {"dim": self.dim, "metric": "inner_product", "codes": "SQ8"}

    def save(self, directory: Path, previous: Path | None = None) -> None:
        """Write the index into the empty folder ``directory`` (created); numpy and FAISS formats, no pickle.

        Files: ``vectors.<token>.npy`` float32 (rows, dim), the *base*: the matrix as it was at some save;
        ``delta_slots.npy`` int64 (m,) and ``delta_vectors.npy`` float32 (m, dim), the rows written since that
        base (overwritten slots and appended ones); ``slot_ids.npy`` int64 (n_slots,), the id of every slot
        (-1 free); ``moments.npy`` float64 (dim + 1, dim), the exact corpus moments of the live vectors (dim at
        most :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM`)
        (:class:`~hybrid_memory.engines.calibration.VectorMoments`, their count in the manifest); ``ivf.<token>.faiss``
        (``faiss.write_index``) when an IVF is in service; ``manifest.json``, which records every other file's
        CRC-32 per 64 MiB block (:mod:`hybrid_memory._checksums`), checked by :meth:`load`.

        Files named with a token never change once written (a log-structured layout, as Lucene's segments).
        When ``previous`` (the folder the last save went to) still holds this index's base and IVF files, they
        are hard-linked into ``directory`` instead of written again, so a save after a few writes costs the
        delta, not the 1.5 GB of a million 384-d vectors. The base is written anew once the delta exceeds
        :data:`DELTA_FRACTION` of the rows; the IVF once its adds and removals since it was written exceed
        :data:`IVF_REWRITE_FRACTION` of its entries (they are replayed on :meth:`load`, see there), or after a
        retraining. Without hard links (another file system), everything is written.

        Waits for a running training first, so the saved IVF is the one in service.

        Args:
            directory: a new, empty folder; the caller swaps it in whole (``HybridMemory`` does, under a file
                lock), so a reader never sees a half-written index.
            previous: the folder of the last save (may be missing), to link unchanged files from.
        """
        import faiss

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.wait()
        with self._lock:
            n = self._n_slots
            base_name, base_rows = self._base_name, self._base_rows
            delta = np.concatenate([np.flatnonzero(self._dirty[: min(base_rows, n)]), np.arange(base_rows, n)])
            linked = (
                base_name is not None
                and base_rows <= n
                and len(delta) <= DELTA_FRACTION * max(n, 1)
                and _link(previous, directory, base_name)
            )
            if not linked:
                base_name, base_rows = f"vectors.{uuid.uuid4().hex}.npy", n
                delta = np.zeros(0, dtype=np.int64)
                self._vectors.save_prefix(directory / base_name, n)
            delta = delta.astype(np.int64)
            np.save(directory / "delta_slots.npy", delta, allow_pickle=False)
            np.save(directory / "delta_vectors.npy", self._vectors.gather(delta), allow_pickle=False)
            np.save(directory / "slot_ids.npy", self._slot_ids[:n], allow_pickle=False)
            if self._moments is not None:
                np.save(directory / "moments.npy", self._moments.to_array(), allow_pickle=False)
            ivf_file = None
            if self._ivf is not None:
                ivf_file = self._ivf_file
                small = self._ivf_changes <= max(IVF_REWRITE_MIN, IVF_REWRITE_FRACTION * int(self._ivf.ntotal))
                if not (ivf_file is not None and small and _link(previous, directory, ivf_file)):
                    self._compact_tombstones()
                    ivf_file = f"ivf.{uuid.uuid4().hex}.faiss"
                    faiss.write_index(self._ivf, str(directory / ivf_file))
                    self._ivf_changes = 0
            live = self._slot_ids[:n][self._slot_ids[:n] >= 0]
            written = [
                base_name,
                "delta_slots.npy",
                "delta_vectors.npy",
                "slot_ids.npy",
                *(["moments.npy"] if self._moments is not None else []),
                *([ivf_file] if ivf_file else []),
            ]
            # token-named files never change: a linked one keeps the checksum it had when written or verified
            crcs = file_checksums(
                directory,
                [name for name in written if name],
                {name: v for name, v in self._file_crcs.items() if name in (base_name, ivf_file)},
            )
            self._file_crcs = {name: crcs[name] for name in (base_name, ivf_file) if name}
            manifest = {
                "format_version": _FORMAT_VERSION,
                "config": self.config(),
                "n_slots": n,
                "n_alive": int(len(live)),
                "ids_sum": int(live.sum()),
                "vectors": base_name,
                "base_rows": base_rows,
                "delta_rows": int(len(delta)),
                "ivf": ivf_file,
                "has_ivf": ivf_file is not None,
                "trained_n": self._trained_n,
                "zero_ids": np.flatnonzero(self._zero).tolist(),  # live ids whose vector is all zeros
                "moments_count": None if self._moments is None else self._moments.count,
                "crc32": crcs,  # per file, per 64 MiB block: checked on load (_checksums.verify_files)
            }
            (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
            if not linked:
                self._base_name, self._base_rows = base_name, base_rows
                self._dirty = np.zeros(base_rows, dtype=bool)
            self._ivf_file = ivf_file

    def load(self, directory: Path) -> bool:
        """Read an index written by :meth:`save` (or by format 1: ``vectors.npy``, ``ivf.faiss``), without
        retraining.

        The base vectors are read straight into a matrix with room to grow, the delta rows written over them.
        The IVF is read with ``faiss.read_index``, then brought to the saved live ids: entries of ids no longer
        live are removed, live ids it lacks are added from the matrix (rowids are never reused, see
        ``store.py``, so an id's vector never changes while it lives).

        Every file is first checked against the CRC-32s its manifest records (saves written before checksums
        have none and are read unchecked): a file damaged in a way that keeps its shape is caught here.

        Returns:
            False (index left empty, a WARNING names the damaged file) if it is missing, unreadable, of another
            dimension, inconsistent or does not match its checksums; the caller then rebuilds it from the
            stored vectors.
        """
        import faiss

        directory = Path(directory)
        if not (directory / "manifest.json").exists():
            return False
        self.wait()
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
            version = manifest.get("format_version")
            if version not in (1, _FORMAT_VERSION) or manifest.get("config") != self.config():
                raise ValueError("saved with another format or configuration")
            recorded = manifest.get("crc32")  # damage that keeps the shapes: a rebuild, not a ranking
            verify_files(directory, None if recorded is None else {k: v for k, v in recorded.items() if k != MOMENTS})
            n_slots = int(manifest["n_slots"])
            slot_ids = np.load(directory / "slot_ids.npy", allow_pickle=False).astype(np.int64)
            if slot_ids.shape != (n_slots,):
                raise ValueError(f"{len(slot_ids)} slot ids, manifest says {n_slots}")
            base_name = manifest["vectors"] if version >= 2 else "vectors.npy"
            base_rows = int(manifest["base_rows"]) if version >= 2 else n_slots
            vectors = _Rows(self.dim, _map_npy(directory / base_name, (base_rows, self.dim)))
            vectors.reserve(n_slots)
            if version >= 2:
                delta = np.load(directory / "delta_slots.npy", allow_pickle=False)
                delta_vectors = np.load(directory / "delta_vectors.npy", allow_pickle=False)
                if delta.shape != (manifest["delta_rows"],) or delta_vectors.shape != (len(delta), self.dim):
                    raise ValueError("delta files do not match the manifest")
                if len(delta) and (delta.min() < 0 or delta.max() >= n_slots):
                    raise ValueError("delta rows outside the matrix")
                if not _distinct(delta) or int((delta >= base_rows).sum()) != n_slots - base_rows:
                    raise ValueError("the delta does not hold every row beyond the base exactly once")
                vectors.put(delta, delta_vectors)
                del delta_vectors
            else:
                delta = np.zeros(0, dtype=np.int64)
            live_slots = np.flatnonzero(slot_ids >= 0)
            live = slot_ids[live_slots]
            if len(live) != manifest["n_alive"] or int(live.sum()) != manifest["ids_sum"] or not _distinct(live):
                raise ValueError("id map does not match the manifest (files from two saves)")
            zero_ids = _zero_ids(manifest, live, live_slots, vectors)
            moments = _load_moments(directory, manifest, self.dim, len(live) - len(zero_ids), vectors, live_slots)
            ivf, ivf_file, replayed = None, None, 0
            if manifest["has_ivf"]:
                ivf_file = manifest["ivf"] if version >= 2 else "ivf.faiss"
                ivf = faiss.read_index(str(directory / ivf_file))
                if not isinstance(ivf, faiss.IndexIVFScalarQuantizer) or ivf.d != self.dim:
                    raise ValueError(f"unexpected FAISS index {type(ivf).__name__} of dimension {ivf.d}")
                replayed = _reconcile_ivf(ivf, live, lambda rows: vectors.gather(live_slots[rows]), self.omp_threads)
        except Exception as exc:  # noqa: BLE001 - any damage means: rebuild from the store
            logger.warning("saved dense index %s is unreadable (%s); it will be rebuilt", directory, exc)
            return False
        with self._lock:
            self._reset()
            self._vectors = vectors
            self._slot_ids = np.full(vectors.capacity, -1, dtype=np.int64)
            self._slot_ids[:n_slots] = slot_ids
            self._n_slots = n_slots
            self._free = np.flatnonzero(slot_ids < 0)[::-1].tolist()
            if len(live):
                self._grow_ids(int(live.max()))
                self._slot_of[live] = live_slots
                mask = np.zeros(len(self._slot_of), dtype=bool)
                mask[live] = True
                self._alive_bits = np.packbits(mask, bitorder="little")
                self._zero[zero_ids] = True
            self._n_alive = len(live)
            self._n_zero = len(zero_ids)
            self._moments = moments
            self._ivf = ivf
            self._trained_n = int(manifest["trained_n"]) if ivf is not None else 0
            if version >= 2:  # format 1 files carry no token: the next save writes a base of its own
                self._base_name, self._base_rows = base_name, base_rows
                self._dirty = np.zeros(base_rows, dtype=bool)
                self._dirty[delta[delta < base_rows]] = True
                self._ivf_file = ivf_file
                self._ivf_changes = replayed
                recorded = manifest.get("crc32") or {}
                self._file_crcs = {
                    name: list(recorded[name])
                    for name in (base_name, ivf_file)
                    if isinstance(name, str) and name in recorded
                }
        return True


MOMENTS = "moments.npy"
"""The file of the saved corpus moments: a damaged one is counted afresh from the vectors, not a rebuild."""


def _load_moments(
    directory: Path, manifest: dict[str, Any], dim: int, directed: int, vectors: _Rows, live_slots: np.ndarray
) -> VectorMoments | None:
    """The saved moments of the live vectors (``moments.npy``), or, when a save has none (written before they
    existed) or they count another number of directed vectors than the ``directed`` live ones, the moments
    counted afresh from the live rows, in blocks of 65,536 (a few seconds at a million 384-d vectors); likewise,
    with a warning, when the file is damaged. None above :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM`."""
    if dim > MOMENTS_MAX_DIM:
        return None
    moments = VectorMoments(dim)
    path = directory / MOMENTS
    if path.exists() and manifest.get("moments_count") == directed:
        try:
            recorded = (manifest.get("crc32") or {}).get(MOMENTS)
            if recorded is not None and file_checksums(directory, [MOMENTS])[MOMENTS] != recorded:
                raise ValueError("it does not match its CRC-32")
            moments.load_array(np.load(path, allow_pickle=False), directed)
            return moments
        except (OSError, ValueError) as exc:  # damaged: the vectors still give them exactly
            logger.warning("saved corpus moments %s are unreadable (%s); counting them from the vectors", path, exc)
            moments = VectorMoments(dim)
    for start in range(0, len(live_slots), 65_536):
        moments.add(vectors.gather(live_slots[start : start + 65_536]))
    return moments


def _zero_ids(manifest: dict[str, Any], live: np.ndarray, live_slots: np.ndarray, vectors: _Rows) -> np.ndarray:
    """int64: the live ids whose vector is all zeros, from the manifest (saves since the zero-vector rule), else
    found by one pass over the live rows (an older save). Raises ValueError for an id that is not live."""
    if "zero_ids" in manifest:
        zero = np.asarray(manifest["zero_ids"], dtype=np.int64).reshape(-1)
        if len(zero) and not np.isin(zero, live).all():
            raise ValueError("zero_ids names ids that are not live")
        return zero
    found = [
        live[start : start + 65_536][~vectors.gather(live_slots[start : start + 65_536]).any(axis=1)]
        for start in range(0, len(live), 65_536)
    ]
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, dtype=np.int64)


def _distinct(ids: np.ndarray) -> bool:
    """Whether the int64 ids (all >= 0) are distinct: one boolean mask by id, O(n + max id), no sort."""
    if not len(ids):
        return True
    seen = np.zeros(int(ids.max()) + 1, dtype=bool)
    seen[ids] = True
    return int(seen.sum()) == len(ids)


def _link(previous: Path | None, directory: Path, name: str) -> bool:
    """Hard-link ``previous / name`` into ``directory``; False when there is no such file or no hard links."""
    if previous is None:
        return False
    try:
        os.link(Path(previous) / name, Path(directory) / name)
    except OSError:
        return False
    return True


def _map_npy(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """A copy-on-write memory map (``numpy.load(mmap_mode="c")``) of a float32 C-order ``.npy`` file of
    ``shape``: nothing is read until used, and rows written in memory never reach the file.

    Raises:
        ValueError: the file holds another dtype, order or shape, or is shorter than its header says.
    """
    if shape[0] == 0:
        return np.zeros(shape, dtype=np.float32)
    array = np.load(path, mmap_mode="c", allow_pickle=False)
    if array.dtype != np.float32 or not array.flags.c_contiguous or array.shape != shape:
        raise ValueError(f"{Path(path).name} holds {array.dtype} {array.shape}, expected float32 {shape}")
    # a plain ndarray view (the map stays open through ``.base``): slices and gathers of an ``np.memmap`` are
    # memmaps, each paying ``memmap.__array_finalize__``
    return array.view(np.ndarray)


GROWTH_MIN_BYTES = 1 << 20
"""The least a growing vector tail adds, in bytes (1 MiB: 683 rows at 384 dimensions, 86 at 3,072)."""


class _Rows:
    """float32 (capacity, dim) rows by slot, in two parts: a *head*, the memory-mapped base file of the last
    load (copy-on-write, so a reopen reads nothing up front and a row written in memory stays private), and a
    growable in-memory *tail* for the slots after it.

    The tail grows in place (``ndarray.resize``: ``realloc``, which glibc serves with ``mremap`` for large
    blocks, so neither a copy nor a second matrix is held; numpy zero-fills the rows it adds, so reserved rows
    are resident: :meth:`reserve` keeps the slack small).
    That is safe because no view of it outlives the index's lock. Inner products of given rows use
    ``faiss.fvec_inner_products_by_idx`` on each part: no gathered copy (2.6x less CPU than
    ``matrix[slots] @ query`` for 100k of 1M rows, which allocates and faults in 150 MB).
    """

    def __init__(self, dim: int, head: np.ndarray | None = None) -> None:
        self.dim = dim
        self.head = head if head is not None else np.zeros((0, dim), dtype=np.float32)
        self.split = len(self.head)
        self.tail = np.zeros((0, dim), dtype=np.float32)

    @property
    def capacity(self) -> int:
        """Slots with room (head rows + tail rows)."""
        return self.split + len(self.tail)

    def reserve(self, needed: int) -> None:
        """Room for slots ``< needed``, plus ``max(needed // 8, rows of GROWTH_MIN_BYTES)`` more when the tail has
        to grow (geometric growth, so n single adds cost O(log n) reallocations).

        ``ndarray.resize`` zero-fills the rows it adds, so every reserved row is resident: the slack is at most
        an eighth of the rows, or 1 MiB for a small memory. (A fixed slack of 65,536 rows, as before, held
        100 MB of zeros for a 10-chunk memory at 384 dimensions and 805 MB at 3,072.)
        """
        if needed <= self.capacity:
            return
        row_bytes = 4 * self.dim
        size = needed - self.split + max(needed // 8, -(-GROWTH_MIN_BYTES // row_bytes))
        try:
            self.tail.resize((size, self.dim), refcheck=False)
        except ValueError:  # not its own memory: copy
            tail = np.empty((size, self.dim), dtype=np.float32)
            tail[: len(self.tail)] = self.tail
            self.tail = tail

    def put(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        """Write float32 (len(slots), dim) ``vectors`` into the int64 ``slots`` (< capacity)."""
        slots = np.asarray(slots, dtype=np.int64)
        in_head = slots < self.split
        if in_head.any():
            self.head[slots[in_head]] = vectors[in_head]
        if not in_head.all():
            self.tail[slots[~in_head] - self.split] = vectors[~in_head]

    def gather(self, slots: np.ndarray) -> np.ndarray:
        """float32 (len(slots), dim), C-contiguous: a copy of the rows ``slots``."""
        slots = np.asarray(slots, dtype=np.int64)
        in_head = slots < self.split
        if not in_head.any():
            return self.tail[slots - self.split]
        if in_head.all():
            return np.ascontiguousarray(self.head[slots])
        out = np.empty((len(slots), self.dim), dtype=np.float32)
        out[in_head] = self.head[slots[in_head]]
        out[~in_head] = self.tail[slots[~in_head] - self.split]
        return out

    def dot(self, slots: np.ndarray, query: np.ndarray) -> np.ndarray:
        """float32 (len(slots),): inner products of the rows ``slots`` (int64, valid) with the float32 (dim,) query."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        query = np.ascontiguousarray(query, dtype=np.float32)
        out = np.empty(len(slots), dtype=np.float32)
        if not len(slots):
            return out
        low, high = id_bounds(slots)
        if high < self.split:
            _dot_by_index(out, query, self.head, slots)
        elif low >= self.split:
            _dot_by_index(out, query, self.tail, slots - self.split)
        else:
            in_head = slots < self.split
            part = np.empty(int(in_head.sum()), dtype=np.float32)
            _dot_by_index(part, query, self.head, slots[in_head])
            out[in_head] = part
            part = np.empty(len(slots) - len(part), dtype=np.float32)
            _dot_by_index(part, query, self.tail, slots[~in_head] - self.split)
            out[~in_head] = part
        return out

    def dot_prefix(self, n: int, query: np.ndarray) -> np.ndarray:
        """float32 (n,): inner products of the rows ``0 .. n - 1`` with the float32 (dim,) query.

        By ``faiss.fvec_inner_products_ny`` (SIMD, in the calling thread), not ``matrix @ query``: numpy hands a
        matrix-vector product to OpenBLAS's thread pool, whose threads, on a machine whose other core is busy
        (the other engine's thread, another process), wait to be scheduled; measured here at load 3 on 2
        cores, a dense search over 5k rows took 8.2 ms p50 that way and 2.8 ms with one BLAS thread. One query's
        scan is bound by memory bandwidth, so a second thread buys little when it is free.
        """
        query = np.ascontiguousarray(query, dtype=np.float32)
        out = np.empty(n, dtype=np.float32)
        head = min(n, self.split)
        _dot_rows(out[:head], query, self.head)
        if n > self.split:
            _dot_rows(out[head:], query, self.tail)
        return out

    def save_prefix(self, path: Path, n: int) -> None:
        """Write rows ``0 .. n - 1`` as a float32 (n, dim) ``.npy`` file (what ``numpy.save`` writes), part by part."""
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (n, self.dim)})
            for part in (self.head[: min(n, self.split)], self.tail[: max(0, n - self.split)]):
                for start in range(0, len(part), 65_536):
                    chunk = np.ascontiguousarray(part[start : start + 65_536])
                    fh.write(memoryview(chunk).cast("B"))  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only


_omp = threading.local()


def set_omp_threads(n: int) -> None:
    """``faiss.omp_set_num_threads(n)`` for the calling thread (OpenMP's count is per thread), only when this
    thread's count, as last set through here, differs: every FAISS call releases the GIL (SWIG ``-threads``)
    and must take it back, which waits while another thread runs Python (up to ``sys.getswitchinterval()``,
    5 ms), so a call per search cost the concurrent searches more than the call itself. Every setter of the
    count in this library goes through here."""
    if getattr(_omp, "threads", None) != n:
        import faiss

        faiss.omp_set_num_threads(n)
        _omp.threads = n


def _dot_rows(out: np.ndarray, query: np.ndarray, rows: np.ndarray) -> None:
    """``out[i] = rows[i] · query`` for the first ``len(out)`` rows (float32, C-contiguous rows), by
    ``faiss.fvec_inner_products_ny``."""
    import faiss

    if len(out):
        faiss.fvec_inner_products_ny(  # type: ignore[attr-defined]  # in faiss's SWIG module, not in its stubs
            faiss.swig_ptr(out), faiss.swig_ptr(query), faiss.swig_ptr(rows), rows.shape[1], len(out)
        )


def _dot_by_index(out: np.ndarray, query: np.ndarray, rows: np.ndarray, index: np.ndarray) -> None:
    """``out[i] = rows[index[i]] · query`` (float32, int64 index) by ``faiss.fvec_inner_products_by_idx``."""
    import faiss

    index = np.ascontiguousarray(index, dtype=np.int64)  # bound here: the pointer below must not outlive it
    if len(index):
        faiss.fvec_inner_products_by_idx(  # type: ignore[attr-defined]  # in faiss's SWIG module, not in its stubs
            faiss.swig_ptr(out),
            faiss.swig_ptr(query),
            faiss.swig_ptr(rows),
            faiss.swig_ptr(index),
            rows.shape[1],
            1,
            len(index),
        )


def _ivf_ids(index: Any) -> np.ndarray:
    """Every id stored in an IVF index's inverted lists, int64 (ntotal,), in list order."""
    import faiss

    invlists = index.invlists
    parts = []
    for list_no in range(index.nlist):
        size = invlists.list_size(list_no)
        if size:
            parts.append(faiss.rev_swig_ptr(invlists.get_ids(list_no), size).copy())
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _reconcile_ivf(index: Any, live: np.ndarray, vectors_of: Any, omp_threads: int | None) -> int:
    """Bring a loaded IVF to hold exactly the int64 ids ``live``: remove entries of other ids, add the live ids
    it lacks (``vectors_of(positions)`` gives the float32 vectors of ``live[positions]``). Returns how many
    entries changed."""
    import faiss

    held = _ivf_ids(index)
    if len(held) and held.min() < 0:
        raise ValueError("the IVF index holds a negative id")
    size = int(max(held.max() if len(held) else 0, live.max() if len(live) else 0)) + 1
    in_ivf = np.zeros(size, dtype=bool)  # boolean masks by id: O(n), no sort or hash of a million ids
    in_ivf[held] = True
    if int(in_ivf.sum()) != len(held):
        raise ValueError("the IVF index holds an id twice")
    is_live = np.zeros(size, dtype=bool)
    is_live[live] = True
    extra = held[~is_live[held]]
    missing = ~in_ivf[live]
    del in_ivf, is_live
    if omp_threads is not None:
        set_omp_threads(omp_threads)
    if len(extra):
        mask = np.zeros(int(extra.max()) + 1, dtype=bool)
        mask[extra] = True
        bits = np.packbits(mask, bitorder="little")
        index.remove_ids(faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits)))
    if missing.any():
        rows = np.flatnonzero(missing)
        index.add_with_ids(np.ascontiguousarray(vectors_of(rows)), live[rows])
    return int(len(extra) + missing.sum())
