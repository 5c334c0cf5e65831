"""What scope-local statistics cost and gain (issue 35, class 2): quality on LoCoMo-5, speed at 100k chunks.

Usage::

    python benchmarks/scope_stats.py                       # LoCoMo-5 with MiniLM (cached vectors) + 100k scale
    python benchmarks/scope_stats.py --embedder hashing    # no model
    python benchmarks/scope_stats.py --skip-scale          # LoCoMo-5 only
    python benchmarks/scope_stats.py --backend edge --n 20000   # the same on a Qdrant Edge shard

``--backend edge`` runs both parts on a Qdrant Edge shard in a temporary folder (BM25 ``avgdl`` set to the corpus's
mean length in tokens, as ``qdrant_eval.py`` does; the metadata keys the "before" filters read are indexed): "before"
is then the collection-wide idf and calibration, "after" the scope's (:mod:`hybrid_memory.backends.qdrant.scoped`).

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
import contextlib
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

TOP_K = 10


WAYS = {"embedded": ("before", "after"), "edge": ("before", "scoped_wide", "after")}
"""How each backend searches the scope: ``before`` the unscoped memory with a metadata filter selecting the scope's
chunks, ``after`` the scoped search; on Edge also ``scoped_wide``, the scoped search with the collection-wide
statistics (what a scoped search ran before ``backends/qdrant/scoped.py``: the ``bm25`` leg with Qdrant's IDF
modifier, the collection's calibration), the fair baseline of its cost (the same filter, indexed alike)."""


@contextlib.contextmanager
def collection_wide(memory, on: bool):
    """On a Qdrant memory, a scoped search with the collection-wide statistics while ``on`` (the plain BM25 vector
    hidden: the backend then runs the scope as any filter)."""
    collection = getattr(getattr(memory, "backend", None), "collection", None)
    if not on or collection is None:
        yield
        return
    collection.tf = False
    try:
        yield
    finally:
        collection.tf = True


def open_memory(backend: str, embedder, folder: str | None, texts=None, keys=None, **options):
    """An embedded memory, or one over a new Qdrant Edge shard in ``folder`` (a temporary folder: never a dataset's;
    refused when it exists) with ``avgdl`` the texts' mean length."""
    from hybrid_memory import HybridMemory

    if backend == "embedded":
        return HybridMemory(None, embedder=embedder, **options)
    from hybrid_memory.tokenizer import TechnicalTokenizer

    if folder is None or Path(folder).exists():
        raise SystemExit(f"the Edge shard's folder must be a new temporary one, got {folder}")
    tokenizer = TechnicalTokenizer()
    avgdl = sum(len(tokenizer.tokenize(t)) for t in texts) / max(len(texts), 1) if texts else 256.0
    return HybridMemory.qdrant(
        edge_path=Path(folder) / "shard", embedder=embedder, avgdl=avgdl, indexed_keys=keys or {}, **options
    )


def locomo(embedder_kind: str, backend: str = "embedded", shard_folder: str | None = None) -> dict:
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
    memory = open_memory(
        backend, embedder, shard_folder, [c.text for c in chunks], {"conversation": "keyword"}, candidate_multiplier=2
    )
    memory.add(chunks, vectors=doc_vectors)
    memory.flush()
    systems = {
        "sparse": {"hybrid_params": {"dense_weight": 0.0, "sparse_weight": 1.0}},
        "dense": {"hybrid_params": {"dense_weight": 1.0, "sparse_weight": 0.0}},
        "default": {},
    }
    table: dict[str, dict] = {}
    for name, extra in systems.items():
        for way in WAYS[backend]:
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
                    with collection_wide(memory, way == "scoped_wide"):
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
    print(
        f"\nLoCoMo-5 on {backend}, each conversation a scope ({len(queries)} questions, top {TOP_K}, depth 20, "
        f"{embedder.name})"
    )
    extra_rows = [] if backend == "embedded" else ["p50 ms scoped, collection-wide"]
    if extra_rows:
        rows = [[*row, table[row[0]]["scoped_wide"]["p50_ms"]] for row in rows]
    print(
        common.format_table(
            rows,
            [
                "system",
                "nDCG@10 memory-wide",
                "nDCG@10 scope-local",
                "delta",
                "p50 ms before",
                "p50 ms after",
                *extra_rows,
            ],
        )
    )
    return {"queries": len(queries), "embedder": embedder.name, "backend": backend, "results": table}


def scale(n: int, n_queries: int, backend: str = "embedded", folder: str | None = None) -> dict:
    import numpy as np
    from hybrid_memory import HashingEmbedder
    from scale import BATCH, Corpus

    corpus = Corpus()
    memory = open_memory(backend, HashingEmbedder(384), folder, None, {"tenant": "keyword"})
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
        for way in WAYS[backend]:
            took = []
            for _ in range(2):  # the first pass warms the caches; the second is timed
                took = []
                for text, vector in zip(texts, vectors, strict=True):
                    t0 = time.perf_counter()
                    if way == "before":
                        memory.search(text, top_k=10, metadata_filter={"tenant": "t7"}, query_vector=vector, **extra)
                    else:
                        with collection_wide(memory, way == "scoped_wide"):
                            memory.search(text, top_k=10, scope={"tenant": "t7"}, query_vector=vector, **extra)
                    took.append(time.perf_counter() - t0)
            out.setdefault(name, {})[way] = common.latency_summary(took)
    if backend == "edge":  # the first scoped search of a scope not kept: one scroll of its points (cold)
        cold = []
        for text, vector in list(zip(texts, vectors, strict=True))[:20]:
            memory.backend.scopes.clear()
            t0 = time.perf_counter()
            memory.search(text, top_k=10, scope={"tenant": "t7"}, query_vector=vector)
            cold.append(time.perf_counter() - t0)
        out["hybrid"]["first_search_of_a_scope"] = common.latency_summary(cold)
        print(
            f"first scoped search of the scope (statistics built by a scroll): p50 "
            f"{out['hybrid']['first_search_of_a_scope']['p50_ms']} ms"
        )
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
    if backend == "edge":
        rows = [
            [
                name,
                t["scoped_wide"]["p50_ms"],
                t["after"]["p50_ms"],
                t["after"]["p50_ms"] / t["scoped_wide"]["p50_ms"],
                t["scoped_wide"]["p95_ms"],
                t["after"]["p95_ms"],
                t["before"]["p50_ms"],
            ]
            for name, t in out.items()
        ]
    print(
        f"\n{backend}: {n:,} chunks, tenant t7 = {tenant_size:,} chunks ({tenant_size / n:.1%}), {n_queries} "
        "queries, "
        f"top 10 (built in {build_s:.0f} s)"
    )
    print(
        common.format_table(
            rows,
            ["search", "p50 ms memory-wide", "p50 ms scope-local", "ratio", "p95 before", "p95 after"]
            + (["p50 ms metadata filter"] if backend == "edge" else []),
        )
    )
    del np
    return {"chunks": n, "tenant_chunks": tenant_size, "queries": n_queries, "backend": backend, "results": out}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-locomo", action="store_true")
    parser.add_argument("--backend", default="embedded", choices=("embedded", "edge"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    payload: dict = {"machine": common.machine_info()}
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_locomo:
            payload["locomo5"] = locomo(args.embedder, args.backend, str(Path(folder) / "locomo"))
        if not args.skip_scale:
            payload["scale"] = scale(args.n, args.queries, args.backend, str(Path(folder) / "scale"))
    name = "scope_stats" + ("" if args.backend == "embedded" else f"_{args.backend}")
    path = common.write_results(name + ("" if args.embedder == "minilm" else f"_{args.embedder}"), payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
