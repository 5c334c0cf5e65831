"""Fusion of ranked candidate lists: weighted RRF, score-based methods, and the query-adaptive default.

Small pure functions, one formula each (the source is in each docstring):

* :func:`reciprocal_rank_fusion` -- weighted RRF (Cormack, Clarke and Büttcher 2009);
* :func:`dbsf` -- distribution-based score fusion, mean +- 3 sigma (Qdrant);
* :func:`tm2c2` -- convex combination of theoretical min-max normalised scores (Bruch, Gai and Ingber 2023);
* :func:`zscore_fusion` -- CombSUM of z-scores over the candidates (Montague and Aslam 2001);
* :func:`log_evidence` -- BM25's multiplicative spread made additive, log(1 + s), before standardising;
* :func:`confidence_weights` -- per-query engine weights from how far each engine's top hit stands out;
* :func:`apply_identifier_guard` -- candidates holding a rare identifier of the query first;
* :func:`surprise_factor` -- an engine's calibrated weight: the evidence in nats that its top hit is not chance;
* :data:`FUSION_METHODS` -- the named methods a request may choose (``hybrid_params.fusion``), each a
  function of one :class:`FusionInput`; :data:`DEFAULT_FUSION` is the default.
"""

from .adaptive import apply_identifier_guard, confidence_weights, surprise_factor, top_outlier
from .methods import DEFAULT_FUSION, FUSION_METHODS, FusionInput, FusionMethod, FusionOutcome, fuse
from .rrf import DEFAULT_RRF_K, FusedHit, reciprocal_rank_fusion, rrf_table
from .scores import dbsf, distribution_normalize, log_evidence, rank_by_score, theoretical_min_max, tm2c2, zscore_fusion

__all__ = [
    "DEFAULT_FUSION",
    "DEFAULT_RRF_K",
    "FUSION_METHODS",
    "FusedHit",
    "FusionInput",
    "FusionMethod",
    "FusionOutcome",
    "apply_identifier_guard",
    "confidence_weights",
    "dbsf",
    "distribution_normalize",
    "fuse",
    "log_evidence",
    "rank_by_score",
    "reciprocal_rank_fusion",
    "rrf_table",
    "surprise_factor",
    "theoretical_min_max",
    "tm2c2",
    "top_outlier",
    "zscore_fusion",
]
