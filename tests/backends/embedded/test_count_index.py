"""count() resolves filters, scopes and as_of from the filter index (no SQL scan), and agrees with the SQL
reference (SQLiteStore.count, the compiled filter) on every case."""

from __future__ import annotations

import random

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory


def _chunks(rng: random.Random, n: int) -> list[dict]:
    chunks = []
    for i in range(n):
        chunk = {
            "chunk_id": f"c{i}",
            "text": f"note {i} about service-{i % 7}",
            "metadata": {
                "env": rng.choice(["prod", "staging"]),
                "sev": rng.randint(1, 4),
                "tags": rng.sample(["db", "net", "oncall"], rng.randint(0, 2)),
            },
        }
        if rng.random() < 0.6:
            chunk["user_id"] = rng.choice(["u1", "u2"])
        if rng.random() < 0.3:
            chunk["tenant"] = "acme"
        if rng.random() < 0.5:
            chunk["valid_from"] = float(rng.choice([100, 200, 300]))
        if rng.random() < 0.5:
            chunk["valid_to"] = float(rng.choice([400, 500]))
        chunks.append(chunk)
    return chunks


FILTERS = [
    None,
    {},
    {"env": "prod"},
    {"sev": {"$gte": 3}},
    {"tags": {"$in": ["db", "x"]}},
    {"tags": {"$ne": "db"}},
    {"$or": [{"env": "staging"}, {"sev": 1}]},
    {"$not": {"tags": {"$contains": "net"}}},
    {"missing": None},
]
SCOPES = [None, {"user_id": "u1"}, {"tenant": "acme", "user_id": "u2"}]
INSTANTS = [None, 99.0, 100.0, 250.0, 399.999, 400.0, 500.0, "1970-01-01T00:05:00Z"]


def test_count_from_the_filter_index_equals_the_sql_reference(tmp_path):
    rng = random.Random(7)
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as memory:
        memory.upsert(_chunks(rng, 240))
        memory.delete([f"c{i}" for i in range(0, 240, 9)])
        memory.upsert([{"chunk_id": "c1", "text": "changed", "metadata": {"env": "prod", "sev": 4}}])
        from hybrid_memory.memory.hybrid import _instant

        checked = 0
        for metadata_filter in FILTERS:
            for scope in SCOPES:
                for as_of in INSTANTS:
                    expected = memory.backend.store.count(metadata_filter, scope, _instant(as_of))
                    assert memory.count(metadata_filter, scope=scope, as_of=as_of) == expected, (
                        metadata_filter,
                        scope,
                        as_of,
                    )
                    checked += expected > 0
        assert checked > 100  # most cases match something: the comparison is not between zeros
        assert memory.count() == 240 - 27 == memory.backend.store.count()
        assert memory.count({"env": "prod"}, as_of=100.0) == memory.backend.store.count({"env": "prod"}, None, 100.0)


def test_count_does_not_scan_the_store_when_it_restricts(memory, monkeypatch):
    def no_scan(*args, **kwargs):
        if args or kwargs:
            pytest.fail(f"SQL scan: store.count{args}")
        return 6

    monkeypatch.setattr(memory.backend.store, "count", no_scan)
    assert memory.count({"environment": "production"}) == 4
    assert memory.count({"severity": {"$lte": 2}}, as_of=1e9) == 4
    assert memory.count() == 6


def test_count_sees_another_process_writes(tmp_path):
    embedder = HashingEmbedder(16)
    with (
        HybridMemory(tmp_path / "m", embedder=embedder) as reader,
        HybridMemory(tmp_path / "m", embedder=embedder) as writer,
    ):
        assert reader.count({"env": "prod"}) == 0
        writer.upsert([{"chunk_id": "a", "text": "x", "metadata": {"env": "prod"}, "valid_from": 10.0}])
        assert reader.count({"env": "prod"}) == 1
        assert reader.count(as_of=5.0) == 0 and reader.count(as_of=10.0) == 1
        writer.delete(["a"])
        assert reader.count({"env": "prod"}) == 0
