"""The metadata filter language: its exact semantics, one parser, and the SQL compiler that is its reference.

Operators are the ones MongoDB, LangChain and Chroma users know::

    {"service": "billing-service"}                       equality (plain value)
    {"severity": {"$gte": 3}}                            $eq $ne $gt $gte $lt $lte
    {"environment": {"$in": ["production", "staging"]}}  $in $nin
    {"owner": {"$exists": True}}                         $exists
    {"tags": {"$contains": "postgres"}}                  element of a list (or the value itself)
    {"$and": [...]}, {"$or": [...]}, {"$not": {...}}     logic; several keys in one object are ANDed

Semantics (MongoDB's query semantics for top-level fields, https://www.mongodb.com/docs/manual/tutorial/query-arrays/,
with strict types):

* **Types are strict.** There are four comparable kinds: numbers (int and float are one kind: ``1 == 1.0``),
  strings, booleans and null. A number never equals or orders against a string, ``True`` never equals ``1``.
  Strings order by Unicode code point (SQLite's BINARY collation of UTF-8, which is the same order).
* **Lists match by element, as in MongoDB.** When the stored value is a list, a test matches when the list as a
  whole or any element matches: with ``labels: ["db", "oncall"]``, ``{"labels": "db"}``,
  ``{"labels": {"$in": ["db", "network"]}}`` and ``{"labels": {"$gt": "c"}}`` match. ``$ne`` and ``$nin`` are the
  negations, so they match only when *no* element (and not the list) is equal. ``{"$eq": [...]}`` with a list
  operand matches an equal list (element by element, type-strict: ``[1]`` equals ``[1.0]``, not ``[True]``), or a
  list holding an equal list as an element. ``$contains`` is equality with a scalar operand (kept for LangChain
  and Chroma users): element of a list, or the scalar itself.
* **Missing keys.** A key missing from a chunk fails every test except ``$ne``, ``$nin``, ``{"$exists": false}``
  and null equality; ``$gt`` on a missing key is simply false, never an error. ``$not`` is the complement over
  all chunks, so ``{"$not": {"sev": {"$gt": 2}}}`` matches chunks without ``sev``.
* **Null.** ``{"key": None}`` (or ``{"$eq": None}``) matches a missing key, JSON null, or a list holding null;
  ``{"$ne": None}`` is its negation. ``None`` inside ``$in`` means the same. ``$contains`` refuses ``None``.
* **Nested objects** are stored but not filterable: only ``$exists`` (and the negations ``$ne``/``$nin``, which
  they always satisfy) see them. Filters address top-level keys; ``"a.b"`` is the key named ``a.b``.
* **Keys** (one rule, checked by :func:`key_problem` both when a chunk is added and when a filter names a key):
  a non-empty string that does not start with ``$`` (operators) and holds no control character
  (U+0000-U+001F, U+007F-U+009F) and no lone surrogate. Any other key (spaces, dots, quotes, backslashes, any
  script) is an ordinary key that filters match exactly.
* **Values** stored in metadata and given as operands: JSON values whose integers fit in 64 bits (SQLite's
  integers), whose floats are finite, whose strings are valid Unicode without NUL (SQLite's JSON functions cut
  text at NUL), nested at most :data:`MAX_VALUE_DEPTH` levels. Anything else is refused with an error naming the
  fix, when added (:func:`check_metadata`) or at request time (:class:`InvalidFilterError`).

Limits (:mod:`hybrid_memory.limits`): filters nest at most :data:`MAX_DEPTH` levels of ``$and``/``$or``/``$not``
and hold at most :data:`MAX_LEAVES` field tests, an ``$in`` list counting once; their ``$in``/``$nin`` lists hold
at most :data:`~hybrid_memory.limits.MAX_IN_VALUES` (10,000) values together (300,000 cost about 3 s of CPU a call).

Every filter is parsed once by :func:`parse_filter` into a canonical, hashable tree (:data:`Node`), which both the
SQL compiler here (:func:`compile_filter`, the reference, used by ``count`` and ``iter_chunks``) and the in-memory
index (:mod:`hybrid_memory.backends.embedded.filter_index`, used by search) evaluate; equal filters give equal trees, so
the tree
is also the cache key of resolved filters. In SQL, keys and values are always bound as parameters (a key is
matched against ``json_each``'s ``key`` column, so any key the key rule allows works), and ``$in`` binds one JSON
array per type however long the list.
"""

