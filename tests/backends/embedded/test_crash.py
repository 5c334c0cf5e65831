"""Unclean exits: what was acknowledged survives, and indexes heal once and stay healed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hybrid_memory import HashingEmbedder, HybridMemory

ROOT = Path(__file__).resolve().parents[3]


def _child(code: str, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        check=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_after_os_exit_the_next_open_rebuilds_and_saves_so_later_opens_do_not(tmp_path, caplog):
    """The issue's repro: add 600 chunks, os._exit(0), reopen three times."""
    _child(
        """
        import os, sys
        from hybrid_memory import HashingEmbedder, HybridMemory
        memory = HybridMemory(sys.argv[1], embedder=HashingEmbedder(32))
        memory.add([{"chunk_id": f"s{i}", "text": f"seed {i}"} for i in range(20)])
        memory.close()
        memory = HybridMemory(sys.argv[1], embedder=HashingEmbedder(32))
        memory.add([{"chunk_id": f"c{i}", "text": f"chunk number {i}"} for i in range(600)])
        os._exit(0)
        """,
        str(tmp_path),
    )
    caplog.set_level(logging.INFO, logger="hybrid_memory")
    builds = []
    for _ in range(3):
        caplog.clear()
        with HybridMemory.open(tmp_path, embedder=HashingEmbedder(32)) as memory:
            assert memory.count() == 620
            builds.append([r.getMessage() for r in caplog.records if "building BM25" in r.getMessage()])
    assert builds == [["building BM25 index over 620 stored chunks"], [], []]


def test_an_open_that_rebuilt_saves_at_once_even_if_the_process_dies_next(tmp_path):
    with HybridMemory(tmp_path, embedder=HashingEmbedder(32), compact_min=10) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": f"chunk {i}"} for i in range(5)])
    _child(
        """
        import os, sys
        from hybrid_memory import HashingEmbedder, HybridMemory
        memory = HybridMemory(sys.argv[1], embedder=HashingEmbedder(32), compact_min=10)
        memory.add([{"chunk_id": f"d{i}", "text": f"delta {i}"} for i in range(30)])
        os._exit(0)
        """,
        str(tmp_path),
    )
    _child(  # reopens (rebuilding: 30 missing > compact_min), then dies without close()
        """
        import os, sys
        from hybrid_memory import HashingEmbedder, HybridMemory
        memory = HybridMemory(sys.argv[1], embedder=HashingEmbedder(32), compact_min=10)
        assert memory.last_sync["bm25"]["rebuilt"], memory.last_sync
        os._exit(0)
        """,
        str(tmp_path),
    )
    with HybridMemory(tmp_path, embedder=HashingEmbedder(32), compact_min=10) as memory:
        assert memory.last_sync == {
            "bm25": {"rebuilt": False, "added": 0, "removed": 0},
            "dense": {"rebuilt": False, "added": 0, "removed": 0},
        }
        assert [r.chunk_id for r in memory.search("delta 7", top_k=1, dense_weight=0.0).results] == ["d7"]


def test_sigkill_trials_lose_nothing_acknowledged_and_heal_once(tmp_path):
    """benchmarks/crash.py, one trial of each kind: SIGKILL during one-at-a-time upserts, during a CLI bulk
    ingest, during close() and inside the index save. Every acknowledged chunk is stored, rank 1 for its
    unique token (sparse only), in the dense top 10 for its text; the second open rebuilds nothing."""
    out = tmp_path / "crash.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "crash.py"), "--trials", "4", "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    summary = json.loads(out.read_text())
    assert [r["kind"] for r in summary["reports"]] == ["upsert", "cli", "close", "close-mid-save"]
    assert summary["open_errors"] == 0
    assert all(r["acked"] >= 1 for r in summary["reports"])
    assert (summary["lost"], summary["not_rank1"], summary["not_dense"]) == (0, 0, 0)
    assert summary["second_open_rebuilds"] == 0 and summary["partial_cli_batches"] == 0
