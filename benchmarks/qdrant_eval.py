"""SciFact on the embedded backend and on Qdrant Edge, with the same cached vectors: nDCG@10 and p50 latency for
sparse, dense and hybrid search, and the top-10 overlap between the two backends.

Usage::

    HYBRID_MEMORY_BENCH_CACHE=/work/bench-cache python benchmarks/qdrant_eval.py
    python benchmarks/qdrant_eval.py --limit-queries 50 --repeats 1     # quick

Setup: the SciFact corpus (5,183 documents) in an in-memory ``HybridMemory`` and in two ``HybridMemory.qdrant``
over Qdrant Edge shards in a temporary directory: one as configured by default, one with its payload cache off
(``payload_cache=0``: every response reads its rows from the shard, as a first read does; each query runs in
every mode and pass, so the default shard serves most rows from the cache: the share is printed). All are fed
the cached all-MiniLM-L6-v2 document vectors (no re-embedding), ``top_k=10``, ``candidate_multiplier=2`` (the
default). Queries pass their cached vectors (``query_vector=``), so latency is the search itself, not the
model. BM25 parameters are set to match:
k1 = 1.5, b = 0.75, and the Qdrant backend's ``avgdl`` = the corpus's mean length in the library's tokens,
which is what the embedded index's merged segment uses; Qdrant's IDF is Lucene's (see
``hybrid_memory.backends.qdrant.backend``), so any remaining sparse difference is float32 rounding and
Qdrant counting in N only points that hold at least one token.

Modes: sparse (``dense_weight=0``), dense (``sparse_weight=0``), hybrid (the default fusion, ``adaptive``) and
hybrid-rrf (``fusion="rrf"``). Method: 5 warm-up queries, then each query in every mode on both backends,
the order rotating from query to query, ``--repeats`` passes. nDCG@10 with ranx over the qrels queries.
Top-10 overlap: mean over queries of |top10_embedded ∩ top10_qdrant| / 10; "same order" the share of queries
with identical ranked lists.

Targets (issue 9): hybrid nDCG@10 within 0.01 of the embedded backend; p50 on Edge at most the embedded
backend's (reported per mode; ``meets_p50_target`` is the hybrid mode's). The 1-minute load average before and
after the timed passes is printed and saved: the machine is shared, and the ratio is the figure to compare.
Prints a table and writes ``benchmarks/results/qdrant_eval_scifact.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

TOP_K = 10
WARMUP = 5
NDCG_TOLERANCE = 0.01
MODES = {
    "sparse": {"dense_weight": 0.0, "sparse_weight": 1.0},
    "dense": {"dense_weight": 1.0, "sparse_weight": 0.0},
    "hybrid": {"dense_weight": 1.0, "sparse_weight": 1.0},
    "hybrid-rrf": {"dense_weight": 1.0, "sparse_weight": 1.0, "fusion": "rrf"},
}
BACKENDS = ("embedded", "qdrant-edge", "qdrant-edge-nocache")
"""The embedded backend; Qdrant Edge as configured by default (with its payload cache); and Qdrant Edge with the
payload cache off (``payload_cache=0``), so every response reads its rows from the shard, as on a first read."""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit-queries", type=int, default=None, help="first N test queries (default all 300)")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes over the queries (default 2)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    if common.dataset_dir("scifact") is None:
        print(f"SciFact not found under {common.DATA_DIR}; nothing to measure (see /work/shared/data/README.md)")
        return {}
    from hybrid_memory import HybridMemory
    from hybrid_memory.tokenizer import TechnicalTokenizer

    data = common.BeirData("scifact", args.limit_queries)
    embedder = common.make_embedder("minilm")
    vectors = common.document_vectors("scifact", embedder, data.texts)
    qids = list(data.queries)
    qtexts = [data.queries[q] for q in qids]
    qvectors = common.load_or_embed(
        "scifact-queries", embedder.name, embedder.dim, qtexts, lambda t: np.stack([embedder.embed_query(x) for x in t])
    )
    tokenizer = TechnicalTokenizer()
    avgdl = statistics.fmean(len(tokenizer.tokenize(t)) for t in data.texts)

    t0 = time.perf_counter()
    embedded = HybridMemory(None, embedder=embedder)
    embedded.add(data.chunks, vectors=vectors)
    embedded.flush()
    t_embedded = time.perf_counter() - t0
    tmp = tempfile.TemporaryDirectory(prefix="qdrant-eval-")
    t0 = time.perf_counter()
    qdrant = HybridMemory.qdrant(edge_path=Path(tmp.name) / "shard", embedder=embedder, avgdl=avgdl, k1=1.5, b=0.75)
    qdrant.add(data.chunks, vectors=vectors)
    t_qdrant = time.perf_counter() - t0
    uncached = HybridMemory.qdrant(
        edge_path=Path(tmp.name) / "shard-nocache", embedder=embedder, avgdl=avgdl, k1=1.5, b=0.75, payload_cache=0
    )
    uncached.add(data.chunks, vectors=vectors)
    memories = {"embedded": embedded, "qdrant-edge": qdrant, "qdrant-edge-nocache": uncached}
    print(
        f"scifact: {len(data.chunks)} documents, {len(qids)} queries x {args.repeats}; loaded embedded in "
        f"{t_embedded:.1f} s, Qdrant Edge in {t_qdrant:.1f} s; avgdl {avgdl:.2f} tokens; top_k={TOP_K}"
    )

    def search(backend: str, mode: str, i: int):  # noqa: ANN202
        return memories[backend].search(qtexts[i], top_k=TOP_K, query_vector=qvectors[i], **MODES[mode])

    for i in range(min(WARMUP, len(qids))):
        for backend in BACKENDS:
            for mode in MODES:
                search(backend, mode, i)
    seconds = {(b, m): [] for b in BACKENDS for m in MODES}
    runs = {(b, m): {} for b in BACKENDS for m in MODES}
    combos = [(b, m) for m in MODES for b in BACKENDS]
    step = 0
    cache = qdrant.backend.collection
    hits_before, misses_before = cache.cache_hits, cache.cache_misses
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for i, qid in enumerate(qids):
            rotation = combos[step % len(combos) :] + combos[: step % len(combos)]
            step += 1
            for backend, mode in rotation:
                t = time.perf_counter()
                response = search(backend, mode, i)
                seconds[(backend, mode)].append(time.perf_counter() - t)
                runs[(backend, mode)][qid] = response.results
    load_after = os.getloadavg()
    cache_hits, cache_misses = cache.cache_hits - hits_before, cache.cache_misses - misses_before
    cache_share = cache_hits / max(1, cache_hits + cache_misses)
    embedded.close()
    qdrant.close()
    uncached.close()
    tmp.cleanup()

    rows, table = [], {}
    for mode in MODES:
        entry = {}
        for backend in BACKENDS:
            run = {q: common.run_from_results(r) for q, r in runs[(backend, mode)].items()}
            entry[backend] = {
                "ndcg@10": common.evaluate(data.qrels, run, ("ndcg@10",))["ndcg@10"],
                **common.latency_summary(seconds[(backend, mode)]),
            }
        overlap, same = [], 0
        for qid in qids:
            a = [r.chunk_id for r in runs[("embedded", mode)][qid]]
            b = [r.chunk_id for r in runs[("qdrant-edge", mode)][qid]]
            overlap.append(len(set(a) & set(b)) / TOP_K)
            same += a == b
            # the uncached shard returns the same rows (same ids, order, texts and metadata)
            assert [(r.chunk_id, r.text, r.metadata) for r in runs[("qdrant-edge-nocache", mode)][qid]] == [
                (r.chunk_id, r.text, r.metadata) for r in runs[("qdrant-edge", mode)][qid]
            ], (mode, qid)
        entry["top10_overlap"] = round(statistics.fmean(overlap), 4)
        entry["same_order_share"] = round(same / len(qids), 4)
        entry["ndcg_delta"] = round(entry["qdrant-edge"]["ndcg@10"] - entry["embedded"]["ndcg@10"], 4)
        entry["p50_ratio"] = round(entry["qdrant-edge"]["p50_ms"] / entry["embedded"]["p50_ms"], 3)
        entry["p50_ratio_nocache"] = round(entry["qdrant-edge-nocache"]["p50_ms"] / entry["embedded"]["p50_ms"], 3)
        table[mode] = entry
        rows.append(
            [
                mode,
                entry["embedded"]["ndcg@10"],
                entry["qdrant-edge"]["ndcg@10"],
                entry["ndcg_delta"],
                entry["embedded"]["p50_ms"],
                entry["qdrant-edge"]["p50_ms"],
                entry["p50_ratio"],
                entry["qdrant-edge-nocache"]["p50_ms"],
                entry["p50_ratio_nocache"],
                entry["top10_overlap"],
                entry["same_order_share"],
            ]
        )
    print(
        common.format_table(
            rows,
            [
                "mode",
                "nDCG@10 embedded",
                "nDCG@10 Edge",
                "delta",
                "p50 ms embedded",
                "p50 ms Edge",
                "Edge / embedded",
                "p50 ms Edge no cache",
                "no cache / embedded",
                "top-10 overlap",
                "same order",
            ],
        )
    )
    print(
        f"Edge payload cache: {cache_hits} of {cache_hits + cache_misses} result rows read in the timed passes came "
        f"from it ({cache_share:.1%}; each query runs {len(MODES)} modes x {args.repeats} passes)"
    )
    ndcg_met = abs(table["hybrid"]["ndcg_delta"]) <= NDCG_TOLERANCE
    p50_met = table["hybrid"]["p50_ratio"] <= 1.0
    p50_modes = {mode: table[mode]["p50_ratio"] <= 1.0 for mode in MODES}
    print(
        f"target hybrid nDCG@10 within {NDCG_TOLERANCE} of embedded: {'met' if ndcg_met else 'NOT MET'}; "
        f"target p50 on Edge <= embedded: "
        + ", ".join(f"{mode} {'met' if ok else 'NOT MET'}" for mode, ok in p50_modes.items())
    )
    print(
        f"load average (1 min) {load_before[0]:.2f} before the timed passes, {load_after[0]:.2f} after "
        f"({os.cpu_count()} cores, shared)"
    )
    payload = {
        "data": "scifact",
        "documents": len(data.chunks),
        "queries": len(qids),
        "repeats": args.repeats,
        "top_k": TOP_K,
        "candidate_multiplier": 2,
        "embedder": embedder.name,
        "bm25": {"k1": 1.5, "b": 0.75, "qdrant_avgdl": round(avgdl, 4)},
        "load_seconds": {"embedded": round(t_embedded, 2), "qdrant-edge": round(t_qdrant, 2)},
        "modes": table,
        "meets_ndcg_target": ndcg_met,
        "meets_p50_target": p50_met,
        "meets_p50_target_per_mode": p50_modes,
        "meets_p50_target_per_mode_nocache": {mode: table[mode]["p50_ratio_nocache"] <= 1.0 for mode in MODES},
        "payload_cache": {"hits": cache_hits, "misses": cache_misses, "hit_share": round(cache_share, 4)},
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
        "notes": "same cached MiniLM vectors in all; queries with cached vectors (no model at query "
        "time); modes and backends interleaved with rotating order; Qdrant Edge in process, "
        "one shard each; qdrant-edge-nocache: payload_cache=0",
    }
    path = common.write_results("qdrant_eval_scifact", payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
