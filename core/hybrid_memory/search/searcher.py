"""HybridSearcher: run engines concurrently over one allowed set, then fuse their runs. Store-free.

Query text (plus an optional precomputed vector) goes in, fused hits come out. The searcher knows no
store: document ids are int64 engine ids, and a ``keys`` callback maps them to the string keys that fusion
uses for identity and tie-breaks (chunk ids for :class:`~hybrid_memory.memory.hybrid.HybridMemory`, report ids for
the graph layer). Composition as in pyserini's ``HybridSearcher(dense, sparse)``.

A search is two steps, both public so an evaluation can apply every fusion method to the same candidates
exactly as the library does: :meth:`HybridSearcher.candidates` (run the engines, cut each list at the
depth with ties broken by key, add exact cross-scores and exact matches (rare identifiers, whole query) when the method
needs
them) and :meth:`HybridSearcher.fuse` (apply a method of :data:`~hybrid_memory.fusion.FUSION_METHODS`, order
by score then key, cut to ``top_k``).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from ..fusion import DEFAULT_FUSION, DEFAULT_RRF_K, FUSION_METHODS, FusionInput, FusionMethod, rank_by_score, rrf_table
from .engine import EXACT_MATCH_ARGS, Engine, Hit, Query, RowSet

#: at most this many hits are read from one engine to break a tie at its candidate cut (see ``_run``)
TIE_DEPTH_LIMIT = 512

SURPRISE = "surprise"
"""``Query.cache`` key of the engines' top-hit surprises (engine name -> nats or None), present when the fusion
method reads them (:attr:`~hybrid_memory.fusion.FusionMethod.surprise`): each engine's is computed in the thread
that ran it, right after its search."""

__all__ = [
    "SURPRISE",
    "TIE_DEPTH_LIMIT",
    "AlignedScores",
    "Candidates",
    "EngineRun",
    "HandoffPolicy",
    "HybridHit",
    "HybridResult",
    "HybridSearcher",
    "size_class",
]


class HandoffPolicy:
    """Whether running engines in the executor pays, decided from the wall times measured on recent searches.

    While the calling thread runs one engine, a worker runs the other. Whether that is faster than running them
    one after the other is not known from the engines' own times: the two compete for the GIL wherever they run
    Python or numpy code that holds it, so each runs slower beside the other (measured here at 100k chunks: BM25
    0.19 ms alone, 0.34 ms beside the dense scan; the concurrent search 0.61 ms against 0.55 ms one after the
    other), and waking a worker costs more on a busy machine. So the policy measures both arms and keeps the
    faster, as a two-armed bandit with forced exploration: the wall time of a concurrent search (hand-off to
    having every list) and of an inline one (both engines in the caller), each the median of its last
    ``window`` samples (robust to the odd descheduled search). An arm not yet measured is tried first
    (concurrency first, then inline); afterwards the faster arm runs, and every ``probe``-th search runs the
    other, so both follow the machine's load. Large corpora spend milliseconds in FAISS and bm25s code that
    releases the GIL, where concurrency wins; small ones answer in a fraction of a millisecond, where it loses.
    Each search is measured under a ``size`` key (the searcher passes the allowed set's size class: a narrow
    filter makes both engines fast while the unfiltered search of the same memory does not). Results never
    depend on the decision.

    Thread-safe (appends to bounded deques; a decision reads a snapshot).
    """

    def __init__(self, *, window: int = 15, probe: int = 16) -> None:
        if window < 1 or probe < 1:
            raise ValueError(f"window and probe must be >= 1, got {window} and {probe}")
        self.window = window
        self.probe = probe
        self._engine: dict[str, deque[float]] = {}
        self._walls: dict[tuple[object, bool], deque[float]] = {}
        self._decisions: dict[object, int] = {}

    def record_engine(self, name: str, seconds: float) -> None:
        """One run of engine ``name`` took ``seconds`` (in whatever thread ran it); orders the engines
        (:meth:`slowest_first`)."""
        samples = self._engine.get(name)
        if samples is None:
            samples = self._engine.setdefault(name, deque(maxlen=self.window))
        samples.append(seconds)

    def record(self, concurrent: bool, wall: float, size: object = None) -> None:
        """A search of size class ``size`` ran its engines concurrently (``concurrent``) or one after the other
        in the caller, and took ``wall`` seconds from the first engine's start to having every list."""
        key = (size, bool(concurrent))
        samples = self._walls.get(key)
        if samples is None:
            samples = self._walls.setdefault(key, deque(maxlen=self.window))
        samples.append(wall)

    def costs(self, size: object = None) -> tuple[float | None, float | None]:
        """(median concurrent wall, median inline wall) of size class ``size``, in seconds; None when unmeasured."""
        walls = [self._walls.get((size, arm)) for arm in (True, False)]
        concurrent, inline = (statistics.median(w) if w else None for w in walls)
        return concurrent, inline

    def slowest_first(self, names: Sequence[str]) -> list[str]:
        """``names`` with the engine of the largest median time first (the order given while any is
        unmeasured; ties keep it). The calling thread runs the first: a worker woken for the faster engine
        then finishes while the caller is still busy, so the wake-up is hidden behind the slower engine
        instead of added to it."""
        times = [statistics.median(self._engine[n]) if self._engine.get(n) else None for n in names]
        known = [t for t in times if t is not None]
        if len(known) < len(times):
            return list(names)
        order = sorted(range(len(names)), key=lambda i: -known[i])  # stable: ties keep the given order
        return [names[i] for i in order]

    def concurrent(self, names: Sequence[str], size: object = None) -> bool:
        """Run the engines ``names`` concurrently for this search of size class ``size``?"""
        concurrent, inline = self.costs(size)
        if concurrent is None:
            return True
        if inline is None:
            return False
        count = self._decisions.get(size, 0) + 1
        self._decisions[size] = count
        faster = concurrent < inline
        return faster if count % self.probe else not faster


