"""The filter language on Qdrant: how chunk fields are laid out in a point's payload, and the exact translation
of :func:`hybrid_memory.filters.parse_filter`'s canonical tree to a Qdrant filter.

Qdrant's conditions are not the filter language's semantics as they stand: ``match`` on an integer field may or
may not see a float ``1.0`` (the payload index decides), ``match`` takes no floats at all, ``range`` orders
numbers only, a key with a dot is a path, and ``match_except`` excludes points that lack the key, where the
filter language's ``$nin`` keeps them. So each filterable value is written to the payload *typed*, once per
kind, under a key no user key can disturb, and every test of the language becomes a condition on exactly one
kind::

    payload["f"]["m" + hex(utf-8 key)] = {
        "e": True,                 # the key is present (any value, nested objects too): $exists
        "s": [str, ...],           # the string value, or the string elements of a list value
        "n": [float, ...],         # numbers (int and float are one kind, as 1 == 1.0), value or elements
        "i": [int, ...],           # the integral ones among them, exactly, as int64 (equality and $in)
        "r": [repr(float), ...],   # the non-integral ones as their shortest repr (exact equality, see below)
        "b": ["true" | "false"],   # booleans as keywords, value or elements (never numbers: True is not 1)
        "z": True,                 # the value is null or a list holding null
        "l": [canonical json, ...] # the value when it is a list, and its elements that are lists ($eq [...])
    }

System fields (scope fields, ``valid_from`` / ``valid_to``) are written the same way under ``"s" + hex``. Kinds
a value does not have are left out. The chunk's own ``metadata`` object is kept as is, under ``"metadata"``,
for reading back; filters never address it. Translation (the tree of :data:`hybrid_memory.filters.Node`):

==========================  ================================================================================
``("eq", k, string)``       ``match.value`` on ``k.s`` (any element of the array, as Qdrant matches arrays)
``("eq", k, integral)``     ``match.value`` int(v) on ``k.i`` (exact over int64; 1.0 is stored there as 1); on a
                            key with a float payload index, ``range`` [v, v] on ``k.n`` (below 2**53), which
                            the index answers
``("eq", k, number)``       ``match.value`` repr(v) on ``k.r`` (a non-integral v: Qdrant's ``match`` takes no floats)
``("eq", k, bool)``         ``match.value`` ``"true"`` / ``"false"`` on ``k.b`` (a keyword: a Python bool is an
                            int to the bindings, and would be matched as 1)
``("eq", k, null)``         ``should``: ``is_empty`` on ``k.e`` (key missing) or not ``is_empty`` on ``k.z``
``("eq", k, list)``         ``match.value`` canonical JSON on ``k.l``
``("in", k, values)``       ``should`` of the equalities (strings in one ``match.any``, integral numbers in another)
``("cmp", k, op, number)``  ``range`` op on ``k.n`` (any element, each test on its own: no $elemMatch)
``("exists", k, b)``        not ``is_empty`` / ``is_empty`` on ``k.e``
``and`` / ``or`` / ``not``  ``must`` / ``should`` / ``must_not`` (the complement over all points, as ``$not``)
==========================  ================================================================================

``$ne`` and ``$nin`` are ``must_not`` of the equality, never Qdrant's ``match_except``, which would drop
points without the key. What Qdrant cannot express exactly is refused with an :class:`InvalidFilterError`
naming the operator, never approximated:

* ``$gt`` / ``$gte`` / ``$lt`` / ``$lte`` with a *string* operand (Qdrant's ``range`` compares numbers only);
* an order test (``$gt`` ...) on a key without a float payload index (the ``exact_ranges`` of
  :func:`translate`): Qdrant re-reads unindexed payload floats with up to 1 ULP of error (measured on Qdrant
  Edge 0.9: 289 of 2,003 random floats read back 1 ULP off, and 45 of 300 ``range`` equalities missed; with a
  float index, none), so an order test is exact only through the index. Equality never depends on it: integral
  numbers are matched as int64, others by their repr;
* an order operand (``$gt`` ...) of magnitude 2**53 or more (Qdrant's range reads numbers as float64: below
  2**53 rounding a stored integer to float64 never changes how it compares with the operand, beyond it the
  comparison could differ). Equality and ``$in`` are exact over int64, through ``k.i``.

The translation is JSON in Qdrant's REST form (``{"must": [{"key": ..., "match": {"value": ...}}]}``), what a
Qdrant server reads; :func:`to_client_filter` and :func:`to_edge_filter` turn it into ``qdrant_client`` and
``qdrant_edge`` objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..._exceptions import InvalidFilterError
from ...filters import BOOL, LIST, METADATA, NULL, NUMBER, SYSTEM, TEXT, Node, canonical_json, untyped

__all__ = [
    "FIELDS",
    "MAX_EXACT_NUMBER",
    "field_key",
    "field_name",
    "filterable_fields",
    "marker_paths",
    "to_client_filter",
    "to_edge_filter",
    "translate",
]

FIELDS = "f"
"""Payload key under which the typed, filterable copies of metadata and system fields live."""

MAX_EXACT_NUMBER = 2.0**53
"""Number operands must be smaller in magnitude: float64 holds every integer below 2**53 exactly (IEEE 754)."""

_NOTHING: dict[str, Any] = {"is_empty": {"key": "chunk_id"}}
"""A condition no point satisfies: every point carries its chunk_id."""


def field_name(namespace: str, key: str) -> str:
    """The payload key (under :data:`FIELDS`) of a metadata key (namespace ``"m"``) or system field (``"s"``):
    the namespace then the key's UTF-8 bytes in hex, so no key (dots, quotes, any script) is read as a path."""
    return namespace + key.encode("utf-8").hex()


