"""Weighted Reciprocal Rank Fusion (RRF) as a pure function.

Formula (Cormack, Clarke and Büttcher, SIGIR 2009, "Reciprocal Rank Fusion outperforms Condorcet and
individual Rank Learning Methods"), with one weight per run as in pyserini and ranx::

    score(d) = Σ_run  weight_run / (rrf_k + rank_run(d))

Ranks are 1-based. ``rrf_k`` is the smoothing constant (default 60, from the paper), **not** the number of
results: that is ``top_k``. With rrf_k = 60, rank 1 in one run and rank 3 in another give
1/61 + 1/63 ≈ 0.032266.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from .._exceptions import InvalidRequestError

__all__ = ["DEFAULT_RRF_K", "FusedHit", "reciprocal_rank_fusion", "rrf_table"]

DEFAULT_RRF_K = 60
"""Default RRF constant, from Cormack et al. (2009)."""


@dataclass(frozen=True)
class FusedHit:
    """One document of a fused run."""

    doc_id: str
    """Identity of the document (a chunk_id); fusion never compares texts."""
    score: float
    """Weighted RRF score, Σ weight / (rrf_k + rank)."""
    ranks: dict[str, int] = field(default_factory=dict)
    """Run name -> 1-based rank of the document in that run (runs it is absent from are left out)."""


def reciprocal_rank_fusion(
    runs: Mapping[str, Sequence[str]],
    weights: Mapping[str, float] | None = None,
    *,
    rrf_k: float = DEFAULT_RRF_K,
    top_k: int | None = None,
) -> list[FusedHit]:
    """Fuse ranked runs with weighted Reciprocal Rank Fusion.

    Args:
        runs: run name -> document ids, best first. A run may be empty. An id repeated in one run counts
            once, at its best (first) position; ranks are positions among the distinct ids, 1-based.
        weights: run name -> weight, finite and >= 0. Runs missing from it weigh 1.0; None means all 1.0
            (plain RRF). A weight of 0 removes that run's contribution.
        rrf_k: the RRF smoothing constant, >= 0 (default 60, Cormack et al. 2009). Not the result count.
        top_k: keep the best ``top_k`` hits (>= 1); None keeps all.

    Returns:
        Hits sorted by score descending, ties broken by ``doc_id`` ascending, so the order is identical
        across processes. Documents whose total weight is 0 are dropped. The inputs are not modified.

    Raises:
        InvalidRequestError: a weight is negative, NaN or infinite, every weight is 0, a weight names no
            run, rrf_k is negative or not finite, or top_k < 1.
    """
    weights = dict(weights or {})
    _validate(runs, weights, rrf_k, top_k)
    scores, ranks = rrf_table(runs, weights, rrf_k)
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    if top_k is not None:
        ordered = ordered[:top_k]
    return [FusedHit(doc_id, score, ranks[doc_id]) for doc_id, score in ordered]


def _validate(runs: Mapping[str, Sequence[str]], weights: Mapping[str, float], rrf_k: float, top_k: int | None) -> None:
    """Raise :class:`InvalidRequestError` for arguments :func:`reciprocal_rank_fusion` refuses."""
    unknown = sorted(set(weights) - set(runs))
    if unknown:
        raise InvalidRequestError(f"weights name runs that are not given: {unknown}; runs are {sorted(runs)}")
    for name, weight in weights.items():
        if not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise InvalidRequestError(f"weight of run {name!r} must be a finite number >= 0, got {weight!r}")
    if runs and all(weights.get(name, 1.0) == 0 for name in runs):
        raise InvalidRequestError("at least one run weight must be > 0; all weights are 0")
    if not isinstance(rrf_k, (int, float)) or not math.isfinite(rrf_k) or rrf_k < 0:
        raise InvalidRequestError(f"rrf_k must be a finite number >= 0, got {rrf_k!r}")
    if top_k is not None and top_k < 1:
        raise InvalidRequestError(f"top_k must be >= 1 or None, got {top_k}")


def rrf_table(
    runs: Mapping[str, Sequence[str]],
    weights: Mapping[str, float],
    rrf_k: float,
    *,
    validate: bool = False,
    keys: Collection[str] | None = None,
) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
    """The arithmetic of :func:`reciprocal_rank_fusion`, unsorted and without building hits (validated only
    with ``validate``; the hybrid searcher validated its request already): (doc id -> weighted RRF score,
    doc id -> run -> 1-based rank). Scores are summed in the order of ``runs``, so they are bit-identical to
    :func:`reciprocal_rank_fusion`'s; documents whose total weight is 0 have a rank but no score. With ``keys``,
    only those documents' rows (the hybrid searcher asks for the hits it returns).

    Raises:
        InvalidRequestError: with ``validate``, for the arguments :func:`reciprocal_rank_fusion` refuses.
    """
    if validate:
        _validate(runs, weights, rrf_k, None)
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name, run in runs.items():
        weight = float(weights.get(name, 1.0))
        distinct = run if len(set(run)) == len(run) else list(dict.fromkeys(run))  # first occurrence kept
        for rank, doc_id in enumerate(distinct, 1):
            if keys is not None and doc_id not in keys:
                continue
            held = ranks.get(doc_id)
            if held is None:
                ranks[doc_id] = {name: rank}
            else:
                held[name] = rank
            if weight > 0:
                scores[doc_id] = scores.get(doc_id, 0.0) + weight / (rrf_k + rank)
    return scores, ranks
