"""GraphRAG layer on HotpotQA-100 with the offline extractor and the extractive summariser (no model).

Measures build time, graph size, communities per level and coverage; then, for each of the 100 questions, the
tokens of the community reports chosen by ``GraphIndex.global_search`` under a token budget versus the tokens of
the 50 raw chunks a hybrid search would hand over instead (the reference design's example), and the share of the
question's gold supporting paragraphs that the chosen reports stand for.

    python benchmarks/graphrag_eval.py [--data ../shared/data/hotpotqa100] [--token-budget 1000]
                                       [--embedder minilm|hashing]

Prints a table and writes benchmarks/results/graphrag_eval.json. Skips (exit 0) when the data set is absent.
Paragraphs are embedded as ``title + " " + text``; MiniLM vectors are cached in benchmarks/.cache/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hotpotqa100"
RESULTS = ROOT / "benchmarks" / "results" / "graphrag_eval.json"
CACHE = ROOT / "benchmarks" / ".cache"
RAW_CHUNKS = 50


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> dict[str, set[str]]:
    qrels: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(doc)
    return qrels


def make_embedder(kind: str):
    from hybrid_memory import HashingEmbedder, SentenceTransformerEmbedder

    return HashingEmbedder(256) if kind == "hashing" else SentenceTransformerEmbedder()


def cached_vectors(embedder, texts: list[str]) -> np.ndarray:
    key = hashlib.sha256(("\x1e".join(texts) + embedder.name).encode()).hexdigest()[:16]
    path = CACHE / f"hotpotqa100-{embedder.name.replace('/', '_')}-{key}.npy"
    if path.is_file():
        return np.load(path)
    vectors = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--token-budget", type=int, default=1000, help="tokens of reports per question (1000)")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--max-cluster-size", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if not (args.data / "corpus.jsonl").is_file():
        print(f"SKIP: {args.data} not found (expected corpus.jsonl, queries.jsonl, qrels/test.tsv)")
        return 0

    try:
        from tabulate import tabulate
    except ImportError:  # plain fallback: the table is the same, only less pretty

        def tabulate(rows, headers, tablefmt=None):  # noqa: ARG001
            width = max(len(str(r[0])) for r in [headers, *rows])
            return "\n".join(f"{str(a):<{width}}  {b}" for a, b in [headers, *rows])

    from hybrid_memory import HybridMemory
    from hybrid_memory.graph import GraphIndex, count_tokens, tokenizer_name

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on itself when imported

    corpus = read_jsonl(args.data / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(args.data / "queries.jsonl")}
    qrels = read_qrels(args.data / "qrels" / "test.tsv")
    chunks = [
        {"chunk_id": d["_id"], "text": f"{d.get('title', '')} {d['text']}".strip(), "source": d.get("title", "")}
        for d in corpus
    ]
    embedder = make_embedder(args.embedder)
    t0 = time.perf_counter()
    vectors = cached_vectors(embedder, [c["text"] for c in chunks])
    embed_seconds = time.perf_counter() - t0

    memory = HybridMemory(None, embedder=embedder)
    memory.add(chunks, vectors=vectors)
    chunk_tokens = {c["chunk_id"]: count_tokens(c["text"]) for c in chunks}

    index = GraphIndex(max_cluster_size=args.max_cluster_size, seed=args.seed, embedder=embedder)
    t0 = time.perf_counter()
    sync = index.sync(memory)
    graph_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    calls, failed = index.summarize_stale(memory)
    report_seconds = time.perf_counter() - t0
    stats = index.stats()
    t0 = time.perf_counter()
    indexed_reports = index.prepare_search()
    report_index_seconds = time.perf_counter() - t0

    rows = []
    t0 = time.perf_counter()
    for qid in sorted(qrels):
        question = queries[qid]
        result = index.global_search(question, token_budget=args.token_budget)
        raw = memory.search(question, top_k=RAW_CHUNKS).results
        raw_ids = [r.chunk_id for r in raw]
        stands_for = set(result.chunk_ids)
        gold = qrels[qid]
        rows.append({
            "query_id": qid,
            "reports": len(result.hits),
            "levels": [h.level for h in result.hits],
            "report_tokens": result.tokens.report_tokens,
            "raw50_tokens": sum(chunk_tokens[c] for c in raw_ids),
            "chunks_stood_for": len(stands_for),
            "stood_for_tokens": result.tokens.source_chunk_tokens,
            "gold_share": len(gold & stands_for) / len(gold),
            "gold_in_raw50": len(gold & set(raw_ids)) / len(gold),
            "no_relevant_reports": result.no_relevant_reports,
        })
    query_seconds = time.perf_counter() - t0

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in rows)

    summary = {
        "dataset": "hotpotqa100",
        "paragraphs": len(chunks),
        "questions": len(rows),
        "extractor": index.extractor.name,
        "summarizer": index.summarizer.name,
        "embedder": embedder.name,
        "tokenizer": tokenizer_name(),
        "token_budget": args.token_budget,
        "max_cluster_size": args.max_cluster_size,
        "seed": args.seed,
        "embed_seconds": round(embed_seconds, 2),
        "graph_seconds": round(graph_seconds, 2),
        "report_seconds": round(report_seconds, 2),
        "report_index_seconds": round(report_index_seconds, 2),
        "indexed_reports": indexed_reports,
        "build_seconds": round(graph_seconds + report_seconds + report_index_seconds, 2),
        "query_seconds_mean": round(query_seconds / max(1, len(rows)), 4),
        "failed_extractions": len(sync.failed),
        "summariser_calls": calls,
        "failed_reports": len(failed),
        "entities": stats["entities"],
        "edges": stats["edges"],
        "communities_per_level": stats["communities_per_level"],
        "coverage": stats["coverage"],
        "mean_reports": mean("reports"),
        "mean_report_tokens": mean("report_tokens"),
        "median_report_tokens": pct([r["report_tokens"] for r in rows], 50),
        "mean_raw50_tokens": mean("raw50_tokens"),
        "report_to_raw50_ratio": mean("report_tokens") / mean("raw50_tokens"),
        "mean_chunks_stood_for": mean("chunks_stood_for"),
        "mean_stood_for_tokens": mean("stood_for_tokens"),
        "mean_gold_share": mean("gold_share"),
        "questions_all_gold_covered": sum(r["gold_share"] == 1.0 for r in rows),
        "mean_gold_in_raw50": mean("gold_in_raw50"),
        "questions_without_relevant_reports": sum(r["no_relevant_reports"] for r in rows),
    }
    table = [
        ["paragraphs / questions", f"{summary['paragraphs']} / {summary['questions']}"],
        ["build: graph (extract + Leiden) s", summary["graph_seconds"]],
        ["build: reports s", summary["report_seconds"]],
        [f"build: hybrid index over {indexed_reports} reports s", summary["report_index_seconds"]],
        ["entities", summary["entities"]],
        ["edges", summary["edges"]],
        ["communities per level", ", ".join(f"L{k}: {v}" for k, v in summary["communities_per_level"].items())],
        ["entity coverage (level 0)", f"{summary['coverage']:.1%}"],
        [f"reports per question (budget {args.token_budget} tokens)", f"{summary['mean_reports']:.2f}"],
        ["report tokens per question, mean / median",
         f"{summary['mean_report_tokens']:.0f} / {summary['median_report_tokens']:.0f}"],
        [f"tokens of {RAW_CHUNKS} raw chunks per question, mean", f"{summary['mean_raw50_tokens']:.0f}"],
        ["report tokens / raw-50 tokens", f"{summary['report_to_raw50_ratio']:.3f}"],
        ["chunks the chosen reports stand for, mean", f"{summary['mean_chunks_stood_for']:.1f}"],
        ["gold paragraphs the reports stand for, mean share", f"{summary['mean_gold_share']:.3f}"],
        ["questions with both gold paragraphs covered", summary["questions_all_gold_covered"]],
        [f"gold paragraphs in the {RAW_CHUNKS} raw chunks (reference)", f"{summary['mean_gold_in_raw50']:.3f}"],
        ["questions with no relevant report", summary["questions_without_relevant_reports"]],
        ["query time per question, s", summary["query_seconds_mean"]],
    ]
    print(f"GraphRAG on HotpotQA-100: {summary['extractor']} + {summary['summarizer']}, "
          f"embedder {summary['embedder']}, tokenizer {summary['tokenizer']}")
    print(tabulate(table, headers=["measure", "value"], tablefmt="github"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"summary": summary, "questions": rows}, indent=1))
    print(f"\nwrote {args.output}")
    memory.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
