"""Checks of the numeric options of a memory's constructor, run before anything is created.

``HybridMemory(path, k1="x")`` used to create the folder and its store, then fail with a raw ``TypeError`` from
inside the BM25 index (``'>=' not supported between instances of 'str' and 'int'``); a ``busy_timeout`` or
``faiss_threads`` of the wrong type failed inside ``sqlite3`` or FAISS the same way, ``True`` passed as an int,
``compact_ratio=5`` and ``show_progress="yes"`` were taken.
:func:`check_memory_options` refuses each with a message naming the option, the value given (type and repr) and
the value to pass, before the folder exists.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ._exceptions import InvalidRequestError

__all__ = ["check_memory_options"]


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


_RULES = {
    # name: (accepted, what it must be, the fix)
    "k1": (
        lambda v: _real(v) and math.isfinite(v) and v >= 0,
        "a finite number >= 0",
        "a float such as k1=1.5 (bm25s' default)",
    ),
    "b": (lambda v: _real(v) and 0 <= v <= 1, "a number in [0, 1]", "a float such as b=0.75 (bm25s' default)"),
    "compact_min": (
        lambda v: _int(v) and v >= 0,
        "an int >= 0 (documents)",
        "an int such as compact_min=500 (the default)",
    ),
    # sparse.py merges once delta + removed documents reach max(compact_min, compact_ratio × main size): 0 leaves
    # compact_min alone to decide; above 1 removals alone (at most the main size) could never trigger a merge
    "compact_ratio": (
        lambda v: _real(v) and 0 <= v <= 1,
        "a number in [0, 1] (a fraction of the main BM25 segment; 0 leaves compact_min alone to decide)",
        "a float such as compact_ratio=0.1 (the default)",
    ),
    "candidate_multiplier": (
        lambda v: _int(v) and v >= 1,
        "an int >= 1",
        "an int such as candidate_multiplier=2 (the default)",
    ),
    "faiss_threads": (
        lambda v: v is None or (_int(v) and v >= 1),
        "an int >= 1 or None",
        "faiss_threads=1 (the default) or None to leave FAISS's own thread count",
    ),
    "busy_timeout": (
        lambda v: _real(v) and math.isfinite(v) and v >= 0,
        "a finite number of seconds >= 0",
        "a float such as busy_timeout=30.0 (the default)",
    ),
    "show_progress": (
        lambda v: isinstance(v, (bool, np.bool_)),
        "a bool",
        "show_progress=True for progress bars, or False (the default)",
    ),
    "background_compaction": (
        lambda v: isinstance(v, (bool, np.bool_)),
        "a bool",
        "background_compaction=True (the default) or False to merge in the writing call",
    ),
}


def check_memory_options(**options: Any) -> None:
    """Refuse a numeric constructor option of the wrong type or out of its range.

    Args:
        **options: any of ``k1``, ``b``, ``compact_min``, ``compact_ratio`` (in [0, 1]: :class:`BM25Index`
            merges at ``max(compact_min, compact_ratio × main size)``), ``candidate_multiplier``,
            ``faiss_threads``, ``busy_timeout``, ``show_progress``, ``background_compaction`` (bools: ``"yes"``
            or ``1`` is not one) with the value given. numpy numbers count as numbers; a bool is not one.

    Raises:
        InvalidRequestError: the first option that is not what it must be; the message names it, the value's
            type and repr, and the value to pass.
    """
    for name, value in options.items():
        accepted, rule, fix = _RULES[name]
        if not accepted(value):
            raise InvalidRequestError(f"{name} must be {rule}, got {type(value).__name__} {value!r:.60}; pass {fix}")
