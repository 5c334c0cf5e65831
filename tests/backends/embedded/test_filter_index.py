"""The filter index against the SQL reference: randomized metadata and filters (hypothesis), the index grown by
ChangeSets and rebuilt from the store, numeric ranges across delta merges, system fields against the store's
scope SQL, the cache, and RowSet's bitmap backing."""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_memory.backends.embedded.filter_index import FilterIndex
from hybrid_memory.backends.embedded.store import NewRow, SQLiteStore
from hybrid_memory.changes import ChangeSet
from hybrid_memory.engines.rowset import RowSet
from hybrid_memory.filters import system_filter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

KEYS = ["a", "b", "tags", "k\\q", "é"]
NUMBERS = [0, 1, -1, 2, 0.0, -0.0, 1.0, 1.5, -2.5, 2**53, 2**53 + 1, float(2**53), 2**62, -(2**63), 2**63 - 1]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.integers(-3, 3),
    st.text(alphabet="abé\n🙂", max_size=2),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.lists(st.one_of(SCALARS, st.lists(SCALARS, max_size=2)), max_size=3),
    st.dictionaries(st.sampled_from(["x", "y"]), SCALARS, max_size=2),
)
METADATA = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4)
ORDERABLE = st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 3), st.text(alphabet="abé", max_size=2))
OPERAND_LIST = st.lists(st.one_of(SCALARS, st.lists(SCALARS, max_size=2)), max_size=3)


def _leaf(key: str) -> st.SearchStrategy:
    return st.one_of(
        SCALARS.map(lambda v: {key: v} if v is not None else {key: None}),
        st.tuples(st.sampled_from(["$eq", "$ne"]), st.one_of(SCALARS, OPERAND_LIST)).map(lambda t: {key: {t[0]: t[1]}}),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(SCALARS, max_size=4)).map(lambda t: {key: {t[0]: t[1]}}),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ORDERABLE).map(lambda t: {key: {t[0]: t[1]}}),
        st.booleans().map(lambda b: {key: {"$exists": b}}),
        SCALARS.filter(lambda v: v is not None).map(lambda v: {key: {"$contains": v}}),
        st.tuples(ORDERABLE, ORDERABLE).map(lambda t: {key: {"$gte": t[0], "$lt": t[1]}}),
    )


LEAVES = st.sampled_from(KEYS).flatmap(_leaf)
FILTERS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$and": fs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$or": fs}),
        inner.map(lambda f: {"$not": f}),
    ),
    max_leaves=6,
)
VECTOR = np.zeros(1, dtype=np.float32)


def _store_with(metadatas: list[dict]) -> tuple[SQLiteStore, list[int]]:
    store = SQLiteStore(None)
    rowids = store.write([NewRow(f"c{i}", "t", "", m, VECTOR) for i, m in enumerate(metadatas)]).rowids
    return store, rowids


def _index_ids(index: FilterIndex, store: SQLiteStore, flt: dict) -> list[int]:
    allowed = index.resolve(flt)
    return store.rowids().tolist() if allowed is None else allowed.ids.tolist()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(METADATA, min_size=1, max_size=12),
    updates=st.lists(st.tuples(st.integers(0, 11), METADATA), max_size=4),
    deletes=st.lists(st.integers(0, 11), max_size=3),
    filters=st.lists(FILTERS, min_size=1, max_size=6),
)
def test_index_equals_the_sql_reference(rows, updates, deletes, filters):
    store, rowids = _store_with(rows)
    grown = FilterIndex()
    grown.apply(
        ChangeSet(
            added_rowids=rowids,
            added_texts=["t"] * len(rows),
            added_vectors=np.zeros((len(rows), 1), np.float32),
            added_metadata=rows,
        )
    )
    # metadata replaced in place (rowid kept), and deletions, through the same funnel the memory uses
    updated = [(rowids[i % len(rowids)], m) for i, m in updates]
    store.write([], metadata_updates=[(r, "", m) for r, m in updated])
    removed = sorted({rowids[i % len(rowids)] for i in deletes})
    store.write([], replace_rowids=removed)
    grown.apply(ChangeSet(metadata_updated=updated))
    grown.apply(ChangeSet(removed=removed))
    rebuilt = FilterIndex()
    rebuilt.rebuild(store.filter_rows())
    for flt in filters:
        expected = store.filter_rowids(flt).tolist()
        assert _index_ids(grown, store, flt) == expected, flt
        assert _index_ids(rebuilt, store, flt) == expected, flt
        assert store.count(flt) == len(expected)


