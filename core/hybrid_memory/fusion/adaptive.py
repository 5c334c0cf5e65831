"""Query-adaptive pieces: per-query engine confidence and the exact-identifier guard.

Both use only what the engines return for the query at hand (ranks, raw scores, and which candidates hold a
rare identifier of the query), so they need no training data and no model call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["apply_identifier_guard", "confidence_weights", "guard_columns", "surprise_factor", "top_outlier"]


def top_outlier(scores: Sequence[float]) -> float:
    """How far an engine's best score stands out of the rest of its own candidate list, in standard deviations::

        c = (s_1 - mean(s_2..s_n)) / std(s_2..s_n)        (population std)

    ``scores`` are the raw scores of one engine's list, best first. This is the z-score of the top hit
    against the other candidates, the query-performance predictor family of Shtok, Kurland, Carmel, Raiber
    and Markovits (ACM TOIS 2012, "Predicting Query Performance by Query-Drift Estimation", NQC: the spread of
    the top scores) applied to the first hit: an engine that found one clear answer scores high, an engine
    returning a flat list scores near 0. It needs no calibration across engines, since both the gap and the
    spread are in the engine's own units. Returns 0 for fewer than 3 scores or a flat tail; capped at 10.
    """
    if len(scores) < 3:
        return 0.0
    rest = [float(s) for s in scores[1:]]
    mean = sum(rest) / len(rest)
    std = math.sqrt(sum([(s - mean) * (s - mean) for s in rest]) / len(rest))
    gap = float(scores[0]) - mean
    if not std > 0:
        return 10.0 if gap > 0 else 0.0
    return min(10.0, max(0.0, gap / std))


def confidence_weights(
    lists: Mapping[str, Sequence[float]], priors: Mapping[str, float], *, strength: float = 1.0
) -> dict[str, float]:
    """Per-query engine weights: the prior times the engine's confidence in this query's list::

        w_e = prior_e * (1 + strength * top_outlier(list_e))

    Args:
        lists: engine -> raw scores of its candidate list, best first (an engine that returned nothing
            gets weight 0: it has nothing to contribute).
        priors: engine -> prior weight >= 0 (the request's dense_weight / sparse_weight); engines missing
            weigh 1; a prior of 0 stays 0.
        strength: how much the confidence counts (0 returns the priors).

    Returns:
        engine -> weight >= 0, for every engine of ``lists``.
    """
    out: dict[str, float] = {}
    for name, values in lists.items():
        prior = float(priors.get(name, 1.0))
        out[name] = 0.0 if not values or prior <= 0 else prior * (1.0 + strength * top_outlier(values))
    return out


def surprise_factor(nats: float) -> float:
    """An engine's calibrated weight (before its prior and the convex normalisation) for a top hit of surprise
    ``nats`` (:mod:`hybrid_memory.engines.calibration`: ``S = -ln(n P)``, ``n P`` the expected number of chance
    documents
    scoring at least the top)::

        factor(S) = softplus(S) = ln(1 + e^S)

    ``softplus(S) = -ln(n P / (1 + n P))``: with one real hit competing against ``n P`` chance documents at its
    level, ``n P / (1 + n P)`` is the probability that the top is one of the chance ones, so softplus is the
    information, in nats, that it is not: the evidence the engine brings for this query. It is about ``S`` for a
    clear top (6-18 nats for a clean engine on the sets of ``benchmarks/fusion_eval.py``), ``ln 2`` at chance
    level, and tends to 0 below it without reaching it (but where ``e^S`` underflows, ``S`` < -745): an engine is
    never silenced outright (a one-word query matching a few documents has ``S = -ln df``: BM25 then still marks
    which candidates hold the word). Used as it is, not tempered (an earlier default took its square root times
    the list's own ``1 + top_outlier``, which counted the top's distinctness twice and let an engine near chance
    keep a fifth of the weight; measured in ``benchmarks/fusion_robustness.py``). nan gives 1 (not judged).
    """
    if nats != nats:
        return 1.0
    return nats + math.log1p(math.exp(-nats)) if nats > 0 else math.log1p(math.exp(nats))


def apply_identifier_guard(scores: Mapping[str, float], matches: Mapping[str, int]) -> dict[str, float]:
    """Put candidates that hold the query's rare identifiers first, keeping the fused order inside each group.

    The product exists because vector search loses exact identifiers: when a query looks up an identifier (a
    token with a joiner, a digit or a case change, see :mod:`hybrid_memory.tokenizer`) that few chunks hold,
    the chunks naming it are what the agent asked for, whatever the embedding thinks; likewise a chunk that
    holds every token of the query (a quoted error message) when few candidates do. The guard is a
    lexicographic sort key, never a change of order inside a group::

        guarded(d) = matches(d) + (f(d) - min f) / (2 (max f - min f))        (0 when max f = min f)

    The second term lies in [0, 0.5], so a candidate holding more of the rare identifiers always ranks above
    one holding fewer, and candidates holding the same number keep the order of ``f``. Keys absent from
    ``matches`` hold none. Returns ``scores`` unchanged (a copy) when no candidate holds one.

    Args:
        scores: key -> fused score (any real numbers).
        matches: key -> exact-match strength (number of distinct rare identifiers of the query the candidate
            contains; the searcher ranks a whole-query match above any identifier count).
    """
    keys = list(scores)
    guarded = guard_columns(list(scores.values()), [float(matches.get(key, 0)) for key in keys])
    return dict(zip(keys, guarded, strict=True))


def guard_columns(scores: Sequence[float], matches: Sequence[float]) -> list[float]:
    """:func:`apply_identifier_guard` over aligned columns of fused scores and exact-match strengths; returns
    the guarded scores (a copy of ``scores`` when no candidate matches)."""
    if not len(scores) or not any(matches):
        return list(scores)
    low, high = min(scores), max(scores)
    span = high - low
    if not span > 0:
        return [float(m) for m in matches]
    return [m + (s - low) / (2 * span) for s, m in zip(scores, matches, strict=True)]
