"""The engine seam: what the hybrid searcher asks of a retrieval engine, and the sets it passes them.

Data flows one way: the store resolves a metadata filter to a :class:`RowSet` of document ids, the
:class:`~hybrid_memory.search.searcher.HybridSearcher` hands one :class:`Query` and that set to every
:class:`Engine`, and fuses what they return. Engines know nothing of the store, of chunk ids or of
fusion; they rank int64 document ids (the store's rowids, or any other dense id space such as the graph
layer's report numbers).

Two engines ship with the core: :class:`SparseEngine` (BM25 over :class:`~hybrid_memory.engines.bm25.index.BM25Index`)
and :class:`DenseEngine` (inner product over :class:`~hybrid_memory.engines.dense.index.FaissIndex`, embedding the query
with an :class:`~hybrid_memory.embedders.Embedder` unless the caller passed a vector).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..embedders import l2_normalize
from ..engines.rowset import RowSet

if TYPE_CHECKING:  # pragma: no cover
    from ..embedders import Embedder
    from ..engines.bm25.index import BM25Index
    from ..engines.dense.index import FaissIndex

__all__ = ["EXACT_MATCH_ARGS", "DenseEngine", "Engine", "Hit", "Query", "RowSet", "SparseEngine"]

Hit = tuple[int, float]
"""``(document id, raw engine score)``; higher scores are better."""

POPULATION = "population"
"""``Query.cache`` key of the scope's rows a scoped search scores with (:attr:`RowSet.population`), set by the
engines' searches, read by their scores, surprises and exact-match guard (:mod:`hybrid_memory.engines.bm25.local`)."""


def _population(query: Query, allowed: RowSet | None) -> RowSet | None:
    """The population of a scoped search (kept in the query's cache for the engines' later calls), else None."""
    population = None if allowed is None else allowed.population
    if population is not None:
        query.cache[POPULATION] = population
    return population


def local_bm25(index: Any, text: str, population: RowSet, cache: dict) -> Any:
    """:func:`hybrid_memory.engines.bm25.local.local_bm25` (imported on first use)."""
    from ..engines.bm25.local import local_bm25 as make

    return make(index, text, population, cache)


class Query:
    """One query as every engine sees it.

    Attributes:
        text: the query text.
        vector: float32 (dim,), L2-normalised, or None. A caller may pass a precomputed vector (for example
            LlamaIndex's ``QueryBundle.embedding``); otherwise the dense engine computes it once on first use
            and stores it here, so later steps (exact re-scoring during fusion) do not embed again.
        cache: per-engine scratch space (the sparse engine keeps the query's tokens and score arrays here,
            the dense engine its exact scan); the searcher also announces there, under
            :data:`EXACT_MATCH_ARGS`, the arguments of the ``exact_matches`` call it will make after the
            engines ran, so the sparse engine prepares them in its own thread.
    """

    __slots__ = ("cache", "text", "vector")

    def __init__(self, text: str, vector: np.ndarray | None = None) -> None:
        self.text = text
        self.vector = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(-1)
        self.cache: dict[str, Any] = {}


EXACT_MATCH_ARGS = "exact_match_args"
"""``Query.cache`` key under which the searcher announces, before the engines run, the ``(max_df, min_share)``
it will pass to ``exact_matches``, so an engine can prepare them during its own search."""


@runtime_checkable
class Engine(Protocol):
    """A retrieval engine the hybrid searcher can run and fuse.

    Implementations must be safe to call from several threads at once, and must set any per-thread state
    they need (FAISS's OpenMP thread count is per thread) inside ``search`` and ``score`` themselves.

    Optional methods the searcher uses when present: ``surprise(query, hits, allowed) -> float | None``, the
    surprise of the top hit against chance in nats (:mod:`hybrid_memory.engines.calibration`; called in the engine's
    own thread right after its search, read by the default fusion's per-query weights), and
    ``exact_matches(query, ids, max_df, min_share) -> int64 (len(ids),)`` (the exact-match guard). An engine
    without them is fused without that evidence. ``prepare_surprise(query)``, also optional, works out the part
    of ``surprise`` that needs no hits, in a worker thread while the engine searches in the caller's.
    """

    name: str
    """Run name in fused results and weights, e.g. ``"sparse"`` or ``"dense"``."""

    def search(self, query: Query, k: int, allowed: RowSet | None) -> list[Hit]:
        """Top ``k`` ``(id, score)`` pairs among ``allowed`` (None: all), score descending then id ascending.

        Only documents the engine considers matches are returned (BM25: at least one query term); fewer
        than ``k`` is normal. ``k`` >= 1.
        """
        ...

    def score(self, query: Query, ids: np.ndarray) -> np.ndarray:
        """Exact raw scores of the int64 ``ids`` for the query, float64 (len(ids),).

        The same scale as :meth:`search`'s scores. Ids the engine does not hold score ``nan``; an id that
        holds no query term scores 0 for BM25.
        """
        ...


