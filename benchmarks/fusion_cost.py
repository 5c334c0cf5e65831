"""Where a hybrid search's time goes, stage by stage, for each fusion method (issue 7's latency target).

Usage::

    python benchmarks/fusion_cost.py                                   # the four sets of fusion_eval.py
    python benchmarks/fusion_cost.py --datasets hotpotqa100 techdocs   # fast

Why: ``fusion_eval.py`` measures the default's p50 over plain RRF's (target 1.10) and finds 1.2-1.3. This script
says where the difference lies, so a change can be aimed at a stage and a target set against what each stage
costs on the machine at hand. It measures in place: the same in-memory memory, cached MiniLM vectors, ``top_k``
10 and 20 candidates per engine as ``fusion_eval.py``, every search through ``HybridMemory.search`` with the
query vector given.

Rows: ``sparse alone`` (dense_weight 0), ``dense alone`` (sparse_weight 0), ``rrf``, ``zscore`` (exact
cross-scores), ``zscore_guard`` (plus the exact-match guard), ``adaptive_uncalibrated`` (plus log-BM25 and
per-query confidence weights), ``adaptive_v1`` (plus each engine's surprise against chance) and the default
``adaptive`` (plus the agreement of the tops and the holders' order with the request's weights), each at
weights 1/1. Each query runs every row ``--repeats`` times (3 by default) in an order shuffled with a fixed seed,
and the fastest repetition counts, its stages with it (as ``fusion_eval.py`` times whole searches).

Stages (wall time inside one search, summed over the calls it makes; the stages nest, so a column is not the
sum of the ones after it):

* ``request``: request validation and filter resolution (``HybridMemory._prepare``);
* ``query``: the query vector's checks (``HybridMemory._query``);
* ``engines``: both engine runs, concurrent or one after the other as the hand-off policy decides
  (``HybridSearcher._gather``); includes what the default has each engine work out in its own thread, the
  ``surprise`` (both engines) and the exact-match preparation (BM25), also shown on their own;
* ``candidates``: key lookup, cut at the depth, exact cross-scores and exact-match counts
  (``HybridSearcher._candidates``); the engines' ``score`` and ``exact_matches`` calls also on their own;
* ``fuse``: the fusion method, the order and the hits (``HybridSearcher.fuse``);
* ``response``: the response (``HybridMemory._response``: texts and metadata of the hits).

Printed: per set, the p50 in µs of each stage for each row and the default's extra over RRF per stage; then, as
context, what a thread hand-off costs on this machine (a ``ThreadPoolExecutor`` task's start after ``submit``
while the caller runs Python, and a FAISS inner-product call of the dense surprise's size, alone and while
another thread runs Python: every FAISS call releases the GIL and must take it back, up to
``sys.getswitchinterval()`` later). Each timer costs about a microsecond; read differences between rows, not
absolute microseconds. Written to ``benchmarks/results/fusion_cost.json``.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import _fusion_data as fdata  # noqa: E402
import fusion_eval as fe  # noqa: E402

ROWS: list[tuple[str, dict[str, Any]]] = [
    ("sparse alone", {"dense_weight": 0.0, "sparse_weight": 1.0, "fusion": "rrf"}),
    ("dense alone", {"dense_weight": 1.0, "sparse_weight": 0.0, "fusion": "rrf"}),
    ("rrf", {"fusion": "rrf"}),
    ("zscore", {"fusion": "zscore"}),
    ("zscore_guard", {"fusion": "zscore_guard"}),
    ("adaptive_uncalibrated", {"fusion": "adaptive_uncalibrated"}),
    ("adaptive_v1", {"fusion": "adaptive_v1"}),
    ("adaptive (default)", {"fusion": "adaptive"}),
]
DEFAULT_ROW, RRF_ROW = "adaptive (default)", "rrf"


def stage_targets() -> list[tuple[str, type, str]]:
    """(stage name, class, method) of every timed stage, outermost first (a name may time several methods)."""
    from hybrid_memory.memory import hybrid as memory
    from hybrid_memory.search import engine as engines
    from hybrid_memory.search import searcher

    return [
        ("request", memory.HybridMemory, "_prepare"),
        ("query", memory.HybridMemory, "_query"),
        ("engines", searcher.HybridSearcher, "_gather"),
        ("sparse surprise", engines.SparseEngine, "surprise"),
        ("dense surprise", engines.DenseEngine, "surprise"),
        ("dense prepare_surprise", engines.DenseEngine, "prepare_surprise"),
        ("candidates", searcher.HybridSearcher, "_candidates"),
        ("cross-scores", engines.SparseEngine, "score"),
        ("cross-scores", engines.DenseEngine, "score"),
        ("exact matches", engines.SparseEngine, "exact_matches"),
        ("fuse", searcher.HybridSearcher, "fuse"),
        ("response", memory.HybridMemory, "_response"),
    ]


@contextmanager
def timed_stages(sums: dict[str, float]) -> Iterator[None]:
    """Wrap every stage of :func:`stage_targets` so each call adds its wall seconds to ``sums[stage]`` (the two
    engines' ``score`` calls add to one ``cross-scores`` stage); the methods are restored on exit. The BM25
    preparation of exact matches runs inside ``SparseEngine.search`` and is timed through ``BM25Index``."""
    from hybrid_memory.engines.bm25 import index as sparse

    targets = [*stage_targets(), ("exact-match preparation", sparse.BM25Index, "prepare_exact_matches")]
    saved = []
    lock = threading.Lock()  # engine stages may run in the executor's thread

    def wrap(stage: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                with lock:
                    sums[stage] = sums.get(stage, 0.0) + elapsed

        return timed

    for stage, cls, name in targets:
        original = cls.__dict__[name]
        saved.append((cls, name, original))
        setattr(cls, name, wrap(stage, original))
    try:
        yield
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


STAGES = [
    "total",
    "request",
    "query",
    "engines",
    "sparse surprise",
    "dense surprise",
    "dense prepare_surprise",
    "exact-match preparation",
    "candidates",
    "cross-scores",
    "exact matches",
    "fuse",
    "response",
]


def measure(data: fdata.EvalSet, memory: Any, repeats: int) -> dict[str, dict[str, float]]:
    """row -> stage -> p50 µs over the queries (the fastest repetition of each query, with its stages)."""
    per_row: dict[str, list[dict[str, float]]] = {label: [] for label, _ in ROWS}
    qids = list(data.qrels)
    sums: dict[str, float] = {}
    with timed_stages(sums):
        warm = qids[: fe.WARMUP]  # a set of fewer queries warms up on all it has
        for i, qid in enumerate(warm + qids):
            vector = data.query_vectors[qid]
            best: dict[str, dict[str, float]] = {}
            for rep in range(repeats):
                order = list(ROWS)
                random.Random(f"{data.name}:{i}:{rep}").shuffle(order)
                for label, params in order:
                    sums.clear()
                    started = time.perf_counter()
                    memory.search(fe.request(data, qid, params), query_vector=vector)
                    stages = {"total": time.perf_counter() - started, **sums}
                    if label not in best or stages["total"] < best[label]["total"]:
                        best[label] = stages
            if i >= len(warm):
                for label, stages in best.items():
                    per_row[label].append(stages)
    out: dict[str, dict[str, float]] = {}
    for label, samples in per_row.items():
        out[label] = {stage: round(statistics.median(s.get(stage, 0.0) for s in samples) * 1e6, 1) for stage in STAGES}
    return out


def handoff_costs(samples: int = 200) -> dict[str, float]:
    """What a thread hand-off costs on this machine, in µs (p50): a task's start after ``submit`` while the caller
    keeps running Python, and a FAISS ``fvec_inner_products_ny`` over a float32 (385, 384) block (the dense
    surprise's) alone and while another thread runs Python (at most 20 calls: each may wait the switch interval)."""
    from concurrent.futures import ThreadPoolExecutor

    import faiss

    def spin(n: int) -> int:
        total = 0
        for k in range(n):
            total += k
        return total

    starts, submits = [], []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(int).result()  # the thread exists
        for _ in range(samples):
            time.sleep(0.001)  # the worker goes idle, as between searches
            begun = time.perf_counter()
            future = pool.submit(time.perf_counter)
            submits.append(time.perf_counter() - begun)
            spin(3000)  # the caller runs Python, as it runs its own engine
            starts.append(future.result() - begun)
    rows = np.random.default_rng(0).standard_normal((385, 384)).astype(np.float32)
    query = np.ones(384, dtype=np.float32)
    out = np.empty(385, dtype=np.float32)

    def inner_products() -> float:
        begun = time.perf_counter()
        faiss.fvec_inner_products_ny(faiss.swig_ptr(out), faiss.swig_ptr(query), faiss.swig_ptr(rows), 384, 385)
        return time.perf_counter() - begun

    alone = [inner_products() for _ in range(samples)]
    stop = threading.Event()

    def python_thread() -> None:
        while not stop.is_set():
            spin(1000)

    other = threading.Thread(target=python_thread, daemon=True)
    other.start()
    time.sleep(0.01)  # the other thread holds the GIL, running Python, as a BM25 search does
    try:
        beside = [inner_products() for _ in range(20)]
    finally:
        stop.set()
        other.join()
    return {
        "executor_submit_us": round(statistics.median(submits) * 1e6, 1),
        "executor_task_start_us": round(statistics.median(starts) * 1e6, 1),
        "faiss_call_alone_us": round(statistics.median(alone) * 1e6, 1),
        "faiss_call_beside_python_thread_us": round(statistics.median(beside) * 1e6, 1),
        "switch_interval_us": round(sys.getswitchinterval() * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fdata.add_dataset_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3, help="repetitions per query and row; the fastest counts")
    args = parser.parse_args(argv)
    fdata.check_datasets(args.datasets)  # every set found before the first runs
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    results: dict[str, Any] = {
        "top_k": fe.TOP_K,
        "candidate_multiplier": fe.MULTIPLIER,
        "repeats": args.repeats,
        "unit": "microseconds, p50 over queries",
        "datasets": {},
    }
    for name in args.datasets:
        data = fdata.load(name, class_key=args.class_key)
        name = data.name  # a set given by its path is named by its folder
        memory = fe.build_memory(data)
        started = time.perf_counter()
        table = measure(data, memory, args.repeats)
        memory.close()
        extra = {stage: round(table[DEFAULT_ROW][stage] - table[RRF_ROW][stage], 1) for stage in STAGES}
        headers = ["stage (µs, p50)", *(label for label, _ in ROWS), "default - rrf"]
        rows = [[stage, *(table[label][stage] for label, _ in ROWS), extra[stage]] for stage in STAGES]
        ratio = table[DEFAULT_ROW]["total"] / table[RRF_ROW]["total"]
        print(
            f"\n## {name}: {len(data.chunks)} chunks, {len(data.qrels)} queries "
            f"({time.perf_counter() - started:.0f} s); default / rrf total {ratio:.3f}"
        )
        print(common.format_table(rows, headers))
        results["datasets"][name] = {
            "chunks": len(data.chunks),
            "queries": len(data.qrels),
            "stages": table,
            "default_minus_rrf": extra,
            "default_over_rrf": round(ratio, 3),
        }
    context = handoff_costs()
    print("\n## thread hand-off on this machine (µs, p50)")
    print(common.format_table([[k, v] for k, v in context.items()], ["measure", "µs"]))
    results["handoff"] = context
    full = fdata.is_full_run(args.datasets)
    path = common.write_results("fusion_cost" if full else "fusion_cost_subset", results)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()