from __future__ import annotations

import json
import math
import reprlib
import sqlite3
from collections.abc import Mapping
from typing import Any

from . import limits
from ._exceptions import InvalidFilterError, InvalidRequestError

__all__ = [
    "system_filter",
    "COMPARISON_OPERATORS",
    "LOGICAL_OPERATORS",
    "MAX_DEPTH",
    "MAX_LEAVES",
    "MAX_VALUE_DEPTH",
    "Node",
    "canonical_json",
    "check_metadata",
    "compile_filter",
    "compile_node",
    "key_problem",
    "parse_filter",
    "register_sql_functions",
    "typed",
    "untyped",
    "validate_filter",
]

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 80, 80, 3, 6, 4


def _short(value: Any) -> str:
    """A bounded repr for error messages (``reprlib``: 80 characters, 3 levels, 6 list items): a filter holding
    300,000 values or nested 5,000 levels deep gives a readable message, never a huge one or a RecursionError."""
    return _REPR.repr(value)


COMPARISON_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains")
LOGICAL_OPERATORS = ("$and", "$or", "$not")

MAX_DEPTH = limits.MAX_FILTER_DEPTH
"""Deepest nesting of $and / $or / $not a filter may have (32)."""
MAX_LEAVES = limits.MAX_FILTER_LEAVES
"""Most field tests ($in lists count once) a filter may have; SQLite limits expression depth to 1000."""
MAX_VALUE_DEPTH = 32
"""Deepest nesting of lists and objects inside a metadata value or a filter operand."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""SQLite's integer range: integers outside it are refused in metadata and in filters."""

# kinds of typed values, in the order typed() tags them
NULL, BOOL, NUMBER, TEXT, LIST, OBJECT = range(6)

Node = tuple
"""A parsed filter: a nested tuple, hashable, equal for equal filters. Its forms:

``("all",)`` matches every chunk; ``("and", (n, ...))``, ``("or", (n, ...))``, ``("not", n)``;
``("eq", key, t)`` (``t`` a :func:`typed` value; null also matches a missing key);
``("in", key, frozenset of t)``; ``("cmp", key, op, t)`` with op one of ``"$gt" "$gte" "$lt" "$lte"`` and ``t`` a
number or a string; ``("exists", key, bool)``. ``key`` is ``(namespace, name)``: namespace ``"m"`` for user
metadata, ``"s"`` for system fields (see :mod:`hybrid_memory.backends.embedded.filter_index`)."""

METADATA, SYSTEM = "m", "s"
"""Key namespaces: user metadata keys and the memory's own per-chunk fields never collide."""


# -- typed values -----------------------------------------------------------------------------------
def typed(value: Any) -> tuple:
    """The hashable canonical form of a checked JSON value, equal exactly when the filter semantics say equal.

    ``(0, None)`` null, ``(1, bool)``, ``(2, number)`` (Python's ``1 == 1.0`` and ``hash(1) == hash(1.0)`` make
    int and float one kind; the tag keeps ``True`` apart from ``1``), ``(3, str)``, ``(4, (typed, ...))`` for a
    list, ``(5, ((key, typed), ...))`` for an object, keys sorted.
    """
    if value is None:
        return (NULL, None)
    if isinstance(value, bool):
        return (BOOL, value)
    if isinstance(value, (int, float)):
        return (NUMBER, value)
    if isinstance(value, str):
        return (TEXT, value)
    if isinstance(value, (list, tuple)):
        return (LIST, tuple(typed(v) for v in value))
    return (OBJECT, tuple(sorted(((k, typed(v)) for k, v in value.items()), key=lambda kv: kv[0])))


