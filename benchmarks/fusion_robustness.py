"""Fusion robustness: every fusion method when one engine is made weak, against the better engine alone.

Usage::

    HYBRID_MEMORY_BENCH_CACHE=/work/bench-cache python benchmarks/fusion_robustness.py              # all four sets
    python benchmarks/fusion_robustness.py --datasets scifact --levels 0.75                         # one set, one level

Why: issue 7's promise is that the default hybrid is never worse than the better of its two engines, on any
dataset. The four sets of ``fusion_eval.py`` have engines of similar strength (nDCG@10 of the weaker engine at
0.77-1.0 of the stronger one). Held-back sets in other domains need not: on BEIR, all-MiniLM-L6-v2 reaches 0.46
of BM25 on Touché-2020 and 0.72 on TREC-COVID, while BM25 reaches 0.64 of MiniLM on FiQA. This benchmark makes
one engine weaker, in steps, on the same sets, and measures every method of
``hybrid_memory.fusion.FUSION_METHODS`` against the better engine alone.

How each variant is built (deterministic, seeded):

* ``dense noise L``: every document vector ``v`` becomes ``normalize((1 - L) v + L n)``, ``n`` a random unit
  vector (float32 (n_docs, 384), numpy ``default_rng([0, round(1000 L)])``, so a level's variant does not depend
  on the other levels asked for); query vectors are kept. The cosines of the dense engine shrink and gain noise,
  as for an embedder used outside its training domain. Levels ``--levels`` (default 0.6, 0.75, 0.85).
* ``sparse keep p +m``: the query *text* keeps each white-space token with probability ``p`` and gains ``m``
  words drawn from the corpus (first 40 words of the first 3,000 chunks), shuffled; the query *vector* is the
  clean query's. BM25 then matches spurious words, as under vocabulary mismatch, while the dense engine still
  sees the clean query: a harsher case for BM25 than any real query, so read it as a bound. Steps (0.6, +2),
  (0.4, +4), (0.25, +6).
* ``documents as queries (N words)``: the set reversed (:func:`documents_as_queries`): each judged document is a
  query, each query a chunk, relevant where it was judged so; N is the median query length in words. BM25's
  surprise grows with the query tokens its top holds (term independence: its median goes from 6 nats for
  SciFact's shortest quarter of queries to 23 for the longest, 9 to 32 on HotpotQA-100), the dense one does
  not, so long queries
  weigh BM25 more: this row measures whether that costs the default where dense retrieval is the better engine.

Every variant is run as ``fusion_eval.py --offline`` runs a set: one in-memory ``HybridMemory`` with the
variant's vectors, each query's candidates gathered once (20 per engine, exact cross-scores, identifier
matches) with ``HybridSearcher.candidates`` and every method applied with ``HybridSearcher.fuse``; nDCG@10 by
ranx. Printed per set: one table, a row per variant, a column per method, each cell the method's nDCG@10 minus
the better engine's (positive: the fusion beats both engines), and the worst query class's margin; written to
``benchmarks/results/fusion_robustness.json`` (``fusion_robustness_subset.json`` for a run on some sets or
levels only). The target of issue 7 reads: the default's margin >= -0.005
overall and in every class.
"""

from __future__ import annotations

import argparse
import copy
import logging
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import _fusion_data as fdata
import fusion_eval as fe

DENSE_LEVELS = (0.6, 0.75, 0.85)
SPARSE_STEPS = ((0.6, 2), (0.4, 4), (0.25, 6))
TOLERANCE = 0.005
"""Issue 7's tolerance: the default may lie at most this far below the better engine."""


def dense_noise(data: fdata.EvalSet, level: float) -> fdata.EvalSet:
    """``data`` with document vectors ``normalize((1 - level) v + level n)``, ``n`` random unit vectors
    (``default_rng([0, round(1000 level)])``)."""
    out = copy.copy(data)
    rng = np.random.default_rng([0, round(1000 * level)])
    v = data.doc_vectors
    noise = rng.standard_normal(v.shape).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    mixed = (1.0 - level) * v + level * noise
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    out.doc_vectors = mixed.astype(np.float32)
    return out


def sparse_noise(data: fdata.EvalSet, keep: float, extra: int, words: list[str]) -> fdata.EvalSet:
    """``data`` with each query text keeping a token with probability ``keep`` plus ``extra`` corpus words,
    shuffled (a query left empty becomes ``"the"``; ``random.Random(1)``); query vectors unchanged."""
    out = copy.copy(data)
    rnd = random.Random(1)
    queries = {}
    for qid, text in data.queries.items():
        tokens = [t for t in text.split() if rnd.random() < keep] + [rnd.choice(words) for _ in range(extra)]
        rnd.shuffle(tokens)
        queries[qid] = " ".join(tokens) or "the"
    out.queries = queries
    return out


