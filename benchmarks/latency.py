"""Per-query latency of sparse-only, dense-only and hybrid search at the same candidate depth.

Usage::

    python benchmarks/latency.py                          # SciFact, cached MiniLM vectors, 300 queries x 3
    python benchmarks/latency.py --data synthetic --n-docs 100000
    python benchmarks/latency.py --embedder hashing --repeats 1

Setup: one in-memory ``HybridMemory``, ``top_k=10``, ``candidate_multiplier=10``, so every engine that
runs retrieves 100 candidates in all three modes (sparse only = ``dense_weight=0``, dense only =
``sparse_weight=0``: the engine with weight 0 is not run). Each timed call is one public ``search()``;
dense and hybrid include embedding the query with the memory's embedder (MiniLM on SciFact; a
trivial random-vector embedder on synthetic data, so there only index time counts).

Method: a warm-up of 10 queries in every mode, then every query runs in all three modes back to back,
the order of the modes rotating from one query to the next, ``--repeats`` passes over the queries.
Reports p50/p95/mean in ms per mode and hybrid / slower-engine ratios; target hybrid <= 1.15 x the
slower single engine (p50 and p95). Prints a table and writes ``benchmarks/results/latency_<data>.json``
(``latency_scifact_hashing.json`` with ``--embedder hashing``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

TOP_K = 10
CANDIDATE_MULTIPLIER = 10
TARGET_RATIO = 1.15
WARMUP = 10
MODES = {
    "sparse": {"dense_weight": 0.0, "sparse_weight": 1.0, "rrf_k_constant": 60},
    "dense": {"dense_weight": 1.0, "sparse_weight": 0.0, "rrf_k_constant": 60},
    "hybrid": {"dense_weight": 1.0, "sparse_weight": 1.0, "rrf_k_constant": 60},
}


def build_scifact(embedder_kind: str, limit_queries: int | None):  # noqa: ANN201
    """SciFact memory with cached vectors; returns (memory, query texts, description)."""
    from hybrid_memory import HybridMemory

    data = common.BeirData("scifact", limit_queries)
    embedder = common.make_embedder(embedder_kind)
    vectors = common.document_vectors("scifact", embedder, data.texts)
    memory = HybridMemory(None, embedder=embedder, candidate_multiplier=CANDIDATE_MULTIPLIER)
    memory.add(data.chunks, vectors=vectors)
    return (
        memory,
        list(data.queries.values()),
        {"data": "scifact", "documents": len(data.chunks), "embedder": embedder.name},
    )


def build_synthetic(n_docs: int, n_queries: int):  # noqa: ANN201
    """Generated technical text with random vectors (seeded); queries are short error/service phrases."""
    import numpy as np
    from hybrid_memory import HybridMemory
    from incremental_add import ERRORS, FUNCTIONS, SEED, SERVICES, PrecomputedEmbedder, make_synthetic

    chunks, vectors = make_synthetic(n_docs)
    embedder = PrecomputedEmbedder()
    memory = HybridMemory(None, embedder=embedder, candidate_multiplier=CANDIDATE_MULTIPLIER)
    memory.add(chunks, vectors=vectors)
    rng = np.random.default_rng(SEED + 1)
    queries = [
        f"{ERRORS[rng.integers(len(ERRORS))]} {SERVICES[rng.integers(len(SERVICES))]} "
        f"{FUNCTIONS[rng.integers(len(FUNCTIONS))]} timeout"
        for _ in range(n_queries)
    ]
    return memory, queries, {"data": "synthetic", "documents": n_docs, "embedder": embedder.name}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", choices=("scifact", "synthetic"), default="scifact")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm", help="SciFact only")
    parser.add_argument("--limit-queries", type=int, default=None, help="SciFact: first N test queries")
    parser.add_argument("--n-docs", type=int, default=100_000, help="synthetic: documents (default 100000)")
    parser.add_argument("--n-queries", type=int, default=300, help="synthetic: queries (default 300)")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the queries (default 3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    logging.getLogger("bm25s").setLevel(logging.WARNING)

    if args.data == "scifact" and common.dataset_dir("scifact") is None:
        print(f"SciFact not found under {common.DATA_DIR}; falling back to --data synthetic")
        args.data = "synthetic"
    t0 = time.perf_counter()
    if args.data == "scifact":
        memory, queries, info = build_scifact(args.embedder, args.limit_queries)
    else:
        memory, queries, info = build_synthetic(args.n_docs, args.n_queries)
    print(
        f"{info['data']}: {info['documents']} documents, {len(queries)} queries x {args.repeats}, "
        f"embedder {info['embedder']}, built in {time.perf_counter() - t0:.1f} s; "
        f"top_k={TOP_K}, {TOP_K * CANDIDATE_MULTIPLIER} candidates per engine"
    )

    names = list(MODES)
    for text in queries[:WARMUP]:
        for mode in names:
            memory.search(text, top_k=TOP_K, hybrid_params=MODES[mode])
    seconds: dict[str, list[float]] = {m: [] for m in names}
    step = 0
    for _ in range(args.repeats):
        for text in queries:
            rotation = names[step % 3 :] + names[: step % 3]
            step += 1
            for mode in rotation:
                t = time.perf_counter()
                memory.search(text, top_k=TOP_K, hybrid_params=MODES[mode])
                seconds[mode].append(time.perf_counter() - t)
    memory.close()

    summary = {m: common.latency_summary(seconds[m]) for m in names}
    ratios = {}
    for stat in ("p50_ms", "p95_ms"):
        slower = max(summary["sparse"][stat], summary["dense"][stat])
        ratios[stat] = round(summary["hybrid"][stat] / slower, 3)
    rows = [[m, summary[m]["p50_ms"], summary[m]["p95_ms"], summary[m]["mean_ms"]] for m in names]
    rows.append(["hybrid / slower engine", ratios["p50_ms"], ratios["p95_ms"], "-"])
    print(common.format_table(rows, ["mode", "p50 ms", "p95 ms", "mean ms"]))
    met = all(r <= TARGET_RATIO for r in ratios.values())
    print(f"target hybrid <= {TARGET_RATIO} x slower engine (p50 and p95): {'met' if met else 'NOT MET'}")

    payload = {
        **info,
        "queries": len(queries),
        "repeats": args.repeats,
        "top_k": TOP_K,
        "candidate_multiplier": CANDIDATE_MULTIPLIER,
        "warmup_queries": WARMUP,
        "latency": summary,
        "hybrid_over_slower_engine": ratios,
        "target_ratio": TARGET_RATIO,
        "meets_target": met,
        "notes": "per search() call; modes interleaved with rotating order; dense and hybrid include query embedding",
    }
    suffix = "" if args.data == "synthetic" or args.embedder == "minilm" else f"_{args.embedder}"
    path = common.write_results(f"latency_{info['data']}{suffix}", payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
