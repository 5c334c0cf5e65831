"""Offline trial, not the library's method: the default fusion with each engine's confidence calibrated against
chance over the corpus (dense alone first, then both engines in one unit, the surprise).

Usage::

    HYBRID_MEMORY_BENCH_CACHE=/work/bench-cache python benchmarks/dense_calibration_trial.py

Why: ``fusion_robustness.py`` shows the default falling below the better engine when the dense engine is weak.
Its per-query confidence, ``top_outlier``, is scale-free, so a list of compressed, noisy cosines looks as peaked
as a good one. This trial measures one calibration that is not scale-free.

The statistic: for query vector ``q`` (unit, float64 (dim,)), the corpus mean ``mu`` and covariance ``Sigma`` of the
document vectors (float64, population), and the top cosine ``s1`` of the dense engine's candidates::

    e = (s1 - q.mu) / sqrt(q' Sigma q) - sqrt(2 ln N)

``sqrt(2 ln N)`` is the leading term of the expected maximum of N independent standard normal scores (Cramér
1946; David and Nagaraja, "Order Statistics", 3rd ed., 2003, section 10.5), where N is the number of documents the
query may return: the allowed set under a filter, else the corpus. ``mu`` and ``Sigma`` are always the whole
corpus's, which approximates a filtered subset. ``e`` < 0 means the top is no further out than chance would put it.
Dense's confidence weight ``prior x (1 + top_outlier)`` is multiplied by ``h(e)``, then the default runs
unchanged (log-BM25 z-scores, convex weights, exact-match guard). Functions ``h``: ``logistic(2e)``, and
``clip(e + 1, 0, 1)`` (1 at and above chance, 0 one unit below it).

Two further rows measure other ways to the same end:

* ``dense c = max(0, e)``: dense's confidence is the excess itself, ``prior x (1 + max(0, e))``, instead of
  ``top_outlier`` (BM25 keeps ``1 + top_outlier``);
* ``both, cross-reference``: a calibration for both engines from the candidates alone, no corpus statistics. For
  engine ``E``, the other engine's candidates that ``E`` did not return stand for the corpus: when ``E`` is
  noise, the other engine's picks are random documents to it. ``e'_E = (top_E - mean) / std - sqrt(2 ln N)``
  over ``E``'s exact scores of those candidates (BM25 read as ``log(1 + s)``, as the default reads it; at least 3
  of them, else no factor), and each engine's confidence weight is multiplied by ``logistic(2 e'_E)``.

Then a calibration of both engines in one unit, the **surprise** of the engine's top hit: minus the natural log
of the number of documents that chance would put at least that high, among the ``n`` the query may return::

    dense:  S_d = -(ln n + ln Phi_c(z)),       z = (s1 - q.mu) / sqrt(q' Sigma q)
    BM25:   S_s = -(ln n + sum_{t in T} ln(df_t / N))

``Phi_c`` is the standard normal upper tail (``scipy.special.log_ndtr(-z)``): the dense null is the Gaussian of the
first trial. The BM25 null is term independence (the binary independence model's assumption; Robertson and Spärck
Jones 1976): ``T`` is the set of distinct query tokens the top BM25 document holds, ``df_t`` their document
frequencies over the corpus of ``N`` documents, so ``n prod df_t / N`` documents would hold all of ``T`` by chance.
Both are in nats, so they compare across engines: about 0 when the top is what chance gives, medians of 6-18 for a
clean engine's top on these sets (SciFact BM25 12.6, dense 5.9; HotpotQA-100 18.2 and 16.1). Rows
``surprise: h`` multiply each engine's confidence weight by ``h(max(0, S))`` (an
engine whose surprise is unknown, no document term matched, keeps 1): ``h = sqrt`` and ``h = identity``; row
``surprise alone`` replaces ``1 + top_outlier`` by ``max(0, S)``. Document frequencies are counted here with the
library's tokenizer over the chunk texts; the library's own index holds them too.

Variants: the clean set and ``fusion_robustness.py``'s dense-noise levels and sparse steps (the same seeded vectors
and queries): a calibration that lowers dense's weight must also be seen where BM25 is the weak engine. Candidates
are gathered once per query, as ``fusion_eval.py --offline`` does. Printed: a table per set; each cell is nDCG@10 minus
the better engine's, then the worst class's margin. Written to ``benchmarks/results/dense_calibration_trial.json``
(``dense_calibration_trial_subset.json`` for a run on some sets or levels only).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import _fusion_data as fdata
import fusion_eval as fe
import fusion_robustness as robust


def chance_excess(q: np.ndarray, top: float, mu: np.ndarray, sigma: np.ndarray, n: int) -> float:
    """``(top - q.mu) / sqrt(q' Sigma q) - sqrt(2 ln n)`` (module docstring); q float (dim,), mu (dim,), Sigma (dim,
    dim),
    n >= 2. Returns +inf for a query with no spread over the corpus (every document scores alike)."""
    q = q.astype(np.float64)
    var = float(q @ sigma @ q)
    if not var > 0:
        return math.inf
    return (top - float(q @ mu)) / math.sqrt(var) - math.sqrt(2.0 * math.log(max(n, 2)))


H = {
    "logistic(2e)": lambda e: 1.0 / (1.0 + math.exp(-2.0 * e)) if e < 50 else 1.0,
    "clip(e + 1)": lambda e: min(1.0, max(0.0, e + 1.0)),
}


def dense_surprise(q: np.ndarray, top: float, mu: np.ndarray, sigma: np.ndarray, n: int) -> float:
    """``S_d = -(ln n + ln Phi_c(z))`` (module docstring), nats; q float (dim,), mu (dim,), Sigma (dim, dim), n >= 1.
    Returns +inf for a query with no spread over the corpus."""
    from scipy.special import log_ndtr

    q = q.astype(np.float64)
    var = float(q @ sigma @ q)
    if not var > 0:
        return math.inf
    return -(math.log(max(n, 1)) + float(log_ndtr(-(top - float(q @ mu)) / math.sqrt(var))))


def sparse_surprise(held: set[str], df: dict[str, int], n_docs: int, n: int) -> float | None:
    """``S_s = -(ln n + sum_{t in held} ln(df_t / N))`` (module docstring), nats: ``held`` the distinct query tokens
    the top BM25 document holds, ``df`` token -> document frequency over ``n_docs`` documents, ``n`` the documents
    the query may return. None when ``held`` is empty (no term matched: nothing to judge)."""
    if not held:
        return None
    return -(math.log(max(n, 1)) + sum(math.log(df[t] / n_docs) for t in held))


def cross_excess(inp: Any, name: str, n: int) -> float | None:
    """``e'`` of engine ``name`` (module docstring, "both, cross-reference"): its top score against its exact scores of
    the other engines' candidates it did not return, in standard deviations (population), minus ``sqrt(2 ln n)``.
    Returns None when fewer than 3 such candidates have a score, +inf when they all score alike."""
    own = list(inp.runs.get(name, ()))
    scores = inp.scores.get(name, {})
    read = (lambda s: math.log1p(max(s, 0.0))) if inp.lower_bounds.get(name) == 0 else float
    held = set(own)
    ref = [
        read(scores[k])
        for other, run in inp.runs.items()
        if other != name
        for k in run
        if k not in held and k in scores
    ]
    if not own or len(ref) < 3:
        return None
    mean = sum(ref) / len(ref)
    std = math.sqrt(sum((x - mean) ** 2 for x in ref) / len(ref))
    if not std > 0:
        return math.inf
    return (read(scores[own[0]]) - mean) / std - math.sqrt(2.0 * math.log(max(n, 2)))


SURPRISE_H = {
    "sqrt": lambda s: math.sqrt(max(0.0, s)),
    "identity": lambda s: max(0.0, s),
    "sqrt, floor 1": lambda s: math.sqrt(max(1.0, s)),
    "sqrt softplus": lambda s: math.sqrt(math.log1p(math.exp(s))) if s < 30 else math.sqrt(s),
}
"""Functions of the surprise (nats, any sign) that multiply an engine's confidence weight: ``sqrt`` and ``identity``
of ``max(0, S)`` (an engine at or below chance gets weight 0), ``sqrt`` of ``max(1, S)`` (never below 1) and of
``softplus(S) = ln(1 + e^S)`` (smooth, > 0: ``sqrt(ln 2)`` = 0.83 at chance)."""


def calibrated(
    inp: Any, factor: float | dict[str, float], *, confidence: dict[str, float] | None = None
) -> dict[str, float]:
    """The default's scores with engine confidence weights times ``factor`` (a number: dense's; a dict: per
    engine) and, for each engine of ``confidence``, its weight ``prior x confidence[engine]`` in place of
    ``prior x (1 + top_outlier)`` (``fuse_adaptive`` otherwise)."""
    from hybrid_memory.fusion import methods as m
    from hybrid_memory.fusion.adaptive import confidence_weights, guard_columns

    weights = confidence_weights(m._padded_lists(inp, list(m._active(inp))), inp.priors)
    for name, value in (confidence or {}).items():
        if weights.get(name, 0) > 0:
            weights[name] = float(inp.priors.get(name, 1.0)) * value
    for name, f in (factor if isinstance(factor, dict) else {"dense": factor}).items():
        if name in weights:
            weights[name] *= f
    total = sum(weights.values())
    if not total > 0:
        weights = m._active(inp)
        total = sum(weights.values())
    alphas = {n: w / total for n, w in weights.items() if w > 0}
    keys, fused = m._zscores(inp, alphas, log_bm25=True)
    return dict(zip(keys, guard_columns(fused, inp.columns[2]), strict=True))


def run(data: fdata.EvalSet) -> dict[str, dict[str, dict[str, float]]]:
    """label -> run (qid -> {key: score}) for sparse, dense, the default and each calibrated default."""
    from hybrid_memory.engines.bm25.index import _QueryTerms
    from hybrid_memory.fusion import methods as m
    from hybrid_memory.search.engine import Query

    memory = fe.build_memory(data)
    vectors = data.doc_vectors.astype(np.float64)
    mu, sigma = vectors.mean(axis=0), np.cov(vectors.T, bias=True)
    labels = [
        "sparse alone",
        "dense alone",
        "default",
        *(f"default, h = {name}" for name in H),
        "dense c = max(0, e)",
        "both, cross-reference",
        *(f"surprise: {name}" for name in SURPRISE_H),
        "surprise alone",
    ]
    runs: dict[str, dict[str, dict[str, float]]] = {label: {} for label in labels}
    total = memory.count()
    tokenizer = memory.backend.sparse.tokenizer  # the library's tokenizer, as the index reads the chunks
    doc_terms = {c["chunk_id"]: set(tokenizer.tokenize(c["text"])) for c in data.chunks}
    df: dict[str, int] = {}
    for terms in doc_terms.values():
        for t in terms:
            df[t] = df.get(t, 0) + 1
    for qid in data.qrels:
        req, allowed = memory._prepare(fe.request(data, qid, {}), {})
        cand = memory._searcher.candidates(
            Query(req.search_text, data.query_vectors[qid]),
            top_k=fe.TOP_K,
            depth=fe.TOP_K * fe.MULTIPLIER,
            weights={"sparse": 1.0, "dense": 1.0},
            allowed=allowed,
            fusion="adaptive",
        )
        inp = cand.input
        scored = {"sparse alone": inp.own_scores("sparse"), "dense alone": inp.own_scores("dense")}
        if inp.runs:
            scored["default"] = m.fuse_adaptive_uncalibrated(inp).scores  # the default before the surprise
            dense = inp.list_scores("dense")
            n = total if allowed is None else len(allowed)
            e = chance_excess(data.query_vectors[qid], max(dense), mu, sigma, n) if dense else math.inf
            for name, h in H.items():
                scored[f"default, h = {name}"] = calibrated(inp, h(e))
            scored["dense c = max(0, e)"] = calibrated(inp, 1.0, confidence={"dense": 1.0 + min(10.0, max(0.0, e))})
            cross = {name: H["logistic(2e)"](x) for name in inp.runs if (x := cross_excess(inp, name, n)) is not None}
            scored["both, cross-reference"] = calibrated(inp, cross)
            sparse_run = inp.runs.get("sparse")
            query_terms = set(_QueryTerms(req.search_text, tokenizer).distinct)
            surprise = {
                "dense": dense_surprise(data.query_vectors[qid], max(dense), mu, sigma, n) if dense else None,
                "sparse": sparse_surprise(query_terms & doc_terms.get(sparse_run[0], set()), df, total, n)
                if sparse_run
                else None,
            }
            raw = {
                name: x for name, x in surprise.items() if x is not None and math.isfinite(x) and name in inp.runs
            }  # inf: no spread, not judged
            known = {name: max(0.0, x) for name, x in raw.items()}
            for name, h in SURPRISE_H.items():
                scored[f"surprise: {name}"] = calibrated(inp, {k: h(x) for k, x in raw.items()})
            scored["surprise alone"] = calibrated(inp, 1.0, confidence=known)
        for label in labels:
            ranked = sorted(scored.get(label, {}).items(), key=lambda kv: (-kv[1], kv[0]))[: fe.TOP_K]
            runs[label][qid] = {key: float(fe.TOP_K - i) for i, (key, _) in enumerate(ranked)}
    memory.close()
    return runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(fdata.DATASETS), choices=fdata.DATASETS)
    parser.add_argument("--levels", nargs="+", type=float, default=list(robust.DENSE_LEVELS))
    parser.add_argument("--no-sparse-steps", action="store_true", help="leave out the weak-BM25 variants")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    results: dict[str, Any] = {
        "dense_levels": args.levels,
        "sparse_steps": [] if args.no_sparse_steps else [list(step) for step in robust.SPARSE_STEPS],
        "h": list(H),
        "datasets": {},
    }
    for name in args.datasets:
        started = time.perf_counter()
        table, per_variant = [], {}
        steps = () if args.no_sparse_steps else robust.SPARSE_STEPS
        for variant, data in robust.variants(fdata.load(name), tuple(args.levels), steps):
            m = robust.margins(fe.evaluate_runs(data, run(data)))
            per_variant[variant] = m
            table.append(
                [variant, m["sparse alone"]["ndcg@10"], m["dense alone"]["ndcg@10"]]
                + [
                    f"{m[label]['margin']:+.4f} / {m[label]['worst_class_margin']:+.4f}"
                    if m[label]["worst_class_margin"] is not None
                    else f"{m[label]['margin']:+.4f}"
                    for label in m
                    if label not in ("sparse alone", "dense alone")
                ]
            )
        headers = [
            "variant",
            "sparse",
            "dense",
            *(label for label in per_variant["clean"] if label not in ("sparse alone", "dense alone")),
        ]
        print(
            f"\n## {name}: margin over the better engine / worst class's margin ({time.perf_counter() - started:.0f} s)"
        )
        print(common.format_table(table, headers))
        results["datasets"][name] = per_variant
    full = (
        args.datasets == list(fdata.DATASETS) and args.levels == list(robust.DENSE_LEVELS) and not args.no_sparse_steps
    )
    # a run on some sets or levels only must not replace the full run the README quotes
    path = common.write_results("dense_calibration_trial" if full else "dense_calibration_trial_subset", results)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()