def field_key(name: str) -> tuple[str, str] | None:
    """The inverse of :func:`field_name`: ``(namespace, key)`` of a payload key written by it (without the
    :data:`FIELDS` prefix and the type suffix), None for a name it did not write."""
    try:
        return name[:1], bytes.fromhex(name[1:]).decode("utf-8")
    except ValueError:  # not hex, or not UTF-8
        return None


def _integral(value: int | float) -> bool:
    """An int, or a float with an integral value, inside int64 (what Qdrant's integer match holds exactly)."""
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return value.is_integer() and -(2.0**63) <= value < 2.0**63


def _kinds(value: Any) -> dict[str, Any]:
    """The typed payload entry of one stored value (see the module docstring)."""
    entry: dict[str, Any] = {"e": True}
    strings: list[str] = []
    numbers: list[float] = []
    integers: list[int] = []
    reprs: list[str] = []
    bools: list[str] = []
    lists: list[str] = []
    null = False

    def scalar(item: Any) -> None:
        nonlocal null
        if item is None:
            null = True
        elif isinstance(item, bool):
            bools.append("true" if item else "false")
        elif isinstance(item, (int, float)):
            numbers.append(float(item))
            if _integral(item):
                integers.append(int(item))
            else:
                reprs.append(repr(float(item)))
        elif isinstance(item, str):
            strings.append(item)
        elif isinstance(item, (list, tuple)):
            lists.append(canonical_json(list(item)))
        # nested objects: seen by $exists only

    if isinstance(value, (list, tuple)):
        lists.append(canonical_json(list(value)))
        for item in value:
            scalar(item)
    elif not isinstance(value, Mapping):
        scalar(value)
    for name, values in (("s", strings), ("n", numbers), ("i", integers), ("r", reprs), ("b", bools), ("l", lists)):
        if values:
            entry[name] = values
    if null:
        entry["z"] = True
    return entry


def filterable_fields(metadata: Mapping[str, Any], system: Mapping[str, Any]) -> dict[str, Any]:
    """The payload's :data:`FIELDS` object for a chunk: every metadata key, and every system field that is not
    None (a None system field is stored as absent, which is what the filter language's null equality reads)."""
    fields = {field_name(METADATA, key): _kinds(value) for key, value in metadata.items()}
    fields.update({field_name(SYSTEM, key): _kinds(value) for key, value in system.items() if value is not None})
    return fields


