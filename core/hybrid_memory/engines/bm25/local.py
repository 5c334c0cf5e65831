"""Scope-local statistics (issue 35, class 2): a scoped search scores with its own scope's counts only.

BM25's idf and length normalisation and the default fusion's calibration read corpus statistics: document
frequencies ``df(t)``, the document count ``N``, the mean length ``avgdl``, the dense engine's chance moments. Read
over the whole memory, they make a scope's scores (and ``effective_weights``) depend on what other scopes store:
writing a one-word probe into one's own scope and reading its ``sparse_score`` recovers how many chunks of other
tenants hold the word. Elasticsearch shows the same coupling between shards: each shard scores with its own term
statistics ("Relevance Is Broken!", Elasticsearch: The Definitive Guide), and users who need scores independent of
how documents fall into shards turn on ``search_type=dfs_query_then_fetch``, a first round that gathers the term and
document frequencies over the index before scoring, "at a small performance cost" (mozilla/addons-server#9771;
pelias/api#1335: "most notable when there are only a few documents in the index"). Here the choice is the other
way round: the population whose statistics score a query is made the *scope* (a tenant's own "index"), not the
whole memory, so no scope's counts reach another's scores, at the price of noisier idf on small scopes.

Here the *population* of a scoped search is every chunk of the scope (all of them, whatever the metadata filter
and ``as_of`` of the search: the filter restricts what is returned, as it does unscoped, not the statistics).
:class:`LocalBM25` computes, per query, from the index's postings and forward token lists
(:meth:`TokenCache.gather`)::

    N = |population|,  avgdl = mean length over it,  df(t) = population documents holding t,
    score(d) = sum_{t in q} idf(t) tf(t, d) / (tf(t, d) + k1 (1 - b + b |d| / avgdl)),
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))                  (Lucene BM25, Kamphuis et al. 2020)

in float64, exactly, independent of how the memory's segments are laid out (main or delta, merged or not): the same
scope's chunks score the same with or without other scopes in the memory. Per query it reads each query token's
documents (its column of the main segment and its delta posting, as the exact-match guard does) kept to the
population, and the token lists of those documents only; ``N`` and the total length are counted once per scope
and write (:func:`_size`). Its BM25 surprise
(:func:`~hybrid_memory.engines.calibration.term_surprise`), its rare identifiers (the exact-match guard's ``max_df``)
and the dense surprise's chance moments (:func:`dense_chance`: mean and variance of the query's inner products over
the population's vectors) are the population's too.

Cost: the query tokens' postings (O(df) each, as an unfiltered search reads them) and the token lists of the
population's documents that hold one; for the dense surprise one gather and matvec over the population's vectors
(O(|scope| x dim)). ``benchmarks/scope_stats.py`` measures it. The unscoped memory keeps memory-wide statistics.

What stays memory-wide: an approximate dense index (IVF, HNSW) walks a structure built over every vector, so which
of a scope's chunks an approximate search finds can depend on other scopes' vectors; the exact (flat) search, the
default below the approximate threshold, does not.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import calibration

if TYPE_CHECKING:
    from ..rowset import RowSet
    from .index import BM25Index

__all__ = ["LocalBM25", "dense_chance", "local_bm25"]


class LocalBM25:
    """BM25 of one query over a population of documents, with the population's statistics.

    Args:
        index: the BM25 index (its tokenizer, vocabulary, forward token lists, k1 and b).
        query: the query text.
        population: the documents the statistics count (a scope's rows).
        cache: the query's cache (its analysis is shared with the index's other methods).
    """

    def __init__(self, index: BM25Index, query: str, population: RowSet, cache: dict | None) -> None:
        self.index = index
        self.query = query
        self.population = population
        self.terms = terms = index._terms(query, cache)
        wanted = sorted(set(terms.distinct) | set(terms.identifiers))
        with index._lock:
            self.generation = index._generation
            n, total = _size(index, population)
            holders: dict[str, np.ndarray] = {}
            spans = index._spans(wanted, cache)
            main = index._main
            for token in wanted:  # the documents holding each token: its column and its delta posting
                parts = []
                begin, end = spans.get(token, (0, 0))
                if end > begin:
                    rows = np.asarray(main.scores["indices"][begin:end], dtype=np.int64)
                    parts.append(index._main_ids[rows[index._main_alive[rows] > 0]])
                posting = index._postings.get(token)
                if posting:
                    parts.append(np.fromiter(posting, dtype=np.int64, count=len(posting)))
                ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
                holders[token] = np.unique(ids[population.contains(ids)]) if len(ids) else ids
            candidates = np.unique(np.concatenate([np.zeros(0, np.int64), *holders.values()]))
            present, lengths, data, owner = index._tokens.gather(candidates)
            k1, b = index.k1, index.b
            vocab = index._vocab
            token_ids = {t: vocab.get(t, -1) for t in wanted}
        self.ids = candidates[present]  # the population's documents holding a query token, ascending
        position = np.cumsum(present) - 1
        owner = position[owner]
        lengths = lengths[present].astype(np.float64)
        self.n = n
        m = len(self.ids)
        avgdl = total / n if n and total > 0 else 1.0
        known = np.array([i for i in token_ids.values() if i >= 0], dtype=np.int64)
        lookup = np.zeros(max(len(vocab), int(data.max()) + 1 if len(data) else 0), dtype=bool)
        lookup[known] = True
        keep = lookup[data]  # one gather, not np.isin's sort
        data, owner = data[keep], owner[keep]
        self.tf: dict[str, np.ndarray] = {}
        self.df: dict[str, int] = {}
        for token, token_id in token_ids.items():
            tf = np.bincount(owner[data == token_id], minlength=m) if token_id >= 0 else np.zeros(m, np.int64)
            self.tf[token] = tf
            self.df[token] = int(len(holders[token]))
        norm = k1 * (1.0 - b + b * lengths / avgdl)
        scores = np.zeros(m, dtype=np.float64)
        for token, times in Counter(terms.tokens).items():
            df = self.df.get(token, 0)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = self.tf[token].astype(np.float64)
            held = tf > 0
            scores[held] += times * idf * tf[held] / (tf[held] + norm[held])
        self.scores = scores

    def _positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in :attr:`ids` of the int64 ``ids``, bool: which are there)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(self.ids):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        pos = np.searchsorted(self.ids, ids).clip(max=len(self.ids) - 1)
        return pos, self.ids[pos] == ids

    def search(self, k: int, allowed: RowSet | None) -> list[tuple[int, float]]:
        """Top ``k`` ``(id, score)`` among ``allowed`` (score > 0, by score descending then id ascending)."""
        keep = self.scores > 0
        if allowed is not None and allowed is not self.population:
            keep &= allowed.contains(self.ids)
        ids, scores = self.ids[keep], self.scores[keep]
        order = np.lexsort((ids, -scores))[: max(k, 0)]
        return [(int(ids[i]), float(scores[i])) for i in order]

    def score(self, ids: np.ndarray) -> np.ndarray:
        """float64 (len(ids),): the scores of ``ids``; 0 for a population document holding no query token,
        ``nan`` for ids outside the population (or not live documents)."""
        ids = np.asarray(ids, dtype=np.int64)
        pos, found = self._positions(ids)
        out = np.where(found, self.scores[pos] if len(self.ids) else 0.0, 0.0)
        outside = ~found & ~self.population.contains(ids)
        out[outside] = np.nan
        return out

    def surprise(self, doc_id: int, n: int | None) -> float | None:
        """:meth:`BM25Index.surprise` with the population's document frequencies and count; None when the document
        holds no query token."""
        pos, found = self._positions(np.array([doc_id], dtype=np.int64))
        if not found[0]:
            return None
        j = int(pos[0])
        dfs = [self.df[t] for t in self.terms.distinct if self.tf[t][j] > 0]
        return calibration.term_surprise(dfs, self.n, self.n if n is None else n)

    def exact_matches(
        self, ids: np.ndarray, max_df: int, min_share: float, min_terms: int = 3, cache: dict | None = None
    ) -> np.ndarray:
        """:meth:`BM25Index.exact_matches` with rare identifiers judged by the population's document frequencies
        (held by 1 to ``max_df`` of its documents); the whole-query part reads the candidates only."""
        ids = np.asarray(ids, dtype=np.int64)
        terms = self.terms
        rare = [t for t in terms.identifiers if 0 < self.df.get(t, 0) <= max_df]
        if len(rare) < min_share * terms.content_runs:
            rare = []
        holders = [set(self.ids[self.tf[t] > 0].tolist()) for t in rare]  # at most max_df ids each
        id_list = ids.tolist()
        counts = [sum(1 for h in holders if i in h) for i in id_list]
        if len(terms.distinct) >= min_terms and len(ids):
            full_at = np.flatnonzero(self.index.holds_all_terms(self.query, ids, cache=cache)).tolist()
            if full_at and len(full_at) <= max_df:
                in_order = self.index.holds_in_order(self.query, ids[full_at], cache=cache).tolist()
                bonus = 1 + len(terms.identifiers)
                for j, ok in zip(full_at, in_order, strict=True):
                    if ok:
                        counts[j] += bonus
        return np.array(counts, dtype=np.int64)


_SIZES_KEPT = 64
"""Populations whose ``(N, total length)`` :func:`_size` keeps per index (the filter index hands the same set object
out again until the next write, so a scope's size is counted once per write, not per query)."""


def _size(index: BM25Index, population: RowSet) -> tuple[int, float]:
    """``(N, total length in tokens)`` of the population's live documents, kept on the index for the same set
    object and index generation. Caller holds the index's lock."""
    kept = index.__dict__.setdefault("_population_sizes", {})
    held = kept.get(id(population))
    if held is not None and held[0] is population and held[1] == index._generation:
        return held[2], held[3]
    present, lengths = index._tokens.lengths_of(population.ids)
    n, total = int(np.count_nonzero(present)), float(lengths.sum())
    if len(kept) >= _SIZES_KEPT:
        kept.clear()
    kept[id(population)] = (population, index._generation, n, total)
    return n, total


def local_bm25(index: BM25Index, query: str, population: RowSet, cache: dict | None) -> LocalBM25:
    """The :class:`LocalBM25` of the query over the population, kept in ``cache`` (``Query.cache``) for the same
    population object and index generation, so search, score, surprise and the exact-match guard share one pass."""
    held = cache.get("bm25_local") if cache is not None else None
    if (
        held is not None
        and held.population is population
        and held.query == query
        and held.generation == index._generation
    ):
        return held
    local = LocalBM25(index, query, population, cache)
    if cache is not None:
        cache["bm25_local"] = local
    return local


def dense_chance(index: Any, vector: np.ndarray, population: RowSet) -> tuple[float, float] | None:
    """``(mean, variance)`` of the inner products of the float32 (dim,) ``vector`` with the population's vectors
    (all-zero ones left out; population variance), the dense surprise's chance model over a scope; None with fewer
    than two such vectors or no spread. One gather and matvec over the population (``FaissIndex.score``)."""
    scores = index.score(vector, population.ids)
    scores = scores[np.isfinite(scores)]
    if len(scores) < 2:
        return None
    variance = float(np.var(scores))
    return (float(np.mean(scores)), variance) if variance > 0 else None
