"""Crash test: SIGKILL a process that writes to a memory at a random moment, then check what survived.

Usage::

    python benchmarks/crash.py                    # 24 trials
    python benchmarks/crash.py --trials 5 --json out.json   # the unit suite's short run

Trial kinds, in rotation:

* ``upsert``: a child upserts chunks one at a time (BM25 merges run in the background, ``compact_min``
  40) and prints each chunk id after ``upsert()`` returned; it is killed after a random number of
  acknowledgements (1..150).
* ``cli``: ``hybrid-memory ingest`` of a 3,000-line JSONL file (batches of 256 upserts); killed once the
  store holds a random number of chunks. Acknowledged: whatever the store holds, which must be whole
  batches.
* ``close``: a child upserts 60-200 chunks, prints ``CLOSING`` and calls ``close()`` (saving the indexes);
  killed 0-40 ms later.
* ``close-mid-save``: as ``close``, but killed inside the save, after ``bm25`` was written to its temporary
  folder and before it was swapped in.

After each kill, a fresh process opens the memory and checks every acknowledged chunk: ``get()`` returns
it, it is rank 1 in a sparse-only search for its unique token, and it is in the dense-only top 10 for its
own text; that process then exits without closing (``os._exit``), the unclean exit again. Then the
memory is opened a second time, which must do no rebuild (the first reopen saved what it rebuilt).
HashingEmbedder (256 dimensions). Prints a table and writes ``benchmarks/results/crash.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

DIM = 256
KINDS = ("upsert", "cli", "close", "close-mid-save")


def chunk_text(i: int) -> str:
    """Chunk i's text: two tokens no other chunk has (``uniq<i>q`` and a scrambled one, so two chunks hash to
    the same HashingEmbedder vector only if both collide), and words many share."""
    return (
        f"uniq{i}q note w{(i * 7919) % 100_003}z about service {i % 13} and the {['db', 'cache', 'queue'][i % 3]} layer"
    )


_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {bench!r})
    from crash import chunk_text
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.engines.bm25.index import BM25Index
    path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "close-mid-save":
        original = BM25Index.save
        def save_then_wait(self, directory):
            original(self, directory)
            print("SAVED-TMP", flush=True)
            sys.stdin.readline()  # the parent kills us here: bm25 written, not yet swapped in
        BM25Index.save = save_then_wait
    memory = HybridMemory(path, embedder=HashingEmbedder({dim}), compact_min=40)
    for i in range(n):
        memory.upsert([{{"chunk_id": f"k{{i}}", "text": chunk_text(i)}}])
        print(f"k{{i}}", flush=True)
    print("CLOSING", flush=True)
    memory.close()
    print("CLOSED", flush=True)
    """
)

