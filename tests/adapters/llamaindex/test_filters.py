"""LlamaIndex MetadataFilters -> core filter language: exact translations, refusals, and the core's matches."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn  # noqa: E402

from llamaindex_hybrid_memory.filters import UNSUPPORTED_OPERATORS, to_core_filter  # noqa: E402


def f(key, value, operator="=="):
    return MetadataFilter(key=key, value=value, operator=FilterOperator(operator))


# --- exact translations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (f("service", "billing"), {"service": {"$eq": "billing"}}),
        (f("service", "billing", "!="), {"service": {"$ne": "billing"}}),
        (f("severity", 3, ">"), {"severity": {"$gt": 3}}),
        (f("severity", 3, ">="), {"severity": {"$gte": 3}}),
        (f("severity", 2.5, "<"), {"severity": {"$lt": 2.5}}),
        (f("severity", 3, "<="), {"severity": {"$lte": 3}}),
        (f("env", ["prod", "staging"], "in"), {"env": {"$in": ["prod", "staging"]}}),
        (f("env", ["dev"], "nin"), {"env": {"$nin": ["dev"]}}),
        (f("tags", "postgres", "contains"), {"tags": {"$contains": "postgres"}}),
        (f("tags", ["a", "b"], "any"), {"$or": [{"tags": {"$contains": "a"}}, {"tags": {"$contains": "b"}}]}),
        (f("tags", ["a", "b"], "all"), {"$and": [{"tags": {"$contains": "a"}}, {"tags": {"$contains": "b"}}]}),
        (f("tags", ["a"], "any"), {"tags": {"$contains": "a"}}),
        (f("owner", None, "is_empty"), {"$or": [{"owner": None}, {"owner": ""}, {"owner": {"$eq": []}}]}),
        (f("tags", ["a", "b"], "=="), {"tags": {"$eq": ["a", "b"]}}),
    ],
)
def test_single_operator_translation(flt, expected):
    assert to_core_filter(flt) == expected
    assert to_core_filter(MetadataFilters(filters=[flt])) == expected


def test_and_or_not_conditions():
    a, b = f("service", "billing"), f("severity", 3, ">=")
    ta, tb = {"service": {"$eq": "billing"}}, {"severity": {"$gte": 3}}
    assert to_core_filter(MetadataFilters(filters=[a, b])) == {"$and": [ta, tb]}
    assert to_core_filter(MetadataFilters(filters=[a, b], condition="or")) == {"$or": [ta, tb]}
    # LlamaIndex NOT means "none of the filters match"
    assert to_core_filter(MetadataFilters(filters=[a, b], condition="not")) == {"$not": {"$or": [ta, tb]}}
    assert to_core_filter(MetadataFilters(filters=[a], condition=FilterCondition.NOT)) == {"$not": ta}


def test_nested_filters():
    inner = MetadataFilters(filters=[f("env", "prod"), f("env", "staging")], condition="or")
    outer = MetadataFilters(
        filters=[f("service", "billing"), inner, MetadataFilters(filters=[f("region", "eu")], condition="not")]
    )
    assert to_core_filter(outer) == {
        "$and": [
            {"service": {"$eq": "billing"}},
            {"$or": [{"env": {"$eq": "prod"}}, {"env": {"$eq": "staging"}}]},
            {"$not": {"region": {"$eq": "eu"}}},
        ]
    }


def test_empty_filters_match_everything():
    assert to_core_filter(None) is None
    assert to_core_filter(MetadataFilters(filters=[])) is None
    nested_empty = MetadataFilters(filters=[f("a", 1), MetadataFilters(filters=[])])
    assert to_core_filter(nested_empty) == {"$and": [{"a": {"$eq": 1}}, {}]}


def test_input_not_modified():
    filters = MetadataFilters(filters=[f("tags", ["a", "b"], "any")])
    before = filters.model_dump()
    to_core_filter(filters)
    assert filters.model_dump() == before


# --- refusals, never silent no-ops -------------------------------------------------------------------


@pytest.mark.parametrize("operator", ["text_match", "text_match_insensitive"])
def test_unexpressible_operator_raises_naming_it(operator):
    assert operator in UNSUPPORTED_OPERATORS
    with pytest.raises(InvalidFilterError, match=rf"'{operator}' on key 'title'"):
        to_core_filter(MetadataFilters(filters=[f("title", "timeout", operator)]))


def test_unexpressible_operator_nested_deep_still_raises():
    deep = MetadataFilters(filters=[f("a", 1), MetadataFilters(filters=[f("t", "x", "text_match")])])
    with pytest.raises(InvalidFilterError, match="text_match"):
        to_core_filter(deep)


@pytest.mark.parametrize("operator", ["in", "nin", "any", "all"])
def test_list_operator_without_list_raises(operator):
    with pytest.raises(InvalidFilterError, match=rf"'{operator}' on key 'env' takes a list"):
        to_core_filter(f("env", "prod", operator))


@pytest.mark.parametrize("operator", ["any", "all"])
def test_any_all_with_empty_list_raises(operator):
    with pytest.raises(InvalidFilterError, match="empty list"):
        to_core_filter(f("tags", [], operator))


def test_every_llamaindex_operator_is_decided():
    """A FilterOperator added by a future llama-index release must be translated or refused on purpose."""
    sample = {"in": ["x"], "nin": ["x"], "any": ["x"], "all": ["x"], "is_empty": None}
    for operator in FilterOperator:
        flt = f("k", sample.get(operator.value, "x"), operator.value)
        if operator.value in UNSUPPORTED_OPERATORS:
            with pytest.raises(InvalidFilterError, match=operator.value):
                to_core_filter(flt)
        else:
            assert to_core_filter(flt)


def test_non_filter_object_raises():
    with pytest.raises(InvalidFilterError, match="MetadataFilters"):
        to_core_filter({"service": "billing"})  # type: ignore[arg-type]


# --- what the core matches equals what LlamaIndex's own SimpleVectorStore matches -----------------------

ROWS = {
    "c1": {"service": "billing", "severity": 4, "tags": ["postgres", "timeout"], "owner": "ana"},
    "c2": {"service": "billing", "severity": 2, "tags": ["redis"], "owner": ""},
    "c3": {"service": "search", "severity": 5, "tags": [], "owner": None},
    "c4": {"service": "auth", "severity": 1, "tags": ["postgres"]},
    "c5": {"service": "search", "tags": ["timeout"], "owner": "li"},
}

CASES = [
    MetadataFilters(filters=[f("service", "billing")]),
    MetadataFilters(filters=[f("service", "billing", "!=")]),
    MetadataFilters(filters=[f("severity", 2, ">")]),
    MetadataFilters(filters=[f("severity", 2, ">=")]),
    MetadataFilters(filters=[f("severity", 4, "<")]),
    MetadataFilters(filters=[f("severity", 4, "<=")]),
    MetadataFilters(filters=[f("service", ["auth", "search"], "in")]),
    MetadataFilters(filters=[f("service", ["auth", "search"], "nin")]),
    MetadataFilters(filters=[f("tags", "postgres", "contains")]),
    MetadataFilters(filters=[f("tags", ["redis", "timeout"], "any")]),
    MetadataFilters(filters=[f("tags", ["postgres", "timeout"], "all")]),
    MetadataFilters(filters=[f("owner", None, "is_empty")]),
    MetadataFilters(filters=[f("tags", None, "is_empty")]),
    MetadataFilters(filters=[f("service", "billing"), f("severity", 3, ">=")]),
    MetadataFilters(filters=[f("service", "auth"), f("severity", 5, ">=")], condition="or"),
    MetadataFilters(filters=[f("service", "billing"), f("tags", "timeout", "contains")], condition="not"),
]


def _llamaindex_reference(filters: MetadataFilters) -> set[str]:
    match = build_metadata_filter_fn(lambda chunk_id: ROWS[chunk_id], filters)
    return {chunk_id for chunk_id in ROWS if match(chunk_id)}


@pytest.fixture(scope="module")
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(dim=16))
    mem.add([{"chunk_id": cid, "text": f"incident note {cid}", "metadata": meta} for cid, meta in ROWS.items()])
    yield mem
    mem.close()


@pytest.mark.parametrize("filters", CASES, ids=lambda fs: repr(to_core_filter(fs)))
def test_core_matches_what_llamaindex_matches(memory, filters):
    core = {chunk.chunk_id for chunk in memory.iter_chunks(metadata_filter=to_core_filter(filters))}
    assert core == _llamaindex_reference(filters)


def test_nested_filters_match_in_core(memory):
    # LlamaIndex's SimpleVectorStore refuses nested filters; the expected set is worked out by hand.
    filters = MetadataFilters(
        filters=[
            f("tags", "postgres", "contains"),
            MetadataFilters(filters=[f("severity", 4, ">="), f("service", "auth")], condition="or"),
        ]
    )
    core = {chunk.chunk_id for chunk in memory.iter_chunks(metadata_filter=to_core_filter(filters))}
    assert core == {"c1", "c4"}
