"""What scope-local statistics cost and gain (issue 35, class 2): quality on LoCoMo-5, speed at 100k chunks.

Usage::

    python benchmarks/scope_stats.py                       # LoCoMo-5 with MiniLM (cached vectors) + 100k scale
    python benchmarks/scope_stats.py --embedder hashing    # no model
    python benchmarks/scope_stats.py --skip-scale          # LoCoMo-5 only

Both figures come from one memory per part and one run, comparing the same allowed set searched two ways:

* **before**, memory-wide statistics: the unscoped memory searched with a metadata filter selecting the scope's
  chunks (what a scoped search scored with before the fix: the same rows, BM25 N / df / avgdl, the BM25 surprise
  and the dense chance moments over the whole memory);
* **after**, scope-local statistics: ``memory.search(scope=...)`` (what every scoped view, scoped MCP server and
  scoped adapter runs; :mod:`hybrid_memory.engines.bm25.local`).

LoCoMo-5: each of the five conversations is a scope (``user_id`` = the conversation, the same value also kept as
metadata for the "before" filter); each question is searched in its conversation with ``as_of`` its last turn,
top_k 10, depth 20 (as ``locomo_eval.py``); nDCG@10 per system (BM25 alone, dense alone, the default fusion) and the
p50 of the default's search. Scale: 100k synthetic chunks of ``scale.py`` (its vectors, a HashingEmbedder never
asked: queries pass their vectors), tenant ``t7`` (1 %) made a scope; p50 / p95 of the default hybrid search over
200 queries, and of BM25 alone. Writes ``benchmarks/results/scope_stats.json``.
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


def locomo(embedder_kind: str) -> dict:
    from hybrid_memory import HybridMemory
    from hybrid_memory.ingest import read_beir_corpus, read_qrels
    from locomo_eval import read_queries, turn_time

    folder = common.require_dataset("locomo5")
    chunks = list(read_beir_corpus(folder / "corpus.jsonl", source="locomo5"))
    chunks = [
        c.model_copy(
            update={"valid_from": turn_time(c.metadata["date"]), "user_id": "conv-" + c.metadata["conversation"]}
        )
        for c in chunks
    ]
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    queries = read_queries(folder, qrels)
    qrels = {q["_id"]: qrels[q["_id"]] for q in queries}
    last_turn: dict[str, float] = {}
    for c in chunks:
        conv = c.metadata["conversation"]
        last_turn[conv] = max(last_turn.get(conv, c.valid_from), c.valid_from)
    embedder = common.make_embedder(embedder_kind)
    doc_vectors = common.document_vectors("locomo5", embedder, [c.text for c in chunks])
    query_vectors = common.load_or_embed(
        "locomo5-queries", embedder.name, embedder.dim, [q["text"] for q in queries], embedder.embed_documents
    )
    memory = HybridMemory(None, embedder=embedder, candidate_multiplier=2)
    memory.add(chunks, vectors=doc_vectors)
    memory.flush()
    systems = {
        "sparse": {"hybrid_params": {"dense_weight": 0.0, "sparse_weight": 1.0}},
        "dense": {"hybrid_params": {"dense_weight": 1.0, "sparse_weight": 0.0}},
        "default": {},
    }
    table: dict[str, dict] = {}
    for name, extra in systems.items():
        for way in ("before", "after"):
            run, took = {}, []
            for q, vector in zip(queries, query_vectors, strict=True):
                conv = q["metadata_filter"]["conversation"]
                request = {
                    "query_id": q["_id"],
                    "search_text": q["text"],
                    "top_k": TOP_K,
                    "as_of": last_turn[conv],
                    **extra,
                }
                start = time.perf_counter()
                if way == "before":
                    response = memory.search(
                        {**request, "metadata_filter": {"conversation": conv}}, query_vector=vector
                    )
                else:
                    response = memory.search(request, query_vector=vector, scope={"user_id": "conv-" + conv})
                took.append(time.perf_counter() - start)
                run[q["_id"]] = common.run_from_results(response.results)
            scores = common.evaluate(qrels, run, ("ndcg@10", "recall@10"))
            table.setdefault(name, {})[way] = {**scores, "p50_ms": common.percentile_ms(took, 50)}
    memory.close()
    rows = [
        [
            name,
            t["before"]["ndcg@10"],
            t["after"]["ndcg@10"],
            t["after"]["ndcg@10"] - t["before"]["ndcg@10"],
            t["before"]["p50_ms"],
            t["after"]["p50_ms"],
        ]
        for name, t in table.items()
    ]
    print(f"\nLoCoMo-5, each conversation a scope ({len(queries)} questions, top {TOP_K}, depth 20, {embedder.name})")
    print(
        common.format_table(
            rows, ["system", "nDCG@10 memory-wide", "nDCG@10 scope-local", "delta", "p50 ms before", "p50 ms after"]
        )
    )
    return {"queries": len(queries), "embedder": embedder.name, "results": table}


def scale(n: int, n_queries: int) -> dict:
    import numpy as np
    from hybrid_memory import HashingEmbedder, HybridMemory
    from scale import BATCH, Corpus

    corpus = Corpus()
    memory = HybridMemory(None, embedder=HashingEmbedder(384))
    start = time.perf_counter()
    with memory.bulk():
        for b in range((n + BATCH - 1) // BATCH):
            chunks, vectors, _ = corpus.batch(b, min(BATCH, n - b * BATCH))
            for c in chunks:
                c["tenant"] = c["metadata"]["tenant"]  # the metadata tenant made a scope too
            memory.add(chunks, vectors=vectors)
    memory.flush()
    build_s = time.perf_counter() - start
    texts, vectors = corpus.queries(n_queries)
    out: dict[str, dict] = {}
    for name, extra in (("hybrid", {}), ("bm25", {"hybrid_params": {"dense_weight": 0.0, "sparse_weight": 1.0}})):
        for way in ("before", "after"):
            took = []
            for _ in range(2):  # the first pass warms the caches; the second is timed
                took = []
                for text, vector in zip(texts, vectors, strict=True):
                    t0 = time.perf_counter()
                    if way == "before":
                        memory.search(text, top_k=10, metadata_filter={"tenant": "t7"}, query_vector=vector, **extra)
                    else:
                        memory.search(text, top_k=10, scope={"tenant": "t7"}, query_vector=vector, **extra)
                    took.append(time.perf_counter() - t0)
            out.setdefault(name, {})[way] = common.latency_summary(took)
    tenant_size = memory.count(scope={"tenant": "t7"})
    memory.close()
    rows = [
        [
            name,
            t["before"]["p50_ms"],
            t["after"]["p50_ms"],
            t["after"]["p50_ms"] / t["before"]["p50_ms"],
            t["before"]["p95_ms"],
            t["after"]["p95_ms"],
        ]
        for name, t in out.items()
    ]
    print(
        f"\n{n:,} chunks, tenant t7 = {tenant_size:,} chunks ({tenant_size / n:.1%}), {n_queries} queries, "
        f"top 10 (built in {build_s:.0f} s)"
    )
    print(
        common.format_table(
            rows, ["search", "p50 ms memory-wide", "p50 ms scope-local", "ratio", "p95 before", "p95 after"]
        )
    )
    del np
    return {"chunks": n, "tenant_chunks": tenant_size, "queries": n_queries, "results": out}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-locomo", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    payload: dict = {"machine": common.machine_info()}
    if not args.skip_locomo:
        payload["locomo5"] = locomo(args.embedder)
    if not args.skip_scale:
        payload["scale"] = scale(args.n, args.queries)
    path = common.write_results("scope_stats" + ("" if args.embedder == "minilm" else f"_{args.embedder}"), payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
