"""benchmarks/figures.py draws the docs' figures from result JSON files only; benchmarks/peers.py subsamples
deterministically. A tiny synthetic results folder in tmp_path, no benchmark is run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytest.importorskip("matplotlib", reason="figures need matplotlib: pip install 'hybrid-memory[bench]'")

import figures
import peers

MACHINE = {"python": "3.11.7", "platform": "Linux-x86_64", "cpus": 2, "cpu": "Test CPU"}
SYSTEMS = [
    "hybrid-memory BM25",
    "hybrid-memory dense",
    "hybrid-memory RRF",
    "hybrid-memory default",
    "LangChain EnsembleRetriever",
    "LlamaIndex QueryFusionRetriever",
]


def _peers_payload() -> dict:
    datasets = {}
    for d, name in enumerate(["scifact", "locomo5"]):
        datasets[name] = {
            "queries": 3,
            "queries_in_set": 3 if d == 0 else 7,
            "subsampled": d == 1,
            "metrics": {s: {"ndcg@10": 0.5 + 0.05 * i + 0.01 * d, "recall@10": 0.6} for i, s in enumerate(SYSTEMS)},
            "latency_ms": {s: {"p50_ms": 10.0 + i, "p95_ms": 20.0 + i} for i, s in enumerate(SYSTEMS)}
            | {"query embedding alone": {"p50_ms": 8.0, "p95_ms": 9.0}},
            "query_embeddings_per_search": {s: 0.0 if s == "hybrid-memory BM25" else 1.0 for s in SYSTEMS},
        }
    return {
        "benchmark": "peers",
        "utc": "2026-12-06T13:00:00Z",
        "machine": MACHINE,
        "command": "python benchmarks/peers.py",
        "top_k": 10,
        "repeats": 2,
        "systems": SYSTEMS,
        "datasets": datasets,
    }


def _scale_payload(n: int, recorded_command: bool) -> dict:
    latency = {
        "none": {
            "sparse": {"p50_ms": n / 1e5, "p95_ms": 2 * n / 1e5},
            "dense": {"p50_ms": 1.0 + n / 1e5, "p95_ms": 3.0},
            "hybrid": {"p50_ms": 2.0 + n / 1e5, "p95_ms": 4.0},
        }
    }
    payload = {
        "benchmark": f"scale_{n}",
        "utc": "2026-12-04T22:16:12Z",
        "machine": MACHINE,
        "n": n,
        "search": {"latency": latency},
    }
    if recorded_command:
        payload["command"] = f"python benchmarks/scale.py --n {n}"
    return payload


def _results(folder: Path) -> Path:
    folder.mkdir()
    (folder / "peers.json").write_text(json.dumps(_peers_payload()))
    for n, recorded in ((100_000, True), (10_000, False)):
        (folder / f"scale_{n}.json").write_text(json.dumps(_scale_payload(n, recorded)))
    # a variant run beside the sizes: not a size of its own, so not a point on the curve
    (folder / "scale_100000_rrf_fusion.json").write_text(json.dumps(_scale_payload(55, True)))
    return folder


def test_render_all_writes_the_three_figures_from_the_json_files(tmp_path):
    out = tmp_path / "figures"
    written = figures.render_all(_results(tmp_path / "results"), out)
    assert sorted(p.name for p in written) == sorted(figures.FIGURES)
    assert sorted(p.name for p in out.iterdir()) == sorted(figures.FIGURES)
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_input_skips_only_its_figures(tmp_path, capsys):
    results = _results(tmp_path / "results")
    (results / "peers.json").unlink()
    written = figures.render_all(results, tmp_path / "figures")
    assert [p.name for p in written] == ["latency_vs_size.png"]
    assert "no " in capsys.readouterr().out


def test_scale_points_are_read_per_size_in_order_and_variants_are_left_out(tmp_path):
    results = _results(tmp_path / "results")
    payloads = [
        json.loads(p.read_text()) for p in sorted(results.glob("scale_*.json")) if figures.SCALE_FILE.fullmatch(p.name)
    ]
    points = figures.scale_points(payloads)
    assert points["sparse"] == [(10_000, 0.1, 0.2), (100_000, 1.0, 2.0)]
    assert points["hybrid"] == [(10_000, 2.1, 4.0), (100_000, 3.0, 4.0)]


def test_the_footer_names_machine_date_and_command_or_says_it_was_not_recorded():
    assert figures.machine_text(_peers_payload()) == "Test CPU, 2 cores, Linux-x86_64, Python 3.11.7"
    assert figures.provenance(_peers_payload()) == "2026-12-06 13:00:00 UTC · python benchmarks/peers.py"
    old = _scale_payload(10_000, recorded_command=False)
    assert figures.provenance(old, "python benchmarks/scale.py --n 10000") == (
        "2026-12-04 22:16:12 UTC · python benchmarks/scale.py --n 10000 (command not recorded; inferred)"
    )


def test_peers_subsample_is_deterministic_and_keeps_the_qrels_order():
    qids = [f"q{i}" for i in range(50)]
    first = peers.subsample(qids, 7)
    assert len(first) == 7
    assert first == peers.subsample(qids, 7)
    assert first == [q for q in qids if q in set(first)]
    assert peers.subsample(qids, 50) == qids
    assert peers.subsample(qids, None) == qids