class SparseEngine:
    """The BM25 engine: :class:`~hybrid_memory.engines.bm25.index.BM25Index` behind the :class:`Engine` protocol.

    The score arrays a search computes are kept in :attr:`Query.cache`, so :meth:`score` for the dense
    engine's candidates right after is a gather, not a second BM25 pass.
    """

    name = "sparse"
    lower_bound = 0.0
    """Theoretical minimum raw score (BM25 scores are >= 0), for theoretical min-max normalisation."""

    def __init__(self, index: BM25Index) -> None:
        self.index = index

    def search(self, query: Query, k: int, allowed: RowSet | None) -> list[Hit]:
        """See :meth:`Engine.search`; scores are bm25s Lucene BM25 scores. When the searcher will ask
        :meth:`exact_matches` (``query.cache["exact_match_args"]`` = ``(max_df, min_share)``), what that needs is
        worked out here too, in the engine's own thread (``BM25Index.prepare_exact_matches``)."""
        population = _population(query, allowed)
        if population is not None:  # a scoped search: the scope's own statistics (engines.bm25.local)
            return local_bm25(self.index, query.text, population, query.cache).search(k, allowed)
        hits = self.index.search(query.text, k, allowed, cache=query.cache)
        args = query.cache.get(EXACT_MATCH_ARGS)
        if args is not None:
            self.index.prepare_exact_matches(query.text, args[0], args[1], cache=query.cache)
        return hits

    def score(self, query: Query, ids: np.ndarray) -> np.ndarray:
        """See :meth:`Engine.score`."""
        population = query.cache.get(POPULATION)
        if population is not None:
            return local_bm25(self.index, query.text, population, query.cache).score(ids)
        return self.index.score(query.text, ids, cache=query.cache)

    def surprise(self, query: Query, hits: Sequence[Hit], allowed: RowSet | None) -> float | None:
        """The surprise of the top hit in nats (``BM25Index.surprise``: term independence over the query tokens
        it holds), among the allowed documents; None without hits. Read by the default fusion's weights."""
        if not hits:
            return None
        population = query.cache.get(POPULATION)
        if population is not None:
            local = local_bm25(self.index, query.text, population, query.cache)
            return local.surprise(hits[0][0], None if allowed is None else len(allowed))
        return self.index.surprise(query.text, hits[0][0], None if allowed is None else len(allowed), cache=query.cache)

    def exact_matches(self, query: Query, ids: np.ndarray, max_df: int, min_share: float = 0.25) -> np.ndarray:
        """int64 (len(ids),): exact-match strength of each id (rare identifiers, whole-query conjunctive
        matches; see ``BM25Index.exact_matches``), read by the exact-match guard of the default fusion."""
        population = query.cache.get(POPULATION)
        if population is not None:
            local = local_bm25(self.index, query.text, population, query.cache)
            return local.exact_matches(ids, max_df, min_share, cache=query.cache)
        return self.index.exact_matches(query.text, ids, max_df, min_share=min_share, cache=query.cache)


class DenseEngine:
    """The dense engine: :class:`~hybrid_memory.engines.dense.index.FaissIndex` behind the :class:`Engine` protocol.

    Args:
        index: the vector index (ids = document ids).
        embedder: embeds the query when :attr:`Query.vector` is None.
    """

    name = "dense"
    lower_bound = -1.0
    """Theoretical minimum raw score (the cosine of unit vectors is >= -1)."""

    def __init__(self, index: FaissIndex, embedder: Embedder) -> None:
        self.index = index
        self.embedder = embedder

    def query_vector(self, query: Query) -> np.ndarray:
        """float32 (dim,), L2-normalised; embeds the text once and keeps the vector on the query."""
        if query.vector is None:
            vector = np.asarray(self.embedder.embed_query(query.text), dtype=np.float32).reshape(1, -1)
            query.vector = l2_normalize(vector)[0]
        return query.vector

    def search(self, query: Query, k: int, allowed: RowSet | None) -> list[Hit]:
        """See :meth:`Engine.search`; scores are inner products of unit vectors (cosines).

        A query vector of all zeros (a stop-word-only query for a bag-of-words embedder) carries no
        direction, so nothing is returned instead of arbitrary rows scoring 0; likewise a stored all-zero
        vector is never returned (see :mod:`hybrid_memory.engines.dense.index`).
        """
        vector = self.query_vector(query)
        _population(query, allowed)
        if not np.any(vector):
            return []
        return self.index.search(vector, k, allowed, cache=query.cache)

    def surprise(self, query: Query, hits: Sequence[Hit], allowed: RowSet | None) -> float | None:
        """The surprise of the top hit in nats (``FaissIndex.surprise``: a Gaussian null with the corpus moments),
        among the allowed documents; None without hits. Read by the default fusion's weights."""
        if not hits or query.vector is None:
            return None
        population = query.cache.get(POPULATION)
        if population is not None:  # a scoped search: the chance moments of the scope's vectors
            from ..engines.bm25.local import dense_chance
            from ..engines.calibration import gaussian_surprise

            chance = dense_chance(self.index, query.vector, population)
            n = len(population) if allowed is None else len(allowed)
            return None if chance is None else gaussian_surprise(hits[0][1], chance[0], chance[1], n)
        n_allowed = None if allowed is None else len(allowed)
        return self.index.surprise(query.vector, hits[0][1], n_allowed, cache=query.cache)

    def prepare_surprise(self, query: Query) -> None:
        """What :meth:`surprise` needs before the top is known (``FaissIndex.prepare_surprise``), for a query whose
        vector is known; the searcher calls it in a worker thread while this engine searches in the caller's."""
        if query.vector is not None:
            self.index.prepare_surprise(query.vector, cache=query.cache)

    def score(self, query: Query, ids: np.ndarray) -> np.ndarray:
        """See :meth:`Engine.score`: inner products with the stored vectors of ``ids``; ``nan`` (no dense
        evidence) for an id whose stored vector is all zeros, as for an id without a vector."""
        return self.index.score(self.query_vector(query), ids, cache=query.cache)
