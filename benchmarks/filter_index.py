"""Metadata filter resolution: the in-memory filter index against the SQL reference, per filter shape.

Usage::

    python benchmarks/filter_index.py --n 100000
    python benchmarks/filter_index.py --n 1000000 --sql-repeats 3

Data: ``--n`` synthetic chunks written to an in-memory SQLite store (no text index, no embedding), with
metadata as in issue 8: ``tenant`` of 100 values (uniform), ``env`` of 3 (prod 50%, staging 40%, dev 10%),
``sev`` 0-4 (uniform), ``shard`` 0-9999 (uniform, for a 0.01% filter), ``labels`` a list of 1-3 of 8 labels,
``ts`` a float time (near-unique). Seeded, deterministic.

Measured, per filter shape (p50 / p95 over ``--repeats`` calls, ms):

* ``index``: ``FilterIndex.resolve`` with the cache cleared before each call (what a search pays after a write);
* ``index+ids``: the same plus materialising the sorted int64 ids and the dense mask the engines read;
* ``cached``: a repeated filter with no write in between (a dictionary lookup);
* ``sql``: ``SQLiteStore.filter_rowids`` (the SQL reference, a json_each scan of every row), ``--sql-repeats``.

Also: the index build time from the store (one SQL pass, as when no saved index is usable), the resident
memory it adds, the time to save it and to load it (what an open pays), its size on disk, and the median
cost of applying a single-chunk ChangeSet (add, metadata update, delete). Target (issue 8): resolution
<= 5 ms at 1M chunks for equality and ``$in`` filters. Prints a table and writes
``benchmarks/results/filter_index_<n>.json``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

common.ensure_core_importable()

from hybrid_memory.backends.embedded.filter_index import FilterIndex  # noqa: E402
from hybrid_memory.backends.embedded.store import SQLiteStore  # noqa: E402
from hybrid_memory.changes import ChangeSet  # noqa: E402

LABELS = ["db", "network", "oncall", "auth", "billing", "search", "cache", "queue"]
TARGET_MS = 5.0


def filters(n: int, ts_cut: float) -> dict[str, dict]:
    """Filter shapes by name; the name says the expected share of matching chunks."""
    return {
        "eq env=prod (50%)": {"env": "prod"},
        "eq tenant (1%)": {"tenant": "t7"},
        "eq shard (0.01%)": {"shard": 17},
        "$in 10 tenants (10%)": {"tenant": {"$in": [f"t{i}" for i in range(10)]}},
        "$in 1000 shards (10%)": {"shard": {"$in": list(range(1000))}},
        "list $in labels (~60%)": {"labels": {"$in": ["db", "network"]}},
        "$ne env (50%)": {"env": {"$ne": "prod"}},
        "range sev>=3 (40%)": {"sev": {"$gte": 3}},
        "range ts (10%)": {"ts": {"$gte": ts_cut}},
        "and env+sev+label (~5%)": {"$and": [{"env": "prod"}, {"sev": {"$gte": 3}}, {"labels": "db"}]},
        "or of tenants (2%)": {"$or": [{"tenant": "t1"}, {"tenant": "t2"}]},
        "$not tenant (99%)": {"$not": {"tenant": "t7"}},
    }


def make_metadata(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 100, n)
    env = rng.choice(np.array(["prod", "staging", "dev"]), n, p=[0.5, 0.4, 0.1])
    sev = rng.integers(0, 5, n)
    shard = rng.integers(0, 10_000, n)
    n_labels = rng.integers(1, 4, n)
    label_ids = rng.integers(0, len(LABELS), (n, 3))
    ts = rng.uniform(1.7e9, 1.8e9, n)
    return [
        {
            "tenant": f"t{tenant[i]}",
            "env": str(env[i]),
            "sev": int(sev[i]),
            "shard": int(shard[i]),
            "labels": sorted({LABELS[j] for j in label_ids[i, : n_labels[i]]}),
            "ts": float(ts[i]),
        }
        for i in range(n)
    ]


def fill_store(metadatas: list[dict]) -> SQLiteStore:
    """Rows written straight into the chunks table (text and vector are irrelevant to filters)."""
    import json

    store = SQLiteStore(None)
    with store._lock, store._conn:
        store._conn.executemany(
            "INSERT INTO chunks (chunk_id, text, metadata, content_hash, created_at, updated_at)"
            " VALUES (?, 't', ?, '', 0, 0)",
            ((f"c{i}", json.dumps(m, ensure_ascii=False)) for i, m in enumerate(metadatas)),
        )
    return store


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def time_calls(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--sql-repeats", type=int, default=5)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    metadatas = make_metadata(args.n)
    store = fill_store(metadatas)
    fill_s = time.perf_counter() - t0
    ts_cut = float(np.quantile([m["ts"] for m in metadatas], 0.9))
    del metadatas
    gc.collect()

    before = rss_mb()
    index = FilterIndex()
    t0 = time.perf_counter()
    index.rebuild(store.filter_rows())
    build_s = time.perf_counter() - t0
    gc.collect()
    index_mb = rss_mb() - before
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        index.save(Path(folder) / "filters", seq=0)
        save_s = time.perf_counter() - t0
        disk_mb = sum(f.stat().st_size for f in (Path(folder) / "filters").iterdir()) / 2**20
        loaded = FilterIndex()
        t0 = time.perf_counter()
        loaded.load(Path(folder) / "filters")
        load_s = time.perf_counter() - t0
        del loaded

    rows, payload_rows = [], []
    for name, flt in filters(args.n, ts_cut).items():

        def uncached(flt=flt):
            index.clear_cache()
            return index.resolve(flt)

        def with_ids(flt=flt):
            index.clear_cache()
            result = index.resolve(flt)
            result.ids  # noqa: B018 - materialise
            result.mask()
            return result

        matched = len(uncached())
        for _ in range(3):
            uncached()  # warm-up
        idx = common.latency_summary(time_calls(uncached, args.repeats))
        ids = common.latency_summary(time_calls(with_ids, max(5, args.repeats // 5)))
        index.resolve(flt)
        cached = common.latency_summary(time_calls(lambda flt=flt: index.resolve(flt), args.repeats))
        sql_rowids = store.filter_rowids(flt)
        assert len(sql_rowids) == matched and np.array_equal(sql_rowids, index.resolve(flt).ids), name
        sql = common.latency_summary(time_calls(lambda flt=flt: store.filter_rowids(flt), args.sql_repeats))
        share = matched / args.n
        rows.append(
            [
                name,
                f"{100 * share:.2f}%",
                idx["p50_ms"],
                idx["p95_ms"],
                ids["p50_ms"],
                cached["p50_ms"],
                sql["p50_ms"],
                round(sql["p50_ms"] / max(idx["p50_ms"], 1e-6)),
            ]
        )
        payload_rows.append(
            {
                "filter": name,
                "query": repr(flt)[:200],
                "matched": matched,
                "share": share,
                "index": idx,
                "index_with_ids_and_mask": ids,
                "cached": cached,
                "sql": sql,
            }
        )

    # single-chunk changes through the ChangeSet funnel
    next_rowid = int(store.rowids()[-1]) + 1
    adds, updates, deletes = [], [], []
    rng = np.random.default_rng(1)
    for i in range(500):
        meta = {"tenant": f"t{i % 100}", "env": "prod", "sev": i % 5, "shard": i, "labels": ["db"], "ts": 1.75e9 + i}
        change = ChangeSet(
            added_rowids=[next_rowid + i],
            added_texts=["t"],
            added_vectors=np.zeros((1, 1), np.float32),
            added_metadata=[meta],
        )
        start = time.perf_counter()
        index.apply(change)
        adds.append(time.perf_counter() - start)
        target = int(rng.integers(1, args.n))
        start = time.perf_counter()
        index.apply(ChangeSet(metadata_updated=[(target, {**meta, "sev": (i + 1) % 5})]))
        updates.append(time.perf_counter() - start)
        start = time.perf_counter()
        index.apply(ChangeSet(removed=[next_rowid + i]))
        deletes.append(time.perf_counter() - start)
    changes = {
        "add": common.latency_summary(adds),
        "metadata_update": common.latency_summary(updates),
        "delete": common.latency_summary(deletes),
    }

    headers = ["filter", "matched", "index p50", "index p95", "+ids+mask p50", "cached p50", "sql p50", "sql/index"]
    print(f"\nfilter resolution at n = {args.n:,} (ms; index uncached = cache cleared before each call)\n")
    print(common.format_table(rows, headers))
    print(
        f"\nindex build from the store (one SQL pass): {build_s:.2f} s, +{index_mb:.0f} MB RSS "
        f"(store filled in {fill_s:.1f} s); {index.stats()['terms']:,} terms"
    )
    print(f"saved index: {disk_mb:.0f} MB on disk, save {save_s:.2f} s, load at open {load_s:.2f} s")
    print(
        "single-chunk ChangeSet apply, p50 / p95 ms: "
        + ", ".join(f"{k} {v['p50_ms']:.3f} / {v['p95_ms']:.3f}" for k, v in changes.items())
    )
    eq_in = [r for r in payload_rows if r["filter"].startswith(("eq ", "$in "))]
    worst = max(r["index"]["p50_ms"] for r in eq_in)
    met = worst <= TARGET_MS
    print(
        f"target: equality and $in resolution p50 <= {TARGET_MS} ms: worst {worst:.3f} ms -> "
        f"{'met' if met else 'MISSED'}"
    )
    path = common.write_results(
        f"filter_index_{args.n}",
        {
            "n": args.n,
            "repeats": args.repeats,
            "sql_repeats": args.sql_repeats,
            "build_s": round(build_s, 3),
            "index_rss_mb": round(index_mb, 1),
            "store_fill_s": round(fill_s, 2),
            "save_s": round(save_s, 3),
            "load_s": round(load_s, 3),
            "disk_mb": round(disk_mb, 1),
            "index_stats": index.stats(),
            "filters": payload_rows,
            "changes": changes,
            "target": {"eq_in_p50_ms_max": TARGET_MS, "worst_eq_in_p50_ms": worst, "met": met},
            "median_speedup_vs_sql": statistics.median(
                r["sql"]["p50_ms"] / max(r["index"]["p50_ms"], 1e-6) for r in payload_rows
            ),
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
