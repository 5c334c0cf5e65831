"""The named fusion methods a request can ask for (``hybrid_params.fusion``), over one :class:`FusionInput`.

Each method is a pure function ``FusionInput -> FusionOutcome``: a score for every candidate (the list is
ordered by it, ties by key) and the effective weight of every engine. The hybrid searcher builds the input
(each engine's candidate list, exact cross-scores, rare-identifier matches) once per query, so an offline
evaluation can apply every method to the same input, exactly as the library does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from .adaptive import apply_identifier_guard, confidence_weights, guard_columns, surprise_factor
from .agreement import chance_free, mix_weights, top_agreement
from .rrf import rrf_table
from .scores import dbsf, tm2c2, zscore_columns

__all__ = [
    "DEFAULT_FUSION",
    "FUSION_METHODS",
    "FusionInput",
    "FusionMethod",
    "FusionOutcome",
    "fuse",
]


@dataclass(frozen=True)
class FusionInput:
    """Everything a fusion method may use for one query.

    Attributes:
        runs: engine -> candidate keys, best first (ties in raw score by key), at most the search depth.
        scores: engine -> key -> exact raw score of that engine, for its own candidates and, when the method
            asked for them, for the other engines' candidates too (cross-scores). A key absent from
            ``scores[e]`` has no score from engine ``e`` (not computed, or the engine does not hold it).
        priors: engine -> request weight > 0, for the engines that ran.
        lower_bounds: engine -> theoretical minimum raw score (BM25 0, cosine -1).
        rrf_k: the RRF constant of the request.
        identifier_matches: key -> exact-match strength of that candidate: +1 per rare identifier of the
            query it holds, more for holding every query token when few candidates do (filled when the method
            asked for it; see ``BM25Index.exact_matches`` and
            :func:`~hybrid_memory.fusion.adaptive.apply_identifier_guard`).
        surprise: engine -> surprise of its top hit against chance, in nats (filled when the method asked for
            it and the engine could tell; see :mod:`hybrid_memory.engines.calibration`); an engine absent is not judged.
    """

    runs: Mapping[str, Sequence[str]]
    scores: Mapping[str, Mapping[str, float]]
    priors: Mapping[str, float]
    lower_bounds: Mapping[str, float] = field(default_factory=dict)
    rrf_k: float = 60.0
    identifier_matches: Mapping[str, int] = field(default_factory=dict)
    surprise: Mapping[str, float] = field(default_factory=dict)

    def keys(self) -> list[str]:
        """Every candidate key of any run, sorted."""
        return sorted({key for run in self.runs.values() for key in run})

    def own_scores(self, name: str) -> dict[str, float]:
        """key -> raw score of engine ``name`` for its own candidates only."""
        scores = self.scores.get(name, {})
        return {key: scores[key] for key in self.runs.get(name, ()) if key in scores}

    def list_scores(self, name: str) -> list[float]:
        """Raw scores of engine ``name``'s candidate list, best first."""
        scores = self.scores.get(name, {})
        return [scores[key] for key in self.runs.get(name, ()) if key in scores]

    @cached_property
    def columns(self) -> tuple[list[str], dict[str, list[float]], list[float]]:
        """The input as aligned lists, built once: (every candidate key, sorted; engine -> raw score of each key,
        ``nan`` where the engine gave none; exact-match strength of each key, float). The score-based methods
        compute on these: a search fuses some 40 candidates, where one pass over a list costs less than one
        numpy call, and a dictionary pass per step cost more than the arithmetic."""
        keys = self.keys()
        nan = math.nan
        table = {name: [scores.get(key, nan) for key in keys] for name, scores in self.scores.items()}
        matches = self.identifier_matches
        strength = [float(matches.get(key, 0)) for key in keys] if matches else [0.0] * len(keys)
        return keys, table, strength

    def with_columns(self, keys: list[str], table: dict[str, list[float]], strength: list[float]) -> FusionInput:
        """This input, with :attr:`columns` set to ``(keys, table, strength)`` instead of built from the dicts on
        first use (the searcher has them as the exact scores arrive). They must be what :attr:`columns` would
        build: every key sorted, an aligned list for every engine of :attr:`scores` (``nan`` where it gave no
        score), the match strengths. Returns ``self`` (``columns`` is a per-instance cache, where
        :func:`functools.cached_property` keeps it)."""
        self.__dict__["columns"] = (keys, table, strength)
        return self

    def tops(self) -> dict[str, float]:
        """engine -> best raw score of its own list (engines with an empty list left out)."""
        return {name: max(values) for name in self.runs if (values := self.list_scores(name))}


