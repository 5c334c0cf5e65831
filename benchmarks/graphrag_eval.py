"""GraphRAG layer offline (offline extractor, extractive reports, no model): extraction quality, graph build, and
how much of the questions' gold evidence the chosen community reports stand for, per token budget.

1. Extraction precision / recall on ``benchmarks/data/graph_extraction_labels.jsonl``: hand-labelled incident and
   runbook sentences written for this project (a ``dev`` split the rules were developed against, and a
   ``heldout`` split written afterwards and never used to change them). Entities match on (normalised name,
   type); typed relations on (normalised source, normalised target, normalised verb phrase), direction kept;
   "co-occurs with" relations are not typed relations and are not scored.
2. For HotpotQA-100 (one graph over the 994 paragraphs) and LoCoMo-5 (one graph per conversation, each built
   from the memory's scoped view ``user_id=<conversation>``, so it sees only that conversation's turns): build
   time, entities, edges, communities per level, level-0 coverage; then for each question and each token
   budget, the reports ``global_search`` picks (with their best source sentences when the budget allows):
   their tokens against the tokens of the 50 raw chunks a hybrid search would hand over instead, the share of
   the question's gold chunks the reports stand for (``stood for``: members of the chosen communities) and the
   share quoted in the text handed over (``quoted``: a sentence of the chunk is in a report or its evidence).

    python benchmarks/graphrag_eval.py [--datasets hotpotqa100,locomo5] [--budgets 500,1000,2000,4000]
                                       [--embedder minilm|hashing] [--locomo-questions N]

Prints tables and writes benchmarks/results/graphrag_eval.json. A dataset that is absent is skipped with a
message. Chunk vectors come from the shared vector cache (``HYBRID_MEMORY_BENCH_CACHE``); report vectors are
cached there too (``graphrag-reports__<embedder>.npz``, keyed by the sha256 of each report text), so the
report-index time counts only the reports embedded in this run.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

LABELS = Path(__file__).resolve().parent / "data" / "graph_extraction_labels.jsonl"
RESULTS = _common.RESULTS_DIR / "graphrag_eval.json"
RAW_CHUNKS = 50


def extraction_scores(path: Path) -> dict:
    """Micro-averaged P/R/F1 of the offline extractor on the labelled set, per split and overall."""
    from hybrid_memory.graph import OfflineExtractor
    from hybrid_memory.graph.normalize import normalize_name
    from hybrid_memory.graph.patterns import CO_OCCURS

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    extractor = OfflineExtractor()
    counts: dict[str, dict[str, int]] = {}
    misses: list[dict] = []
    for row in rows:
        entities, relations = extractor.extract(row["sentence"])
        got_e = {(normalize_name(e.name), e.type) for e in entities}
        gold_e = {(normalize_name(e["name"]), e["type"]) for e in row["entities"]}
        got_r = {
            (normalize_name(r.source), normalize_name(r.target), normalize_name(r.description))
            for r in relations
            if r.description != CO_OCCURS
        }
        gold_r = {
            (normalize_name(r["source"]), normalize_name(r["target"]), normalize_name(r["verb"]))
            for r in row["relations"]
        }
        for split in (row["split"], "all"):
            c = counts.setdefault(
                split, {"sentences": 0, "e_tp": 0, "e_got": 0, "e_gold": 0, "r_tp": 0, "r_got": 0, "r_gold": 0}
            )
            c["sentences"] += 1
            c["e_tp"] += len(got_e & gold_e)
            c["e_got"] += len(got_e)
            c["e_gold"] += len(gold_e)
            c["r_tp"] += len(got_r & gold_r)
            c["r_got"] += len(got_r)
            c["r_gold"] += len(gold_r)
        if got_e != gold_e or got_r != gold_r:
            misses.append(
                {
                    "id": row["id"],
                    "extra_entities": sorted(got_e - gold_e),
                    "missed_entities": sorted(gold_e - got_e),
                    "extra_relations": sorted(got_r - gold_r),
                    "missed_relations": sorted(gold_r - got_r),
                }
            )

    def prf(tp: int, got: int, gold: int) -> dict:
        p = tp / got if got else 0.0
        r = tp / gold if gold else 0.0
        return {"precision": round(p, 3), "recall": round(r, 3), "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0}

    out = {}
    for split, c in counts.items():
        out[split] = {
            "sentences": c["sentences"],
            "gold_entities": c["e_gold"],
            "gold_relations": c["r_gold"],
            "entities": prf(c["e_tp"], c["e_got"], c["e_gold"]),
            "typed_relations": prf(c["r_tp"], c["r_got"], c["r_gold"]),
        }
    return {"by_split": out, "differences": misses}


class ReportVectorCache:
    """Report embeddings persisted as ``graphrag-reports__<embedder>.npz`` (sha256 of the text -> float32 vector,
    no pickle), so a rerun embeds only the reports whose text changed."""

    def __init__(self, embedder_name: str):
        slug = embedder_name.replace("/", "_")
        self.path = _common.CACHE_DIR / f"graphrag-reports__{slug}.npz"
        self.vectors: dict[str, np.ndarray] = {}
        if self.path.is_file():
            with np.load(self.path, allow_pickle=False) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def fill(self, index) -> None:
        """Hand the index the cached vectors of its current reports (it embeds the others)."""
        index._report_vectors_for = getattr(index.embedder, "name", None)
        for report in index.reports.values():
            text = report.text()
            if self.key(text) in self.vectors:
                index._report_vectors[text] = self.vectors[self.key(text)]

    def collect(self, index) -> None:
        self.vectors.update({self.key(t): np.asarray(v, dtype=np.float32) for t, v in index._report_vectors.items()})

    def save(self) -> None:
        if not self.vectors:
            return
        keys = sorted(self.vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]).astype(np.float32))
        tmp.replace(self.path)


class QueryCachedEmbedder:
    """The embedder with ``embed_query`` memoised: each question is embedded once, not once per budget and once
    more for the raw-chunk search (the vectors are identical, only the benchmark's time changes)."""

    def __init__(self, inner):
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self._queries: dict[str, np.ndarray] = {}

    def embed_documents(self, texts):
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        if text not in self._queries:
            self._queries[text] = np.asarray(self.inner.embed_query(text), dtype=np.float32)
        return self._queries[text]

    def __getattr__(self, name):
        return getattr(self.inner, name)


def build_graph(index, view, cache: ReportVectorCache) -> dict:
    """sync + summarise + report index of one GraphIndex over ``view``; returns the timings (seconds)."""
    t0 = time.perf_counter()
    sync = index.sync(view)
    graph_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    calls, failed = index.summarize_stale(view)
    report_s = time.perf_counter() - t0
    cache.fill(index)  # reuse cached report embeddings across runs (same embedder)
    t0 = time.perf_counter()
    indexed = index.prepare_search()
    index_s = time.perf_counter() - t0
    cache.collect(index)
    return {
        "graph_seconds": graph_s,
        "report_seconds": report_s,
        "report_index_seconds": index_s,
        "indexed_reports": indexed,
        "failed_extractions": len(sync.failed),
        "summariser_calls": calls,
        "failed_reports": len(failed),
    }


def evaluate_questions(
    graphs: dict,
    views: dict,
    questions: list[tuple[str, str, str, set[str]]],
    chunk_tokens: dict[str, int],
    budgets: list[int],
) -> tuple[dict, list[dict]]:
    """Per budget: means over the questions. ``questions``: (query id, graph key, text, gold chunk ids)."""
    rows = []
    for qid, key, text, gold in questions:
        raw = views[key].search(text, top_k=RAW_CHUNKS).results
        raw_ids = [r.chunk_id for r in raw]
        row = {
            "query_id": qid,
            "raw50_tokens": sum(chunk_tokens[c] for c in raw_ids),
            "gold_in_raw50": len(gold & set(raw_ids)) / len(gold),
            "budgets": {},
        }
        for budget in budgets:
            result = graphs[key].global_search(text, token_budget=budget)
            stood, quoted = set(result.chunk_ids), set(result.quoted_chunk_ids)
            row["budgets"][str(budget)] = {
                "reports": len(result.hits),
                "evidence_sentences": sum(len(h.evidence) for h in result.hits),
                "tokens": sum(h.tokens for h in result.hits),
                "stood_for": len(gold & stood) / len(gold),
                "quoted": len(gold & quoted) / len(gold),
                "chunks_stood_for": len(stood),
                "no_relevant_reports": result.no_relevant_reports,
            }
        rows.append(row)
    raw_mean = statistics.fmean(r["raw50_tokens"] for r in rows)
    per_budget = {}
    for budget in budgets:
        cells = [r["budgets"][str(budget)] for r in rows]
        tokens = statistics.fmean(c["tokens"] for c in cells)
        per_budget[str(budget)] = {
            "mean_tokens": round(tokens, 1),
            "tokens_to_raw50": round(tokens / raw_mean, 3) if raw_mean else 0.0,
            "gold_stood_for": round(statistics.fmean(c["stood_for"] for c in cells), 3),
            "gold_quoted": round(statistics.fmean(c["quoted"] for c in cells), 3),
            "questions_all_gold_stood_for": sum(c["stood_for"] == 1.0 for c in cells),
            "mean_reports": round(statistics.fmean(c["reports"] for c in cells), 2),
            "mean_evidence_sentences": round(statistics.fmean(c["evidence_sentences"] for c in cells), 2),
            "mean_chunks_stood_for": round(statistics.fmean(c["chunks_stood_for"] for c in cells), 1),
            "questions_without_relevant_reports": sum(c["no_relevant_reports"] for c in cells),
        }
    summary = {
        "questions": len(rows),
        "mean_raw50_tokens": round(raw_mean, 1),
        "gold_in_raw50": round(statistics.fmean(r["gold_in_raw50"] for r in rows), 3),
        "budgets": per_budget,
    }
    return summary, rows


def graph_stats(graphs: dict) -> dict:
    per_level: dict[int, int] = {}
    entities = edges = covered = 0
    for index in graphs.values():
        stats = index.stats()
        entities += stats["entities"]
        edges += stats["edges"]
        covered += round(stats["coverage"] * stats["entities"])
        for level, n in stats["communities_per_level"].items():
            per_level[int(level)] = per_level.get(int(level), 0) + n
    return {
        "graphs": len(graphs),
        "entities": entities,
        "edges": edges,
        "communities_per_level": {str(k): v for k, v in sorted(per_level.items())},
        "coverage": round(covered / entities, 4) if entities else 1.0,
        "merges": sum(len(i.merges) for i in graphs.values()),
        "alias_candidates": sum(len(i.alias_candidates()) for i in graphs.values()),
    }


def run_dataset(name: str, embedder, args, cache: ReportVectorCache) -> dict | None:
    if _common.dataset_dir(name) is None:
        print(f"SKIP {name}: not found under {_common.DATA_DIR}")
        return None
    from hybrid_memory import HybridMemory
    from hybrid_memory.graph import GraphIndex, count_tokens

    data = _common.BeirData(name)
    vectors = _common.document_vectors(name, embedder, data.texts)
    memory = HybridMemory(None, embedder=embedder)
    chunks = []
    for chunk in data.chunks:
        record = {
            "chunk_id": chunk.chunk_id,
            "text": chunk.text,
            "source": chunk.source,
            "metadata": dict(chunk.metadata),
        }
        if name == "locomo5":
            record["user_id"] = str(chunk.metadata["conversation"])
        chunks.append(record)
    memory.add(chunks, vectors=vectors)
    chunk_tokens = {c["chunk_id"]: count_tokens(c["text"]) for c in chunks}
    if name == "locomo5":
        keys = sorted({c["user_id"] for c in chunks})
        views = {k: memory.scoped(user_id=k) for k in keys}
    else:
        views = {"all": memory}
    graphs = {}
    timings: dict[str, float] = {}
    for key, view in views.items():
        index = GraphIndex(max_cluster_size=args.max_cluster_size, seed=args.seed, embedder=embedder)
        for k, v in build_graph(index, view, cache).items():
            timings[k] = timings.get(k, 0) + v
        graphs[key] = index
    cache.save()
    folder = _common.dataset_dir(name)
    metadata = {q["_id"]: q for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    questions = []
    qids = list(data.queries)
    if name == "locomo5" and args.locomo_questions and args.locomo_questions < len(qids):
        step = len(qids) / args.locomo_questions  # evenly spaced over the five conversations and categories
        qids = [qids[int(i * step)] for i in range(args.locomo_questions)]
    for qid in qids:
        gold = {d for d, rel in data.qrels[qid].items() if rel > 0}
        key = str(metadata[qid]["metadata_filter"]["conversation"]) if name == "locomo5" else "all"
        questions.append((qid, key, data.queries[qid], gold))
    t0 = time.perf_counter()
    summary, rows = evaluate_questions(graphs, views, questions, chunk_tokens, args.budgets)
    query_s = time.perf_counter() - t0
    out = {
        "dataset": name,
        "chunks": len(chunks),
        **{k: round(v, 2) for k, v in timings.items()},
        "build_seconds": round(
            timings["graph_seconds"] + timings["report_seconds"] + timings["report_index_seconds"], 2
        ),
        "query_seconds_per_question_all_budgets": round(query_s / max(1, len(rows)), 3),
        **graph_stats(graphs),
        **summary,
    }
    memory.close()
    return {"summary": out, "questions": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="hotpotqa100,locomo5")
    parser.add_argument("--budgets", default="500,1000,2000,4000", help="token budgets (comma-separated)")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--max-cluster-size", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--locomo-questions",
        type=int,
        default=0,
        help="N LoCoMo questions evenly spaced over the qrels order (0 = all 760)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _common.ensure_core_importable()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    from hybrid_memory.graph import tokenizer_name

    results: dict = {
        "tokenizer": tokenizer_name(),
        "embedder": args.embedder,
        "extractor": "offline-rules",
        "summarizer": "extractive",
        "max_cluster_size": args.max_cluster_size,
        "seed": args.seed,
    }
    extraction = extraction_scores(LABELS)
    results["extraction"] = extraction
    print("Offline extraction on the hand-labelled set (micro-averaged)")
    print("| split | sentences | entities P | entities R | entities F1 | typed relations P | R | F1 |")
    print("|---|---|---|---|---|---|---|---|")
    for split in ("dev", "heldout", "all"):
        s = extraction["by_split"][split]
        e, r = s["entities"], s["typed_relations"]
        print(
            f"| {split} | {s['sentences']} | {e['precision']:.3f} | {e['recall']:.3f} | {e['f1']:.3f} | "
            f"{r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} |"
        )

    embedder = QueryCachedEmbedder(_common.make_embedder(args.embedder))
    cache = ReportVectorCache(embedder.name)
    results["datasets"] = {}
    for name in args.datasets.split(","):
        got = run_dataset(name, embedder, args, cache)
        if got is None:
            continue
        results["datasets"][name] = got
        s = got["summary"]
        print(
            f"\n{name}: {s['chunks']} chunks in {s['graphs']} graph(s), {s['questions']} questions, "
            f"embedder {embedder.name}, tokenizer {results['tokenizer']}"
        )
        print("| measure | value |\n|---|---|")
        for label, value in [
            ("build: graph (extract + resolve + Leiden) s", s["graph_seconds"]),
            ("build: reports s", s["report_seconds"]),
            (f"build: hybrid index over {s['indexed_reports']} reports s", s["report_index_seconds"]),
            ("entities / edges", f"{s['entities']} / {s['edges']}"),
            ("communities per level", ", ".join(f"L{k}: {v}" for k, v in s["communities_per_level"].items())),
            ("entity coverage (level 0)", f"{s['coverage']:.1%}"),
            ("alias merges (auto) / candidates left", f"{s['merges']} / {s['alias_candidates']}"),
            (f"tokens of {RAW_CHUNKS} raw chunks per question, mean", s["mean_raw50_tokens"]),
            (f"gold chunks in the {RAW_CHUNKS} raw chunks", f"{s['gold_in_raw50']:.3f}"),
        ]:
            print(f"| {label} | {value} |")
        print(
            "\n| token budget | tokens handed over (mean) | / raw-50 tokens | gold stood for | gold quoted | "
            "all gold stood for | reports | evidence sentences |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for budget, b in s["budgets"].items():
            print(
                f"| {budget} | {b['mean_tokens']:.0f} | {b['tokens_to_raw50']:.3f} | {b['gold_stood_for']:.3f} | "
                f"{b['gold_quoted']:.3f} | {b['questions_all_gold_stood_for']} | {b['mean_reports']:.2f} | "
                f"{b['mean_evidence_sentences']:.2f} |"
            )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
