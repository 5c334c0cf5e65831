"""Render the docs' benchmark figures from ``benchmarks/results/*.json``: every number drawn comes from a JSON file.

Usage::

    python benchmarks/figures.py                        # benchmarks/results -> docs/_static/figures
    python benchmarks/figures.py --results DIR --out DIR

Figures (PNG, matplotlib's Agg backend, so no display is needed):

* ``ndcg_per_set.png`` -- nDCG@10 per set for hybrid-memory's BM25, dense, RRF and default fusion and the peers
  (LangChain ``EnsembleRetriever``, LlamaIndex ``QueryFusionRetriever``), from ``peers.json`` (one run, the same
  queries for every system);
* ``latency_vs_size.png`` -- p50 search latency (``top_k`` 10, query vector given, no filter) of BM25 alone,
  dense alone and the hybrid against the corpus size, from every ``scale_<n>.json`` (``benchmarks/scale.py --n``;
  p50 only: on a shared machine a run's p95 measures the other processes as much as the search);
* ``query_latency_peers.png`` -- p50 (bar) and p95 (tick) query latency, the query embedding included, of
  hybrid-memory's RRF and default against the peers, per set, from ``peers.json``.

Each figure carries a footer naming the machine (CPU model, cores, platform, Python), the UTC date and the command
of every result file it draws from, as that file records them (``_common.write_results``); a file written before
the command was recorded says so. A figure whose input is missing is skipped with a message; :func:`render_all`
returns the paths it wrote.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = PROJECT_ROOT / "benchmarks" / "results"
FIGURES_DIR = PROJECT_ROOT / "docs" / "_static" / "figures"

FIGURES = ("ndcg_per_set.png", "latency_vs_size.png", "query_latency_peers.png")
"""The files :func:`render_all` writes when all inputs exist."""

SET_LABELS = {
    "scifact": "SciFact",
    "hotpotqa100": "HotpotQA-100",
    "locomo5": "LoCoMo-5\n(filtered)",
    "techdocs": "TechDocs",
    "apidocs": "APIDocs",
    "hotpotqa100-long": "HotpotQA-100\nlong queries",
    "locomo5-long": "LoCoMo-5\nlong queries",
}
COLOURS = {
    "hybrid-memory BM25": "#9ecae1",
    "hybrid-memory dense": "#6baed6",
    "hybrid-memory RRF": "#3182bd",
    "hybrid-memory default": "#08306b",
    "LangChain EnsembleRetriever": "#e6550d",
    "LlamaIndex QueryFusionRetriever": "#31a354",
}
EMBED_ONLY = "query embedding alone"
"""The timed row of ``peers.json`` that only embeds the query."""
SCALE_FILE = re.compile(r"scale_(\d+)\.json")
ENGINES = (("sparse", "BM25 alone"), ("dense", "dense alone"), ("hybrid", "hybrid (default fusion)"))
ENGINE_STYLE = {"sparse": ("#9ecae1", "s"), "dense": ("#6baed6", "^"), "hybrid": ("#08306b", "o")}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def provenance(payload: dict[str, Any], fallback_command: str | None = None) -> str:
    """``"<UTC date> · <command>"`` of one result file (the command it recorded, else ``fallback_command``)."""
    date = str(payload.get("utc", "date not recorded")).replace("T", " ").replace("Z", " UTC")
    command = payload.get("command") or (
        f"{fallback_command} (command not recorded; inferred)" if fallback_command else "command not recorded"
    )
    if payload.get("omp_num_threads") is not None and not command.startswith("OMP_NUM_THREADS"):
        command = f"OMP_NUM_THREADS={payload['omp_num_threads']} {command}"  # scale.py records the variable
    return f"{date} · {command}"


def machine_text(payload: dict[str, Any]) -> str:
    """One line naming the machine of a result file: CPU model (when recorded), cores, platform, Python."""
    m = payload.get("machine") or {}
    parts = [
        m.get("cpu"),
        f"{m['cpus']} cores" if m.get("cpus") else None,
        m.get("platform"),
        f"Python {m['python']}" if m.get("python") else None,
    ]
    return ", ".join(p for p in parts if p) or "machine not recorded"


def add_footer(fig: Any, lines: Sequence[str]) -> None:
    """Write the provenance lines at the bottom of ``fig`` (small grey text, wrapped at 140 characters)."""
    wrapped = [w for line in lines for w in textwrap.wrap(line, 140, subsequent_indent="    ")]
    height = 0.022 * len(wrapped) + 0.02
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, height + 0.1))
    fig.text(0.01, 0.01, "\n".join(wrapped), fontsize=6.5, color="#555555", va="bottom", ha="left", family="monospace")


def _datasets(peers: dict[str, Any]) -> list[str]:
    """The sets of a peers payload: the known ones in :data:`SET_LABELS` order, then any others as run."""
    names = list(peers.get("datasets", {}))
    return [s for s in SET_LABELS if s in names] + [s for s in names if s not in SET_LABELS]


def _set_label(name: str, info: dict[str, Any]) -> str:
    label = SET_LABELS.get(name, name)
    if info.get("subsampled"):
        label += f"\n({info['queries']} of {info['queries_in_set']} q.)"
    return label


def ndcg_per_set(peers: dict[str, Any], out: Path) -> Path:
    """Grouped bars: nDCG@10 per set (x) and system (bar), from a ``peers.json`` payload. Returns ``out``."""
    plt = _pyplot()
    sets = _datasets(peers)
    systems = list(peers["systems"])
    fig, ax = plt.subplots(figsize=(12.5, 5.4))
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(sets))]
        ys = [peers["datasets"][s]["metrics"][system]["ndcg@10"] for s in sets]
        bars = ax.bar(xs, ys, width * 0.95, label=system, color=COLOURS.get(system))
        for bar, y in zip(bars, ys, strict=True):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                y + 0.005,
                f"{y:.3f}",
                ha="center",
                va="bottom",
                fontsize=6,
                rotation=90,
            )
    ax.set_xticks(range(len(sets)), [_set_label(s, peers["datasets"][s]) for s in sets])
    ax.set_ylabel("nDCG@10")
    ax.set_ylim(0, min(1.0, max(peers["datasets"][s]["metrics"][m]["ndcg@10"] for s in sets for m in systems) + 0.12))
    ax.set_title(f"nDCG@10 per set: top {peers.get('top_k', 10)}, the same all-MiniLM-L6-v2 vectors for every system")
    ax.legend(fontsize=7.5, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.subplots_adjust(bottom=0.3)
    add_footer(fig, [f"machine: {machine_text(peers)}", f"run: {provenance(peers)}"])
    return _save(fig, out)


def scale_points(
    payloads: Sequence[dict[str, Any]], filter_name: str = "none"
) -> dict[str, list[tuple[int, float, float]]]:
    """engine -> [(n, p50 ms, p95 ms)] sorted by n, from ``scale_<n>.json`` payloads (latency under ``filter_name``)."""
    out: dict[str, list[tuple[int, float, float]]] = {engine: [] for engine, _ in ENGINES}
    for payload in sorted(payloads, key=lambda p: int(p["n"])):
        latency = payload["search"]["latency"][filter_name]
        for engine, _ in ENGINES:
            out[engine].append((int(payload["n"]), float(latency[engine]["p50_ms"]), float(latency[engine]["p95_ms"])))
    return out


def latency_vs_size(payloads: Sequence[dict[str, Any]], out: Path) -> Path:
    """p50 latency (log scale) against corpus size for BM25, dense and the hybrid, one footer line per run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    points = scale_points(payloads)
    for engine, label in ENGINES:
        colour, marker = ENGINE_STYLE[engine]
        ns = [p[0] for p in points[engine]]
        ax.plot(ns, [p[1] for p in points[engine]], marker=marker, color=colour, label=label, linewidth=2)
        for n, p50, _ in points[engine]:
            ax.annotate(f"{p50:.2f}", (n, p50), textcoords="offset points", xytext=(6, -3), fontsize=7, color=colour)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ns = sorted({int(p["n"]) for p in payloads})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns, [f"{n:,}" for n in ns])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ns[0] / 1.6, ns[-1] * 1.6)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("chunks in the memory")
    ax.set_ylabel("search latency p50, ms (log scale)")
    ax.set_title("Search latency (p50) against corpus size: top 10, no filter, query vector given (no embedding)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=7.5, ncol=2)
    ax.grid(alpha=0.3, which="both")
    by_n = sorted(payloads, key=lambda p: int(p["n"]))
    lines = []
    for p in by_n:  # each size is its own run, perhaps on another day: each names its own machine
        n = int(p["n"])
        lines.append(f"n={n:,}: {provenance(p, f'python benchmarks/scale.py --n {n}')} · {machine_text(p)}")
    add_footer(fig, lines)
    return _save(fig, out)


def query_latency_peers(peers: dict[str, Any], out: Path) -> Path:
    """Grouped bars: p50 latency per set and system with the query embedding (BM25-only row left out); p95 ticks."""
    plt = _pyplot()
    sets = _datasets(peers)
    systems = [
        s
        for s in peers["systems"]
        if all(peers["datasets"][d].get("query_embeddings_per_search", {}).get(s, 1) >= 1 for d in sets)
        and s != "hybrid-memory dense"
    ]
    fig, ax = plt.subplots(figsize=(12.5, 5.4))
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(sets))]
        p50 = [peers["datasets"][s]["latency_ms"][system]["p50_ms"] for s in sets]
        p95 = [peers["datasets"][s]["latency_ms"][system]["p95_ms"] for s in sets]
        bars = ax.bar(xs, p50, width * 0.95, label=system, color=COLOURS.get(system))
        ax.scatter(xs, p95, marker="_", s=120, color="#333333", zorder=3, label="p95" if j == 0 else None)
        for bar, y in zip(bars, p50, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, y, f"{y:.0f}", ha="center", va="bottom", fontsize=7)
    floor = [peers["datasets"][s]["latency_ms"].get(EMBED_ONLY, {}).get("p50_ms") for s in sets]
    for i, y in enumerate(floor):
        if y is not None:
            ax.hlines(
                y,
                i - 0.45,
                i + 0.45,
                colors="#d62728",
                linestyles="--",
                linewidth=1.2,
                label="the query embedding alone, p50" if i == 0 else None,
                zorder=4,
            )
    ax.set_xticks(range(len(sets)), [_set_label(s, peers["datasets"][s]) for s in sets])
    ax.set_ylabel("query latency, ms (p50 bar, p95 tick)")
    ax.set_title("Query latency with the query embedding (all-MiniLM-L6-v2 on the CPU, once per search, every system)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=7.5, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.subplots_adjust(bottom=0.3)
    add_footer(
        fig,
        [
            f"machine: {machine_text(peers)}",
            f"run: {provenance(peers)}",
            (
                f"timing: fastest of {peers.get('repeats', '?')} runs per query, systems interleaved; a shared "
                "machine: read the ratios between systems"
            ),
        ],
    )
    return _save(fig, out)


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130, metadata={"Software": None})
    _pyplot().close(fig)
    return out


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def render_all(results_dir: Path = RESULTS_DIR, out_dir: Path = FIGURES_DIR) -> list[Path]:
    """Render every figure whose inputs exist in ``results_dir`` into ``out_dir``; returns the paths written.

    Inputs: ``peers.json`` (nDCG and query latency figures) and ``scale_<n>.json`` for at least two sizes
    (latency against size). Raises ``KeyError`` when a file lacks a field a figure needs (a result written by
    an older script).
    """
    written: list[Path] = []
    peers_file = results_dir / "peers.json"
    if peers_file.is_file():
        peers = _load(peers_file)
        written.append(ndcg_per_set(peers, out_dir / "ndcg_per_set.png"))
        written.append(query_latency_peers(peers, out_dir / "query_latency_peers.png"))
    else:
        print(f"skip ndcg_per_set.png and query_latency_peers.png: no {peers_file} (run benchmarks/peers.py)")
    scales = [_load(p) for p in sorted(results_dir.glob("scale_*.json")) if SCALE_FILE.fullmatch(p.name)]
    if len(scales) >= 2:
        written.append(latency_vs_size(scales, out_dir / "latency_vs_size.png"))
    else:
        print(f"skip latency_vs_size.png: fewer than two scale_<n>.json in {results_dir} (run benchmarks/scale.py --n)")
    return written


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="folder of result JSON files")
    parser.add_argument("--out", type=Path, default=FIGURES_DIR, help="folder the PNG files go to")
    args = parser.parse_args(argv)
    written = render_all(args.results, args.out)
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
