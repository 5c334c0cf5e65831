"""Score-based fusion: normalise each engine's raw scores, then add them with one weight per engine.

All functions are pure and work on plain mappings ``engine name -> {key: raw score}``. A key missing from an
engine's mapping has no score from that engine and contributes 0 (as in both sources below); the hybrid
searcher avoids that case by computing the exact score of every candidate in every engine (a BM25 score for
a dense-only candidate, an inner product for a BM25-only one), so the fused score is a function of the
document and the query alone, not of which list happened to contain it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = [
    "dbsf",
    "distribution_normalize",
    "log_evidence",
    "rank_by_score",
    "theoretical_min_max",
    "tm2c2",
    "zscore_columns",
    "zscore_fusion",
]


def rank_by_score(scores: Mapping[str, float], top_k: int | None = None) -> list[tuple[str, float]]:
    """``(key, score)`` pairs by score descending, ties by key ascending (so the order is identical across
    processes and insertion histories), cut to ``top_k`` (None keeps all)."""
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ordered if top_k is None else ordered[:top_k]


def theoretical_min_max(scores: Mapping[str, float], lower_bound: float, top: float | None = None) -> dict[str, float]:
    """Theoretical min-max normalisation (TMM; Bruch, Gai and Ingber, ACM TOIS 2023, section 4.2)::

        phi(s) = (s - m) / (M - m)

    with ``m`` the *theoretical* minimum of the engine's scores (0 for BM25, -1 for a cosine) instead of the
    observed one, so a list whose scores are all alike keeps them alike instead of being stretched over
    [0, 1], and ``M`` the observed maximum, ``top`` (default: the maximum of ``scores``). Scores at or
    below ``m`` map to 0. Returns {} for empty ``scores``; when ``M <= m`` every score maps to 0.
    """
    if not scores:
        return {}
    top = max(scores.values()) if top is None else top
    span = top - lower_bound
    if not span > 0:
        return dict.fromkeys(scores, 0.0)
    return {key: max(0.0, (s - lower_bound) / span) for key, s in scores.items()}


def tm2c2(
    scores: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    lower_bounds: Mapping[str, float],
    tops: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """TM2C2: convex combination of theoretically min-max normalised scores (Bruch, Gai and Ingber, ACM TOIS
    2023, "An Analysis of Fusion Functions for Hybrid Retrieval", eq. 7)::

        f(d) = sum_e alpha_e * phi_e(s_e(d)),   alpha_e = w_e / sum_e' w_e'

    For two engines that is the paper's ``alpha * phi_sem + (1 - alpha) * phi_lex``. ``phi_e`` is
    :func:`theoretical_min_max` with ``lower_bounds[e]`` and ``tops[e]`` (default: the largest score in
    ``scores[e]``; the searcher passes the top of the engine's own candidate list). A key without a score
    from engine ``e`` gets ``phi_e = 0``.

    Args:
        scores: engine -> {key: raw score}.
        weights: engine -> weight >= 0 (engines missing weigh 0); at least one > 0.
        lower_bounds: engine -> theoretical minimum raw score.
        tops: engine -> the maximum used by phi (optional).

    Returns:
        key -> fused score in [0, 1] for every key of any engine.

    Raises:
        ValueError: no weight is > 0, or an engine with weight > 0 has no lower bound.
    """
    alphas = _convex(weights, scores)
    fused: dict[str, float] = {key: 0.0 for run in scores.values() for key in run}
    for name, alpha in alphas.items():
        if name not in lower_bounds:
            raise ValueError(f"engine {name!r} has no theoretical lower bound")
        top = None if tops is None else tops.get(name)
        for key, value in theoretical_min_max(scores[name], lower_bounds[name], top).items():
            fused[key] += alpha * value
    return fused


def distribution_normalize(
    scores: Mapping[str, float], reference: Sequence[float] | None = None, *, clip: bool = False
) -> dict[str, float]:
    """Distribution-based normalisation of Qdrant's DBSF (qdrant-client ``hybrid/fusion.py``,
    ``distribution_based_score_fusion``; Mazzeschi 2023)::

        phi(s) = (s - (mu - 3 sigma)) / (6 sigma)

    ``mu`` and ``sigma`` (sample standard deviation, n - 1) are those of ``reference`` (default: the values of
    ``scores``), so scores of the same engine for other documents can be put on the scale of its list. With
    fewer than two reference scores, or sigma = 0, every score maps to 0.5 (the centre of the scale).
    ``clip`` limits the result to [0, 1] (the 3-sigma range).
    """
    values = list(scores.values()) if reference is None else list(reference)
    if len(values) < 2:
        return dict.fromkeys(scores, 0.5)
    mean = math.fsum(values) / len(values)
    sigma = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if not sigma > 0:
        return dict.fromkeys(scores, 0.5)
    low = mean - 3 * sigma
    out = {key: (s - low) / (6 * sigma) for key, s in scores.items()}
    if clip:
        out = {key: min(1.0, max(0.0, v)) for key, v in out.items()}
    return out


def dbsf(
    scores: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    references: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, float]:
    """Distribution-Based Score Fusion (Qdrant 1.11; qdrant-client ``distribution_based_score_fusion``)::

        f(d) = sum_e w_e * phi_e(s_e(d)),   phi_e = distribution_normalize over engine e's list

    Qdrant adds the normalised scores unweighted; ``weights`` multiplies each engine's term (1 and 1 is
    Qdrant's method). ``references[e]`` are the scores that define engine ``e``'s mean and sigma (default
    all of ``scores[e]``; the searcher passes the engine's own candidate list, so exact scores of other
    candidates are put on the same scale; those are clipped at 0 from below, the value of a missing score).

    Raises:
        ValueError: no weight is > 0.
    """
    active = {name: float(w) for name, w in weights.items() if w > 0 and name in scores}
    if not active:
        raise ValueError("at least one engine weight must be > 0")
    fused: dict[str, float] = {key: 0.0 for run in scores.values() for key in run}
    for name, weight in active.items():
        reference = None if references is None else references.get(name)
        normalised = distribution_normalize(scores[name], reference)
        for key, value in normalised.items():
            fused[key] += weight * (max(0.0, value) if reference is not None else value)
    return fused


def zscore_fusion(scores: Mapping[str, Mapping[str, float]], weights: Mapping[str, float]) -> dict[str, float]:
    """CombSUM of z-scores over the candidate set (Montague and Aslam, CIKM 2001, "Relevance Score
    Normalization for Metasearch": ZMUV, zero mean and unit variance; Lee, SIGIR 1997, "Analyses of Multiple
    Evidence Combination" for CombSUM)::

        z_e(d) = (s_e(d) - mean_e) / std_e,    f(d) = sum_e alpha_e * z_e(d),   alpha_e = w_e / sum w

    ``mean_e`` and ``std_e`` (population) are over the scores engine ``e`` gave to the candidates in
    ``scores[e]``: with exact cross-scores that is every candidate of every engine, so both engines are
    standardised over the same documents, and each engine's scale (BM25's unbounded sums, the narrow band of
    cosines) drops out without a bound to guess. A key without a score from ``e`` gets ``z_e = 0`` (the
    mean: no evidence either way); std 0 gives every key ``z_e = 0``. The arithmetic is
    :func:`zscore_columns`'s, over the keys of every engine in sorted order.

    Raises:
        ValueError: no weight is > 0.
    """
    alphas = _convex(weights, scores)
    keys = sorted({key for run in scores.values() for key in run})
    nan = math.nan
    columns = {name: [scores[name].get(key, nan) for key in keys] for name in alphas}
    return dict(zip(keys, zscore_columns(columns, alphas, len(keys)), strict=True))


def zscore_columns(columns: Mapping[str, Sequence[float]], alphas: Mapping[str, float], n: int) -> list[float]:
    """:func:`zscore_fusion` over aligned columns: ``columns[e]`` holds engine ``e``'s raw score of each of
    ``n`` candidates, ``nan`` where it has none (z = 0 there); ``alphas`` the convex weights. Returns the
    ``n`` values ``sum_e alpha_e * z_e`` (population mean and std over each column's scored entries). Plain
    Python: over the few dozen candidates of a search, a pass over a list costs less than one numpy call."""
    fused = [0.0] * n
    for name, alpha in alphas.items():
        column = columns.get(name)
        if column is None:
            continue
        values = [s for s in column if s == s]  # s == s drops nan
        if not values:
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum([(s - mean) * (s - mean) for s in values]) / len(values))
        if not std > 0:
            continue
        scale = alpha / std
        fused = [f + (s - mean) * scale if s == s else f for f, s in zip(fused, column, strict=True)]
    return fused


def log_evidence(scores: Mapping[str, float]) -> dict[str, float]:
    """``log(1 + s)`` of non-negative evidence scores (BM25), order unchanged; 0 stays 0 (no term matched).

    A BM25 score is a sum over the query's terms of idf x saturated tf (Robertson and Zaragoza 2009), so
    over one query's candidates it grows by whole idf steps with each rarer term a document matches: its
    spread is multiplicative and its distribution right-skewed (median sample skewness +0.4 to +0.9 on the
    four sets of ``benchmarks/fusion_eval.py``, where MiniLM cosines lie between -0.7 and +0.5). The
    logarithm makes the spread additive, so a z-score of BM25 counts relative evidence the way a z-score of
    a cosine does, and one lexical outlier no longer outweighs every other signal. Scores below 0 (none for
    BM25) are clipped to 0.
    """
    return {key: math.log1p(max(0.0, s)) for key, s in scores.items()}


def _convex(weights: Mapping[str, float], scores: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    active = {name: float(w) for name, w in weights.items() if w > 0 and name in scores}
    total = math.fsum(active.values())
    if not total > 0:
        raise ValueError("at least one engine weight must be > 0")
    return {name: w / total for name, w in active.items()}