def size_class(allowed: RowSet | None) -> int | None:
    """The :class:`HandoffPolicy` size key of a search: None unfiltered, else ``(n + 1).bit_length() // 2`` for an
    allowed set of ``n`` ids, classes about 4x apart in size (so engine costs within a class differ by about 4x
    at most)."""
    return None if allowed is None else (len(allowed) + 1).bit_length() // 2


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
    """The score the fused list is ordered by (descending, ties by key): the method's fused score."""
    rrf_score: float
    """Weighted RRF score Σ w_e / (rrf_k + rank_e) with the request weights (equals ``score`` for RRF)."""
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
    calibrated: bool | None = None
    """Whether the default method's weights were calibrated against chance (:attr:`FusionOutcome.calibrated
    <hybrid_memory.fusion.FusionOutcome.calibrated>`); None for other methods and single-engine searches."""


@dataclass(frozen=True)
class Candidates:
    """One query's candidates as :meth:`HybridSearcher.candidates` gathers them."""

    input: FusionInput
    """What every fusion method reads."""
    runs: dict[str, EngineRun]
    """Each engine's candidate list (cut at the depth)."""
    id_of: dict[str, int]
    """key -> engine id."""
    priors: dict[str, float]
    """Request weight of every engine of the searcher (0: not run)."""


class AlignedScores(Mapping[str, Mapping[str, float]]):
    """engine -> {key: raw score} of every candidate the engine scored, read off the aligned score columns of a
    search (:attr:`FusionInput.columns <hybrid_memory.fusion.FusionInput.columns>`, ``nan`` left out), each
    engine's dict built on first use: the default fusion computes on the columns alone, so a search does not pay
    for dicts only other methods (and evaluations) read. Engines without a column map to their ``own`` scores.

    Args:
        keys: every candidate key, sorted (the columns' order).
        columns: engine -> raw score of each key (``nan``: none).
        own: engine -> {key: score} of its own candidates, for every engine of the mapping.

    Read-only; safe to read from several threads (a race builds the same dict twice).
    """

    __slots__ = ("_built", "_columns", "_keys", "_own")

    def __init__(
        self, keys: Sequence[str], columns: Mapping[str, Sequence[float]], own: Mapping[str, Mapping[str, float]]
    ) -> None:
        self._keys = keys
        self._columns = columns
        self._own = own
        self._built: dict[str, dict[str, float]] = {}

    def __getitem__(self, name: str) -> Mapping[str, float]:
        built = self._built.get(name)
        if built is None:
            column = self._columns.get(name)
            if column is None:
                return self._own[name]
            built = {key: value for key, value in zip(self._keys, column, strict=True) if value == value}
            self._built[name] = built
        return built

    def __iter__(self) -> Iterator[str]:
        return iter(self._own)

    def __len__(self) -> int:
        return len(self._own)

    def __repr__(self) -> str:
        return f"AlignedScores({ {name: dict(self[name]) for name in self._own}!r})"