@dataclass(frozen=True)
class FusionOutcome:
    """What a fusion method returns."""

    scores: dict[str, float]
    """key -> the score the fused list is ordered by (descending, ties by key)."""
    weights: dict[str, float]
    """engine -> effective weight the method gave it for this query."""
    calibrated: bool | None = None
    """The default method (:func:`fuse_adaptive`) with two or more engines having a say: True when their weights
    were calibrated against chance (every one's surprise known), False when they fell back to the uncalibrated
    confidence weights (no corpus statistics: a dimension above the moments' cap, no spread). None for every
    other method, and with a single engine (nothing to weigh)."""


@dataclass(frozen=True)
class FusionMethod:
    """A named method and what it needs from the searcher."""

    name: str
    fuse: Callable[[FusionInput], FusionOutcome]
    cross_scores: bool
    """Needs the exact score of every candidate in every engine."""
    identifiers: bool
    """Needs the rare-identifier matches of the candidates."""
    summary: str
    surprise: bool = False
    """Needs each engine's top-hit surprise (:mod:`hybrid_memory.engines.calibration`)."""


def _active(inp: FusionInput) -> dict[str, float]:
    return {name: float(inp.priors.get(name, 1.0)) for name in inp.runs if inp.priors.get(name, 1.0) > 0}


def fuse_rrf(inp: FusionInput) -> FusionOutcome:
    """Weighted RRF (Cormack et al. 2009): ``sum_e w_e / (rrf_k + rank_e(d))`` with the request weights."""
    weights = _active(inp)
    runs = {name: inp.runs[name] for name in weights}
    if not weights:
        return FusionOutcome({}, weights)
    return FusionOutcome(rrf_table(runs, weights, inp.rrf_k, validate=True)[0], weights)


def fuse_dbsf(inp: FusionInput) -> FusionOutcome:
    """DBSF as Qdrant (each engine's own list, mean +- 3 sigma), each term times the request weight."""
    weights = _active(inp)
    own = {name: inp.own_scores(name) for name in weights}
    return FusionOutcome(dbsf(own, weights), weights)


def fuse_tm2c2(inp: FusionInput) -> FusionOutcome:
    """TM2C2 (Bruch et al. 2023) over exact scores of every candidate, alpha_e = w_e / sum w (request weights)."""
    weights = _active(inp)
    scores = tm2c2({n: inp.scores.get(n, {}) for n in weights}, weights, inp.lower_bounds, inp.tops())
    total = sum(weights.values())
    return FusionOutcome(scores, {n: w / total for n, w in weights.items()})


def _unit(keys: list[str], fused: list[float]) -> dict[str, float]:
    """Min-max over the candidates to [0, 1], order unchanged (all equal: all 1), so the best candidate scores 1
    and post-fusion steps that scale by the top score (the recency prior) see a positive scale."""
    if not keys:
        return {}
    low, high = min(fused), max(fused)
    span = high - low
    if not span > 0:
        return dict.fromkeys(keys, 1.0)
    return {key: (value - low) / span for key, value in zip(keys, fused, strict=True)}


def _zscores(inp: FusionInput, alphas: Mapping[str, float], *, log_bm25: bool = False) -> tuple[list[str], list[float]]:
    """(keys, :func:`~hybrid_memory.fusion.scores.zscore_fusion` of ``inp``'s exact scores with the convex
    weights ``alphas``, aligned with the keys); with ``log_bm25``, an engine whose theoretical minimum is 0
    (BM25) read as ``log(1 + s)`` first (:func:`~hybrid_memory.fusion.scores.log_evidence`)."""
    keys, table, _ = inp.columns
    log1p = math.log1p
    columns = {
        # log(1 + max(0, s)); nan (no score) stays nan
        name: [log1p(s) if s > 0 else (s if s != s else 0.0) for s in table[name]]
        if log_bm25 and inp.lower_bounds.get(name) == 0
        else table[name]
        for name in alphas
        if name in table
    }
    return keys, zscore_columns(columns, alphas, len(keys))