def test_numeric_ranges_stay_exact_across_delta_merges():
    """Enough adds, updates and deletes on one key to merge its delta into the sorted array several times."""
    rng = np.random.default_rng(7)
    values = [int(v) for v in rng.integers(-50, 50, 3000)] + [float(v) for v in rng.normal(0, 20, 3000)]
    values += [2**53 + 1, 2**62, -(2**63), 2**53, float(2**53)]
    store, rowids = _store_with(
        [
            {"n": v, "t": f"x{i % 5}", "sev": i % 5} if i % 7 else {"n": [v, v + 1], "t": ["x1", "y"], "sev": [0, 4.0]}
            for i, v in enumerate(values)
        ]
    )
    index = FilterIndex()
    index.rebuild(store.filter_rows())
    assert index._numbers[("m", "sev")].by_value is not None  # few distinct values: a bitmap per value
    more = [{"n": float(v), "sev": int(v) % 3} for v in rng.normal(0, 30, 5000)]
    new_rowids = store.write([NewRow(f"m{i}", "t", "", m, VECTOR) for i, m in enumerate(more)]).rowids
    index.add(new_rowids, more)
    index._compact_forward()  # the forward dict folded into the CSR arrays mid-way (normally past 65,536 rows)
    changed = [
        (int(r), {"n": int(rng.integers(-60, 60))}) for r in rng.choice(rowids + new_rowids, 3000, replace=False)
    ]
    store.write([], metadata_updates=[(r, "", m) for r, m in changed])
    index.apply(ChangeSet(metadata_updated=changed))
    gone = [int(r) for r in rng.choice(rowids + new_rowids, 1000, replace=False)]
    store.write([], replace_rowids=gone)
    index.remove(gone)
    index._compact_forward()
    assert index.stats()["forward_pending"] == 0
    assert index.stats()["rows"] == store.count() == len(values) + 5000 - 1000
    for flt in (
        {"sev": 2},
        {"sev": {"$in": [1, 3.0, 2**53 + 1]}},
        {"sev": {"$nin": [0]}},
        {"sev": {"$gte": 3}},
        {"t": "x1"},
        {"t": {"$ne": "y"}},
        {"n": {"$in": [0, 3, 17, 2**53 + 1]}},
        {"n": 5, "t": "x0"},
    ):
        assert index.resolve(flt).ids.tolist() == store.filter_rowids(flt).tolist(), flt
    for op in ("$gt", "$gte", "$lt", "$lte"):
        for x in (-100, -10.5, 0, 0.0, 3, 17.25, 2**53, 2**53 + 1, 2**62, 2**63 - 1, -(2**63)):
            flt = {"n": {op: x}}
            assert index.resolve(flt).ids.tolist() == store.filter_rowids(flt).tolist(), flt


