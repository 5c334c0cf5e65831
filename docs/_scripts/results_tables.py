"""Markdown tables of the latest benchmark runs, read from ``benchmarks/results/*.json`` (never typed by hand).

The docs build (``docs/conf.py``) writes them to ``docs/_generated/`` where ``docs/benchmarks.md`` includes them;
``tests/docs/test_readme.py`` checks the README's results table against :func:`readme_rows`. Print one::

    python docs/_scripts/results_tables.py readme        # the README's rows
    python docs/_scripts/results_tables.py quality       # any name of TABLES
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

SETS = {"scifact": "SciFact", "hotpotqa100": "HotpotQA-100", "locomo5": "LoCoMo-5", "techdocs": "TechDocs"}
"""fusion_eval's data sets, in the order the tables show them, with their display names."""
LABELS = SETS | {"apidocs": "APIDocs", "hotpotqa100-long": "HotpotQA-100 long", "locomo5-long": "LoCoMo-5 long"}
"""Display names of every set a table may show (the development sets of issue 36 too)."""

CLASS_NAMES = {"error": "quoted error message", "identifier": "exact identifier"}

README_ROWS = {
    "BM25 alone": "hybrid-memory BM25",
    "dense alone (all-MiniLM-L6-v2)": "hybrid-memory dense",
    "reciprocal rank fusion (k = 60)": "hybrid-memory RRF",
    "**hybrid-memory default**": "hybrid-memory default",
    "LangChain `EnsembleRetriever` (BM25 + FAISS, 0.5 / 0.5)": "LangChain EnsembleRetriever",
    "LlamaIndex `QueryFusionRetriever` (BM25 + vector, reciprocal rerank)": "LlamaIndex QueryFusionRetriever",
}
"""README row label -> system of ``peers.json`` (every row measured in one run, on the same queries)."""


def load(name: str) -> dict:
    """One result file of ``benchmarks/results``, parsed."""
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _method(metrics: dict, key: str) -> dict:
    if key != "DEFAULT":
        return metrics[key]
    (found,) = [value for name, value in metrics.items() if name.startswith("DEFAULT") and name.endswith("1/1")]
    return found


def provenance(data: dict, command: str) -> str:
    """One line naming the run's date, machine and command."""
    machine = data.get("machine", {})
    return (
        f"*Run {data.get('utc', '?')}, {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}: "
        f"`{command}` (`benchmarks/results/`).*"
    )


def readme_rows() -> list[str]:
    """The README's results rows: nDCG@10 on the four sets to 3 decimals from ``peers.json`` (this library's rows and
    the peers', one run, the same queries and vectors), the default in bold."""
    data = load("peers.json")["datasets"]
    rows = []
    for label, system in README_ROWS.items():
        cells = []
        for s in SETS:
            cell = f"{data[s]['metrics'][system]['ndcg@10']:.3f}"
            cells.append(f"**{cell}**" if system == "hybrid-memory default" else cell)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def readme_note() -> str:
    """The README table's footnote: which sets were subsampled, and how."""
    data = load("peers.json")["datasets"]
    parts = [
        f"{SETS[s]} {data[s]['queries']} of {data[s]['queries_in_set']} queries"
        for s in SETS
        if data[s]["queries"] < data[s]["queries_in_set"]
    ]
    return "† seeded subsample: " + ", ".join(parts) if parts else ""


