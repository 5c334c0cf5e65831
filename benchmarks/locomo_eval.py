"""LoCoMo-5: retrieval over long conversations, per question category, for the engines, fusion and the recency prior.

Usage::

    HYBRID_MEMORY_BENCH_CACHE=/work/bench-cache python benchmarks/locomo_eval.py
    python benchmarks/locomo_eval.py --embedder hashing            # no model, for a smoke run

Data: ``<workspace>/shared/data/locomo5`` (five LoCoMo conversations, snap-research/locomo, BEIR layout; no licence
file upstream: read for evaluation only, never copied into the project). Exits 0 with a message when absent.

What it does:

1. One chunk per dialogue turn (metadata ``conversation``, ``session``, ``date``). The turn's date ("1:56 pm on 8 May,
   2023", read as UTC) becomes the chunk's ``valid_from`` (event time).
2. Document (and query) vectors come from the cache (``HYBRID_MEMORY_BENCH_CACHE``), checked against the memory's
   embedder, and are passed to ``add(vectors=...)`` / ``search(query_vector=...)``.
3. Each question is searched with its ``metadata_filter`` (its conversation) and ``as_of`` = the conversation's last
   turn (the questions are asked after the conversation), ``top_k`` 10, each engine returning 20 candidates
   (``candidate_multiplier`` 2: the "depth 20, top 10" of the reference figures). Systems:

   * ``sparse``: BM25 alone (``dense_weight`` 0); ``dense``: MiniLM alone (``sparse_weight`` 0);
   * ``rrf``: equal-weight RRF, k = 60 (``hybrid_params.fusion = "rrf"`` when the library has several methods);
   * ``default``: the library's default request (no ``hybrid_params``): whatever fusion the library ships;
   * ``default+recency``: the default with the :class:`~hybrid_memory.RecencyPrior` on (weight 0.05, half-life
     30 days), the cost of preferring recent facts on questions about old events.

4. nDCG@10 and recall@10 (ranx) per category (multi-hop, temporal, open-domain, single-hop) and over all questions.
   Prints the tables, whether the default is at or above the better single engine in each category (the issue's
   target), and writes ``benchmarks/results/locomo_eval.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

DATASET = "locomo5"
CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")
TOP_K = 10
REFERENCE_NDCG = {"sparse": 0.443, "dense": 0.338, "rrf": 0.430}  # shared/data/README.md


def turn_time(date: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` -> Unix seconds (UTC; LoCoMo gives no time zone)."""
    moment = datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y")
    return moment.replace(tzinfo=UTC).timestamp()


def read_queries(folder: Path, qrels: dict) -> list[dict]:
    """The evaluated questions (those in qrels), with their category (``set``) and metadata filter."""
    out = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                if q["_id"] in qrels:
                    out.append(q)
    return out


