"""Filtered search on Qdrant Edge: what the bool indexes on the present / null markers buy, and what they cost.

Usage::

    python benchmarks/qdrant_filter_latency.py               # 20,000 chunks
    python benchmarks/qdrant_filter_latency.py --n 5000      # quick

Why: the filter language's ``$exists``, ``null``, ``$ne`` and missing keys, a scope's unset fields, ``as_of``'s
open-ended validity and the dedup's exact-scope lookup all become ``is_empty`` conditions on a field's markers
(``hybrid_memory.backends.qdrant.filters.marker_paths``). Without a payload index on them, Qdrant reads every
point's payload to answer. The backend now indexes them as bool; this measures both layouts in one run.

How: two Qdrant Edge shards in temporary folders, each a ``HybridMemory.qdrant(edge_path=...)`` with
``indexed_keys={"team": "keyword"}``: one as this release opens it, one with the marker indexes deleted right
after opening (the layout of earlier releases). Both get the same ``--n`` chunks (seeded: short texts of two words from
ten, so that a word of the query is in a fifth of them; random
unit vectors of dimension 384 given with the chunks, a ``team`` of 10 values on two thirds of them, a
``user_id`` on half, a validity span on a tenth), bulk-added in batches of 2,000, then 50 single-chunk adds
each. Each search below runs ``--queries`` times per shard with a given query vector, the shards alternating
query by query; each mode's ids must be equal on both shards. Dedup's lookup is the backend's ``nearest`` (the
near-duplicate check of ``dedup="skip"``), exact scope with every field unset, validity covering now.

The texts are short and alike, so many chunks tie in BM25 at a candidate cut and each search reads the tie out
(``hybrid_memory.search.searcher.TIE_DEPTH_LIMIT``): absolute times are those of a templated memory; compare the two
shards' columns.

Prints p50 per mode and shard and the ratio; writes ``benchmarks/results/qdrant_filter_latency.json``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

DIM = 384
WORDS = ("disk", "latency", "network", "timeout", "memory", "cache", "queue", "auth", "billing", "retry")


def _chunks(start: int, stop: int) -> list[dict[str, Any]]:
    out = []
    for j in range(start, stop):
        text = f"note {j} on topic {j % 97}: {WORDS[j % len(WORDS)]} {WORDS[(7 * j + 3) % len(WORDS)]} after deploy"
        chunk: dict[str, Any] = {"chunk_id": f"c{j}", "text": text}
        if j % 3:
            chunk["metadata"] = {"team": f"t{j % 10}"}
        if j % 2:
            chunk["user_id"] = "u1"
        if j % 10 == 0:
            chunk["valid_from"], chunk["valid_to"] = 1.0e9, 1.5e9
        out.append(chunk)
    return out


def _open(path: Path, markers: bool) -> Any:
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.backends.qdrant.filters import marker_paths

    memory = HybridMemory.qdrant(edge_path=path, embedder=HashingEmbedder(DIM), indexed_keys={"team": "keyword"})
    if not markers:
        import qdrant_edge as qe
        from hybrid_memory.models import SCOPE_FIELDS, TIME_FIELDS

        paths = [p for f in SCOPE_FIELDS + TIME_FIELDS for p in marker_paths("s", f)] + marker_paths("m", "team")
        for p in paths:
            memory.backend.collection.shard.update(qe.UpdateOperation.delete_field_index(p))
    return memory


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="chunks per shard (default 20,000)")
    parser.add_argument("--queries", type=int, default=30, help="searches per mode and shard (default 30)")
    args = parser.parse_args(argv)
    if args.n < 2000 or args.queries < 1:
        parser.error("--n must be >= 2000 and --queries >= 1")
    common.ensure_core_importable()
    logging.basicConfig(level=logging.WARNING)
    try:
        import qdrant_edge  # noqa: F401
    except ImportError:
        sys.exit("qdrant-edge-py is not installed: pip install 'hybrid-memory[qdrant]'")

    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((args.n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[: args.queries] + 0.05 * rng.standard_normal((args.queries, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    shards = {"markers indexed": True, "markers unindexed": False}
    now = time.time()
    modes = {
        "no filter": {},
        "scope user_id=u1": {"scope": {"user_id": "u1"}},
        "as_of now": {"as_of": now},
        "team $exists false": {"metadata_filter": {"team": {"$exists": False}}},
        "team null": {"metadata_filter": {"team": None}},
        "team $ne t3": {"metadata_filter": {"team": {"$ne": "t3"}}},
        "team t3": {"metadata_filter": {"team": "t3"}},
    }
    unset = dict.fromkeys(("tenant", "user_id", "agent_id", "session_id"))
    with tempfile.TemporaryDirectory(prefix="hm-qdrant-filters-") as tmp:
        memories = {label: _open(Path(tmp) / f"shard{i}", markers) for i, (label, markers) in enumerate(shards.items())}
        load: dict[str, float] = {}
        adds: dict[str, list[float]] = {label: [] for label in shards}
        for label, memory in memories.items():
            started = time.perf_counter()
            for start in range(0, args.n - 50, 2000):
                stop = min(start + 2000, args.n - 50)
                memory.add(_chunks(start, stop), vectors=vectors[start:stop])
            load[label] = time.perf_counter() - started
        for j in range(args.n - 50, args.n):  # single-chunk adds, the shards alternating
            for label, memory in memories.items():
                started = time.perf_counter()
                memory.add(_chunks(j, j + 1), vectors=vectors[j : j + 1])
                adds[label].append(time.perf_counter() - started)
        times: dict[str, dict[str, list[float]]] = {
            mode: {label: [] for label in shards} for mode in [*modes, "dedup nearest"]
        }
        mismatches: list[str] = []
        for q in range(args.queries):
            vector = queries[q]
            for mode, params in modes.items():
                ids = {}
                for label in shards if q % 2 else reversed(list(shards)):
                    memory = memories[label]
                    request = {
                        "query_id": f"q{q}",
                        "search_text": "disk timeout",
                        "top_k": 10,
                        **{k: v for k, v in params.items() if k != "scope"},
                    }
                    started = time.perf_counter()
                    found = memory.search(request, query_vector=vector, scope=params.get("scope"))
                    times[mode][label].append(time.perf_counter() - started)
                    ids[label] = [r.chunk_id for r in found.results]
                if len({tuple(v) for v in ids.values()}) != 1:
                    mismatches.append(f"{mode} q{q}")
            near = {}
            for label in shards:
                started = time.perf_counter()
                near[label] = memories[label].backend.nearest(vector, unset, 5, span=(now, None))
                times["dedup nearest"][label].append(time.perf_counter() - started)
            if len({tuple(c for c, _, _ in v) for v in near.values()}) != 1:
                mismatches.append(f"dedup nearest q{q}")
        for memory in memories.values():
            memory.close()

    p50 = {
        mode: {label: round(statistics.median(t) * 1000, 2) for label, t in per.items()} for mode, per in times.items()
    }
    rows = [
        [mode, v["markers indexed"], v["markers unindexed"], round(v["markers unindexed"] / v["markers indexed"], 1)]
        for mode, v in p50.items()
    ]
    rows.append(
        [
            "bulk load (s)",
            round(load["markers indexed"], 2),
            round(load["markers unindexed"], 2),
            round(load["markers unindexed"] / load["markers indexed"], 2),
        ]
    )
    add_p50 = {label: round(statistics.median(t) * 1000, 2) for label, t in adds.items()}
    rows.append(
        [
            "single add (ms)",
            add_p50["markers indexed"],
            add_p50["markers unindexed"],
            round(add_p50["markers unindexed"] / add_p50["markers indexed"], 2),
        ]
    )
    print(f"\n## Qdrant Edge, {args.n:,} chunks: p50 in ms ({args.queries} searches per cell)")
    print(common.format_table(rows, ["mode", "markers indexed", "markers unindexed", "unindexed / indexed"]))
    print("same ids on both shards:", "yes" if not mismatches else f"NO: {mismatches[:5]}")
    results = {
        "n": args.n,
        "queries": args.queries,
        "p50_ms": p50,
        "bulk_load_seconds": load,
        "single_add_p50_ms": add_p50,
        "same_ids": not mismatches,
        "mismatches": mismatches,
    }
    path = common.write_results("qdrant_filter_latency", results)
    print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
