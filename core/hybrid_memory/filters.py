"""The metadata filter language, validated and compiled to parameterised SQLite SQL.

Operators are the ones LangChain, Chroma and MongoDB users know::

    {"service": "billing-service"}                       equality (plain value)
    {"severity": {"$gte": 3}}                            $eq $ne $gt $gte $lt $lte
    {"environment": {"$in": ["production", "staging"]}}  $in $nin
    {"owner": {"$exists": True}}                         $exists
    {"tags": {"$contains": "postgres"}}                  list membership (or equality for a scalar)
    {"$and": [...]}, {"$or": [...]}, {"$not": {...}}     logic; several keys in one object are ANDed

Semantics, chosen to be predictable:

* Type-strict: a number never equals or orders against a string; booleans match only booleans.
* A key missing from a chunk fails every comparison except ``$ne``, ``$nin`` and ``{"$exists": false}``
  (as in MongoDB); ``$gt`` on a missing key is simply false, never an error.
* ``{"key": None}`` matches a key that is missing or JSON null.
* Keys and values are never spliced into SQL: both are bound as parameters (``json_extract(metadata, ?)``).

An unknown operator, or an operand of the wrong type, raises :class:`InvalidFilterError` at request time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ._exceptions import InvalidFilterError

__all__ = ["COMPARISON_OPERATORS", "LOGICAL_OPERATORS", "compile_filter", "validate_filter"]

COMPARISON_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains")
LOGICAL_OPERATORS = ("$and", "$or", "$not")

_ORDER_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_SCALAR = (str, int, float, bool, type(None))


def _path(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidFilterError(f"metadata filter keys must be non-empty strings, got {key!r}")
    if key.startswith("$"):
        raise InvalidFilterError(
            f"unknown operator {key!r} in metadata filter; logical operators are {', '.join(LOGICAL_OPERATORS)}"
        )
    if '"' in key or any(ord(ch) < 32 for ch in key):
        raise InvalidFilterError(f"metadata filter key {key!r} must not contain double quotes or control characters")
    return '$."' + key + '"'


MAX_DEPTH = 32
"""Deepest nesting of $and / $or / $not a filter may have."""
MAX_LEAVES = 256
"""Most field tests ($in lists count once) a filter may have; SQLite limits expression depth to 1000."""
_INT64 = (-(2**63), 2**63 - 1)


def _check_scalar(op: str, key: str, value: Any) -> None:
    if not isinstance(value, _SCALAR):
        raise InvalidFilterError(
            f"{op} on {key!r} takes a string, number, boolean or null, got {type(value).__name__}: {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFilterError(f"{op} on {key!r} got a non-finite number {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
        raise InvalidFilterError(f"{op} on {key!r}: integers must fit in 64 bits (SQLite), got {value}")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidFilterError(f"{op} on {key!r}: the value is not valid Unicode text ({exc.reason})") from exc


def _leaf(expr: str) -> str:
    """A leaf test as 0/1, never NULL, so NOT and OR behave (a missing key gives 0, not NULL)."""
    return f"COALESCE(({expr}), 0)"


def _eq_sql(path: str, value: Any, params: list[Any]) -> str:
    """SQL true when the value at path equals value, type-strictly; None matches a missing key or null."""
    if value is None:
        params.append(path)
        return _leaf("IFNULL(json_type(metadata, ?), 'null') = 'null'")
    if isinstance(value, bool):
        params.append(path)
        return _leaf(f"json_type(metadata, ?) = '{'true' if value else 'false'}'")
    if isinstance(value, (int, float)):
        params.extend([path, path, value])
        return _leaf("json_type(metadata, ?) IN ('integer', 'real') AND json_extract(metadata, ?) = ?")
    if isinstance(value, (list, tuple)):
        params.extend([path, path, json.dumps(list(value))])
        return _leaf("CASE WHEN json_type(metadata, ?) = 'array' THEN json_extract(metadata, ?) = json(?) END")
    params.extend([path, path, value])
    return _leaf("json_type(metadata, ?) = 'text' AND json_extract(metadata, ?) = ?")


def _in_sql(path: str, values: Any, params: list[Any]) -> str:
    """True when the value at path equals one of values: one SQL IN list per JSON type, so a list of
    thousands of values stays one shallow expression."""
    clauses = []
    strings = [v for v in values if isinstance(v, str)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if strings:
        params.extend([path, path, *strings])
        marks = ",".join("?" * len(strings))
        clauses.append(_leaf(f"json_type(metadata, ?) = 'text' AND json_extract(metadata, ?) IN ({marks})"))
    if numbers:
        params.extend([path, path, *numbers])
        marks = ",".join("?" * len(numbers))
        clauses.append(
            _leaf(f"json_type(metadata, ?) IN ('integer', 'real') AND json_extract(metadata, ?) IN ({marks})")
        )
    for special in dict.fromkeys(v for v in values if v is None or isinstance(v, bool)):
        clauses.append(_eq_sql(path, special, params))
    return "(" + " OR ".join(clauses) + ")" if clauses else "0"


def _order_sql(op: str, key: str, path: str, value: Any, params: list[Any]) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidFilterError(f"{op} on {key!r} takes a number or a string, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFilterError(f"{op} on {key!r} got a non-finite number {value!r}")
    kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
    params.extend([path, path, value])
    return _leaf(f"json_type(metadata, ?) IN {kinds} AND json_extract(metadata, ?) {_ORDER_SQL[op]} ?")


def _contains_sql(key: str, path: str, value: Any, params: list[Any]) -> str:
    """True when the list at path has an element equal to value (type-strict), or the scalar equals it."""
    if value is None:
        raise InvalidFilterError(f"$contains on {key!r} takes a string, number or boolean; use {{{key!r}: None}}")
    if isinstance(value, bool):
        element, element_params = f"e.type = '{'true' if value else 'false'}'", []
    else:
        kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
        element, element_params = f"e.type IN {kinds} AND e.value = ?", [value]
    params.extend([path, path, *element_params])
    in_list = _leaf(
        f"json_type(metadata, ?) = 'array' AND EXISTS (SELECT 1 FROM json_each(metadata, ?) AS e WHERE {element})"
    )
    return f"({in_list} OR {_eq_sql(path, value, params)})"


def _field_sql(key: str, condition: Any, params: list[Any]) -> str:
    path = _path(key)
    if not isinstance(condition, Mapping):
        if isinstance(condition, (list, tuple)):
            raise InvalidFilterError(
                f"metadata filter value for {key!r} is a list; use {{{key!r}: {{'$in': [...]}}}} for "
                f"'any of', or {{{key!r}: {{'$eq': [...]}}}} for an equal list"
            )
        _check_scalar("equality", key, condition)
        return _eq_sql(path, condition, params)
    if not condition:
        raise InvalidFilterError(f"metadata filter for {key!r} is an empty object; give an operator such as $eq")
    clauses = []
    for op, value in condition.items():
        if op in ("$eq", "$ne"):
            if not isinstance(value, (list, tuple)):
                _check_scalar(op, key, value)
            eq = _eq_sql(path, value, params)
            clauses.append(eq if op == "$eq" else f"(NOT {eq})")
        elif op in _ORDER_SQL:
            clauses.append(_order_sql(op, key, path, value, params))
        elif op in ("$in", "$nin"):
            if not isinstance(value, (list, tuple)):
                raise InvalidFilterError(f"{op} on {key!r} takes a list of values, got {value!r}")
            for item in value:
                _check_scalar(op, key, item)
            any_sql = _in_sql(path, value, params)
            clauses.append(any_sql if op == "$in" else f"(NOT {any_sql})")
        elif op == "$exists":
            if not isinstance(value, bool):
                raise InvalidFilterError(f"$exists on {key!r} takes true or false, got {value!r}")
            params.append(path)
            clauses.append(f"(json_type(metadata, ?) IS {'NOT ' if value else ''}NULL)")
        elif op == "$contains":
            _check_scalar(op, key, value)
            clauses.append(_contains_sql(key, path, value, params))
        else:
            raise InvalidFilterError(
                f"unknown operator {op!r} on {key!r}; supported: {', '.join(COMPARISON_OPERATORS)}"
            )
    return "(" + " AND ".join(clauses) + ")"


def _node_sql(node: Any, params: list[Any], depth: int = 0, budget: list[int] | None = None) -> str:
    budget = budget if budget is not None else [MAX_LEAVES]
    if depth > MAX_DEPTH:
        raise InvalidFilterError(f"metadata filter nests $and/$or/$not deeper than {MAX_DEPTH} levels; flatten it")
    if not isinstance(node, Mapping):
        raise InvalidFilterError(f"a metadata filter must be an object, got {type(node).__name__}: {node!r}")
    if not node:
        return "1"
    clauses = []
    for key, value in node.items():
        if key in ("$and", "$or"):
            if not isinstance(value, (list, tuple)) or not value:
                raise InvalidFilterError(f"{key} takes a non-empty list of filters, got {value!r}")
            joiner = " AND " if key == "$and" else " OR "
            clauses.append("(" + joiner.join(_node_sql(item, params, depth + 1, budget) for item in value) + ")")
        elif key == "$not":
            clauses.append(f"(NOT {_node_sql(value, params, depth + 1, budget)})")
        else:
            budget[0] -= 1
            if budget[0] < 0:
                raise InvalidFilterError(
                    f"metadata filter has more than {MAX_LEAVES} field tests; use $in with a list instead of "
                    "many $or branches"
                )
            clauses.append(_field_sql(key, value, params))
    return "(" + " AND ".join(clauses) + ")"


def compile_filter(metadata_filter: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    """Compile a filter to a SQL boolean expression over the column ``metadata`` (JSON text).

    Returns:
        ``(sql, params)``: the expression, with every key path and value bound as a ``?`` parameter, and
        the parameters in order; ``("1", [])`` for None or ``{}``. Every leaf is 0 or 1, never NULL, so
        ``$not`` of a test on a missing key is true.

    Raises:
        InvalidFilterError: unknown operator, operand of the wrong type, bad key.
    """
    if metadata_filter is None:
        return "1", []
    params: list[Any] = []
    return _node_sql(metadata_filter, params), params


def validate_filter(metadata_filter: Mapping[str, Any] | None) -> None:
    """Raise :class:`InvalidFilterError` if the filter is malformed; return None otherwise."""
    compile_filter(metadata_filter)