def untyped(t: tuple) -> Any:
    """The JSON value of a :func:`typed` form (lists come back as lists)."""
    kind, value = t
    if kind == LIST:
        return [untyped(v) for v in value]
    if kind == OBJECT:
        return {k: untyped(v) for k, v in value}
    return value


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)  # exact: 1.0 and 1 become one text; 2**53 + 1 stays apart from float(2**53)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def canonical_json(value: Any) -> str:
    """JSON text equal for values the filter semantics call equal: integral floats written as integers, object
    keys sorted, no spaces, UTF-8 kept (``ensure_ascii=False``, as the store writes metadata)."""
    return json.dumps(_canonical(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _sql_canonical_json(text: str | None) -> str | None:
    return None if text is None else canonical_json(json.loads(text))


def register_sql_functions(conn: sqlite3.Connection) -> None:
    """Register ``hm_canonical_json(json_text)`` (:func:`canonical_json` of the parsed text) on a connection;
    :func:`compile_filter`'s SQL compares lists through it. Every connection that runs filter SQL needs it."""
    conn.create_function("hm_canonical_json", 1, _sql_canonical_json, deterministic=True)


# -- the shared key and value rules ---------------------------------------------------------------------
def key_problem(key: Any) -> str | None:
    """Why ``key`` cannot be a metadata key (and so cannot be filtered on), or None when it can.

    The one rule for chunks and filters: a non-empty string, not starting with ``$``, without control
    characters (U+0000-U+001F, U+007F-U+009F) or lone surrogates.
    """
    if not isinstance(key, str):
        return f"keys must be strings, got {type(key).__name__}"
    if not key:
        return "the key is empty"
    if key.startswith("$"):
        return "a key may not start with '$' (reserved for operators)"
    for ch in key:
        if ord(ch) < 32 or 127 <= ord(ch) < 160:
            return f"the key holds the control character {_short(ch)}"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the key is not valid Unicode text ({exc.reason})"
    return None


def _value_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be stored or compared, or None (see the module docstring's value rule)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return f"integers must fit in 64 bits (SQLite), got {value}"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"numbers must be finite, got {_short(value)}"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{_short(value)} is not valid Unicode text ({exc.reason} at position {exc.start})"
        return "strings may not contain NUL characters (SQLite's JSON cuts text there)" if "\x00" in value else None
    if isinstance(value, (list, tuple, Mapping)):
        if depth >= MAX_VALUE_DEPTH:
            return f"values may nest lists and objects at most {MAX_VALUE_DEPTH} levels deep"
        if isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    return f"object keys must be strings, got {_short(k)}"
                problem = _value_problem(k, depth + 1) or _value_problem(v, depth + 1)
                if problem:
                    return problem
            return None
        for item in value:
            problem = _value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"{type(value).__name__} is not a JSON value (use str, int, float, bool, None, lists or objects)"


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Check a chunk's metadata against the key and value rules.

    Raises:
        InvalidRequestError: a key breaks :func:`key_problem`'s rule (the message says "cannot be filtered on"
            and names the key), or a value is not storable (non-finite number, integer beyond 64 bits, lone
            surrogate or NUL in a string, nesting deeper than :data:`MAX_VALUE_DEPTH`, not JSON).
    """
    if not isinstance(metadata, Mapping):
        raise InvalidRequestError(f"metadata must be an object (a dict), got {type(metadata).__name__}")
    for key, value in metadata.items():
        problem = key_problem(key)
        if problem:
            raise InvalidRequestError(f"metadata key {_short(key)} cannot be filtered on: {problem}; rename it")
        problem = _value_problem(value)
        if problem:
            raise InvalidRequestError(f"metadata value of {_short(key)} cannot be stored as JSON: {problem}")


# -- parsing ------------------------------------------------------------------------------------------
_ORDER = ("$gt", "$gte", "$lt", "$lte")
_ALL: Node = ("all",)


def _scalar(op: str, name: str, value: Any) -> tuple:
    if not (value is None or isinstance(value, (str, int, float, bool))):
        raise InvalidFilterError(
            f"{op} on {_short(name)} takes a string, number, boolean or null, "
            f"got {type(value).__name__}: {_short(value)}"
        )
    problem = _value_problem(value)
    if problem:
        raise InvalidFilterError(f"{op} on {_short(name)}: {problem}")
    return typed(value)


def _key(name: Any, namespace: str) -> tuple[str, str]:
    if isinstance(name, str) and name.startswith("$"):
        raise InvalidFilterError(
            f"unknown operator {_short(name)} in metadata filter; logical operators are {', '.join(LOGICAL_OPERATORS)}"
        )
    problem = key_problem(name)
    if problem:
        raise InvalidFilterError(f"metadata filter key {_short(name)} cannot be filtered on: {problem}")
    return (namespace, name)


def _negate(node: Node) -> Node:
    return node[1] if node[0] == "not" else ("not", node)


def _combine(kind: str, children: list[Node]) -> Node:
    flat: list[Node] = []
    for child in children:
        flat.extend(child[1] if child[0] == kind else (child,))
    unique = sorted(set(flat), key=repr)  # canonical: {"a":1,"b":2} and {"b":2,"a":1} are one tree
    if kind == "and":
        unique = [c for c in unique if c != _ALL] or [_ALL]
    elif _ALL in unique:
        return _ALL
    return unique[0] if len(unique) == 1 else (kind, tuple(unique))


def _field(name: Any, condition: Any, namespace: str) -> Node:
    key = _key(name, namespace)
    if not isinstance(condition, Mapping):
        if isinstance(condition, (list, tuple)):
            raise InvalidFilterError(
                f"metadata filter value for {_short(name)} is a list; use {{{_short(name)}: {{'$in': [...]}}}} for "
                f"'any of', or {{{_short(name)}: {{'$eq': [...]}}}} for an equal list"
            )
        return ("eq", key, _scalar("equality", name, condition))
    if not condition:
        raise InvalidFilterError(f"metadata filter for {_short(name)} is an empty object; give an operator such as $eq")
    tests = []
    for op, value in condition.items():
        if op in ("$eq", "$ne"):
            if isinstance(value, (list, tuple)):
                problem = _value_problem(value)
                if problem:
                    raise InvalidFilterError(f"{op} on {_short(name)}: {problem}")
                node: Node = ("eq", key, typed(value))
            else:
                node = ("eq", key, _scalar(op, name, value))
            tests.append(node if op == "$eq" else _negate(node))
        elif op in _ORDER:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise InvalidFilterError(f"{op} on {_short(name)} takes a number or a string, got {_short(value)}")
            tests.append(("cmp", key, op, _scalar(op, name, value)))
        elif op in ("$in", "$nin"):
            if not isinstance(value, (list, tuple)):
                raise InvalidFilterError(f"{op} on {_short(name)} takes a list of values, got {_short(value)}")
            values = frozenset(_scalar(op, name, item) for item in value)  # order-free: one tree per set
            if not values:
                node = _negate(_ALL)  # "any of nothing" matches nothing
            else:
                node = ("eq", key, next(iter(values))) if len(values) == 1 else ("in", key, values)
            tests.append(node if op == "$in" else _negate(node))
        elif op == "$exists":
            if not isinstance(value, bool):
                raise InvalidFilterError(f"$exists on {_short(name)} takes true or false, got {_short(value)}")
            tests.append(("exists", key, value))
        elif op == "$contains":
            if value is None:
                raise InvalidFilterError(
                    f"$contains on {_short(name)} takes a string, number or boolean; use {{{_short(name)}: None}}"
                )
            tests.append(("eq", key, _scalar(op, name, value)))
        else:
            raise InvalidFilterError(
                f"unknown operator {_short(op)} on {_short(name)}; supported: {', '.join(COMPARISON_OPERATORS)}"
            )
    return _combine("and", tests)


def _node(node: Any, namespace: str, depth: int, budget: list[int]) -> Node:
    if depth > MAX_DEPTH:
        raise InvalidFilterError(f"metadata filter nests $and/$or/$not deeper than {MAX_DEPTH} levels; flatten it")
    if not isinstance(node, Mapping):
        raise InvalidFilterError(f"a metadata filter must be an object, got {type(node).__name__}: {_short(node)}")
    parts = []
    for name, value in node.items():
        if name in ("$and", "$or"):
            if not isinstance(value, (list, tuple)) or not value:
                raise InvalidFilterError(f"{name} takes a non-empty list of filters, got {_short(value)}")
            parts.append(_combine(name[1:], [_node(item, namespace, depth + 1, budget) for item in value]))
        elif name == "$not":
            parts.append(_negate(_node(value, namespace, depth + 1, budget)))
        else:
            budget[0] -= 1
            if budget[0] < 0:
                raise InvalidFilterError(
                    f"metadata filter has more than {MAX_LEAVES} field tests; use $in with a list instead of "
                    "many $or branches"
                )
            if isinstance(value, Mapping):  # counted before any value is read: refusing costs nothing
                budget[1] -= sum(
                    len(v) for op, v in value.items() if op in ("$in", "$nin") and isinstance(v, (list, tuple))
                )
                if budget[1] < 0:
                    raise InvalidFilterError(
                        f"metadata filter has more than MAX_IN_VALUES ({limits.MAX_IN_VALUES:,}, hybrid_memory.limits) "
                        "values in its $in/$nin lists together; tag the chunks with a shared metadata value and filter "
                        "on it, split the search, or raise hybrid_memory.limits.MAX_IN_VALUES"
                    )
            parts.append(_field(name, value, namespace))
    return _combine("and", parts) if parts else _ALL


def parse_filter(metadata_filter: Mapping[str, Any] | None, namespace: str = METADATA) -> Node:
    """Validate a filter and return its canonical tree (:data:`Node`); None and ``{}`` give ``("all",)``.

    Args:
        metadata_filter: the filter (see the module docstring).
        namespace: ``"m"`` for user metadata keys, ``"s"`` for the memory's system fields.

    Raises:
        InvalidFilterError: unknown operator, operand of the wrong type or out of range, bad key, too deep or
            too many field tests or ``$in``/``$nin`` values. Never RecursionError, OverflowError or UnicodeEncodeError.
    """
    if metadata_filter is None:
        return _ALL
    return _node(metadata_filter, namespace, 0, [MAX_LEAVES, limits.MAX_IN_VALUES])


def validate_filter(metadata_filter: Mapping[str, Any] | None) -> None:
    """Raise :class:`InvalidFilterError` if the filter is malformed; return None otherwise."""
    parse_filter(metadata_filter)


# -- the SQL reference ------------------------------------------------------------------------------
_SQL_KIND = {NUMBER: "('integer', 'real')", TEXT: "('text')"}
_SQL_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _present(key: tuple[str, str], params: list[Any]) -> str:
    params.append(key[1])
    return "EXISTS (SELECT 1 FROM json_each(metadata) AS f WHERE f.key = ?)"


def _any(key: tuple[str, str], cond: str, cond_params: list[Any], params: list[Any]) -> str:
    """True when the value at key, or an element of it when it is a list, satisfies ``cond`` (``{x}`` names
    the json_each row: its ``type``, ``atom`` and ``value``). EXISTS is 0 or 1, never NULL, so NOT works."""
    params.extend([key[1], *cond_params, *cond_params])
    return (
        "EXISTS (SELECT 1 FROM json_each(metadata) AS f WHERE f.key = ? AND (("
        + cond.format(x="f")
        + ") OR (f.type = 'array' AND EXISTS (SELECT 1 FROM json_each(f.value) AS g WHERE "
        + cond.format(x="g")
        + "))))"
    )


def _equal_cond(t: tuple) -> tuple[str, list[Any]]:
    kind, value = t
    if kind == NULL:
        return "{x}.type = 'null'", []
    if kind == BOOL:
        return f"{{x}}.type = '{'true' if value else 'false'}'", []
    if kind == LIST:
        return "{x}.type = 'array' AND hm_canonical_json({x}.value) = ?", [canonical_json(untyped(t))]
    return f"{{x}}.type IN {_SQL_KIND[kind]} AND {{x}}.atom = ?", [value]


def compile_node(node: Node, params: list[Any]) -> str:
    """SQL boolean expression (0 or 1, never NULL) over the column ``metadata`` for a parsed filter; appends
    the bound parameters to ``params``. The reference semantics: the filter index must agree with it."""
    kind = node[0]
    if kind == "all":
        return "1"
    if kind in ("and", "or"):
        joiner = " AND " if kind == "and" else " OR "
        return "(" + joiner.join(compile_node(child, params) for child in node[1]) + ")"
    if kind == "not":
        return f"(NOT {compile_node(node[1], params)})"
    key = node[1]
    if key[0] != METADATA:
        raise InvalidFilterError(f"system field {_short(key[1])} has no SQL column in this store")
    if kind == "exists":
        return _present(key, params) if node[2] else f"(NOT {_present(key, params)})"
    if kind == "eq":
        cond, cond_params = _equal_cond(node[2])
        if node[2][0] == NULL:
            missing = f"(NOT {_present(key, params)})"
            return f"({missing} OR {_any(key, cond, cond_params, params)})"
        return _any(key, cond, cond_params, params)
    if kind == "cmp":
        op, (value_kind, value) = node[2], node[3]
        return _any(key, f"{{x}}.type IN {_SQL_KIND[value_kind]} AND {{x}}.atom {_SQL_ORDER[op]} ?", [value], params)
    if kind == "in":
        conds, cond_params = [], []
        texts = [v for k, v in node[2] if k == TEXT]
        numbers = [v for k, v in node[2] if k == NUMBER]
        if texts:  # one bound JSON array per type, whatever the length (no 'too many SQL variables')
            conds.append("({x}.type = 'text' AND {x}.atom IN (SELECT atom FROM json_each(?)))")
            cond_params.append(json.dumps(texts, ensure_ascii=False))
        if numbers:
            conds.append("({x}.type IN ('integer', 'real') AND {x}.atom IN (SELECT atom FROM json_each(?)))")
            cond_params.append(json.dumps(numbers))
        for t in node[2]:
            if t[0] in (BOOL, NULL):
                conds.append(_equal_cond(t)[0])
        missing = f"(NOT {_present(key, params)}) OR " if (NULL, None) in node[2] else ""
        return f"({missing}{_any(key, ' OR '.join(conds), cond_params, params)})"
    raise AssertionError(f"unknown filter node {_short(node)}")  # pragma: no cover


def compile_filter(metadata_filter: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    """Compile a filter to a SQL boolean expression over the column ``metadata`` (JSON text).

    Returns:
        ``(sql, params)``: the expression, with every key and value bound as a ``?`` parameter, and the
        parameters in order; ``("1", [])`` for None or ``{}``. Every test is 0 or 1, never NULL, so
        ``$not`` of a test on a missing key is true. Lists compare through ``hm_canonical_json``
        (:func:`register_sql_functions`).

    Raises:
        InvalidFilterError: as :func:`parse_filter`.
    """
    params: list[Any] = []
    return compile_node(parse_filter(metadata_filter), params), params


def system_filter(scope: Mapping[str, str] | None, as_of: float | None) -> dict[str, Any] | None:
    """The system-field filter of a search: each bound scope field equal, and the facts valid at ``as_of``
    (Unix seconds): ``valid_from`` absent or ``<= as_of``, and ``valid_to`` absent or ``> as_of`` (the semantics
    of the store's ``scope_sql``, the SQL reference). None when neither is given."""
    parts: list[dict[str, Any]] = [{name: value} for name, value in (scope or {}).items()]
    if as_of is not None:
        parts.append({"$or": [{"valid_from": None}, {"valid_from": {"$lte": as_of}}]})
        parts.append({"$or": [{"valid_to": None}, {"valid_to": {"$gt": as_of}}]})
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}