def fuse_zscore(inp: FusionInput) -> FusionOutcome:
    """CombSUM of z-scores over all candidates with exact scores, alpha_e = w_e / sum w (request weights);
    reported rescaled to [0, 1] over the candidates (best 1), which changes no order."""
    weights = _active(inp)
    total = sum(weights.values())
    alphas = {n: w / total for n, w in weights.items()}
    return FusionOutcome(_unit(*_zscores(inp, alphas)), alphas)


def _padded_lists(inp: FusionInput, names: Sequence[str]) -> dict[str, list[float]]:
    """engine -> raw scores of its list, best first, for :func:`confidence_weights`; an engine whose list is
    shorter than the longest one (it ran out of documents: BM25 returns only documents sharing a term with
    the query) is continued with its exact scores of the other candidates, best first, up to that length
    (for BM25 those are 0, its lower bound: they hold no query term). The ranks it could not fill are then
    read as what they are, documents the engine scores at the bottom, so a lone lexical hit stands out of its
    list as clearly as it does among the candidates, instead of being "too short to judge"
    (:func:`~hybrid_memory.fusion.adaptive.top_outlier` needs 3 scores)."""
    lists = {n: inp.list_scores(n) for n in names}
    longest = max((len(v) for v in lists.values()), default=0)
    for name, values in lists.items():
        if 0 < len(values) < longest:
            own = set(inp.runs.get(name, ()))
            scores = inp.scores.get(name, {})
            rest = sorted((s for key, s in scores.items() if key not in own and s == s), reverse=True)
            values.extend(rest[: longest - len(values)])
    return lists


def _confident_alphas(inp: FusionInput, *, calibrated: bool = False) -> tuple[dict[str, float], bool | None]:
    """Convex per-query weights. With ``calibrated``, when the surprise of every engine with a say (a prior > 0
    and candidates) is known: ``prior x`` :func:`~hybrid_memory.fusion.adaptive.surprise_factor` ``(S_e)``, the
    evidence in nats that the engine's top hit is not a chance one (see :func:`fuse_adaptive`). Otherwise
    ``prior x (1 + top_outlier)`` (:func:`confidence_weights`, over :func:`_padded_lists`). The request's priors
    when every weight comes out 0. Returns (the weights, whether the calibrated ones ran: None unless
    ``calibrated`` was asked with two or more engines having a say)."""
    active = _active(inp)
    judged = [name for name in active if inp.runs.get(name)]
    # only when every engine with a say can be judged: nats on some engines and plain confidence on others do
    # not compare (an engine that cannot tell, such as a flat dense list, would outweigh one judged near chance)
    ran = calibrated and len(judged) > 1 and all(name in inp.surprise for name in judged)
    if ran:
        weights = {name: active[name] * surprise_factor(inp.surprise[name]) for name in judged}
    else:
        weights = confidence_weights(_padded_lists(inp, list(active)), inp.priors)
    total = sum(weights.values())
    if not total > 0:
        weights = active
        total = sum(weights.values())
    return {n: w / total for n, w in weights.items() if w > 0}, (ran if calibrated and len(judged) > 1 else None)


def fuse_confidence(inp: FusionInput) -> FusionOutcome:
    """z-score fusion with per-query weights: prior x (1 + top-hit z-score of the engine's list), made convex."""
    alphas, _ = _confident_alphas(inp)
    return FusionOutcome(_unit(*_zscores(inp, alphas)), alphas)


def fuse_guarded_rrf(inp: FusionInput) -> FusionOutcome:
    """Weighted RRF, then the exact-identifier guard (candidates holding a rare query identifier first)."""
    outcome = fuse_rrf(inp)
    return FusionOutcome(apply_identifier_guard(outcome.scores, inp.identifier_matches), outcome.weights)


def fuse_zscore_guard(inp: FusionInput) -> FusionOutcome:
    """z-score fusion over exact scores with the request weights, then the exact-match guard; reported
    rescaled to [0, 1] over the candidates (best 1). The default until the log-evidence scale and the
    per-query weights of :func:`fuse_adaptive`."""
    weights = _active(inp)
    total = sum(weights.values())
    alphas = {n: w / total for n, w in weights.items()}
    keys, fused = _zscores(inp, alphas)
    return FusionOutcome(_unit(keys, guard_columns(fused, inp.columns[2])), alphas)


