"""Per-query agreement between the engines' lists, and the guard's order among holders of a rare name.

Two pieces of the default fusion (:func:`~hybrid_memory.fusion.methods.fuse_adaptive`) that judge the engines on
the query at hand rather than on the corpus: both read only the candidate lists and the exact cross-scores every
backend already computes, so the embedded and the Qdrant backends fuse the same inputs alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["guard_columns_by", "mix_weights", "top_agreement"]


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


def guard_columns_by(scores: Sequence[float], matches: Sequence[float], inner: Sequence[float]) -> list[float]:
    """The exact-match guard (:func:`~hybrid_memory.fusion.adaptive.guard_columns`) with its own order inside the
    groups of holders::

        guarded(d) = matches(d) + (g(d) - min g) / (2 (max g - min g))

    where ``g`` is ``inner`` over the candidates holding a rare name (matches > 0; min and max over them) and
    ``scores`` over the others (min and max over all candidates, as the plain guard). The guard decides *that*
    the holders come first; ``inner`` decides *which* holder first (the default passes the z-score fusion with
    the request's priors, so BM25's own reasons, repetition, a title, a definition, count as much as the
    embedding's instead of as little as BM25's calibrated weight on a one-identifier query, whose surprise is at
    most 0 by construction). A span of 0 puts the group at ``matches(d)``. Returns a copy of ``scores`` when no
    candidate matches.
    """
    if not len(scores) or not any(matches):
        return list(scores)
    low, high = min(scores), max(scores)
    span = high - low
    held = [g for g, m in zip(inner, matches, strict=True) if m]
    in_low, in_span = min(held), max(held) - min(held)
    out = []
    for s, m, g in zip(scores, matches, inner, strict=True):
        if m:
            out.append(m + ((g - in_low) / (2 * in_span) if in_span > 0 else 0.0))
        else:
            out.append((s - low) / (2 * span) if span > 0 else 0.0)
    return out
