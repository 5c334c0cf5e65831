"""Several processes on one memory: 1 writer and N readers on one directory, checked after every search.

Usage::

    python benchmarks/multiprocess.py                      # 30 s, 1 writer + 4 readers
    python benchmarks/multiprocess.py --seconds 3 --json out.json  # the unit suite's short run

The writer (its own process) upserts chunks one at a time, re-upserts an earlier chunk with new text
every 11th step and deletes an earlier chunk every 7th, appending ``A``/``U``/``D <chunk_id>`` to an
acknowledgement file only after the call returned (and ``P <chunk_id>`` just before a delete starts: its commit
is visible to other processes before the call returns). Each reader (its own process, its own
``HybridMemory`` on the same directory) loops: read the acknowledgements, then run a sparse-only search
for one bucket token (``bucketN``: 400 consecutive chunks share one), and check that

* every chunk of the bucket acknowledged before the search began is returned (visible within the next
  search call), and
* no chunk whose delete was acknowledged before the search began is returned (deletes never come back).

Every 25th search a reader also saves its indexes (``persist()``), so saves of several processes race;
at the end all five close at the same moment (a barrier). Uses the offline ``HashingEmbedder`` (64
dimensions): the point is coordination, not ranking. Zero errors, zero missing, zero resurrected is the
target. Prints a table and writes ``benchmarks/results/multiprocess.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

BUCKET = 400
DIM = 64


def _text(n: int, version: int = 0) -> str:
    return f"bucket{n // BUCKET} tok{n} version{version} shared words about memory number {n % 97}"


def _read_acks(path: Path, state: dict) -> None:
    """Read new complete lines of the acknowledgement file into state (offset, live, deleted, by bucket)."""
    with open(path, encoding="utf-8") as fh:
        fh.seek(state["offset"])
        data = fh.read()
    end = data.rfind("\n") + 1
    state["offset"] += len(data[:end].encode("utf-8"))
    for line in data[:end].splitlines():
        kind, chunk_id = line.split(" ", 1)
        n = int(chunk_id.removeprefix("c"))
        if kind in ("A", "U"):
            state["acked"].setdefault(n // BUCKET, set()).add(chunk_id)
        elif kind == "D":
            state["acked"].get(n // BUCKET, set()).discard(chunk_id)
            state["deleted"].add(chunk_id)
        elif kind == "P":  # a delete about to start: from here on the chunk may or may not show
            state["pending"].add(chunk_id)
            continue
        state["writes"] += 1


def writer(path: str, ack_path: str, seconds: float, start, stop_barrier, out) -> None:  # noqa: ANN001
    """Upsert / re-upsert / delete one chunk at a time for ``seconds``, acknowledging each after it returned."""
    result = {"role": "writer", "errors": [], "upserts": 0, "reupserts": 0, "deletes": 0}
    try:
        from hybrid_memory import HashingEmbedder, HybridMemory

        rng = random.Random(7)
        memory = HybridMemory(path, embedder=HashingEmbedder(DIM))
        live: list[int] = []
        start.wait()
        deadline = time.monotonic() + seconds
        with open(ack_path, "a", encoding="utf-8") as ack:
            n = 0
            while time.monotonic() < deadline:
                memory.upsert([{"chunk_id": f"c{n}", "text": _text(n)}])
                ack.write(f"A c{n}\n")
                ack.flush()
                live.append(n)
                result["upserts"] += 1
                if n % 11 == 10 and len(live) > 2:
                    m = rng.choice(live[:-1])
                    memory.upsert([{"chunk_id": f"c{m}", "text": _text(m, version=n)}])
                    ack.write(f"U c{m}\n")
                    ack.flush()
                    result["reupserts"] += 1
                if n % 7 == 6 and len(live) > 2:
                    m = live.pop(rng.randrange(len(live) - 1))
                    # a delete is visible to other processes once its commit lands, before delete() returns and
                    # "D" is written: "P" first, so a reader never counts a chunk it rightly missed as lost
                    ack.write(f"P c{m}\n")
                    ack.flush()
                    memory.delete([f"c{m}"])
                    ack.write(f"D c{m}\n")
                    ack.flush()
                    result["deletes"] += 1
                n += 1
        stop_barrier.wait()
        memory.close()
    except Exception:  # noqa: BLE001 - reported to the parent
        result["errors"].append(traceback.format_exc())
        stop_barrier.abort()
    out.put(result)


def reader(index: int, path: str, ack_path: str, seconds: float, start, stop_barrier, out) -> None:  # noqa: ANN001
    """Search bucket after bucket, checking every acknowledged write is visible and no delete comes back."""
    result = {
        "role": f"reader{index}",
        "errors": [],
        "searches": 0,
        "checked": 0,
        "missing": 0,
        "resurrected": 0,
        "persists": 0,
        "catch_up_ms": [],
    }
    try:
        from hybrid_memory import HashingEmbedder, HybridMemory

        rng = random.Random(index)
        start.wait()
        memory = HybridMemory.open(path, embedder=HashingEmbedder(DIM))
        state = {"offset": 0, "acked": {}, "deleted": set(), "pending": set(), "writes": 0}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            _read_acks(Path(ack_path), state)
            if not state["acked"]:
                continue
            newest = max(state["acked"])
            bucket = newest if rng.random() < 0.7 else rng.randint(0, newest)
            expected = set(state["acked"].get(bucket, ()))
            deleted = set(state["deleted"])
            t0 = time.perf_counter()
            response = memory.search(
                {
                    "search_text": f"bucket{bucket}",
                    "top_k": 1000,
                    "hybrid_params": {"dense_weight": 0.0, "sparse_weight": 1.0},
                }
            )
            result["catch_up_ms"].append((time.perf_counter() - t0) * 1000)
            found = {r.chunk_id for r in response.results}
            result["searches"] += 1
            result["checked"] += len(expected)
            _read_acks(Path(ack_path), state)  # a delete acknowledged during the search may or may not show
            missing = expected - found - state["deleted"] - state["pending"]
            back = found & deleted
            if missing or back:
                result["missing"] += len(missing)
                result["resurrected"] += len(back)
                if len(result["errors"]) < 5:
                    result["errors"].append(
                        f"bucket {bucket}: missing {sorted(missing)[:5]}, resurrected {sorted(back)[:5]}"
                    )
            if result["searches"] % 25 == 0:
                memory.persist()
                result["persists"] += 1
        result["acks_seen"] = state["writes"]
        stop_barrier.wait()
        memory.close()
    except Exception:  # noqa: BLE001 - reported to the parent
        result["errors"].append(traceback.format_exc())
        stop_barrier.abort()
    out.put(result)


def run(seconds: float, readers: int, folder: Path) -> dict:
    """Run 1 writer and ``readers`` readers on ``folder`` for ``seconds``; return every process's report."""
    from hybrid_memory import HashingEmbedder, HybridMemory

    memory_path = folder / "memory"
    ack_path = folder / "acks.txt"
    ack_path.write_text("")
    with HybridMemory(memory_path, embedder=HashingEmbedder(DIM)) as memory:  # created before anyone opens it
        memory.upsert([{"chunk_id": "seed", "text": "seed chunk"}])
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(readers + 1)
    stop = ctx.Barrier(readers + 1, timeout=seconds + 120)
    out = ctx.Queue()
    procs = [ctx.Process(target=writer, args=(str(memory_path), str(ack_path), seconds, start, stop, out))]
    procs += [
        ctx.Process(target=reader, args=(i, str(memory_path), str(ack_path), seconds, start, stop, out))
        for i in range(readers)
    ]
    for proc in procs:
        proc.start()
    reports = [out.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    with HybridMemory.open(memory_path, embedder=HashingEmbedder(DIM)) as memory:
        final_sync = memory.last_sync
        final_count = memory.count()
    return {
        "reports": reports,
        "final_open_sync": final_sync,
        "final_count": final_count,
        "exit_codes": [p.exitcode for p in procs],
    }


def summarise(outcome: dict) -> dict:
    """Totals over the readers: searches, ids checked, missing, resurrected, errors, search latency."""
    readers = [r for r in outcome["reports"] if r["role"].startswith("reader")]
    writer_report = next(r for r in outcome["reports"] if r["role"] == "writer")
    latencies = [ms / 1000 for r in readers for ms in r["catch_up_ms"]]
    return {
        "writes_acknowledged": writer_report["upserts"] + writer_report["reupserts"] + writer_report["deletes"],
        "upserts": writer_report["upserts"],
        "reupserts": writer_report["reupserts"],
        "deletes": writer_report["deletes"],
        "reader_searches": sum(r["searches"] for r in readers),
        "ids_checked": sum(r["checked"] for r in readers),
        "missing": sum(r["missing"] for r in readers),
        "resurrected": sum(r["resurrected"] for r in readers),
        "reader_persists": sum(r["persists"] for r in readers),
        "errors": sum(len(r["errors"]) for r in outcome["reports"]),
        "error_samples": [e for r in outcome["reports"] for e in r["errors"]][:5],
        "search_ms": common.latency_summary(latencies) if latencies else {},
        "exit_codes": outcome["exit_codes"],
        "final_open_rebuilt": any(v["rebuilt"] for v in outcome["final_open_sync"].values()),
        "final_count": outcome["final_count"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None, help="write the summary here instead of benchmarks/results/")
    args = parser.parse_args(argv)
    common.ensure_core_importable()
    with tempfile.TemporaryDirectory(prefix="hm-multiprocess-") as tmp:
        summary = summarise(run(args.seconds, args.readers, Path(tmp)))
    summary.update({"seconds": args.seconds, "readers": args.readers, "machine": common.machine_info()})
    rows = [
        [key, summary[key]]
        for key in (
            "writes_acknowledged",
            "upserts",
            "reupserts",
            "deletes",
            "reader_searches",
            "ids_checked",
            "missing",
            "resurrected",
            "reader_persists",
            "errors",
            "final_open_rebuilt",
            "final_count",
        )
    ]
    rows += [[f"reader search {k}", v] for k, v in summary["search_ms"].items()]
    print(common.format_table(rows, [f"1 writer + {args.readers} readers, {args.seconds:.0f} s", "value"]))
    if summary["error_samples"]:
        print("errors:", *summary["error_samples"], sep="\n", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    else:
        print("wrote", common.write_results("multiprocess", summary))
    return summary


if __name__ == "__main__":
    main()
