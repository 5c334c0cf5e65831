"""Retrieval quality and latency of sparse-only, dense-only and hybrid search on a BEIR dataset.

Usage::

    python benchmarks/beir_eval.py --dataset scifact                # all 300 test queries, MiniLM
    python benchmarks/beir_eval.py --dataset scifact --limit-queries 50 --embedder hashing

What it does:

1. Reads ``<workspace>/shared/data/<dataset>``, or the BEIR folder at that path, with ``hybrid_memory.ingest``
   (chunk text = ``title + "\\n\\n" + text``; for MiniLM's tokenizer identical to the ``title + " " + text`` of the
   reference figures). Exits 0 with a message when the data is absent.
2. Document vectors come from ``benchmarks/.cache`` (keyed by dataset, embedder name and a hash of the
   chunk texts; computed once with the memory's own embedder and spot-checked against it) and are passed
   with ``memory.add(chunks, vectors=...)``, so the memory holds exactly what it would have embedded.
3. One in-memory ``HybridMemory`` with ``candidate_multiplier=1`` and ``top_k=100``: each engine returns
   its top 100 and the fused list is cut to 100 -- the "RRF over the top 100 of each list" of the
   reference figures. Four modes through the public ``search`` API:

   * sparse only: ``HybridParams(dense_weight=0, sparse_weight=1)`` (the dense engine is not run);
   * dense only:  ``HybridParams(dense_weight=1, sparse_weight=0)``;
   * hybrid:      ``HybridParams(dense_weight=1, sparse_weight=1, rrf_k_constant=60, fusion="rrf")``;
   * default:     ``HybridParams(dense_weight=1, sparse_weight=1)``, the default fusion (what a request that
     names no method gets; ``fusion_eval.py`` compares it with every method at the depth of an agent's search).

   The script checks that the single-engine modes return exactly their engine's order (rank i at
   position i).
4. Only queries in ``qrels/test.tsv`` are evaluated. nDCG@10 and recall@100 by ranx (nDCG@10
   cross-checked with pytrec_eval). Latency per ``search`` call in ms (p50/p95), the four modes
   interleaved query by query after a warm-up; every mode but sparse includes embedding the query.
5. Prints a table and writes ``benchmarks/results/beir_eval_<dataset>.json`` (a suffix such as
   ``_hashing`` or ``_limit50`` marks runs with another embedder or fewer queries).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

REFERENCE = {  # shared/data/README.md (bm25s lucene k1=1.5 b=0.75, MiniLM, RRF k=60 over top 100)
    "scifact": {"sparse": 0.686, "dense": 0.645, "hybrid": 0.713},
    "hotpotqa100": {"sparse": 0.782, "dense": 0.785, "hybrid": 0.812},
}
TOP_K = 100
WARMUP_QUERIES = 5


def mode_params() -> dict[str, dict[str, float]]:
    """The four modes as ``hybrid_params`` of a SearchRequest."""
    return {
        "sparse": {"dense_weight": 0.0, "sparse_weight": 1.0, "rrf_k_constant": 60, "fusion": "rrf"},
        "dense": {"dense_weight": 1.0, "sparse_weight": 0.0, "rrf_k_constant": 60, "fusion": "rrf"},
        # plain RRF, as in the reference figures (benchmarks/fusion_eval.py compares the default with it)
        "hybrid": {"dense_weight": 1.0, "sparse_weight": 1.0, "rrf_k_constant": 60, "fusion": "rrf"},
        "default": {"dense_weight": 1.0, "sparse_weight": 1.0, "rrf_k_constant": 60},  # the default fusion
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset", default="scifact", help="a BEIR folder under shared/data, or the path of one (default scifact)"
    )
    parser.add_argument("--limit-queries", type=int, default=None, help="evaluate only the first N test queries")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    common.ensure_core_importable()
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on its logger at import
    from hybrid_memory import HybridMemory

    data = common.BeirData(args.dataset, args.limit_queries)
    embedder = common.make_embedder(args.embedder)
    print(f"{data.name}: {len(data.chunks)} documents, {len(data.queries)} test queries, embedder {embedder.name}")

    t0 = time.perf_counter()
    vectors = common.document_vectors(data.name, embedder, data.texts)
    vectors_s = time.perf_counter() - t0

    memory = HybridMemory(None, embedder=embedder, candidate_multiplier=1)
    t0 = time.perf_counter()
    memory.add(data.chunks, vectors=vectors)
    build_s = time.perf_counter() - t0
    print(f"vectors ready in {vectors_s:.1f} s; memory built in {build_s:.1f} s ({memory.count()} chunks)")

    modes = mode_params()
    query_items = list(data.queries.items())
    for _, text in query_items[:WARMUP_QUERIES]:  # warm-up: model, bm25s, faiss, threads
        for params in modes.values():
            memory.search(text, top_k=TOP_K, hybrid_params=params)

    runs: dict[str, dict[str, dict[str, float]]] = {m: {} for m in modes}
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    order_violations = {"sparse": 0, "dense": 0}
    rank_field = {"sparse": "sparse_rank", "dense": "dense_rank"}
    for qid, text in query_items:
        for mode, params in modes.items():
            t0 = time.perf_counter()
            response = memory.search(text, query_id=qid, top_k=TOP_K, hybrid_params=params)
            seconds[mode].append(time.perf_counter() - t0)
            runs[mode][qid] = common.run_from_results(response.results)
            if mode in rank_field:
                ranks = [getattr(r, rank_field[mode]) for r in response.results]
                if ranks != list(range(1, len(ranks) + 1)):
                    order_violations[mode] += 1
    memory.close()

    reference = REFERENCE.get(data.name, {}) if args.embedder == "minilm" and not args.limit_queries else {}
    results = {}
    rows = []
    for mode in modes:
        metrics = common.evaluate(data.qrels, runs[mode])
        latency = common.latency_summary(seconds[mode])
        results[mode] = {
            **metrics,
            "ndcg@10_pytrec_eval": common.pytrec_ndcg10(data.qrels, runs[mode]),
            "latency": latency,
            "reference_ndcg@10": reference.get(mode),
        }
        rows.append(
            [
                mode,
                metrics["ndcg@10"],
                reference.get(mode, "-"),
                metrics["recall@100"],
                latency["p50_ms"],
                latency["p95_ms"],
            ]
        )
    print()
    print(common.format_table(rows, ["mode", "nDCG@10", "reference", "recall@100", "p50 ms", "p95 ms"]))
    if any(order_violations.values()):
        print(f"WARNING: single-engine modes not in engine order for {order_violations} queries")
    else:
        print("single-engine modes return their engine's order: ok")

    payload = {
        "dataset": data.name,
        "embedder": embedder.name,
        "documents": len(data.chunks),
        "queries": len(data.queries),
        "top_k": TOP_K,
        "candidate_multiplier": 1,
        "modes": mode_params(),
        "results": results,
        "single_engine_order_violations": order_violations,
        "vectors_seconds": round(vectors_s, 2),
        "build_seconds": round(build_s, 2),
        "notes": "chunk text = title + '\\n\\n' + text; latency per search() call, modes interleaved, "
        f"{WARMUP_QUERIES} warm-up queries; every mode but sparse includes query embedding",
    }
    suffix = "" if args.embedder == "minilm" else f"_{args.embedder}"
    suffix += f"_limit{args.limit_queries}" if args.limit_queries else ""
    path = common.write_results(f"beir_eval_{data.name}{suffix}", payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
