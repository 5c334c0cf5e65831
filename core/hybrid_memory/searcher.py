"""HybridSearcher: run engines concurrently over one allowed set, then fuse their runs. Store-free.

Query text (plus an optional precomputed vector) goes in, fused hits come out. The searcher knows no
store: document ids are int64 engine ids, and a ``keys`` callback maps them to the string keys that fusion
uses for identity and tie-breaks (chunk ids for :class:`~hybrid_memory.memory.HybridMemory`, report ids for
the graph layer). Composition as in pyserini's ``HybridSearcher(dense, sparse)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from .engines import Engine, Hit, Query, RowSet
from .fusion import DEFAULT_RRF_K, reciprocal_rank_fusion

__all__ = ["EngineRun", "HybridHit", "HybridResult", "HybridSearcher"]

KeyLookup = Callable[[Sequence[int]], Mapping[int, str]]
"""``ids -> {id: key}`` for the ids that still exist (a document deleted meanwhile is left out)."""


@dataclass(frozen=True)
class EngineRun:
    """One engine's candidates: keys best first, with their raw scores."""

    keys: list[str]
    """Keys in rank order (rank 1 first); ties in raw score are ordered by key ascending."""
    scores: dict[str, float]
    """key -> raw engine score."""


@dataclass(frozen=True)
class HybridHit:
    """One fused hit."""

    key: str
    """The document's key (a chunk_id)."""
    doc_id: int
    """The engine id (a store rowid)."""
    score: float
    """The fused score the list is ordered by."""
    rrf_score: float
    """Weighted RRF score Σ w_e / (rrf_k + rank_e) of the hit (equals ``score`` when the method is RRF)."""
    ranks: dict[str, int] = field(default_factory=dict)
    """Engine name -> 1-based rank in that engine's candidates (absent engines left out)."""
    raw_scores: dict[str, float] = field(default_factory=dict)
    """Engine name -> raw engine score, where the engine returned the document."""


@dataclass(frozen=True)
class HybridResult:
    """What :meth:`HybridSearcher.search` returns."""

    hits: list[HybridHit]
    """Fused hits, best first, at most ``top_k``."""
    method: str
    """The fusion method that ran."""
    weights: dict[str, float]
    """Effective weight per engine (0 for an engine that was not run)."""
    runs: dict[str, EngineRun]
    """Each engine's candidates, for inspection and evaluation."""


class HybridSearcher:
    """Run several :class:`~hybrid_memory.engines.Engine` s concurrently, then fuse their candidate runs.

    Args:
        engines: the engines, by their ``name`` (``{"sparse": ..., "dense": ...}``).
        keys: maps engine ids to string keys; ids it leaves out are dropped (deleted meanwhile).
        executor: runs the engines of :meth:`search` in parallel (None: one after the other in the caller's
            thread). :meth:`asearch` uses ``asyncio.to_thread`` instead.

    Thread-safe when the engines are.
    """

    def __init__(self, engines: Mapping[str, Engine], keys: KeyLookup, *, executor: Executor | None = None) -> None:
        self.engines = dict(engines)
        self.keys = keys
        self.executor = executor

    # -- running the engines ------------------------------------------------------------------------
    def _active(self, weights: Mapping[str, float]) -> list[str]:
        return [name for name in self.engines if weights.get(name, 1.0) > 0]

    def search(
        self,
        query: Query,
        *,
        top_k: int,
        depth: int,
        weights: Mapping[str, float],
        allowed: RowSet | None = None,
        rrf_k: float = DEFAULT_RRF_K,
    ) -> HybridResult:
        """Fused top ``top_k`` for ``query``.

        Args:
            query: text and optional precomputed vector.
            top_k: fused hits wanted, >= 1.
            depth: candidates each engine returns, >= ``top_k``.
            weights: engine name -> weight >= 0; an engine of weight 0 is not run. Missing names weigh 1.
            allowed: ids results must belong to (None: all); applied inside every engine before ranking.
            rrf_k: RRF constant (Cormack et al. 2009), >= 0.
        """
        active = self._active(weights)
        if allowed is not None and len(allowed) == 0:
            return self._fuse(query, {}, weights, top_k, rrf_k)
        if self.executor is None or len(active) < 2:
            hits = {name: self.engines[name].search(query, depth, allowed) for name in active}
        else:
            futures = {name: self.executor.submit(self.engines[name].search, query, depth, allowed) for name in active}
            hits = {name: future.result() for name, future in futures.items()}
        return self._fuse(query, hits, weights, top_k, rrf_k)

    async def asearch(
        self,
        query: Query,
        *,
        top_k: int,
        depth: int,
        weights: Mapping[str, float],
        allowed: RowSet | None = None,
        rrf_k: float = DEFAULT_RRF_K,
    ) -> HybridResult:
        """:meth:`search` for asyncio: each engine runs in a worker thread under ``asyncio.gather``."""
        active = self._active(weights)
        if allowed is not None and len(allowed) == 0:
            return self._fuse(query, {}, weights, top_k, rrf_k)
        results = await asyncio.gather(
            *(asyncio.to_thread(self.engines[name].search, query, depth, allowed) for name in active)
        )
        hits = dict(zip(active, results, strict=True))
        return await asyncio.to_thread(self._fuse, query, hits, weights, top_k, rrf_k)

    # -- fusion -------------------------------------------------------------------------------------
    def _runs(self, hits: Mapping[str, list[Hit]]) -> tuple[dict[str, EngineRun], dict[str, int]]:
        ids = sorted({doc_id for engine_hits in hits.values() for doc_id, _ in engine_hits})
        keys = self.keys(ids)
        runs: dict[str, EngineRun] = {}
        for name, engine_hits in hits.items():
            scores = {keys[i]: float(s) for i, s in engine_hits if i in keys}
            # equal raw scores rank by key, so the order never depends on insertion history
            runs[name] = EngineRun(sorted(scores, key=lambda key, s=scores: (-s[key], key)), scores)
        return runs, {key: doc_id for doc_id, key in keys.items()}

    def _fuse(
        self,
        query: Query,
        hits: Mapping[str, list[Hit]],
        weights: Mapping[str, float],
        top_k: int,
        rrf_k: float,
    ) -> HybridResult:
        runs, id_of = self._runs(hits)
        effective = {name: float(weights.get(name, 1.0)) if name in runs else 0.0 for name in self.engines}
        fused = reciprocal_rank_fusion(
            {name: run.keys for name, run in runs.items()},
            {name: effective[name] for name in runs},
            rrf_k=rrf_k,
            top_k=top_k,
        ) if runs else []
        out = [
            HybridHit(
                key=hit.doc_id,
                doc_id=id_of[hit.doc_id],
                score=hit.score,
                rrf_score=hit.score,
                ranks=dict(hit.ranks),
                raw_scores={name: run.scores[hit.doc_id] for name, run in runs.items() if hit.doc_id in run.scores},
            )
            for hit in fused
        ]
        return HybridResult(hits=out, method="rrf", weights=effective, runs=runs)
