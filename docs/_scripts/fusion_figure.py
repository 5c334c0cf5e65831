"""Draw the concepts page's figure: for two queries over the bundled incident memory, BM25's list, the dense list
and the default fusion's list, from a real run of the library (nothing typed by hand).

    python docs/_scripts/fusion_figure.py          # writes docs/_static/figures/fusion_one_query.png

The memory is ``examples/incident_memory/notes.jsonl`` (38 notes) with the default embedder. Each engine's list is
the same search with the other engine's weight at 0; the fused list is the default search. The chunk each query is
about is drawn in colour wherever it appears.
"""

from __future__ import annotations

import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "core"), str(ROOT)]

from hybrid_memory import HybridMemory  # noqa: E402
from hybrid_memory.ingest import read_beir_corpus  # noqa: E402

OUT = ROOT / "docs" / "_static" / "figures" / "fusion_one_query.png"
QUERIES = [
    # (query, the chunk it is about, why one engine fails)
    ("SQLSTATE 53300", "inc-0507-payments-pg-pool-staging", "an error code: the embedding blurs it"),
    (
        "money never came back to the customer",
        "rb-billing-refund-retry",
        "a paraphrase: the note says \u2018refund\u2019",
    ),
]
TOP = 5


def lists(memory: HybridMemory, query: str) -> tuple[list[str], list[str], list[str], dict[str, float]]:
    """BM25's, the dense engine's and the default fusion's top ``TOP`` chunk ids, and the fused weights."""
    sparse = memory.search(query, top_k=TOP, hybrid_params={"dense_weight": 0, "sparse_weight": 1})
    dense = memory.search(query, top_k=TOP, hybrid_params={"dense_weight": 1, "sparse_weight": 0})
    fused = memory.search(query, top_k=TOP)
    ids = [[hit.chunk_id for hit in r.results] for r in (sparse, dense, fused)]
    return ids[0], ids[1], ids[2], fused.effective_weights


def draw(ax, query: str, target: str, why: str, columns: list[list[str]], weights: dict[str, float]) -> None:
    xs = [0.0, 1.0, 2.0]
    titles = [
        "BM25",
        f"default fusion\n(this query: BM25 {weights['sparse']:.2f}, dense {weights['dense']:.2f})",
        "dense (all-MiniLM-L6-v2)",
    ]
    for x, title, ids in zip(xs, titles, columns, strict=True):
        ax.text(x, 0.35, title, ha="center", va="bottom", fontsize=9, weight="bold")
        if not ids:
            ax.text(x, 1, "(no chunk holds a query word)", ha="center", fontsize=8, color="grey")
        for rank, chunk_id in enumerate(ids, start=1):
            hit = chunk_id == target
            ax.text(
                x,
                rank,
                f"{rank}. {chunk_id}",
                ha="center",
                va="center",
                fontsize=7.5,
                color="white" if hit else "black",
                bbox={
                    "boxstyle": "round,pad=0.3",
                    "fc": "#c0392b" if hit else "#eef2f7",
                    "ec": "#c0392b" if hit else "#9aa5b1",
                },
            )
    fused = columns[1]
    for side, (x_from, x_to) in ((columns[0], (0.42, 0.58)), (columns[2], (1.58, 1.42))):
        for rank_a, chunk_id in enumerate(side, start=1):
            if chunk_id in fused:
                rank_b = fused.index(chunk_id) + 1
                ax.annotate(
                    "",
                    xy=(x_to, rank_b),
                    xytext=(x_from, rank_a),
                    arrowprops={
                        "arrowstyle": "-",
                        "color": "#c0392b" if chunk_id == target else "#b8c2cc",
                        "lw": 1.6 if chunk_id == target else 0.8,
                    },
                )
    ax.set_title(f"query: \u201c{query}\u201d ({why})", fontsize=10, loc="left")
    ax.set_xlim(-0.45, 2.45)
    ax.set_ylim(TOP + 0.6, -0.6)
    ax.axis("off")


def main() -> None:
    memory = HybridMemory()
    memory.upsert(list(read_beir_corpus(ROOT / "examples" / "incident_memory" / "notes.jsonl")))
    fig, axes = plt.subplots(len(QUERIES), 1, figsize=(11, 3.1 * len(QUERIES)))
    for ax, (query, target, why) in zip(axes, QUERIES, strict=True):
        sparse, dense, fused, weights = lists(memory, query)
        draw(ax, query, target, why, [sparse, fused, dense], weights)
    memory.close()
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    fig.text(
        0.01,
        0.005,
        f"{stamp}, {platform.machine()} {platform.system()}, Python {platform.python_version()}: "
        "python docs/_scripts/fusion_figure.py (examples/incident_memory, 38 notes, top 5)",
        fontsize=7,
        color="grey",
    )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=130)
    print(OUT)


if __name__ == "__main__":
    main()