def _path(key: tuple[str, str], kind: str) -> str:
    return f"{FIELDS}.{field_name(key[0], key[1])}.{kind}"


def marker_paths(namespace: str, key: str) -> list[str]:
    """The payload paths of a field's two markers, ``e`` (the key is present) and ``z`` (its value is null),
    which the translation tests with ``is_empty`` (``$exists``, equality with null and its negations, and the
    scope and validity conditions of searches and dedup). Qdrant answers ``is_empty`` on a field without a payload
    index by reading every point's payload: measured on Qdrant Edge 0.9 at 20,000 points
    (``benchmarks/qdrant_filter_latency.py``), an ``as_of`` search took 318 ms and ``{"team": {"$exists": false}}``
    157 ms, against 20 and 11 ms with a bool index on these paths, the same ids. The backend indexes them as bool
    for the scope fields, the validity times and every declared metadata key."""
    return [_path((namespace, key), "e"), _path((namespace, key), "z")]


def _number(op: str, key: tuple[str, str], value: float) -> float:
    if not math.isfinite(value) or abs(value) >= MAX_EXACT_NUMBER:
        raise InvalidFilterError(
            f"{op} on {key[1]!r} with the number {value!r}: Qdrant keeps numbers as float64, exact only below "
            f"2**53 in magnitude; compare with a smaller number, or store the value as a string"
        )
    return float(value)


def _integers(key: tuple[str, str], values: list[int], exact: Any, match: str) -> dict[str, Any]:
    """Equality with any of the integral ``values``: ``match`` (``"value"`` or ``"any"``) on ``k.i``; on a key
    with a float payload index (in ``exact``), a ``range`` ``[v, v]`` on ``k.n`` per value instead, which that
    index answers (``k.n`` holds every number as float64, exact for an operand below 2**53, where no other stored
    number reads as ``v``), so one float declaration serves a key's order tests and its equality alike."""
    if exact is not None and key in exact and all(abs(v) < MAX_EXACT_NUMBER for v in values):
        ranges = [{"key": _path(key, "n"), "range": {"gte": float(v), "lte": float(v)}} for v in values]
        return ranges[0] if len(ranges) == 1 else {"should": ranges}
    return {"key": _path(key, "i"), "match": {match: values[0] if match == "value" else values}}


def _equal(key: tuple[str, str], t: tuple, op: str = "$eq", exact: Any = None) -> dict[str, Any]:
    kind, value = t
    if kind == TEXT:
        return {"key": _path(key, "s"), "match": {"value": value}}
    if kind == NUMBER:
        if _integral(value):
            return _integers(key, [int(value)], exact, "value")
        return {"key": _path(key, "r"), "match": {"value": repr(float(value))}}
    if kind == BOOL:
        return {"key": _path(key, "b"), "match": {"value": "true" if value else "false"}}
    if kind == NULL:
        return {
            "should": [{"is_empty": {"key": _path(key, "e")}}, {"must_not": [{"is_empty": {"key": _path(key, "z")}}]}]
        }
    if kind == LIST:
        return {"key": _path(key, "l"), "match": {"value": canonical_json(untyped(t))}}
    raise InvalidFilterError(f"{op} on {key[1]!r}: objects cannot be compared; test the key with $exists")


_RANGE = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}