class HybridSearcher:
    """Run several :class:`~hybrid_memory.search.engine.Engine` s concurrently, then fuse their candidate runs.

    Args:
        engines: the engines, by their ``name`` (``{"sparse": ..., "dense": ...}``).
        keys: maps engine ids to string keys; ids it leaves out are dropped (deleted meanwhile).
        executor: runs the engines of :meth:`search` in parallel: the calling thread runs the engine with
            the largest measured time (the first in ``engines`` order until both are measured) while the
            executor runs the others, when the ``policy`` finds that this pays (None: always one after the other in the
            caller's thread). :meth:`asearch` uses
            ``asyncio.to_thread`` instead.
        identifier_max_df: an identifier of the query is *rare* when at most this many documents hold it,
            and a whole-query (conjunctive) match counts when at most this many candidates hold every query
            token (None: ``top_k`` of the search, so every chunk naming it fits in the answer). Read by the
            exact-match guard of the default fusion (``SparseEngine.exact_matches``).
        identifier_min_share: the guard acts only when the rare identifiers are at least this share of the
            query's content words (default 0.25: an identifier plus at most three words), so an identifier
            that is a detail of a long question does not override both engines.
        policy: decides per search whether the engines run concurrently (default: a new
            :class:`HandoffPolicy`).

    Thread-safe when the engines are.
    """

    def __init__(
        self,
        engines: Mapping[str, Engine],
        keys: KeyLookup,
        *,
        executor: Executor | None = None,
        identifier_max_df: int | None = None,
        identifier_min_share: float = 0.25,
        policy: HandoffPolicy | None = None,
    ) -> None:
        self.engines = dict(engines)
        self.policy = policy or HandoffPolicy()
        self.keys = keys
        self.executor = executor
        self.identifier_max_df = identifier_max_df
        self.identifier_min_share = identifier_min_share

    # -- running the engines ------------------------------------------------------------------------
    def _active(self, weights: Mapping[str, float]) -> list[str]:
        return [name for name in self.engines if weights.get(name, 1.0) > 0]

    @staticmethod
    def _run(engine: Engine, query: Query, depth: int, allowed: RowSet | None) -> list[Hit]:
        """The engine's hits down to ``depth``, plus the hits tied with the one at ``depth``, up to
        :data:`TIE_DEPTH_LIMIT` hits in all.

        Engines order equal scores by engine id (insertion history), so a list cut at ``depth`` could drop a
        tied document whose key sorts first. Asking one more than ``depth`` shows whether the cut falls
        inside a tie; if so the search is repeated at twice that depth (a tie of a few documents, as in prose,
        ends there), and if the tie still runs on, once more at ``max(TIE_DEPTH_LIMIT, depth + 1)`` hits (a
        templated memory's hundreds of equal notes: one read instead of a doubling per step, each a request on
        a Qdrant backend). Within that limit the tie is broken by key exactly, so the
        results do not depend on ``top_k``; a tie larger than the limit (a query part every chunk holds
        equally) is broken among the engine's first hits of the tie, still deterministically, instead of
        reading every tied chunk (at 1M chunks that was 100k keys and seconds per search).
        """
        limit = max(TIE_DEPTH_LIMIT, depth + 1)
        k = depth + 1
        while True:
            hits = engine.search(query, k, allowed)
            if len(hits) < k or hits[-1][1] != hits[depth - 1][1] or k >= limit:
                return hits
            k = min(k * 2, limit) if k == depth + 1 else limit

    def _gather(self, query: Query, depth: int, active: list[str], allowed: RowSet | None) -> dict[str, list[Hit]]:
        if allowed is not None and len(allowed) == 0:
            return {}
        policy = self.policy
        if self.executor is None or len(active) < 2:
            return {name: self._timed_run(name, query, depth, allowed)[0] for name in active}
        size = size_class(allowed)
        started = time.perf_counter()
        if not policy.concurrent(active, size):
            out = {name: self._timed_run(name, query, depth, allowed)[0] for name in active}
            policy.record(False, time.perf_counter() - started, size)
            return out
        # the calling thread runs the slowest engine itself while the executor runs the others: one thread
        # hand-off per search instead of one per engine (each costs a wake-up, far more on a busy machine),
        # and the worker's wake-up overlaps the longest run instead of lengthening it
        order = policy.slowest_first(active)
        futures = {
            name: self.executor.submit(self._timed_run, name, query, depth, allowed, order[0] if i == 0 else None)
            for i, name in enumerate(order[1:])
        }
        runs = {order[0]: self._timed_run(order[0], query, depth, allowed)}
        runs.update({name: future.result() for name, future in futures.items()})
        policy.record(True, time.perf_counter() - started, size)
        return {name: runs[name][0] for name in active}

    def _run_named(self, name: str, query: Query, depth: int, allowed: RowSet | None) -> list[Hit]:
        """:meth:`_run` of engine ``name``, then, when the method reads it (``query.cache`` holds
        :data:`SURPRISE`), the surprise of its top hit, from the engine's optional ``surprise`` method."""
        engine = self.engines[name]
        hits = self._run(engine, query, depth, allowed)
        wanted = query.cache.get(SURPRISE)
        if wanted is not None:
            finder = getattr(engine, "surprise", None)
            wanted[name] = finder(query, hits, allowed) if finder is not None else None
        return hits

    def _timed_run(
        self, name: str, query: Query, depth: int, allowed: RowSet | None, prepare: str | None = None
    ) -> tuple[list[Hit], float]:
        """:meth:`_run_named` of engine ``name``, timed for the policy; then, in a worker thread of a concurrent
        search, when the method reads surprises and engine ``prepare`` (the one the caller's thread still runs)
        has an optional ``prepare_surprise(query)``, that is called here, so the part of its surprise that needs
        no hits (the dense engine's (dim + 1, dim) matvec) is off the caller's path. Skipped when that surprise
        is already in (the caller finished first); the results are the same either way."""
        started = time.perf_counter()
        hits = self._run_named(name, query, depth, allowed)
        seconds = time.perf_counter() - started
        self.policy.record_engine(name, seconds)
        if prepare is not None:
            wanted = query.cache.get(SURPRISE)
            finder = getattr(self.engines[prepare], "prepare_surprise", None)
            if wanted is not None and finder is not None and prepare not in wanted:
                finder(query)
        return hits, seconds

    def search(
        self,
        query: Query,
        *,
        top_k: int,
        depth: int,
        weights: Mapping[str, float],
        allowed: RowSet | None = None,
        rrf_k: float = DEFAULT_RRF_K,
        fusion: str = DEFAULT_FUSION,
        max_df: int | None = None,
    ) -> HybridResult:
        """Fused top ``top_k`` for ``query``.

        Args:
            query: text and optional precomputed vector.
            top_k: fused hits wanted, >= 1.
            depth: candidates each engine contributes, >= ``top_k`` (ties at the cut broken by key).
            weights: engine name -> weight >= 0; an engine of weight 0 is not run. Missing names weigh 1.
                RRF uses them as run weights; the score-based methods as priors (see ``FUSION_METHODS``).
            allowed: ids results must belong to (None: all); applied inside every engine before ranking.
            rrf_k: RRF constant (Cormack et al. 2009), >= 0; also gives every hit's ``rrf_score``.
            fusion: a name of :data:`~hybrid_memory.fusion.FUSION_METHODS`.
            max_df: the exact-match guard's document-frequency bound for this search (None: the searcher's
                ``identifier_max_df``, else ``top_k``).

        Raises:
            KeyError: ``fusion`` names no method.
        """
        method = FUSION_METHODS[fusion]
        max_df = self._announce(query, method, top_k, max_df)
        hits = self._gather(query, depth, self._active(weights), allowed)
        candidates = self._candidates(query, hits, depth, weights, rrf_k, method.name, max_df)
        return self.fuse(candidates, method.name, top_k)

    async def asearch(
        self,
        query: Query,
        *,
        top_k: int,
        depth: int,
        weights: Mapping[str, float],
        allowed: RowSet | None = None,
        rrf_k: float = DEFAULT_RRF_K,
        fusion: str = DEFAULT_FUSION,
        max_df: int | None = None,
    ) -> HybridResult:
        """:meth:`search` for asyncio: each engine runs in a worker thread under ``asyncio.gather``."""
        method = FUSION_METHODS[fusion]
        max_df = self._announce(query, method, top_k, max_df)
        active = self._active(weights)
        hits: dict[str, list[Hit]] = {}
        if not (allowed is not None and len(allowed) == 0):
            results = await asyncio.gather(
                *(asyncio.to_thread(self._run_named, name, query, depth, allowed) for name in active)
            )
            hits = dict(zip(active, results, strict=True))
        candidates = await asyncio.to_thread(self._candidates, query, hits, depth, weights, rrf_k, method.name, max_df)
        return self.fuse(candidates, method.name, top_k)

    def candidates(
        self,
        query: Query,
        *,
        top_k: int,
        depth: int,
        weights: Mapping[str, float],
        allowed: RowSet | None = None,
        rrf_k: float = DEFAULT_RRF_K,
        fusion: str = DEFAULT_FUSION,
        max_df: int | None = None,
    ) -> Candidates:
        """Run the engines and gather what ``fusion`` needs (cross-scores, identifier matches and the engines'
        surprises are gathered when the method needs them: pass ``fusion="adaptive"`` to get all three)."""
        method = FUSION_METHODS[fusion]
        max_df = self._announce(query, method, top_k, max_df)
        hits = self._gather(query, depth, self._active(weights), allowed)
        return self._candidates(query, hits, depth, weights, rrf_k, method.name, max_df)

    # -- candidates and fusion ----------------------------------------------------------------------
    def _announce(self, query: Query, method: FusionMethod, top_k: int, max_df: int | None) -> int:
        """The exact-match guard's bound for this search (``max_df``, else the searcher's ``identifier_max_df``,
        else ``top_k``); when the method reads exact matches, announced in the query's cache
        (:data:`~hybrid_memory.search.engine.EXACT_MATCH_ARGS`) so the engines prepare them in their own threads; when
        it reads surprises, an empty :data:`SURPRISE` dict there for the engines' threads to fill."""
        if max_df is None:
            max_df = self.identifier_max_df if self.identifier_max_df is not None else top_k
        if method.identifiers:
            query.cache[EXACT_MATCH_ARGS] = (max_df, self.identifier_min_share)
        if method.surprise:
            query.cache[SURPRISE] = {}
        else:
            query.cache.pop(SURPRISE, None)
        return max_df

    def _candidates(
        self,
        query: Query,
        hits: Mapping[str, list[Hit]],
        depth: int,
        weights: Mapping[str, float],
        rrf_k: float,
        fusion: str,
        max_df: int,
    ) -> Candidates:
        method = FUSION_METHODS[fusion]
        ids = sorted({doc_id for engine_hits in hits.values() for doc_id, _ in engine_hits})
        keys = self.keys(ids)
        id_of = {key: doc_id for doc_id, key in keys.items()}
        runs: dict[str, EngineRun] = {}
        for name, engine_hits in hits.items():
            scores = {keys[i]: float(s) for i, s in engine_hits if i in keys}
            # equal raw scores rank by key, so the order never depends on insertion history
            ordered = [key for key, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:depth]]
            runs[name] = EngineRun(ordered, {key: scores[key] for key in ordered})
        union = sorted({key for run in runs.values() for key in run.keys})
        n = len(union)
        found = [name for name, run in runs.items() if run.keys]  # an engine that found nothing has no say
        own_scores: dict[str, dict[str, float]] = {name: dict(runs[name].scores) for name in found}
        union_ids = None
        if (method.cross_scores or method.identifiers) and n:
            union_ids = np.array([id_of[k] for k in union], dtype=np.int64)
        columns: dict[str, list[float]] = {}
        if method.cross_scores and len(found) > 1 and union_ids is not None:  # found holds keys: n > 0
            # the aligned columns the score-based methods compute on (FusionInput.columns): the engine's own score
            # where it returned the candidate, else its exact score (nan: an id the engine does not hold). One
            # score() call over the whole union and one pass to align, instead of picking out the missing
            # candidates first (a search's own candidates come back from a gather: BM25's and the exact scan's
            # kept scores, the Qdrant legs' own hits); plain lists, since a search fuses some 40 candidates and a
            # numpy call costs more than a Python pass over them
            for name in found:
                own = runs[name].scores
                exact = self.engines[name].score(query, union_ids).tolist()
                columns[name] = [own.get(key, value) for key, value in zip(union, exact, strict=True)]
        matches: dict[str, int] = {}
        strength: list[float] | None = None
        if method.identifiers and n:
            for name in runs:
                finder = getattr(self.engines[name], "exact_matches", None)
                if finder is not None:
                    counts = finder(query, union_ids, max_df, self.identifier_min_share).tolist()
                    strength = (
                        counts if strength is None else [max(a, b) for a, b in zip(strength, counts, strict=True)]
                    )
            if strength is not None:
                matches = {union[j]: int(c) for j, c in enumerate(strength) if c}
        priors = {name: float(weights.get(name, 1.0)) for name in self.engines}
        lower_bounds = {}
        for name in found:  # the engine's theoretical minimum, else the lowest score it returned
            bound = getattr(self.engines[name], "lower_bound", None)
            lower_bounds[name] = float(min(runs[name].scores.values()) if bound is None else bound)
        surprises = query.cache.get(SURPRISE) or {} if method.surprise else {}
        inp = FusionInput(
            runs={name: runs[name].keys for name in found},
            scores=AlignedScores(union, columns, own_scores) if columns else own_scores,
            priors={name: priors[name] for name in found},
            lower_bounds=lower_bounds,
            rrf_k=float(rrf_k),
            identifier_matches=matches,
            surprise={name: float(v) for name in found if (v := surprises.get(name)) is not None and math.isfinite(v)},
        )
        if columns:
            inp = inp.with_columns(union, columns, [float(c) for c in strength] if strength is not None else [0.0] * n)
        return Candidates(inp, runs, id_of, priors)

    def fuse(self, candidates: Candidates, fusion: str, top_k: int) -> HybridResult:
        """Apply the method ``fusion`` to gathered candidates: the top ``top_k`` by score, ties by key.

        Every hit also carries its weighted RRF score with the request weights and ``rrf_k``.

        Raises:
            KeyError: ``fusion`` names no method.
        """
        method = FUSION_METHODS[fusion]
        inp, runs = candidates.input, candidates.runs
        effective = dict.fromkeys(self.engines, 0.0)
        if not inp.runs:
            return HybridResult(hits=[], method=method.name, weights=effective, runs=runs)
        outcome = method.fuse(inp)
        effective.update({name: float(w) for name, w in outcome.weights.items()})
        ranked = rank_by_score(outcome.scores, top_k)
        rrf_weights = {name: candidates.priors[name] for name in inp.runs}
        # the request was validated; only the returned hits' rows
        rrf, rrf_ranks = rrf_table(inp.runs, rrf_weights, inp.rrf_k, keys={key for key, _ in ranked})
        hits = [
            HybridHit(
                key=key,
                doc_id=candidates.id_of[key],
                score=score,
                rrf_score=rrf.get(key, 0.0),
                ranks=rrf_ranks[key] if key in rrf else {},
                raw_scores={name: run.scores[key] for name, run in runs.items() if key in run.scores},
            )
            for key, score in ranked
        ]
        return HybridResult(hits=hits, method=method.name, weights=effective, runs=runs, calibrated=outcome.calibrated)