_VERIFY = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {bench!r})
    from crash import chunk_text
    from hybrid_memory import HashingEmbedder, HybridMemory
    path, acked = sys.argv[1], json.loads(sys.stdin.read())
    memory = HybridMemory.open(path, embedder=HashingEmbedder({dim}))
    report = {{"sync": memory.last_sync, "count": memory.count(), "lost": [], "not_rank1": [], "not_dense": []}}
    stored = {{c.chunk_id for c in memory.get(acked)}}
    report["lost"] = sorted(set(acked) - stored)
    for chunk_id in acked:
        i = int(chunk_id[1:])
        top = memory.search(f"uniq{{i}}q", top_k=1, dense_weight=0.0, sparse_weight=1.0).results
        if [r.chunk_id for r in top] != [chunk_id]:
            report["not_rank1"].append(chunk_id)
        dense = memory.search(chunk_text(i), top_k=10, dense_weight=1.0, sparse_weight=0.0).results
        if chunk_id not in [r.chunk_id for r in dense]:
            report["not_dense"].append(chunk_id)
    print(json.dumps(report), flush=True)
    os._exit(0)  # no close(): the second open must still not rebuild
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    core = str(common.PROJECT_ROOT / "core")
    if core not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (core, str(common.PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _count(path: Path) -> int:
    db = path / "store.sqlite3"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
    except sqlite3.Error:
        return 0


def _stored_ids(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path / 'store.sqlite3'}?mode=ro", uri=True, timeout=5) as conn:
        return [r[0] for r in conn.execute("SELECT chunk_id FROM chunks ORDER BY ord")]


def trial(kind: str, rng: random.Random, folder: Path) -> dict:
    """One kill and its checks; returns the trial's report."""
    env = _env()
    path = folder / "memory"
    bench = str(Path(__file__).resolve().parent)
    acked: list[str] = []
    started = time.perf_counter()
    if kind == "cli":
        corpus = folder / "corpus.jsonl"
        with open(corpus, "w", encoding="utf-8") as fh:
            for i in range(3000):
                fh.write(json.dumps({"_id": f"k{i}", "text": chunk_text(i)}) + "\n")
        target = rng.randint(1, 2700)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hybrid_memory.cli.app",
                "ingest",
                str(corpus),
                "--memory",
                str(path),
                "--hashing-dim",
                str(DIM),
                "-q",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        while proc.poll() is None and _count(path) < target:
            time.sleep(0.002)  # polling the store to choose the moment; nothing is proven by timing
        killed_at = f"store held >= {target} chunks"
        if proc.poll() is None:
            _kill(proc)
        acked = _stored_ids(path) if (path / "store.sqlite3").exists() else []
    else:
        n = rng.randint(1, 150) if kind == "upsert" else rng.randint(60, 200)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER.format(bench=bench, dim=DIM),
                str(path),
                kind,
                str(n + 50 if kind == "upsert" else n),
            ],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed_at = ""
        for line in proc.stdout:
            line = line.strip()
            if line.startswith("k"):
                acked.append(line)
                if kind == "upsert" and len(acked) >= n:
                    killed_at = f"after {n} acknowledged upserts"
                    break
            elif line == "CLOSING" and kind == "close":
                delay = rng.uniform(0, 0.04)
                time.sleep(delay)  # a random moment inside close(); the checks do not depend on it
                killed_at = f"{delay * 1000:.0f} ms into close()"
                break
            elif line == "SAVED-TMP":
                killed_at = "inside the save, bm25 written to its temporary folder"
                break
        _kill(proc)
    verify = subprocess.run(
        [sys.executable, "-c", _VERIFY.format(bench=bench, dim=DIM), str(path)],
        input=json.dumps(acked),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if verify.returncode != 0:
        return {"kind": kind, "killed": killed_at, "acked": len(acked), "open_error": verify.stderr[-2000:]}
    report = json.loads(verify.stdout.strip().splitlines()[-1])
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory.open(path, embedder=HashingEmbedder(DIM)) as memory:
        second = memory.last_sync
    return {
        "kind": kind,
        "killed": killed_at,
        "acked": len(acked),
        "stored_after": report["count"],
        "lost": len(report["lost"]),
        "not_rank1": len(report["not_rank1"]),
        "not_dense": len(report["not_dense"]),
        "first_open_rebuilt": sorted(k for k, v in report["sync"].items() if v["rebuilt"]),
        "second_open_rebuilt": sorted(k for k, v in second.items() if v["rebuilt"]),
        "whole_batches": kind != "cli" or report["count"] % 256 == 0 or report["count"] == 3000,
        "seconds": round(time.perf_counter() - started, 2),
    }


def run(trials: int, seed: int) -> list[dict]:
    """``trials`` trials, kinds in rotation, kill moments drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    reports = []
    for t in range(trials):
        with tempfile.TemporaryDirectory(prefix="hm-crash-") as tmp:
            reports.append(trial(KINDS[t % len(KINDS)], rng, Path(tmp)))
    return reports


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    common.ensure_core_importable()
    reports = run(args.trials, args.seed)
    ok = [r for r in reports if "open_error" not in r]
    summary = {
        "trials": len(reports),
        "open_errors": len(reports) - len(ok),
        "acknowledged": sum(r["acked"] for r in reports),
        "lost": sum(r["lost"] for r in ok),
        "not_rank1": sum(r["not_rank1"] for r in ok),
        "not_dense": sum(r["not_dense"] for r in ok),
        "second_open_rebuilds": sum(bool(r["second_open_rebuilt"]) for r in ok),
        "partial_cli_batches": sum(not r["whole_batches"] for r in ok),
        "reports": reports,
    }
    rows = [
        [
            r["kind"],
            r["killed"],
            r["acked"],
            r.get("lost", "-"),
            r.get("not_rank1", "-"),
            r.get("not_dense", "-"),
            ",".join(r.get("first_open_rebuilt", [])) or "-",
            ",".join(r.get("second_open_rebuilt", [])) or "-",
            "ERROR" if "open_error" in r else "ok",
        ]
        for r in reports
    ]
    print(
        common.format_table(
            rows,
            [
                "kind",
                "killed",
                "acked",
                "lost",
                "not rank 1",
                "not dense",
                "1st open rebuilt",
                "2nd open rebuilt",
                "open",
            ],
        )
    )
    print(common.format_table([[k, summary[k]] for k in summary if k != "reports"], ["total", "value"]))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    else:
        print("wrote", common.write_results("crash", summary))
    return summary


if __name__ == "__main__":
    main()
