"""Exact filter semantics: every operator on hand-built rows, with hand-computed id sets, through every path
that resolves filters (the SQL reference and the in-memory filter index), and every bad input an error of the
library's own tree."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError, InvalidRequestError
from hybrid_memory.backends.embedded.filter_index import FilterIndex

ROWS = {
    "a": {
        "labels": ["db", "oncall"],
        "sev": 2,
        "env": "prod",
        "tags": ["café"],
        "v": [1.0],
        "n": 1.0,
        "k\\q": 3,
        'we"ird': "x",
        "ключ": "значение",
    },
    "b": {"labels": ["network"], "sev": 4, "env": "staging", "flag": True, "owner": None, "n": 1},
    "c": {"labels": [], "sev": 2.5, "env": "prod", "flag": False, "nested": {"x": 1}, "v": [1, 2]},
    "d": {"sev": "2", "env": "dev", "labels": "db", "owner": "ana", "mixed": [1, "1", True, None, [1]]},
    "e": {},
}
ALL = set(ROWS)

CASES = [
    ({}, ALL),
    # list-valued metadata matches by element, as in MongoDB
    ({"labels": {"$in": ["db", "network"]}}, {"a", "b", "d"}),
    ({"labels": "db"}, {"a", "d"}),
    ({"labels": {"$ne": "db"}}, {"b", "c", "e"}),
    ({"labels": {"$nin": ["db", "oncall"]}}, {"b", "c", "e"}),
    ({"labels": {"$contains": "oncall"}}, {"a"}),
    ({"labels": {"$gt": "c"}}, {"a", "b", "d"}),
    ({"labels": {"$eq": []}}, {"c"}),
    ({"labels": {"$eq": ["db", "oncall"]}}, {"a"}),
    ({"labels": {"$eq": ["oncall", "db"]}}, set()),
    # list equality: non-ASCII strings, and 1 == 1.0 inside lists as for scalars
    ({"tags": {"$eq": ["café"]}}, {"a"}),
    ({"tags": {"$ne": ["café"]}}, ALL - {"a"}),
    ({"v": {"$eq": [1]}}, {"a"}),
    ({"v": {"$eq": [1.0, 2.0]}}, {"c"}),
    ({"v": {"$eq": [True]}}, set()),
    ({"n": 1}, {"a", "b"}),
    ({"n": 1.0}, {"a", "b"}),
    ({"n": True}, set()),
    # elements of a list satisfy several range tests one each (no $elemMatch)
    ({"v": {"$gt": 1.5, "$lt": 1.8}}, {"c"}),
    # type-strict orders
    ({"sev": {"$gt": 2}}, {"b", "c"}),
    ({"sev": {"$gte": 2}}, {"a", "b", "c"}),
    ({"sev": {"$lt": 2.5}}, {"a"}),
    ({"sev": {"$lte": 2.5}}, {"a", "c"}),
    ({"sev": {"$gte": "2"}}, {"d"}),
    ({"sev": {"$gt": 2, "$lt": 3}}, {"c"}),
    ({"$not": {"sev": {"$gt": 2}}}, {"a", "d", "e"}),
    # booleans are not numbers
    ({"flag": True}, {"b"}),
    ({"flag": 1}, set()),
    ({"flag": {"$ne": True}}, ALL - {"b"}),
    ({"flag": {"$in": [False, 0]}}, {"c"}),
    # null: missing, JSON null, or a list holding null
    ({"owner": None}, {"a", "b", "c", "e"}),
    ({"owner": {"$eq": None}}, {"a", "b", "c", "e"}),
    ({"owner": {"$ne": None}}, {"d"}),
    ({"owner": {"$exists": True}}, {"b", "d"}),
    ({"owner": {"$exists": False}}, {"a", "c", "e"}),
    ({"owner": {"$in": [None, "ana"]}}, ALL),
    ({"owner": {"$nin": [None]}}, {"d"}),
    ({"mixed": None}, ALL),
    # mixed lists: each element by its own type; a list element equals a list operand
    ({"mixed": 1}, {"d"}),
    ({"mixed": "1"}, {"d"}),
    ({"mixed": {"$contains": True}}, {"d"}),
    ({"mixed": {"$eq": [1]}}, {"d"}),
    ({"mixed": {"$eq": [1.0]}}, {"d"}),
    # nested objects: stored, seen by $exists only
    ({"nested": {"$exists": True}}, {"c"}),
    ({"nested": {"$ne": 1}}, ALL),
    # keys: any key the one key rule allows is an ordinary key
    ({"k\\q": 3}, {"a"}),
    ({'we"ird': "x"}, {"a"}),
    ({"ключ": "значение"}, {"a"}),
    ({"a.b": 1}, set()),
    # logic
    ({"$or": [{"env": "dev"}, {"flag": False}]}, {"c", "d"}),
    ({"$and": [{"env": "prod"}, {"sev": {"$lte": 2}}]}, {"a"}),
    ({"env": "prod", "sev": 2}, {"a"}),
    ({"$not": {"$or": [{"env": "prod"}, {"env": "dev"}]}}, {"b", "e"}),
    ({"$not": {}}, set()),
    ({"env": {"$in": []}}, set()),
    ({"env": {"$nin": []}}, ALL),
    # $in with MAX_IN_VALUES (10,000) values binds one JSON array per type
    ({"sev": {"$in": list(range(10_000))}}, {"a", "b"}),
    ({"env": {"$in": [f"e{i}" for i in range(9_999)] + ["dev"]}}, {"d"}),
]


@pytest.fixture(scope="module")
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(dim=16))
    mem.add([{"chunk_id": cid, "text": f"note {cid}", "metadata": meta} for cid, meta in ROWS.items()])
    yield mem
    mem.close()


def _ids_sql(memory, flt):
    return {c.chunk_id for c in memory.backend.store.iter_chunks(flt)}


def _ids_index(memory, flt):
    allowed = memory._resolve_filter(flt)
    rowids = memory.backend.store.rowids() if allowed is None else allowed.ids
    return set(memory.backend.store.chunk_ids_by_rowid(rowids.tolist()).values())


def _ids_rebuilt_index(memory, flt):
    """The index rebuilt from the store (as at open), not grown by ChangeSets."""
    index = FilterIndex()
    index.rebuild(memory.backend.store.filter_rows())
    allowed = index.resolve(flt)
    rowids = memory.backend.store.rowids() if allowed is None else allowed.ids
    return set(memory.backend.store.chunk_ids_by_rowid(rowids.tolist()).values())


PATHS = {"sql": _ids_sql, "index": _ids_index, "rebuilt-index": _ids_rebuilt_index}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("flt", "expected"), CASES, ids=[repr(c[0])[:60] for c in CASES])
def test_every_operator_on_every_path(memory, path, flt, expected):
    assert PATHS[path](memory, flt) == expected


def test_count_and_search_agree_with_the_cases(memory):
    for flt, expected in CASES[:12]:
        assert memory.count(flt) == len(expected)
        hits = memory.search("note", top_k=10, metadata_filter=flt or None).results
        assert {h.chunk_id for h in hits} == expected


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"n": {"$gt": 2**70}}, "64 bits"),
        ({"n": {"$in": [1, -(2**64)]}}, "64 bits"),
        ({"n": 2**63}, "64 bits"),
        ({"env": "\ud800"}, "not valid Unicode"),
        ({"env": {"$in": ["ok", "bad\udfff"]}}, "not valid Unicode"),
        ({"env": {"$eq": ["x\ud800"]}}, "not valid Unicode"),
        ({"env": "a\x00b"}, "NUL"),
        ({"n": float("nan")}, "finite"),
        ({"n": {"$lt": float("inf")}}, "finite"),
        ({"a\nb": 1}, "control character"),
        ({"": 2}, "empty"),
        ({"\ud800": 2}, "not valid Unicode"),
        ({"$regex": 1}, "unknown operator"),
        ({"n": {"$regex": 1}}, "unknown operator"),
        ({"n": {"$gt": True}}, "number or a string"),
        ({"n": {"$gt": None}}, "number or a string"),
        ({"n": {"$in": "x"}}, "list of values"),
        ({"n": {"$in": [[1]]}}, "string, number, boolean or null"),
        ({"n": {"$eq": {"x": 1}}}, "string, number, boolean or null"),
        ({"n": {"$contains": None}}, "takes a string, number or boolean"),
        ({"n": {"$exists": 1}}, "true or false"),
        ({"n": [1, 2]}, "is a list"),
        ({"n": {}}, "empty object"),
        ({"$and": []}, "non-empty list"),
        ({"$or": {"a": 1}}, "non-empty list"),
        ({"$not": [1]}, "must be an object"),
    ],
)
def test_bad_filters_are_invalid_filter_errors(memory, flt, message):
    with pytest.raises(InvalidFilterError, match=message):
        memory.search("note", metadata_filter=flt)
    with pytest.raises(InvalidFilterError, match=message):
        memory.count(flt)


def test_deep_and_wide_filters_stay_in_the_error_tree(memory):
    deep: dict = {"n": 1}
    for _ in range(100_000):
        deep = {"$not": deep}
    with pytest.raises(InvalidFilterError, match="deeper than 32"):
        memory.search("note", metadata_filter=deep)
    value: list = [1]
    for _ in range(100_000):
        value = [value]
    with pytest.raises(InvalidFilterError, match="at most 32 levels"):
        memory.search("note", metadata_filter={"v": {"$eq": value}})
    with pytest.raises(InvalidFilterError, match="more than 256 field tests"):
        memory.count({"$or": [{"n": i} for i in range(300)]})


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"a\nb": 1}, "cannot be filtered on: the key holds the control character '\\\\n'"),
        ({"": 2}, "cannot be filtered on: the key is empty"),
        ({"$op": 1}, "cannot be filtered on: a key may not start with '\\$'"),
        ({"tab\there": 1}, "control character"),
        ({"\x85": 1}, "control character"),
        ({"n": 2**70}, "64 bits"),
        ({"n": float("nan")}, "finite"),
        ({"s": "lone \ud800"}, "not valid Unicode"),
        ({"s": ["x", "a\x00b"]}, "NUL"),
        ({"s": {"deep": _nested(40)}}, "32 levels"),
        ({"s": {1, 2}}, "not a JSON value"),
    ],
)
def test_one_key_and_value_rule_at_add(metadata, message):
    with HybridMemory(embedder=HashingEmbedder(dim=8)) as mem:
        with pytest.raises(InvalidRequestError, match=message):
            mem.add([{"chunk_id": "x", "text": "some text", "metadata": metadata}])
        assert mem.count() == 0 and mem.get(["x"]) == []


def test_keys_the_rule_allows_are_stored_and_filterable():
    keys = ["k\\q", 'we"ird', "a.b", " spaced ", "ключ", "emoji🙂", "[0]", "x$y"]
    with HybridMemory(embedder=HashingEmbedder(dim=8)) as mem:
        mem.add([{"chunk_id": f"c{i}", "text": "t", "metadata": {key: i}} for i, key in enumerate(keys)])
        for i, key in enumerate(keys):
            assert {c.chunk_id for c in mem.iter_chunks({key: i})} == {f"c{i}"}
            assert mem.count({key: {"$exists": True}}) == 1