def systems(has_fusion_methods: bool) -> dict[str, dict]:
    """System name -> extra ``search`` arguments."""
    rrf = {"dense_weight": 1.0, "sparse_weight": 1.0, "rrf_k_constant": 60}
    if has_fusion_methods:
        rrf["fusion"] = "rrf"
    return {
        "sparse": {"hybrid_params": {"dense_weight": 0.0, "sparse_weight": 1.0}},
        "dense": {"hybrid_params": {"dense_weight": 1.0, "sparse_weight": 0.0}},
        "rrf": {"hybrid_params": rrf},
        "default": {},
        "default+recency": {"recency": True},
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--limit-queries", type=int, default=None, help="evaluate only the first N questions")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs index builds at DEBUG

    common.ensure_core_importable()
    from hybrid_memory import HybridMemory, HybridParams, RecencyPrior
    from hybrid_memory.ingest import read_beir_corpus, read_qrels

    folder = common.require_dataset(DATASET)
    chunks = list(read_beir_corpus(folder / "corpus.jsonl", source=DATASET))
    chunks = [c.model_copy(update={"valid_from": turn_time(c.metadata["date"])}) for c in chunks]
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    queries = read_queries(folder, qrels)[: args.limit_queries]
    qrels = {q["_id"]: qrels[q["_id"]] for q in queries}
    last_turn: dict[str, float] = {}
    for c in chunks:
        conv = c.metadata["conversation"]
        last_turn[conv] = max(last_turn.get(conv, c.valid_from), c.valid_from)

    embedder = common.make_embedder(args.embedder)
    doc_vectors = common.document_vectors(DATASET, embedder, [c.text for c in chunks])
    query_texts = [q["text"] for q in queries]
    query_vectors = common.load_or_embed(
        f"{DATASET}-queries", embedder.name, embedder.dim, query_texts, embedder.embed_documents
    )

    prior = RecencyPrior()
    memory = HybridMemory(None, embedder=embedder, candidate_multiplier=2, recency_prior=prior)
    memory.add(chunks, vectors=doc_vectors)
    memory.flush()
    has_methods = "fusion" in HybridParams.model_fields
    runs: dict[str, dict[str, dict[str, float]]] = {}
    method_ran: dict[str, str] = {}
    for name, extra in systems(has_methods).items():
        extra = dict(extra)
        recency = extra.pop("recency", False)
        run = {}
        for q, vector in zip(queries, query_vectors, strict=True):
            conv = q["metadata_filter"]["conversation"]
            response = memory.search(
                {
                    "query_id": q["_id"],
                    "search_text": q["text"],
                    "top_k": TOP_K,
                    "metadata_filter": q["metadata_filter"],
                    "as_of": last_turn[conv],
                    **extra,
                },
                query_vector=vector,
                recency=recency,
            )
            run[q["_id"]] = common.run_from_results(response.results)
            method_ran[name] = getattr(response, "fusion", None) or "rrf"  # responses name it once fusion has methods
        runs[name] = run

    by_category = {cat: [q["_id"] for q in queries if q["set"] == cat] for cat in CATEGORIES}
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, run in runs.items():
        table[name] = {}
        for cat, ids in [*by_category.items(), ("all", [q["_id"] for q in queries])]:
            if not ids:
                continue
            scores = common.evaluate(
                {i: qrels[i] for i in ids}, {i: run.get(i, {}) for i in ids}, ("ndcg@10", "recall@10")
            )
            table[name][cat] = scores
    columns = [c for c in (*CATEGORIES, "all") if c in table["sparse"]]
    counts = {c: len(by_category.get(c, queries)) for c in columns}
    headers = ["system", *[f"{c} ({counts[c]})" for c in columns]]
    for metric in ("ndcg@10", "recall@10"):
        print(f"\nLoCoMo-5, {metric} ({len(queries)} questions, top {TOP_K}, depth {TOP_K * 2}, {embedder.name})")
        rows = [[name, *[table[name][c][metric] for c in columns]] for name in runs]
        print(common.format_table(rows, headers))
    verdict = {}
    for c in columns:
        best_single = max(table["sparse"][c]["ndcg@10"], table["dense"][c]["ndcg@10"])
        verdict[c] = {
            "default": table["default"][c]["ndcg@10"],
            "better_single_engine": best_single,
            "met": table["default"][c]["ndcg@10"] >= best_single,
        }
    print("\ntarget: default nDCG@10 >= the better single engine, per category")
    for c, v in verdict.items():
        print(
            f"  {c:12s} default {v['default']:.4f} vs {v['better_single_engine']:.4f}: "
            f"{'met' if v['met'] else 'MISSED'}"
        )
    print(f"fusion methods that ran: {method_ran}; reference nDCG@10 (shared/data/README.md): {REFERENCE_NDCG}")
    payload = {
        "dataset": DATASET,
        "queries": len(queries),
        "top_k": TOP_K,
        "depth": TOP_K * 2,
        "embedder": embedder.name,
        "recency_prior": {"weight": prior.weight, "half_life_days": prior.half_life_days},
        "as_of": "the conversation's last turn",
        "methods": method_ran,
        "results": table,
        "target": verdict,
        "reference_ndcg@10": REFERENCE_NDCG,
    }
    suffix = (
        ""
        if args.embedder == "minilm" and not args.limit_queries
        else (f"_{args.embedder}" + (f"_limit{args.limit_queries}" if args.limit_queries else ""))
    )
    path = common.write_results(f"locomo_eval{suffix}", payload)
    print(f"wrote {path}")
    memory.close()
    return payload


if __name__ == "__main__":
    main()
