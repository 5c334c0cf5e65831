"""Several memories (threads, processes) on one directory: writes become visible without rebuilds.

Two ``HybridMemory`` objects on one folder have two SQLite connections, exactly like two processes; the
deterministic tests use that. The process tests spawn real processes (benchmarks/multiprocess.py in a
short run, and five processes that write and close at one barrier).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.changes import ChangeSet

ROOT = Path(__file__).resolve().parents[3]
SPARSE = {"dense_weight": 0.0, "sparse_weight": 1.0}


def _open(path, **kwargs) -> HybridMemory:
    return HybridMemory(path, embedder=HashingEmbedder(32), **kwargs)


def _ids(memory: HybridMemory, text: str) -> list[str]:
    return [r.chunk_id for r in memory.search(text, top_k=50, hybrid_params=SPARSE).results]


def test_writes_of_one_memory_are_searched_by_another_without_rebuild(tmp_path, caplog):
    writer = _open(tmp_path)
    writer.upsert([{"chunk_id": "seed", "text": "seed chunk"}])
    reader = _open(tmp_path)
    applied: list[ChangeSet] = []
    original = reader.backend._apply_changes
    reader.backend._apply_changes = lambda changes: (applied.append(changes), original(changes))[1]
    caplog.set_level(logging.INFO, logger="hybrid_memory")
    try:
        writer.upsert([{"chunk_id": "a", "text": "zebra alpha", "metadata": {"team": "x"}}])
        assert _ids(reader, "zebra") == ["a"]
        assert applied[-1].added_metadata == [{"team": "x"}] and list(applied[-1].removed) == []

        writer.upsert([{"chunk_id": "a", "text": "zebra alpha", "metadata": {"team": "y"}}])  # metadata only
        assert _ids(reader, "zebra") == ["a"]
        rowid = writer.backend.store.lookup(["a"])["a"][0]
        assert applied[-1].metadata_updated == [(rowid, {"team": "y"})] and len(applied[-1].added_rowids) == 0
        assert reader.search("zebra", top_k=1, hybrid_params=SPARSE).results[0].metadata == {"team": "y"}

        writer.upsert([{"chunk_id": "a", "text": "zebra beta"}])  # a new version: new rowid, old one removed
        [hit] = reader.search("zebra", top_k=5, hybrid_params=SPARSE).results
        assert (hit.chunk_id, hit.text) == ("a", "zebra beta")
        assert list(applied[-1].removed) == [rowid]

        writer.delete(["a"])
        assert _ids(reader, "zebra") == []
        assert [r.chunk_id for r in reader.search("zebra", top_k=5).results] == ["seed"]  # dense still returns seed
        assert len(reader.backend.sparse) == len(reader.backend.dense) == 1  # only "seed" is left in both indexes
        assert not [r for r in caplog.records if "building BM25" in r.getMessage()]
    finally:
        writer.close()
        reader.close()


def test_no_new_writes_means_no_catch_up_work(tmp_path):
    with _open(tmp_path) as memory:
        memory.upsert([{"chunk_id": "a", "text": "alpha"}])
        memory.search("alpha")
        assert memory.backend.catch_up() is False  # own commits do not move PRAGMA data_version


def test_both_memories_write_and_each_sees_all(tmp_path):
    one, two = _open(tmp_path), _open(tmp_path)
    try:
        for i in range(30):
            (one if i % 2 else two).upsert([{"chunk_id": f"c{i}", "text": f"common tok{i}"}])
        one.upsert([{"chunk_id": "c3", "text": "common tok3 rewritten"}])
        two.delete(["c4"])
        expected = sorted(f"c{i}" for i in range(30) if i != 4)
        assert sorted(_ids(one, "common")) == sorted(_ids(two, "common")) == expected
        for memory in (one, two):
            assert sorted(memory.backend.sparse.ids().tolist()) == sorted(memory.backend.store.rowids().tolist())
            assert sorted(memory.backend.dense.ids().tolist()) == sorted(memory.backend.store.rowids().tolist())
    finally:
        one.close()
        two.close()


def test_the_dense_corpus_moments_are_the_same_bits_in_every_memory_and_after_reopen(tmp_path):
    """The default fusion's dense surprise reads the corpus moments (calibration.VectorMoments): two memories
    that applied the same writes in another order, and a fresh open of the folder, hold identical sums."""
    import numpy as np

    one, two = _open(tmp_path), _open(tmp_path)
    try:
        for i in range(30):
            (one if i % 3 else two).upsert([{"chunk_id": f"c{i}", "text": f"common tok{i} word{i % 7}"}])
        one.upsert([{"chunk_id": "c3", "text": "common tok3 rewritten"}])
        two.delete(["c4", "c5"])
        assert sorted(_ids(one, "common")) == sorted(_ids(two, "common"))  # both caught up
        fresh = HybridMemory(embedder=HashingEmbedder(32))
        fresh.upsert([c for c in one.iter_chunks()])  # the live chunks only, in one batch
        sums = [m.backend.dense._moments.to_array() for m in (one, two, fresh)]
        assert (
            one.backend.dense._moments.count
            == two.backend.dense._moments.count
            == fresh.backend.dense._moments.count
            == 28
        )
        assert np.array_equal(sums[0], sums[1]) and np.array_equal(sums[0], sums[2])
        fresh.close()
    finally:
        one.close()
        two.close()
    reopened = _open(tmp_path)
    try:
        assert np.array_equal(reopened.backend.dense._moments.to_array(), sums[0])
    finally:
        reopened.close()


def test_a_write_prepared_against_rows_another_memory_changed_is_prepared_again(tmp_path):
    one, two = _open(tmp_path), _open(tmp_path)
    try:
        one.upsert([{"chunk_id": "x", "text": "first version"}])
        two.search("first")
        # two looks the chunk up, then one replaces it before two's transaction: two must retry, not fail
        original = two.backend.store.lookup
        calls = {"n": 0}

        def lookup_then_race(ids):
            found = original(ids)
            calls["n"] += 1
            if calls["n"] == 1:
                one.upsert([{"chunk_id": "x", "text": "second version"}])
            return found

        two.backend.store.lookup = lookup_then_race
        two.upsert([{"chunk_id": "x", "text": "third version"}])
        assert calls["n"] == 2
        assert [c.text for c in one.get(["x"])] == ["third version"]
        assert _ids(one, "version") == _ids(two, "version") == ["x"]
        assert len(one.backend.sparse) == len(two.backend.sparse) == 1
    finally:
        one.close()
        two.close()


def test_a_memory_behind_the_pruned_log_reconciles_by_rowid_without_rebuild(tmp_path, caplog):
    writer = _open(tmp_path)
    writer.backend.store.log_keep = 4
    reader = _open(tmp_path)
    caplog.set_level(logging.INFO, logger="hybrid_memory")
    try:
        for i in range(20):
            writer.upsert([{"chunk_id": f"c{i}", "text": f"common tok{i}"}])
        writer.delete(["c0", "c1"])
        assert writer.backend.store._horizon() > reader.backend.seq  # the reader's position was pruned
        assert sorted(_ids(reader, "common")) == sorted(f"c{i}" for i in range(2, 20))
        messages = [r.getMessage() for r in caplog.records]
        assert any("reconciling indexes by rowid" in m for m in messages)
        assert not any("building BM25" in m for m in messages)
    finally:
        writer.close()
        reader.close()


def test_one_writer_and_four_reader_processes(tmp_path):
    """benchmarks/multiprocess.py, 3 s: every acknowledged write is found by the next search of every
    reader, no acknowledged delete comes back, no process errs, saves race and five processes close at once."""
    out = tmp_path / "summary.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "multiprocess.py"), "--seconds", "3", "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    summary = json.loads(out.read_text())
    assert summary["errors"] == 0, summary["error_samples"]
    assert summary["missing"] == 0 and summary["resurrected"] == 0
    assert summary["exit_codes"] == [0, 0, 0, 0, 0]
    assert summary["writes_acknowledged"] >= 20 and summary["reader_searches"] >= 8
    assert summary["ids_checked"] > 0 and summary["reader_persists"] >= 0
    assert summary["final_open_rebuilt"] is False


def _write_then_close(path: str, index: int, barrier) -> None:  # noqa: ANN001
    memory = HybridMemory(path, embedder=HashingEmbedder(32), compact_min=50)
    memory.upsert([{"chunk_id": f"p{index}-{i}", "text": f"process{index} common tok{index}x{i}"} for i in range(120)])
    memory.upsert([{"chunk_id": f"shared-{i}", "text": f"shared common from {index}"} for i in range(10)])
    barrier.wait(timeout=120)
    memory.close()


def test_five_processes_write_and_close_at_once(tmp_path):
    """Today's fixed bm25.tmp / bm25.old names made 3 of 5 simultaneous closes fail."""
    with _open(tmp_path) as memory:
        memory.upsert([{"chunk_id": "seed", "text": "seed"}])
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(5)
    procs = [ctx.Process(target=_write_then_close, args=(str(tmp_path), i, barrier)) for i in range(5)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * 5
    with _open(tmp_path) as memory:
        assert memory.count() == 1 + 5 * 120 + 10
        assert not any(v["rebuilt"] for v in memory.last_sync.values())
        assert sorted(memory.backend.sparse.ids().tolist()) == sorted(memory.backend.store.rowids().tolist())
        assert len(memory.backend.dense) == memory.count()
        assert _ids(memory, "tok3x7") == ["p3-7"]
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".bm25-") or p.name.startswith(".dense-")]
    assert leftovers == []


def test_index_files_record_the_change_log_position_they_hold(tmp_path):
    with _open(tmp_path) as memory:
        memory.upsert([{"chunk_id": f"c{i}", "text": f"tok{i}"} for i in range(3)])
        seq = memory.backend.seq
    state = json.loads((tmp_path / "indexes.json").read_text())
    assert state["seq"] == seq == 3
    with _open(tmp_path) as memory:
        assert memory.last_sync == {
            "bm25": {"rebuilt": False, "added": 0, "removed": 0},
            "dense": {"rebuilt": False, "added": 0, "removed": 0},
        }