def fuse_adaptive_uncalibrated(inp: FusionInput) -> FusionOutcome:
    """:func:`fuse_adaptive` without step 2's calibration against chance (the default of earlier releases)."""
    alphas, _ = _confident_alphas(inp)
    keys, fused = _zscores(inp, alphas, log_bm25=True)
    return FusionOutcome(_unit(keys, guard_columns(fused, inp.columns[2])), alphas)


def fuse_adaptive_v1(inp: FusionInput) -> FusionOutcome:
    """The default until issue 36 (``adaptive_v1``), kept for comparison. Three steps, each with its reason:

    1. scale: BM25 (an engine whose scores start at 0) is read as ``log(1 + s)``
       (:func:`~hybrid_memory.fusion.scores.log_evidence`): a BM25 score is a sum of per-term evidence whose
       spread over a candidate set is multiplicative (one more rare term adds a whole idf), so its raw
       candidate scores are right-skewed and a raw z-score lets one lexical outlier outvote any semantic
       agreement; cosines are bounded and stay linear;
    2. z-score fusion (:func:`~hybrid_memory.fusion.scores.zscore_fusion`) over the exact scores of every
       candidate in every engine, with per-query convex weights calibrated against chance:
       ``prior_e x softplus(S_e)`` (:func:`~hybrid_memory.fusion.adaptive.surprise_factor`), the request weights
       the priors and ``S_e`` the surprise of the engine's top hit in nats (:mod:`hybrid_memory.engines.calibration`:
       minus the log of how many of the documents the query may return chance would score that high; Gaussian
       over the corpus moments for cosines, term independence for BM25), so ``softplus(S_e)`` is the evidence,
       in nats, that the engine's top is not a chance hit. A measure within the list (``top_outlier``) is
       scale-free and cannot see an engine that is weak on the whole corpus (a list of compressed, noisy cosines
       looks as peaked as a good one); the surprise is in one unit for both engines and near 0 for an engine at
       chance level. It runs only when every engine can be judged; when one cannot (an engine without a ``surprise``
       method,
       no corpus moments above :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM` dimensions, or no spread,
       as in a memory of identical chunks) the weights are those of :func:`fuse_adaptive_uncalibrated`,
       ``prior_e x (1 + top_outlier(list_e))`` (:func:`confidence_weights`), since nats and plain confidence do
       not compare. Until stop 23 the calibrated weights were ``prior_e x (1 + top_outlier) x sqrt(softplus(S_e))``,
       which counted the top's distinctness twice and left an engine at chance level a fifth of the weight;
       measured against it in ``benchmarks/fusion_robustness.py`` (README);
    3. the exact-match guard (:func:`apply_identifier_guard`): candidates holding a rare identifier of the
       query, or every query token in the query's order when few candidates do, first.

    Reported rescaled to [0, 1] over the candidates (best 1), which changes no order. Computed on
    :attr:`FusionInput.columns` with the array forms of those functions (same formulas).
    """
    alphas, calibrated = _confident_alphas(inp, calibrated=True)
    keys, fused = _zscores(inp, alphas, log_bm25=True)
    return FusionOutcome(_unit(keys, guard_columns(fused, inp.columns[2])), alphas, calibrated)


