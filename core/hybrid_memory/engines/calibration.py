"""Calibration of an engine's top hit against chance: its *surprise*, in nats, the same unit for every engine.

The default fusion weighs each engine per query by the evidence its top hit brings against chance (its surprise,
below); without that it weighs it by how confident its list looks (``top_outlier``, scale-free). A scale-free
measure cannot see an engine that is weak on a whole corpus (an embedder used outside its domain,
or BM25 under vocabulary mismatch): a list of compressed, noisy cosines looks as peaked as a good one
(``benchmarks/fusion_robustness.py``). The surprise of the top hit asks instead how many of the ``n`` documents
the query may return would score at least that high *by chance*, under a null model of the engine's scores over
the corpus::

    S = -(ln n + ln P_null(score >= top))          (nats; about 0 when the top is what chance gives)

``n x P`` is the expected number of chance documents at or above the top, so ``S = -ln(n P)``; a clean engine's
top lies 6-18 nats out on the sets of ``benchmarks/fusion_eval.py``. The nulls (both measured offline in
``benchmarks/dense_calibration_trial.py`` before becoming the default):

* dense: the inner products of the query with the stored vectors are Gaussian with the corpus mean ``q . mu`` and
  variance ``q' Sigma q`` (:class:`VectorMoments` keeps ``mu`` and ``Sigma`` exactly); ``P = Phi_c(z)``;
* BM25: term independence, the binary independence model's assumption (Robertson and Spärck Jones 1976,
  "Relevance weighting of search terms"): a random document holds each of the query tokens ``T`` that the top
  document holds with probability ``df_t / N``, independently; ``P = prod_t df_t / N``.

Everything here is a pure function of counts; the engines supply them (``BM25Index.surprise``,
``FaissIndex.surprise``) and the fusion reads the nats (``hybrid_memory.fusion.methods.fuse_adaptive``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable

import numpy as np

__all__ = ["MOMENTS_MAX_DIM", "QUANTUM", "VectorMoments", "gaussian_surprise", "term_surprise"]

QUANTUM = 2.0**-10
"""Grid the moments read vector entries on: ``rint(v / QUANTUM)``, integers in [-1024, 1024] for unit vectors."""

_CHUNK = 16_384
"""Rows per product in :meth:`VectorMoments.add` (each product sums at most ``_CHUNK x 2^20`` < 2^35: exact)."""

MOMENTS_MAX_DIM = 1024
"""Vectors of at most this dimension get exact corpus moments (``FaissIndex`` keeps a :class:`VectorMoments`): a
(dim, dim) float64 sum is 1.2 MB at 384 and 8 MB at 1024, but 75 MB at 3072, with a write costing a (dim, dim)
update and a search reading a (dim, dim) block. Above it the dense engine reports no surprise, and the default
fusion then runs uncalibrated (``fuse_adaptive``)."""

_RANK_ONE_MAX = 16
"""Up to this many rows, :meth:`VectorMoments.add` / ``remove`` update the sums row by row in place (BLAS ``dger``)."""


def gaussian_surprise(top: float, mean: float, variance: float, n: int) -> float | None:
    """Surprise of a top score ``top`` among ``n`` >= 1 documents whose chance scores are normal(mean, variance)::

        S = -(ln n + ln Phi_c(z)),   z = (top - mean) / sqrt(variance)

    ``Phi_c`` is the standard normal upper tail (``math.erfc``, and ``scipy.special.log_ndtr(-z)`` far in the
    tail, where ``erfc`` underflows).
    Returns nats, or None when ``variance`` <= 0 (every document scores alike: nothing to judge by).
    """
    if not variance > 0:
        return None
    z = (float(top) - float(mean)) / math.sqrt(float(variance))
    return -(math.log(max(int(n), 1)) + _log_upper_tail(z))


def _log_upper_tail(z: float) -> float:
    """``ln Phi_c(z)``: ``ln(erfc(z / sqrt 2) / 2)`` while that is a normal float (z < 26), else scipy's
    ``log_ndtr(-z)`` (its asymptotic series), which costs a ufunc call."""
    if z < 26.0:
        return math.log(0.5 * math.erfc(z / math.sqrt(2.0)))
    from scipy.special import log_ndtr

    return float(log_ndtr(-z))


def term_surprise(dfs: Iterable[int], n_docs: int, n: int) -> float | None:
    """Surprise of a top BM25 document holding the query tokens of document frequencies ``dfs`` (each >= 1, over
    a corpus of ``n_docs`` documents), among the ``n`` >= 1 documents the query may return::

        S = -(ln n + sum_t ln(df_t / N))

    Returns nats, or None when ``dfs`` is empty (the top holds no query token: nothing matched). The same bits
    for ``dfs`` in any order (the logs are summed by ``math.fsum``, correctly rounded): the embedded index lists
    the top's tokens by text, the Qdrant engine by sparse index, and a plain float sum differed in its last bit.
    """
    dfs = list(dfs)
    if not dfs or n_docs < 1:
        return None
    log = math.log
    return len(dfs) * log(n_docs) - log(max(n, 1)) - math.fsum(map(log, dfs))


class VectorMoments:
    """Count, sum and sum of outer products of stored vectors, exact under any order of adds and removes.

    The dense surprise needs the mean ``mu`` and the covariance ``Sigma`` (population) of the corpus's vectors.
    Running float sums would drift under adds and removes, and two processes applying the same changes in
    another order would disagree. So each vector ``v`` (float32 (dim,), entries in [-1, 1]: unit vectors) is
    read on a grid, ``u = rint(v / QUANTUM)``, integers in [-1024, 1024], and the sums of ``u`` and of ``u u'``
    are kept in float64, which holds every integer below 2^53 exactly: every product is at most 2^20, so up to
    2^33 vectors sum without rounding, in any order, by BLAS or not. Adding and removing the same vectors
    returns the sums to their exact former values, and every process reading the same store holds the same
    bits. The grid moves an entry by at most 2^-11, far below what a chance level needs.

    All-zero vectors (no direction, never returned by the dense index) are left out.

    Thread-safe for one writer at a time (the dense index's lock); :meth:`chance` reads a consistent snapshot.
    """

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = dim
        self.count = 0
        self._sum = np.zeros(dim, dtype=np.float64)
        self._outer = np.zeros((dim, dim), dtype=np.float64)
        self._scaled: tuple[int, np.ndarray] | None = None  # (version, float32 (dim + 1, dim): mean, E[u u'])
        self._version = 0
        self._lock = threading.Lock()

    def add(self, vectors: np.ndarray) -> None:
        """Count float32 (m, dim) vectors in (all-zero rows are skipped)."""
        self._update(vectors, 1.0)

    def remove(self, vectors: np.ndarray) -> None:
        """Count float32 (m, dim) vectors out; they must have been added (all-zero rows are skipped)."""
        self._update(vectors, -1.0)

    def _update(self, vectors: np.ndarray, sign: float) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        directed = vectors.any(axis=1)
        if not directed.all():
            vectors = vectors[directed]
        if not len(vectors):
            return
        grid = np.rint(vectors.astype(np.float64) / QUANTUM)
        if len(grid) <= _RANK_ONE_MAX:
            # a few rows (an agent's single write): rank-1 updates in place (BLAS dger, about 30 us a row at dim 384)
            # instead of a (dim, dim) product and a pass to add it (about 0.6 ms)
            from scipy.linalg.blas import dger

            with self._lock:
                for row in grid:
                    dger(sign, row, row, a=self._outer.T, overwrite_a=True)  # symmetric: the transpose is the same
                self._sum += sign * grid.sum(axis=0)
                self.count += int(sign) * len(grid)
                self._version += 1
            return
        total = grid.sum(axis=0)
        outer = np.zeros((self.dim, self.dim), dtype=np.float64)
        for start in range(0, len(grid), _CHUNK):
            block = grid[start : start + _CHUNK]
            outer += block.T @ block
        with self._lock:
            if sign > 0:
                self._sum += total
                self._outer += outer
            else:
                self._sum -= total
                self._outer -= outer
            self.count += int(sign) * len(grid)
            self._version += 1

    @property
    def version(self) -> int:
        """Counts the changes (adds and removes) so far: equal versions of one instance hold equal moments."""
        return self._version

    def chance(self, query: np.ndarray) -> tuple[float, float] | None:
        """(mean, variance) of the inner products of the float32 (dim,) ``query`` with the counted vectors::

            mean = q . mu,    variance = q' Sigma q = E[(q . v)^2] - mean^2

        (population moments over the grid values, times ``QUANTUM`` and ``QUANTUM^2``); the variance is 0 when it
        lies below 1e-4 of the mean square (float32 rounding, not a spread). None when fewer than two vectors are
        counted. Costs one (dim + 1, dim) float32 matvec (FAISS's); the scaled matrix is rebuilt once after each
        change.
        """
        with self._lock:
            if self.count < 2:
                return None
            scaled = self._scaled
            if scaled is None or scaled[0] != self._version:
                n = float(self.count)
                rows = np.empty((self.dim + 1, self.dim), dtype=np.float32)  # the mean, then E[u u']
                rows[0] = self._sum * (QUANTUM / n)
                rows[1:] = self._outer * (QUANTUM * QUANTUM / n)
                scaled = self._scaled = (self._version, rows)
        rows = scaled[1]
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        # one pass of FAISS's single-threaded SIMD inner products gives q . mu and E[u u'] q; not numpy's BLAS,
        # whose matvec runs on every core (and OpenBLAS spins its threads after it) beside the other engine
        import faiss

        products = np.empty(self.dim + 1, dtype=np.float32)
        faiss.fvec_inner_products_ny(  # type: ignore[attr-defined]  # in faiss's SWIG module, not in its stubs
            faiss.swig_ptr(products), faiss.swig_ptr(q), faiss.swig_ptr(rows), self.dim, self.dim + 1
        )
        mu = float(products[0])
        expected_square = float(np.dot(products[1:], q))
        variance = expected_square - mu * mu
        # float32 products carry a relative error of some 1e-6: a variance below 1e-4 of the mean square is
        # that rounding, not a spread (every vector scores alike); real corpora lie near 0.2
        return mu, variance if variance > 1e-4 * expected_square else 0.0

    # -- persistence --------------------------------------------------------------------------------
    def to_array(self) -> np.ndarray:
        """float64 (dim + 1, dim): the sum of grid vectors, then the sum of their outer products (exact
        integers); the count is kept by the caller (``FaissIndex.save`` writes it into its manifest)."""
        with self._lock:
            return np.vstack([self._sum[None, :], self._outer])

    def load_array(self, array: np.ndarray, count: int) -> None:
        """Set the sums from :meth:`to_array`'s output and ``count``.

        Raises:
            ValueError: the array is not float64 (dim + 1, dim) of integers, or ``count`` < 0.
        """
        array = np.asarray(array)
        if array.shape != (self.dim + 1, self.dim) or array.dtype != np.float64 or count < 0:
            raise ValueError(f"moments must be float64 ({self.dim + 1}, {self.dim}) with a count >= 0")
        if not np.array_equal(array, np.rint(array)):
            raise ValueError("moments must be integer sums")
        with self._lock:
            self._sum = array[0].copy()
            self._outer = array[1:].copy()
            self.count = int(count)
            self._version += 1