def quality() -> str:
    """nDCG@10 per set and query class: both engines, RRF and the default (fusion_eval.json)."""
    run = load("fusion_eval.json")
    keys = ["sparse alone", "dense alone", "rrf 1/1", "DEFAULT"]
    lines = ["| set | BM25 | dense | RRF 1/1 | **default** | default recall@10 |", "|---|---|---|---|---|---|"]
    for s, name in SETS.items():
        metrics = run["datasets"][s]["metrics"]
        classes = [c for c in run["datasets"][s]["classes"] if c != "all"]
        for cls in [None, *classes]:
            metric = "ndcg@10" if cls is None else f"ndcg@10:{cls}"
            label = name if cls is None else f"{name}, {CLASS_NAMES.get(cls, cls)}"
            values = [_method(metrics, k).get(metric) for k in keys]
            if any(v is None for v in values):
                continue
            recall = _method(metrics, "DEFAULT")["recall@10"] if cls is None else None
            cells = [f"{v:.4f}" for v in values[:-1]] + [
                f"**{values[-1]:.4f}**",
                "" if recall is None else f"{recall:.3f}",
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return provenance(run, "python benchmarks/fusion_eval.py") + "\n\n" + "\n".join(lines)


def latency() -> str:
    """p50 of a search through HybridMemory.search, the query vector cached (fusion_eval.json)."""
    run = load("fusion_eval.json")
    lines = ["| set | BM25 alone | dense alone | RRF 1/1 | default | default / RRF |", "|---|---|---|---|---|---|"]
    for s, name in SETS.items():
        p50 = run["datasets"][s]["p50_ms"]
        default = next(v for k, v in p50.items() if k.startswith("DEFAULT") and k.endswith("1/1"))
        cells = [p50["sparse alone"], p50["dense alone"], p50["rrf 1/1"], default]
        lines.append(f"| {name} | " + " | ".join(f"{c:.2f} ms" for c in cells) + f" | {default / p50['rrf 1/1']:.2f} |")
    return provenance(run, "python benchmarks/fusion_eval.py") + "\n\n" + "\n".join(lines)


def beir() -> str:
    """SciFact at depth 100, the query embedding included (beir_eval_scifact.json)."""
    run = load("beir_eval_scifact.json")
    names = {"sparse": "BM25", "dense": "dense", "hybrid": "RRF (k = 60)", "default": "**default**"}
    lines = ["| mode | nDCG@10 | recall@100 | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    for mode, label in names.items():
        r = run["results"][mode]
        lines.append(
            f"| {label} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {r['latency']['p50_ms']:.1f} | "
            f"{r['latency']['p95_ms']:.1f} |"
        )
    return provenance(run, "python benchmarks/beir_eval.py --dataset scifact") + "\n\n" + "\n".join(lines)


def locomo() -> str:
    """LoCoMo-5 per question category (locomo_eval.json)."""
    run = load("locomo_eval.json")
    systems = {
        "sparse": "BM25",
        "dense": "dense",
        "rrf": "RRF",
        "default": "**default**",
        "default+recency": "default + recency prior",
    }
    categories = list(run["results"]["sparse"])
    lines = ["| system | " + " | ".join(categories) + " |", "|---" * (len(categories) + 1) + "|"]
    for key, label in systems.items():
        lines.append(
            f"| {label} | " + " | ".join(f"{run['results'][key][c]['ndcg@10']:.4f}" for c in categories) + " |"
        )
    return provenance(run, "python benchmarks/locomo_eval.py") + "\n\n" + "\n".join(lines)


def scale() -> str:
    """Search latency against corpus size and filter selectivity (scale_100000.json, scale_1000000.json)."""
    parts = []
    for n in (100_000, 1_000_000):
        path = RESULTS / f"scale_{n}.json"
        if not path.exists():
            continue
        run = load(path.name)
        latency = run["search"]["latency"]
        recall = run["search"].get("recall_at_10", {})
        summary = (
            f"**{n:,} chunks**: bulk load {run['build']['bulk_load_seconds']:.0f} s, peak RSS "
            f"{run['build']['peak_rss_gb']:.2f} GB, reopen {run['search']['reopen_seconds']:.2f} s, "
            f"upsert-to-searchable p50 {run['search']['writes']['upsert_to_searchable']['p50_ms']:.1f} ms."
        )
        lines = [
            summary,
            "",
            "| filter (share of chunks) | BM25 p50 | dense p50 | hybrid p50 | dense recall@10 |",
            "|---|---|---|---|---|",
        ]
        for name, row in latency.items():
            rec = recall.get(name)
            lines.append(
                f"| {name} | {row['sparse']['p50_ms']:.2f} ms | {row['dense']['p50_ms']:.2f} ms | "
                f"{row['hybrid']['p50_ms']:.2f} ms | {'' if rec is None else f'{rec:.3f}'} |"
            )
        parts.append(
            provenance(run, f"OMP_NUM_THREADS=1 python benchmarks/scale.py --n {n}") + "\n\n" + "\n".join(lines)
        )
    return "\n\n".join(parts)


def qdrant() -> str:
    """The embedded backend against Qdrant Edge on SciFact (qdrant_eval_scifact.json)."""
    run = load("qdrant_eval_scifact.json")
    names = {"sparse": "BM25", "dense": "dense", "hybrid": "**default**", "hybrid-rrf": "RRF"}
    lines = [
        "| mode | nDCG@10 embedded | nDCG@10 Edge | p50 embedded | p50 Edge | same top 10, same order |",
        "|---|---|---|---|---|---|",
    ]
    for mode, label in names.items():
        m = run["modes"][mode]
        lines.append(
            f"| {label} | {m['embedded']['ndcg@10']:.4f} | {m['qdrant-edge']['ndcg@10']:.4f} | "
            f"{m['embedded']['p50_ms']:.2f} ms | {m['qdrant-edge']['p50_ms']:.2f} ms | "
            f"{m['same_order_share']:.0%} |"
        )
    return provenance(run, "python benchmarks/qdrant_eval.py") + "\n\n" + "\n".join(lines)


def peers() -> str:
    """This library against LangChain's EnsembleRetriever and LlamaIndex's QueryFusionRetriever (peers.json, written by
    ``benchmarks/peers.py``): nDCG@10 and p50 latency with the query embedding, per set."""
    if not (RESULTS / "peers.json").exists():
        return "*Not run yet: `python benchmarks/peers.py` writes `benchmarks/results/peers.json`.*"
    run = load("peers.json")
    sets = [s for s in SETS if s in run.get("datasets", {})] + [s for s in run.get("datasets", {}) if s not in SETS]
    systems = run.get("systems") or list(run["datasets"][sets[0]]["metrics"])
    header = "| system | " + " | ".join(f"{LABELS.get(s, s)} nDCG@10 / p50" for s in sets) + " |"
    lines = [header, "|---" * (len(sets) + 1) + "|"]
    for system in systems:
        cells = []
        for s in sets:
            data = run["datasets"][s]
            ndcg = data.get("metrics", {}).get(system, {}).get("ndcg@10")
            p50 = data.get("latency_ms", {}).get(system, {}).get("p50_ms")
            cells.append("-" if ndcg is None else f"{ndcg:.4f} / {p50:.1f} ms" if p50 is not None else f"{ndcg:.4f}")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    notes = [f"- **{name}**: {how}" for name, how in run.get("filter_support", {}).items()]
    text = provenance(run, run.get("command", "python benchmarks/peers.py")) + "\n\n" + "\n".join(lines)
    return text + ("\n\nFilters (LoCoMo-5 is filtered per conversation):\n\n" + "\n".join(notes) if notes else "")


def embedding() -> str:
    """The default embedder against sentence-transformers (embed_speed.json), and the opt-in int8 graph's nDCG@10
    cost (int8_ndcg.json)."""
    run = load("embed_speed.json")
    lines = [
        "| embedder | query p50 / min | x ST | docs/s b32 / b128 | x ST (b128) | first embedding | peak RSS | "
        "runtime on disk | cosine to ST (min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in run["rows"].items():
        cos = row.get("cosine_to_st") or {"min": 1.0}
        lines.append(
            f"| {name} | {row['query_p50_ms']:.2f} / {row['query_min_ms']:.2f} ms | {row['query_p50_ratio']:.2f} | "
            f"{row['docs_per_s_b32']:.1f} / {row['docs_per_s_b128']:.1f} | {row['docs_per_s_ratio_b128']:.2f} | "
            f"{row['first_embedding_s']:.2f} s | {row['peak_rss_mb']:.0f} MB | {row['runtime_mb']:.0f} MB | "
            f"{cos['min']:.7f} |"
        )
    text = provenance(run, "python benchmarks/embed_speed.py") + "\n\n" + "\n".join(lines)
    pair = run.get("query_on_cores")
    if pair:
        text += (
            f"\n\nOn two threads each, a query: onnx-2q {pair['onnx_2q_p50_ms']:.2f} ms p50 against "
            f"sentence-transformers' {pair['sentence_transformers_cores_p50_ms']:.2f} ms ({pair['ratio']:.2f}x)."
        )
    searches = run.get("searches")
    if searches:
        one, two = searches["query_threads_1"], searches["query_threads_2"]
        text += (
            f"\n\nWhole searches on {searches['chunks']:,} chunks, the query embedded on one intra-op thread (the "
            f"default) or two: one client {one['one_client_p50_ms']:.2f} / {two['one_client_p50_ms']:.2f} ms p50; "
            f"two clients at once {one['two_clients_per_s']:.0f} / {two['two_clients_per_s']:.0f} searches/s."
        )
    if not (RESULTS / "int8_ndcg.json").exists():
        return text
    int8 = load("int8_ndcg.json")
    rows = ["| set | dense fp32 / int8 | RRF fp32 / int8 | default fp32 / int8 |", "|---|---|---|---|"]
    for name, data in int8["datasets"].items():
        cells = []
        for method in data["ndcg@10"].values():
            cells.append(f"{method['fp32']:.4f} / {method['int8']:.4f} ({method['int8'] - method['fp32']:+.4f})")
        rows.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + " |")
    return (
        text
        + "\n\nnDCG@10 of the opt-in int8 graph, documents and queries embedded by each graph:\n\n"
        + provenance(int8, int8.get("command", "python benchmarks/int8_ndcg.py"))
        + "\n\n"
        + "\n".join(rows)
    )


TABLES: dict[str, Callable[[], str]] = {
    "peers": peers,
    "quality": quality,
    "latency": latency,
    "beir": beir,
    "locomo": locomo,
    "scale": scale,
    "qdrant": qdrant,
    "embedding": embedding,
}


def write_all(target: Path) -> None:
    """Write every table of :data:`TABLES` to ``target/<name>.md`` (only when the text changed)."""
    target.mkdir(parents=True, exist_ok=True)
    for name, make in TABLES.items():
        path = target / f"{name}.md"
        text = make() + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "readme"
    print("\n".join(readme_rows()) if which == "readme" else TABLES[which]())
