"""benchmarks/graph_global_latency.py in a tiny run: every case serves the same hits, the cached cases read no
hashes and the re-reading ones one per call (the script refuses to report otherwise); nothing is written to
benchmarks/results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("networkx")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _common as common
import graph_global_latency as bench


def test_a_tiny_run_counts_one_read_per_call_before_and_none_after(monkeypatch, tmp_path):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    payload = bench.main(["--chunks", "200", "--calls", "2"])
    reads = {case: c["hash_reads_per_call"] for case, c in payload["cases"].items() if c["graph"] is not None}
    assert reads == {
        "unscoped, re-read every call (before)": 1,
        "unscoped, cached (after)": 0,
        "scoped u0, re-read every call (before)": 1,
        "scoped u0, cached (after)": 0,
        "unscoped, a write before each call": 1,
    }
    assert payload["graphs"]["unscoped"]["chunks"] == 200 and payload["graphs"]["scoped u0"]["chunks"] == 50
    assert (tmp_path / "graph_global_latency.json").is_file()
