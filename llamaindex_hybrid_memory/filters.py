"""Translation of LlamaIndex ``MetadataFilters`` into the core metadata filter language.

A pure function, no I/O: it turns LlamaIndex objects into the plain dict :mod:`hybrid_memory.filters`
understands, and the core does every match. Operator by operator:

=========================  ==================================================================
LlamaIndex                 core filter
=========================  ==================================================================
``==``                     ``{key: {"$eq": value}}`` (a list value compares whole lists)
``!=``                     ``{key: {"$ne": value}}``
``>`` ``>=`` ``<`` ``<=``  ``{key: {"$gt" | "$gte" | "$lt" | "$lte": value}}``
``in`` / ``nin``           ``{key: {"$in" | "$nin": [values]}}``
``contains``               ``{key: {"$contains": value}}`` (list membership)
``any``                    ``{"$or": [{key: {"$contains": v}} for v in values]}``
``all``                    ``{"$and": [{key: {"$contains": v}} for v in values]}``
``is_empty``               ``{"$or": [{key: None}, {key: ""}, {key: {"$eq": []}}]}``: missing, null,
                           empty string or empty list, as LlamaIndex's own ``SimpleVectorStore``
``text_match``             not expressible: raises :class:`~hybrid_memory.InvalidFilterError`
``text_match_insensitive`` not expressible: raises :class:`~hybrid_memory.InvalidFilterError`
condition ``and``          ``{"$and": [...]}``
condition ``or``           ``{"$or": [...]}``
condition ``not``          ``{"$not": {"$or": [...]}}``: none of the filters match, as LlamaIndex
=========================  ==================================================================

Nested ``MetadataFilters`` translate recursively; an empty one is ``{}`` (matches everything).
The core's semantics apply to the result, notably: comparisons are type-strict, a key missing from a chunk
fails every comparison except ``!=``, ``nin`` and ``is_empty``, and a list-valued field matches by element as in
MongoDB (and Qdrant): ``==`` / ``in`` match when an element is equal, ``!=`` / ``nin`` only when none is.
LlamaIndex's own ``SimpleVectorStore`` compares a list field as a whole value instead.
"""

from __future__ import annotations

from typing import Any

from hybrid_memory import InvalidFilterError
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

__all__ = ["UNSUPPORTED_OPERATORS", "to_core_filter"]

_COMPARISON = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.CONTAINS: "$contains",
}
_LIST_OPERAND = {
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
}

UNSUPPORTED_OPERATORS: dict[str, str] = {
    FilterOperator.TEXT_MATCH.value: (
        "substring search inside a metadata string; the core filter language compares whole values (use '==' or 'in')"
    ),
    FilterOperator.TEXT_MATCH_INSENSITIVE.value: (
        "case-insensitive substring search inside a metadata string; the core filter language compares "
        "whole values (use '==' or 'in' on a case-folded metadata field)"
    ),
}
"""LlamaIndex operators (by value) that have no meaning in the core filter language, with the reason."""


def _operator_name(operator: Any) -> str:
    return operator.value if isinstance(operator, FilterOperator) else str(operator)


def _list_operand(flt: MetadataFilter) -> list[Any]:
    if not isinstance(flt.value, list):
        raise InvalidFilterError(
            f"LlamaIndex operator {_operator_name(flt.operator)!r} on key {flt.key!r} takes a list of values, "
            f"got {flt.value!r}"
        )
    return list(flt.value)


def _translate_one(flt: MetadataFilter) -> dict[str, Any]:
    operator, key = flt.operator, flt.key
    if operator in _COMPARISON:
        return {key: {_COMPARISON[operator]: flt.value}}
    if operator in _LIST_OPERAND:
        return {key: {_LIST_OPERAND[operator]: _list_operand(flt)}}
    if operator in (FilterOperator.ANY, FilterOperator.ALL):
        values = _list_operand(flt)
        if not values:
            raise InvalidFilterError(
                f"LlamaIndex operator {operator.value!r} on key {key!r} got an empty list; give at least one value"
            )
        parts = [{key: {"$contains": value}} for value in values]
        if len(parts) == 1:
            return parts[0]
        return {"$or" if operator == FilterOperator.ANY else "$and": parts}
    if operator == FilterOperator.IS_EMPTY:
        return {"$or": [{key: None}, {key: ""}, {key: {"$eq": []}}]}
    name = _operator_name(operator)
    reason = UNSUPPORTED_OPERATORS.get(name, "no equivalent in the core filter language")
    raise InvalidFilterError(f"LlamaIndex filter operator {name!r} on key {key!r} is not supported: {reason}")


def _translate(filters: MetadataFilters | MetadataFilter) -> dict[str, Any]:
    if isinstance(filters, MetadataFilter):
        return _translate_one(filters)
    if not isinstance(filters, MetadataFilters):
        raise InvalidFilterError(
            f"expected llama_index MetadataFilters or MetadataFilter, got {type(filters).__name__}: {filters!r}"
        )
    parts = [_translate(item) for item in filters.filters]
    if not parts:
        return {}
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return parts[0] if len(parts) == 1 else {"$and": parts}
    if condition == FilterCondition.OR:
        return parts[0] if len(parts) == 1 else {"$or": parts}
    if condition == FilterCondition.NOT:
        return {"$not": parts[0] if len(parts) == 1 else {"$or": parts}}
    name = condition.value if isinstance(condition, FilterCondition) else str(condition)
    raise InvalidFilterError(f"LlamaIndex filter condition {name!r} is not supported; use 'and', 'or' or 'not'")


def to_core_filter(filters: MetadataFilters | MetadataFilter | None) -> dict[str, Any] | None:
    """Translate LlamaIndex metadata filters into a core metadata filter.

    Args:
        filters: a ``MetadataFilters`` (nested ones included), a single ``MetadataFilter``, or None.

    Returns:
        A dict in the core filter language (see :mod:`hybrid_memory.filters`), or None when ``filters``
        is None or has no filters (match everything). The input is not modified.

    Raises:
        InvalidFilterError: an operator with no meaning in the core language (``text_match``,
            ``text_match_insensitive``), a list operator (``in``, ``nin``, ``any``, ``all``) without a
            list, ``any``/``all`` with an empty list, or an unknown condition. The message names the
            operator and the key. Operand types are checked by the core when the search runs.
    """
    if filters is None:
        return None
    translated = _translate(filters)
    return translated or None