def documents_as_queries(data: fdata.EvalSet) -> fdata.EvalSet:
    """``data`` reversed: every judged document becomes a query (its text and cached vector), every query a chunk
    (``q:<query id>``, its text and vector), a query relevant to the documents it was judged relevant to (grade > 0),
    one class ``all``, no filters. Long queries (an abstract, a paragraph, a docstring; a pasted log or note, for
    an agent) against short chunks."""
    out = copy.copy(data)
    position = {chunk["chunk_id"]: i for i, chunk in enumerate(data.chunks)}
    qrels: dict[str, dict[str, int]] = {}
    for qid, judged in data.qrels.items():
        for doc, grade in judged.items():
            if grade > 0 and doc in position:
                qrels.setdefault(doc, {})[f"q:{qid}"] = int(grade)
    out.chunks = [
        {"chunk_id": f"q:{qid}", "text": text, "source": data.name, "metadata": {}}
        for qid, text in data.queries.items()
    ]
    out.doc_vectors = np.stack([data.query_vectors[qid] for qid in data.queries]).astype(np.float32)
    out.queries = {doc: data.chunks[position[doc]]["text"] for doc in qrels}
    out.query_vectors = {doc: data.doc_vectors[position[doc]] for doc in qrels}
    out.qrels, out.query_class, out.query_filter = qrels, dict.fromkeys(qrels, "all"), {}
    return out


def variants(
    data: fdata.EvalSet, levels: tuple[float, ...], steps: tuple[tuple[float, int], ...]
) -> list[tuple[str, fdata.EvalSet]]:
    """(label, variant) for the clean set, every dense level, every sparse step and the set reversed, in table
    order."""
    words = [w for chunk in data.chunks[:3000] for w in chunk["text"].split()[:40]]
    out = [("clean", data)]
    out += [(f"dense noise {level}", dense_noise(data, level)) for level in levels]
    out += [(f"sparse keep {keep} +{extra}", sparse_noise(data, keep, extra, words)) for keep, extra in steps]
    reversed_set = documents_as_queries(data)
    words_per_query = sorted(len(text.split()) for text in reversed_set.queries.values())
    out.append((f"documents as queries ({words_per_query[len(words_per_query) // 2]} words)", reversed_set))
    return out


def margins(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """row -> {"ndcg@10", "margin" (minus the better engine's nDCG@10), "worst_class", "worst_class_margin"}."""
    sparse, dense = metrics["sparse alone"], metrics["dense alone"]
    classes = [key for key in sparse if key.startswith("ndcg@10:")]
    out = {}
    for label, row in metrics.items():
        worst = min(((row[c] - max(sparse[c], dense[c]), c.split(":", 1)[1]) for c in classes), default=(None, None))
        out[label] = {
            "ndcg@10": row["ndcg@10"],
            "margin": row["ndcg@10"] - max(sparse["ndcg@10"], dense["ndcg@10"]),
            "worst_class_margin": worst[0],
            "worst_class": worst[1],
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fdata.add_dataset_arguments(parser)
    parser.add_argument(
        "--levels",
        nargs="+",
        type=float,
        default=list(DENSE_LEVELS),
        help="dense noise levels L in [0, 1) (default 0.6 0.75 0.85)",
    )
    args = parser.parse_args(argv)
    fdata.check_datasets(args.datasets)  # every set found before the first runs
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    from hybrid_memory.fusion import DEFAULT_FUSION

    default_row = f"DEFAULT {DEFAULT_FUSION} 1/1"
    labels = [label for label, _ in fe.rows() if label not in ("sparse alone", "dense alone")]
    results: dict[str, Any] = {
        "top_k": fe.TOP_K,
        "candidate_multiplier": fe.MULTIPLIER,
        "tolerance": TOLERANCE,
        "dense_levels": args.levels,
        "sparse_steps": SPARSE_STEPS,
        "datasets": {},
    }
    verdicts: list[str] = []
    for name in args.datasets:
        started = time.perf_counter()
        table, per_variant = [], {}
        clean = fdata.load(name, class_key=args.class_key)
        name = clean.name  # a set given by its path is named by its folder
        for variant, data in variants(clean, tuple(args.levels), SPARSE_STEPS):
            memory = fe.build_memory(data)
            metrics = fe.evaluate_runs(data, fe.run_offline(data, memory))
            memory.close()
            m = margins(metrics)
            per_variant[variant] = m
            table.append(
                [
                    variant,
                    m["sparse alone"]["ndcg@10"],
                    m["dense alone"]["ndcg@10"],
                    *(m[label]["margin"] for label in labels),
                    m[default_row]["worst_class"] or "-",
                    m[default_row]["worst_class_margin"],
                ]
            )
            row = m[default_row]
            ok = row["margin"] >= -TOLERANCE and (
                row["worst_class_margin"] is None or row["worst_class_margin"] >= -TOLERANCE
            )
            verdicts.append(
                f"{'met' if ok else 'MISSED'}: {name} {variant}: default margin {row['margin']:+.4f}"
                + (f", worst class {row['worst_class']} {row['worst_class_margin']:+.4f}" if row["worst_class"] else "")
            )
        headers = ["variant", "sparse", "dense", *labels, "default's worst class", "its margin"]
        print(
            f"\n## {name}: nDCG@10 of each engine alone; of each method minus the better engine "
            f"({time.perf_counter() - started:.0f} s)"
        )
        print(common.format_table(table, headers))
        results["datasets"][name] = per_variant
    print("\n## the default against the better engine (tolerance 0.005)")
    for line in verdicts:
        print(f"- {line}")
    results["verdicts"] = verdicts
    full = fdata.is_full_run(args.datasets) and args.levels == list(DENSE_LEVELS)
    # a run on some sets or levels only must not replace the full run the README quotes
    path = common.write_results("fusion_robustness" if full else "fusion_robustness_subset", results)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()
