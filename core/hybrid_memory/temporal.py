"""Event time: instants as Unix seconds, validity intervals, and the optional recency prior.

A chunk's *event time* is the half-open interval ``[valid_from, valid_to)`` during which its fact holds (None
bounds are open). It is separate from ingestion time (``created_at`` / ``updated_at``). Facts that change are
closed, not deleted (:meth:`HybridMemory.supersede`), after Graphiti's bi-temporal edges (``valid_at`` /
``invalid_at`` next to ingestion time; Rasmussen et al. 2025, "Zep: a temporal knowledge graph architecture
for agent memory").

The recency prior is additive and bounded, never a multiplier: a multiplicative decay sends the score of every
old fact to zero however relevant it is (one project's 0.03/day decay took LoCoMo recall to 0 on a 242-day
corpus), while a bounded additive term can only reorder results whose fused scores are already close.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ._exceptions import InvalidRequestError

__all__ = ["RecencyPrior", "apply_recency_prior", "iso_utc", "to_timestamp"]

_DAY = 86400.0


def iso_utc(seconds: float) -> str:
    """Unix seconds as ISO 8601 in UTC, for messages: ``1717200000.0`` -> ``"2024-06-01T00:00:00Z"``
    (microseconds shown when the instant has them); an instant beyond ``datetime``'s years 1-9999 is given as
    ``"<seconds> (Unix seconds)"``."""
    try:
        return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"{seconds} (Unix seconds)"


def to_timestamp(value: Any, field: str = "time") -> float | None:
    """An instant as Unix seconds (float).

    Args:
        value: None; an int or float (Unix seconds, finite); a ``datetime`` (naive means UTC); or an ISO 8601
            string (``"2023-05-08"``, ``"2023-05-08T13:56:00Z"``, ``"2023-05-08T13:56:00+02:00"``).
        field: the field name, for the error message.

    Returns:
        Seconds since 1970-01-01 UTC, or None for None.

    Raises:
        ValueError: a bool, a non-finite number, an unparseable string, or another type (pydantic turns it
            into a validation error naming the field).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{field} must be Unix seconds, a datetime or an ISO 8601 string, got a bool")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{field} must be a finite number of Unix seconds, got {value!r}")
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{field} {value!r} is not an ISO 8601 date or time; write e.g. '2023-05-08' or "
                "'2023-05-08T13:56:00Z', or give Unix seconds"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    raise ValueError(f"{field} must be Unix seconds, a datetime or an ISO 8601 string, got {type(value).__name__}")


@dataclass(frozen=True)
class RecencyPrior:
    """An additive, bounded preference for recent facts, applied after fusion (off unless given).

    ``final(d) = fused(d) + weight · scale · 2^(−age(d) / half_life)``, where ``scale`` is the best fused score
    of the candidate list (``top − min(bottom, 0)`` when a fusion method gives negative scores, such as
    z-scores: the spread of the list, so the bonus never turns negative) and ``age(d) = max(0, t_ref − t(d))``:
    ``t(d)`` is the chunk's ``valid_from`` (event time), else its ``created_at``; ``t_ref`` is the request's
    ``as_of``, else the current time.

    The prior adds at most ``weight × scale``: for fusions with non-negative scores (RRF, the default) at most
    ``weight / (1 + weight)`` of any final score (4.8 % at the default 0.05), and it only reorders chunks whose
    fused scores differ by less than ``weight × scale``. It composes with any fusion method because it is
    relative to the fused scores' own scale. The result still
    carries the fusion's ``rrf_score``; the order is the final score's. With RRF (k = 60), where rank 1 and
    rank 5 of both lists differ by 6 %, the default lets a fresh fact climb a few places among near-ties and
    never further.

    Args:
        weight: maximum bonus as a fraction of the best fused score, 0 < weight <= 0.5 (default 0.05).
        half_life_days: age in days at which the bonus halves, > 0 (default 30: facts of the last weeks count
            as recent for an agent that works over weeks; a convention, not a value tuned on a benchmark).

    Raises:
        InvalidRequestError: ``weight`` outside (0, 0.5], or ``half_life_days`` not a finite number > 0.
    """

    weight: float = 0.05
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0 < self.weight <= 0.5:
            raise InvalidRequestError(
                f"RecencyPrior.weight must be in (0, 0.5] (a small share of the score), got {self.weight!r}"
            )
        if (
            isinstance(self.half_life_days, bool)
            or not isinstance(self.half_life_days, (int, float))
            or not math.isfinite(self.half_life_days)
            or self.half_life_days <= 0
        ):
            raise InvalidRequestError(
                f"RecencyPrior.half_life_days must be a finite number > 0, got {self.half_life_days!r}"
            )

    def bonus(self, scale: float, age_seconds: float) -> float:
        """The additive bonus for one chunk: ``weight · scale · 2^(−age/half_life)``; age in seconds (clamped
        at 0), ``scale`` >= 0 in the fused scores' unit."""
        return self.weight * scale * 2.0 ** (-max(0.0, age_seconds) / (self.half_life_days * _DAY))


def apply_recency_prior(
    hits: Sequence[Any], times: Mapping[str, float], prior: RecencyPrior, now: float, top_k: int
) -> list[Any]:
    """Re-rank fused hits with the recency prior and cut to ``top_k``.

    Args:
        hits: fused hits (``HybridHit``: ``key``, ``score``), best first.
        times: key -> the chunk's event time in Unix seconds (hits missing from it get no bonus).
        prior: the prior.
        now: the reference instant ``t_ref``, Unix seconds.
        top_k: hits to keep, >= 1.

    Returns:
        New hits with ``score`` = fused score + bonus, by score descending, ties by key ascending.
    """
    if not hits:
        return []
    scores = [float(h.score) for h in hits]
    scale = max(scores) - min(min(scores), 0.0)
    rescored = [
        replace(h, score=float(h.score) + (prior.bonus(scale, now - times[h.key]) if h.key in times else 0.0))
        for h in hits
    ]
    rescored.sort(key=lambda h: (-h.score, h.key))
    return rescored[:top_k]
