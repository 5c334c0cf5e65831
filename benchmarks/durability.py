"""Cost of ``synchronous="full"`` (fsync at every commit: a returned write survives power loss) against
``"normal"`` (survives a killed process only), for one-at-a-time upserts and 256-chunk batches.

Usage::

    python benchmarks/durability.py [--n 400] [--dir /path/on/the/disk/to/measure]

HashingEmbedder (64 dimensions), so only the store and the indexes count. The two modes alternate in
rounds in one run; reports the median per-upsert latency and the full/normal ratio. Writes
``benchmarks/results/durability.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402


def _measure(mode: str, n: int, batch: int, folder: Path) -> list[float]:
    from hybrid_memory import HashingEmbedder, HybridMemory

    times = []
    with (
        tempfile.TemporaryDirectory(dir=folder) as tmp,
        HybridMemory(tmp, embedder=HashingEmbedder(64), synchronous=mode) as memory,
    ):
        for i in range(n):
            chunks = [{"chunk_id": f"c{i}-{j}", "text": f"note {i} {j} about service {i % 7}"} for j in range(batch)]
            t0 = time.perf_counter()
            memory.upsert(chunks)
            times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="upserts per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=common.PROJECT_ROOT / "benchmarks" / ".cache")
    args = parser.parse_args(argv)
    common.ensure_core_importable()
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    rows = []
    for batch, n in ((1, args.n), (256, max(args.n // 20, 5))):
        per_mode: dict[str, list[float]] = {"full": [], "normal": []}
        for _ in range(args.rounds):
            for mode in ("normal", "full"):
                per_mode[mode] += _measure(mode, n, batch, args.dir)
        summary = {mode: common.latency_summary(t) for mode, t in per_mode.items()}
        ratio = statistics.median(per_mode["full"]) / statistics.median(per_mode["normal"])
        results[f"batch_{batch}"] = {**summary, "full_over_normal_p50": round(ratio, 2)}
        for mode in ("normal", "full"):
            rows.append([batch, mode, summary[mode]["p50_ms"], summary[mode]["p95_ms"], summary[mode]["mean_ms"]])
        rows.append([batch, "full / normal (p50)", round(ratio, 2), "", ""])
    print(common.format_table(rows, ["chunks per upsert", "synchronous", "p50 ms", "p95 ms", "mean ms"]))
    print("wrote", common.write_results("durability", {"dir": str(args.dir), **results}))
    return results


if __name__ == "__main__":
    main()
