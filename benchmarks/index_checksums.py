"""Open cost of the dense and BM25 index files' CRC-32 checks (issue 35, class 8).

Builds a dense index (``FaissIndex``, 384-d random unit vectors, exact: no IVF below its training size) and a
BM25 index (synthetic 30-token documents, one main segment) of ``--n`` chunks, saves both, then loads each
``--repeat`` times with the checks (as shipped) and without them (``verify_files`` replaced by a no-op, the
loader otherwise identical), alternating, in one run. Files are in the page cache (a second open of a memory),
so the checks cost CPU (zlib's CRC-32, blocks spread over ``_checksums.THREADS`` threads), not disk reads; on a
cold cache both variants read the files, the checked one all of them up front.

Usage: ``python benchmarks/index_checksums.py --n 100000``. Prints a table, writes
``benchmarks/results/index_checksums_<n>.json``. The 1M figure is extrapolated from the bytes checked (the
check is linear in bytes) unless ``--n 1000000`` is run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ensure_core_importable, format_table, machine_info, write_results  # noqa: E402

ensure_core_importable()

import hybrid_memory.engines.bm25.index as bm25_module  # noqa: E402
import hybrid_memory.engines.dense.index as dense_module  # noqa: E402
from hybrid_memory._checksums import THREADS  # noqa: E402
from hybrid_memory.engines.bm25.index import BM25Index  # noqa: E402
from hybrid_memory.engines.dense.index import FaissIndex  # noqa: E402


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(50_000)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dense = FaissIndex(384)
        ids = list(range(1, args.n + 1))
        for start in range(0, args.n, 50_000):
            block = rng.standard_normal((min(50_000, args.n - start), 384)).astype(np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            dense.add(ids[start : start + len(block)], block)
        dense.save(root / "dense")
        del dense
        sparse = BM25Index()
        picks = rng.zipf(1.3, size=(args.n, 30)) % len(words)
        sparse.build(ids, [" ".join(words[j] for j in row) for row in picks])
        sparse.save(root / "bm25")
        del sparse, picks
        sizes = {"dense": _bytes(root / "dense"), "bm25": _bytes(root / "bm25")}
        real = {m: m.verify_files for m in (dense_module, bm25_module)}
        timings: dict[str, dict[str, list[float]]] = {e: {"checked": [], "unchecked": []} for e in sizes}
        for _ in range(args.repeat):
            for variant in ("checked", "unchecked"):
                for module in real:
                    module.verify_files = real[module] if variant == "checked" else (lambda *a, **k: None)
                t0 = time.perf_counter()
                assert FaissIndex(384).load(root / "dense")
                timings["dense"][variant].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                assert BM25Index().load(root / "bm25")
                timings["bm25"][variant].append(time.perf_counter() - t0)
        for module, fn in real.items():
            module.verify_files = fn
    rows: list[list[str]] = []
    payload: dict = {"n": args.n, "repeat": args.repeat, "threads": THREADS, "machine": machine_info(), "engines": {}}
    for engine, by in timings.items():
        checked, unchecked = statistics.median(by["checked"]), statistics.median(by["unchecked"])
        extra = checked - unchecked
        per_gb = extra / (sizes[engine] / 1e9)
        at_1m = per_gb * sizes[engine] / 1e9 * (1_000_000 / args.n)
        payload["engines"][engine] = {
            "bytes": sizes[engine],
            "open_checked_s": round(checked, 4),
            "open_unchecked_s": round(unchecked, 4),
            "check_s": round(extra, 4),
            "check_s_per_gb": round(per_gb, 3),
            "check_s_at_1m_extrapolated": round(at_1m, 2),
        }
        rows.append(
            [
                engine,
                f"{sizes[engine] / 1e6:.0f}",
                f"{unchecked * 1e3:.0f}",
                f"{checked * 1e3:.0f}",
                f"{extra * 1e3:.0f}",
                f"{per_gb:.2f}",
                f"{at_1m:.2f}",
            ]
        )
    print(f"index open with and without CRC-32 checks, n={args.n:,}, median of {args.repeat}, {THREADS} threads")
    print(
        format_table(
            rows,
            [
                "engine",
                "MB",
                "open ms (no check)",
                "open ms (checked)",
                "check ms",
                "s/GB",
                "check s at 1M (extrapolated)",
            ],
        )
    )
    print(f"results: {write_results(f'index_checksums_{args.n}', payload)}")


if __name__ == "__main__":
    main()