def fuse_adaptive(inp: FusionInput) -> FusionOutcome:
    """The default: :func:`fuse_adaptive_v1` (log-scaled BM25, z-score fusion over exact cross-scores, weights
    calibrated against chance, the exact-match guard), with the engines judged on the query:

    1. the weights, when the query names nothing exact (no candidate holds a rare identifier of it, nor the whole
       query): ``alpha = (1 - a^2) calibrated + a^2 priors`` (:func:`~hybrid_memory.fusion.agreement.mix_weights`),
       ``a`` the share of the two engines' top ``k`` they have in common
       (:func:`~hybrid_memory.fusion.agreement.top_agreement`). Why: the calibrated weight of an engine is the
       evidence that its top hit is not chance *on this corpus*; an engine weak on the corpus (compressed cosines
       of a technical manual) or a BM25 whose evidence grows with the query's length under term independence
       (a whole paragraph as the query) gets a lopsided weight even where both engines return the same documents.
       When their tops coincide, each corroborates the other on this query (what RRF rewards), so the request's
       weights hold; when they differ, the calibration decides. ``a`` is discounted by the probability that each
       engine's top is not a chance hit, ``min_e 1 / (1 + e^-S_e)``
       (:func:`~hybrid_memory.fusion.agreement.chance_free`), so an engine near chance level (an embedder far
       outside its domain) does not win its weight back from tops that overlap by chance. Not where the query
       names something exact: there the calibrated evidence (an error message BM25 alone holds) is what the guard
       and the weights protect;
    2. the exact-match guard as in :func:`fuse_adaptive_v1`, order inside each group ``f``. Ordering the holders
       of a rare name by the fusion with the request's weights instead (so BM25's reasons count as much as the
       embedding's on a one-identifier query, whose BM25 surprise is at most 0) was measured and left out: +0.003
       nDCG@10 on both technical sets' identifier queries, but -0.006 overall on APIDocs with the dense engine
       weakened (``fusion_robustness.py``, dense noise 0.75: identifiers -0.008, filtered -0.013), where the
       calibrated weights rightly keep a noisy embedding out of that order (issue 36). The guard's input changed for
       every guarded method: a query that names nothing counts as quoted only where one candidate holds it in order
       (``BM25Index.exact_matches``, and alike on Qdrant).

    The calibrated weights, their fallback and ``calibrated`` are those of :func:`fuse_adaptive_v1`. Reported
    rescaled to [0, 1] over the candidates (best 1), which changes no order.
    """
    calibrated_alphas, calibrated = _confident_alphas(inp, calibrated=True)
    strength = inp.columns[2]
    active = _active(inp)
    priors = {name: active[name] for name in calibrated_alphas if name in active}
    if any(strength):
        alphas = calibrated_alphas
    else:
        agreement = top_agreement({n: inp.runs[n] for n in calibrated_alphas})
        if calibrated:  # shared tops corroborate only as far as each engine's top is not a chance hit
            agreement *= min(chance_free(inp.surprise[n]) for n in calibrated_alphas)
        alphas = mix_weights(calibrated_alphas, priors, agreement)
    keys, fused = _zscores(inp, alphas, log_bm25=True)
    return FusionOutcome(_unit(keys, guard_columns(fused, strength)), alphas, calibrated)


FUSION_METHODS: dict[str, FusionMethod] = {
    m.name: m
    for m in (
        FusionMethod("rrf", fuse_rrf, False, False, "weighted Reciprocal Rank Fusion (Cormack et al. 2009)"),
        FusionMethod("rrf_guard", fuse_guarded_rrf, False, True, "weighted RRF plus the exact-identifier guard"),
        FusionMethod("dbsf", fuse_dbsf, False, False, "distribution-based score fusion, mean +- 3 sigma (Qdrant)"),
        FusionMethod(
            "tm2c2", fuse_tm2c2, True, False, "convex combination of theoretical min-max scores (Bruch et al. 2023)"
        ),
        FusionMethod(
            "zscore", fuse_zscore, True, False, "CombSUM of z-scores over exact scores (Montague and Aslam 2001)"
        ),
        FusionMethod("confidence", fuse_confidence, True, False, "z-score fusion with per-query confidence weights"),
        FusionMethod(
            "zscore_guard", fuse_zscore_guard, True, True, "z-score fusion over exact scores plus the exact-match guard"
        ),
        FusionMethod(
            "adaptive_uncalibrated",
            fuse_adaptive_uncalibrated,
            True,
            True,
            "z-score fusion of log-scaled BM25 and cosines with per-query confidence weights, "
            "plus the exact-match guard",
        ),
        FusionMethod(
            "adaptive_v1",
            fuse_adaptive_v1,
            True,
            True,
            "z-score fusion of log-scaled BM25 and cosines weighted by each engine's top-hit evidence against chance, "
            "plus the exact-match guard",
            surprise=True,
        ),
        FusionMethod(
            "adaptive",
            fuse_adaptive,
            True,
            True,
            "adaptive_v1 with the engines judged on the query: weights toward the request's where their tops agree "
            "and the query names nothing exact",
            surprise=True,
        ),
    )
}
"""Every method a request may name in ``hybrid_params.fusion``."""

DEFAULT_FUSION = "adaptive"
"""The method used when a request names none."""


def fuse(method: str, inp: FusionInput) -> FusionOutcome:
    """Apply the named method. Raises KeyError for an unknown name (requests are validated before)."""
    return FUSION_METHODS[method].fuse(inp)