def _condition(node: Node, exact: Any = None) -> dict[str, Any]:
    kind = node[0]
    if kind == "all":
        return {"must": []}
    if kind == "and":
        return {"must": [_condition(child, exact) for child in node[1]]}
    if kind == "or":
        return {"should": [_condition(child, exact) for child in node[1]]}
    if kind == "not":
        if node[1] == ("all",):
            return _NOTHING
        return {"must_not": [_condition(node[1], exact)]}
    key = node[1]
    if kind == "exists":
        missing = {"is_empty": {"key": _path(key, "e")}}
        return {"must_not": [missing]} if node[2] else missing
    if kind == "eq":
        return _equal(key, node[2], exact=exact)
    if kind == "in":
        texts = sorted(v for k, v in node[2] if k == TEXT)
        integers = sorted({int(v) for k, v in node[2] if k == NUMBER and _integral(v)})
        others = sorted((t for t in node[2] if t[0] != TEXT and not (t[0] == NUMBER and _integral(t[1]))), key=repr)
        parts: list[dict[str, Any]] = []
        if texts:
            parts.append({"key": _path(key, "s"), "match": {"any": texts}})
        if integers:
            parts.append(_integers(key, integers, exact, "any"))
        parts.extend(_equal(key, t, "$in", exact) for t in others)
        return parts[0] if len(parts) == 1 else {"should": parts}
    if kind == "cmp":
        op, (value_kind, value) = node[2], node[3]
        if value_kind != NUMBER:
            raise InvalidFilterError(
                f"{op} on {key[1]!r} with the string {value!r}: Qdrant's range condition orders numbers only, so "
                f"string order cannot run on the Qdrant backend; use $eq / $in on strings, or the embedded backend"
            )
        if exact is not None and key not in exact:
            raise InvalidFilterError(
                f"{op} on {key[1]!r}: Qdrant compares unindexed payload floats after re-reading them with up to "
                f"1 ULP of error, so order tests are exact only on keys with a float payload index; declare it: "
                f"HybridMemory.qdrant(..., indexed_keys={{{key[1]!r}: 'float'}}), or on the command line "
                f"--index-key {key[1]}=float"
            )
        return {"key": _path(key, "n"), "range": {_RANGE[op]: _number(op, key, value)}}
    raise AssertionError(f"unknown filter node {node!r}")  # pragma: no cover


def translate(node: Node, exact_ranges: Any = None) -> dict[str, Any] | None:
    """The Qdrant filter (REST JSON) of a parsed filter tree; None for ``("all",)`` (no restriction).

    Args:
        node: a tree from :func:`hybrid_memory.filters.parse_filter` (namespace ``"m"`` or ``"s"``), or an
            ``("and", ...)`` of such trees.
        exact_ranges: the keys (``(namespace, key)``) whose order tests are exact (a float payload index);
            None: every key (qdrant-client's local mode, which compares in Python).

    Raises:
        InvalidFilterError: an operator Qdrant cannot express exactly (see the module docstring); the message
            names the operator and the key.
    """
    if node == ("all",):
        return None
    condition = _condition(node, exact_ranges)
    if set(condition) <= {"must", "should", "must_not"}:
        return condition
    return {"must": [condition]}


# -- REST JSON -> library objects ---------------------------------------------------------------------
def to_client_filter(flt: Mapping[str, Any] | None) -> Any:
    """A ``qdrant_client.models.Filter`` from the REST JSON (None stays None)."""
    if flt is None:
        return None
    from qdrant_client import models

    return models.Filter.model_validate(flt)


def _edge_condition(c: Mapping[str, Any]) -> Any:
    import qdrant_edge as qe

    if set(c) <= {"must", "should", "must_not"}:
        return to_edge_filter(c)
    if "is_empty" in c:
        return qe.IsEmptyCondition(key=c["is_empty"]["key"])
    if "has_id" in c:
        return qe.HasIdCondition(set(c["has_id"]))
    key = c["key"]
    if "match" in c:
        match = c["match"]
        if "any" in match:
            return qe.FieldCondition(key=key, match=qe.MatchAny(any=list(match["any"])))
        return qe.FieldCondition(key=key, match=qe.MatchValue(match["value"]))
    if "range" in c:
        return qe.FieldCondition(key=key, range=qe.RangeFloat(**c["range"]))
    raise AssertionError(f"untranslated condition {c!r}")  # pragma: no cover


def to_edge_filter(flt: Mapping[str, Any] | None) -> Any:
    """A ``qdrant_edge.Filter`` from the REST JSON (None stays None)."""
    if flt is None:
        return None
    import qdrant_edge as qe

    parts: dict[str, Any] = {
        name: [_edge_condition(c) for c in flt[name]] for name in ("must", "should", "must_not") if name in flt
    }
    return qe.Filter(**parts)