def test_system_fields_resolve_like_the_store_scope_sql():
    """Scope fields and validity times, as a search applies them, equal the store's own SQL for them."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(400):
        system = {
            "tenant": f"t{i % 3}",
            "user_id": None if i % 5 == 0 else f"u{i % 4}",
            "valid_from": None if i % 6 == 0 else float(rng.integers(0, 100)),
            "valid_to": None if i % 4 == 0 else float(rng.integers(50, 150)),
        }
        rows.append(NewRow(f"c{i}", "t", "", {"tenant": "user-metadata, not the scope"}, VECTOR, system=system))
    store = SQLiteStore(None)
    rowids = store.write(rows).rowids
    index = FilterIndex()
    index.apply(
        ChangeSet(
            added_rowids=rowids,
            added_texts=["t"] * len(rows),
            added_vectors=np.zeros((len(rows), 1), np.float32),
            added_metadata=[r.metadata for r in rows],
            added_system=[r.system for r in rows],
        )
    )
    closes = [(rowids[i], {"valid_to": 60.0, "superseded_by": "x"}) for i in range(0, 400, 9)]
    store.write([], system_updates=closes)
    index.apply(ChangeSet(system_updated=closes))
    rebuilt = FilterIndex()
    rebuilt.rebuild(store.filter_rows())
    for scope in (None, {"tenant": "t1"}, {"tenant": "t2", "user_id": "u1"}, {"user_id": "u0"}):
        for as_of in (None, 0.0, 55.5, 60.0, 99.0, 149.0):
            expected = store.filter_rowids(None, scope, as_of).tolist()
            for idx in (index, rebuilt):
                allowed = idx.resolve(None, system_filter(scope, as_of))
                got = store.rowids().tolist() if allowed is None else allowed.ids.tolist()
                assert got == expected, (scope, as_of)
    # the user's metadata key "tenant" and the system field "tenant" never mix
    assert index.resolve({"tenant": "t1"}).ids.tolist() == []
    assert len(index.resolve({"tenant": "user-metadata, not the scope"})) == 400
    assert index.resolve(None, {"tenant": "t0", "valid_to": 60.0, "valid_from": {"$exists": False}}).ids[0] == rowids[0]


def test_resolved_filters_are_cached_until_the_next_change():
    index = FilterIndex()
    index.add([1, 2, 3], [{"env": "prod"}, {"env": "dev"}, {"env": "prod"}])
    first = index.resolve({"env": "prod"})
    assert first.ids.tolist() == [1, 3]
    assert index.resolve({"env": {"$eq": "prod"}}) is first  # one canonical tree, one cache entry
    generation = index.generation
    index.add([4], [{"env": "prod"}])
    assert index.generation == generation + 1
    second = index.resolve({"env": "prod"})
    assert second is not first and second.ids.tolist() == [1, 3, 4]
    assert first.ids.tolist() == [1, 3]  # a set handed out earlier never changes under its holder
    assert index.resolve({"env": 1}).ids.tolist() == [] and index.resolve({}) is None


def test_update_of_one_namespace_keeps_the_other():
    index = FilterIndex()
    index.add([5], [{"sev": 2}], [{"tenant": "acme", "valid_from": 10.0}])
    index.update(5, metadata={"sev": 4})
    assert index.resolve({"sev": 4}, {"tenant": "acme"}).ids.tolist() == [5]
    assert index.resolve({"sev": 2}).ids.tolist() == []
    index.update(5, system={"tenant": "other"})
    assert index.resolve(None, {"tenant": "acme"}).ids.tolist() == []
    assert index.resolve({"sev": {"$gte": 4}}, {"tenant": "other"}).ids.tolist() == [5]
    assert index.resolve(None, {"valid_from": {"$exists": True}}).ids.tolist() == []
    index.add([6], [{}], [{"tenant": "acme", "valid_from": 1.0, "valid_to": 9.0}])
    index.update_system(6, {"valid_to": None, "superseded_by": "x"})
    assert index.resolve(None, {"valid_to": {"$exists": False}, "valid_from": 1}).ids.tolist() == [6]
    index.update_system(6, {"valid_from": 2.0})
    assert index.resolve(None, {"valid_from": 2, "tenant": "acme"}).ids.tolist() == [6]
    assert index.resolve(None, {"valid_from": 1}).ids.tolist() == []
    with pytest.raises(Exception, match="2\\*\\*32"):
        index.add([2**32], [{}])


def test_rowset_backed_by_a_bitmap():
    rows = RowSet.from_bitmap(BitMap([3, 9, 10]))
    assert len(rows) == 3 and rows.ids.tolist() == [3, 9, 10] and rows.ids.dtype == np.int64
    assert rows.mask().tolist() == [False] * 3 + [True] + [False] * 5 + [True, True]
    probe = np.arange(5000, dtype=np.int64)
    hit = rows.contains(probe)
    assert np.flatnonzero(hit).tolist() == [3, 9, 10]
    assert rows.contains(probe) is hit  # kept for the same large array
    assert rows.contains(np.array([10, -1, 99])).tolist() == [True, False, False]
    assert rows.intersect(RowSet.from_bitmap(BitMap([9, 10, 11]))).ids.tolist() == [9, 10]
    assert rows.intersect(RowSet([10, 3])).ids.tolist() == [3, 10]
    selector = rows.faiss_selector()
    assert [selector.is_member(i) for i in (2, 3, 9, 10, 11)] == [False, True, True, True, False]
    assert RowSet([4, 2, 2]).bitmap() == BitMap([2, 4])


def test_another_process_writes_reach_the_filter_index(tmp_path):
    """Two memories on one folder (two connections, as two processes): the reader's filter index follows the
    writer's adds, metadata updates, scope fields and deletes through the change-log catch-up."""
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as writer:
        writer.add([{"chunk_id": "a", "text": "disk full on db host", "metadata": {"labels": ["db", "oncall"]}}])
        with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as reader:

            def ids(**fields):
                return sorted(r.chunk_id for r in reader.search("disk full", top_k=10, **fields).results)

            assert ids(metadata_filter={"labels": "db"}) == ["a"]
            writer.add(
                [{"chunk_id": "b", "text": "disk full on web host", "metadata": {"labels": ["web"]}, "tenant": "acme"}]
            )
            assert ids(metadata_filter={"labels": {"$in": ["web", "db"]}}) == ["a", "b"]
            assert ids(scope={"tenant": "acme"}) == ["b"]
            writer.upsert([{"chunk_id": "a", "text": "disk full on db host", "metadata": {"labels": ["web"]}}])
            assert ids(metadata_filter={"labels": {"$ne": "db"}}) == ["a", "b"]
            assert ids(metadata_filter={"labels": "db"}) == []
            writer.delete(["b"])
            assert ids(metadata_filter={"labels": "web"}) == ["a"]
            assert ids(scope={"tenant": "acme"}) == []


