"""Per-query agreement between the engines' lists, for the default fusion's weights.

Pieces of the default fusion (:func:`~hybrid_memory.fusion.methods.fuse_adaptive`) that judge the engines on
the query at hand rather than on the corpus: they read only the candidate lists and the top-hit surprises every
backend already computes, so the embedded and the Qdrant backends fuse the same inputs alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["chance_free", "mix_weights", "top_agreement"]


def top_agreement(runs: Mapping[str, Sequence[str]], k: int | None = None) -> float:
    """Share of the engines' top ``k`` candidates they have in common, in [0, 1]::

        a = |top_k(e1) & top_k(e2)| / k        (mean over pairs of engines for more than two)

    ``k`` defaults to half the longest list, rounded up: the fused list keeps ``top_k`` of the ``top_k x
    candidate_multiplier`` candidates each engine returns, 2 by default, so that is the depth a result is
    judged at. The quantity RRF rewards (Cormack, Clarke and Büttcher 2009: a document in both lists outranks
    one in a single list) and CombMNZ counts (Fox and Shaw 1994), measured for the query: two engines of
    different kinds that put the same documents on top corroborate each other on this query, whatever either is
    worth on the corpus as a whole. Returns 0 for fewer than two non-empty lists.
    """
    lists = [list(run) for run in runs.values() if run]
    if len(lists) < 2:
        return 0.0
    if k is None:
        k = (max(len(run) for run in lists) + 1) // 2
    if k <= 0:
        return 0.0
    tops = [set(run[:k]) for run in lists]
    pairs = [(i, j) for i in range(len(tops)) for j in range(i + 1, len(tops))]
    return sum(len(tops[i] & tops[j]) for i, j in pairs) / (k * len(pairs))


def chance_free(nats: float) -> float:
    """Probability that an engine's top hit of surprise ``nats`` is not a chance one::

        p(S) = 1 / (1 + n P) = 1 / (1 + e^-S)

    with ``n P = e^-S`` the expected number of chance documents scoring at least the top
    (:mod:`hybrid_memory.engines.calibration`; :func:`~hybrid_memory.fusion.adaptive.surprise_factor` is ``-ln(1 - p)``
    of the same quantity): one real hit among ``n P`` chance ones at its level. About 1 for a clear top
    (S >= 4), 1/2 at chance level, toward 0 below it. nan gives 1 (not judged).
    """
    if nats != nats:
        return 1.0
    if nats >= 0:
        return 1.0 / (1.0 + math.exp(-nats))
    e = math.exp(nats)
    return e / (1.0 + e)


def mix_weights(calibrated: Mapping[str, float], priors: Mapping[str, float], agreement: float) -> dict[str, float]:
    """Convex weights between the calibrated ones and the request's priors, by the squared agreement::

        alpha_e = (1 - a^2) * calibrated_e + a^2 * prior_e / sum(prior)

    ``calibrated``: convex per-query weights (they sum to 1); ``priors``: engine -> request weight >= 0 for the
    same engines (others ignored); ``agreement`` in [0, 1] (:func:`top_agreement`). Squared so that the usual
    partial overlap (a third of the tops) moves the weights little and only lists that mostly coincide are
    weighed as the request weighs them. Returns engine -> weight for every engine of ``calibrated``.
    """
    share = min(1.0, max(0.0, agreement)) ** 2
    total = sum(float(priors.get(name, 0.0)) for name in calibrated)
    if not share or not total > 0:
        return dict(calibrated)
    return {name: (1 - share) * w + share * float(priors.get(name, 0.0)) / total for name, w in calibrated.items()}