def _ids(memory, flt, **fields):
    return sorted(r.chunk_id for r in memory.search("disk", top_k=20, metadata_filter=flt, **fields).results)


def test_saved_index_is_loaded_and_replays_the_log(tmp_path):
    """Saved with the other indexes; an open loads it (no rebuild) and replays the change log from its
    position, so in-place metadata updates and deletes made after the save are not missed."""
    from hybrid_memory import HashingEmbedder, HybridMemory

    chunks = [
        {
            "chunk_id": f"c{i}",
            "text": f"disk note {i}",
            "metadata": {"env": "prod", "n": i, "tags": ["a", "é"]},
            "tenant": "acme" if i % 2 else "other",
        }
        for i in range(6)
    ]
    writer = HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16))
    writer.add(chunks)
    writer.persist()
    assert (tmp_path / "m" / "filters" / "meta.json").exists()
    writer.upsert([{"chunk_id": "c1", "text": "disk note 1", "metadata": {"env": "dev", "n": 1.5}, "tenant": "acme"}])
    writer.delete(["c2"])
    try:
        with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as reader:  # files older than store
            assert reader.backend._filters_rebuilt is False
            assert _ids(reader, {"env": "dev"}) == ["c1"]
            assert _ids(reader, {"env": "prod"}) == ["c0", "c3", "c4", "c5"]
            assert _ids(reader, {"n": {"$gt": 1}}) == ["c1", "c3", "c4", "c5"]
            assert _ids(reader, {"tags": "é"}, scope={"tenant": "acme"}) == ["c3", "c5"]
    finally:
        writer.close()
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as again:
        assert again.backend._filters_rebuilt is False and _ids(again, {"env": "dev"}) == ["c1"]
    (tmp_path / "m" / "filters" / "arrays.npz").write_bytes(b"damaged")
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as healed:
        assert healed.backend._filters_rebuilt is True
        assert _ids(healed, {"tags": {"$in": ["a"]}}) == ["c0", "c3", "c4", "c5"]
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=16)) as once:
        assert once.backend._filters_rebuilt is False  # healed once, saved, loaded since


def test_save_and_load_round_trip_every_structure(tmp_path):
    index = FilterIndex()
    index.add(
        [1, 2, 3, 4],
        [
            {"s": "x", "n": 2**60 + 1, "l": [1.0, "a", [True]], "o": {"k": 1}},
            {"s": "y", "n": -0.5, "l": []},
            {"n": 3},
            {"z": None},
        ],
        [{"tenant": "t", "valid_from": 5.0}, None, None, {"user_id": "u"}],
    )
    index.update(3, metadata={"n": 4})
    index.save(tmp_path / "f", seq=17)
    loaded = FilterIndex()
    assert loaded.load(tmp_path / "f") == 17
    for flt, system in [
        ({"s": {"$gte": "x"}}, None),
        ({"n": 2**60 + 1}, None),
        ({"n": {"$lt": 3.5}}, None),
        ({"l": {"$eq": [1, "a", [True]]}}, None),
        ({"l": {"$eq": []}}, None),
        ({"o": {"$exists": True}}, None),
        ({"z": None}, None),
        ({"n": 4}, None),
        (None, {"tenant": "t", "valid_from": {"$lte": 5}}),
        (None, {"user_id": {"$exists": True}}),
    ]:
        assert loaded.resolve(flt, system).ids.tolist() == index.resolve(flt, system).ids.tolist(), (flt, system)
    assert FilterIndex().load(tmp_path / "missing") is None
