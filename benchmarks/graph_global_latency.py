"""GraphRAG ``global_search`` latency: reading the chunk hashes at every call (before) against keeping what they
said while the memory's change position stays (after).

``global_search`` must not serve a report citing a chunk deleted or replaced since the graph was built, which needs
the scope's chunk hashes (``memory.chunk_hashes()``: one SQL read of every chunk of the scope). The index now keeps
its answer with the memory's change position (``Backend.change_position``, the change log's sequence on the
embedded backend) and reads again only when a write moved it. "before" is the path a backend without a position
takes (``change_position`` answering None, as on Qdrant), which is the code as it was: one read per call.

Data (seeded, no model, nothing from the network): ``--chunks`` (20,000) generated incident notes (10 services, 14
error codes, 10 functions, 6 tables, 120 hosts, 8-15 filler words), a quarter each in the scopes ``user_id=u0`` ..
``u3``, in a memory folder under a temporary directory (``HashingEmbedder(64)``); an unscoped graph over all of them
and a scoped graph over ``u0``'s view, both built with the offline path (``OfflineExtractor``, extractive reports).
Timed, interleaved call by call (``--calls`` each, default 30, after 3 warm-up calls): ``global_search`` of one
question (token budget 2,000) re-reading every call, cached (no write between calls), and, unscoped, with one
committed write (an upsert of a chunk no report cites) before each call; plus the raw reads: ``chunk_hashes()`` and
``_change_position()``. Each case also counts the hash reads per call and checks that both paths serve the same hits.

    python benchmarks/graph_global_latency.py [--chunks 20000] [--calls 30]

Prints a table and writes ``benchmarks/results/graph_global_latency.json``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402
from incremental_add import ERRORS, FUNCTIONS, SERVICES, TABLES, WORDS  # noqa: E402

SEED = 2027
QUESTION = "which services hit ERR_CONN_RESET on the production databases?"
SCOPES = ("u0", "u1", "u2", "u3")
WARMUP = 3


def make_chunks(n: int, seed: int = SEED) -> list[dict]:
    """``n`` chunk dicts (ids ``g-000000``...), a quarter in each scope of :data:`SCOPES`, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    chunks = []
    for i in range(n):
        service = SERVICES[rng.integers(len(SERVICES))]
        error = ERRORS[rng.integers(len(ERRORS))]
        function = FUNCTIONS[rng.integers(len(FUNCTIONS))]
        table = TABLES[rng.integers(len(TABLES))]
        host = f"db-{('prod', 'stag', 'dev')[rng.integers(3)]}-{rng.integers(1, 41)}"
        filler = " ".join(WORDS[j] for j in rng.integers(len(WORDS), size=int(rng.integers(8, 16))))
        chunks.append(
            {
                "chunk_id": f"g-{i:06d}",
                "text": f"{service} hit {error} on {host} in {function}() reading {table}; {filler}.",
                "user_id": SCOPES[i % len(SCOPES)],
            }
        )
    return chunks


class HashReads:
    """Counts the calls of a backend's ``chunk_hashes`` (every read of the memory and of its views goes there)."""

    def __init__(self, backend: Any) -> None:
        self.calls = 0
        read = backend.chunk_hashes

        def counting(scope: Any) -> dict[str, str]:
            self.calls += 1
            return read(scope)

        backend.chunk_hashes = counting


def position_unknown(backend: Any, unknown: bool) -> None:
    """Make ``backend.change_position`` answer None (what Qdrant answers: read every call), or restore it."""
    if unknown:
        backend.change_position = lambda: None
    else:
        backend.__dict__.pop("change_position", None)


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(n_chunks: int, n_calls: int) -> dict[str, Any]:
    """Build the memory and both graphs, time every case; returns the result payload."""
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.graph import GraphIndex

    chunks = make_chunks(n_chunks)
    out: dict[str, Any] = {"chunks": n_chunks, "calls": n_calls, "seed": SEED, "question": QUESTION}
    with tempfile.TemporaryDirectory(prefix="graph-global-latency-") as folder:
        memory = HybridMemory(Path(folder) / "memory", embedder=HashingEmbedder(64))
        with memory:
            started = time.perf_counter()
            with memory.bulk():
                memory.add(chunks)
            out["load_s"] = round(time.perf_counter() - started, 2)
            view = memory.scoped(user_id="u0")
            started = time.perf_counter()
            graphs = {"unscoped": GraphIndex.build(memory, save=False), "scoped u0": GraphIndex.build(view, save=False)}
            out["graph_build_s"] = round(time.perf_counter() - started, 2)
            out["graphs"] = {
                name: {k: g.stats()[k] for k in ("chunks", "entities", "edges", "reports_ok")}
                for name, g in graphs.items()
            }
            for graph in graphs.values():
                graph.prepare_search()
            backend = memory.backend
            reads = HashReads(backend)
            cases: dict[str, dict[str, Any]] = {}
            writes = iter(range(10**9))

            def write() -> None:  # a committed write no report cites: it moves the position, changes no answer
                memory.upsert([{"chunk_id": "bench-write", "text": f"tomato soup recipe number {next(writes)}"}])

            # (case, graph, position unknown, a write before each call); the cases of one phase run interleaved
            # call by call (load on the machine hits each alike); the writes run in a phase of their own, since
            # a write moves the position for every case after it
            phases: list[list[tuple[str, str, bool, bool]]] = [
                [
                    ("unscoped, re-read every call (before)", "unscoped", True, False),
                    ("unscoped, cached (after)", "unscoped", False, False),
                    ("scoped u0, re-read every call (before)", "scoped u0", True, False),
                    ("scoped u0, cached (after)", "scoped u0", False, False),
                ],
                [("unscoped, a write before each call", "unscoped", False, True)],
            ]
            plans = [plan for phase in phases for plan in phase]
            answers: dict[str, list[str]] = {}
            seconds: dict[str, list[float]] = {case: [] for case, *_ in plans}
            counted: dict[str, int] = dict.fromkeys(seconds, 0)
            for phase in phases:
                for rep in range(WARMUP + n_calls):
                    for case, name, unknown, with_write in phase:
                        graph = graphs[name]
                        if with_write:
                            write()
                        position_unknown(backend, unknown)
                        before = reads.calls
                        took = timed(lambda graph=graph, case=case: answers.__setitem__(case, _hits(graph)))
                        position_unknown(backend, False)
                        if rep >= WARMUP:
                            seconds[case].append(took)
                            counted[case] += reads.calls - before
            for case, name, _, _ in plans:
                cases[case] = {
                    "graph": name,
                    **common.latency_summary(seconds[case]),
                    "hash_reads_per_call": round(counted[case] / n_calls, 3),
                    "hits": answers[case],
                }
            for name in graphs:
                same = {tuple(c["hits"]) for c in cases.values() if c["graph"] == name}
                if len(same) != 1:
                    raise SystemExit(f"{name}: the cases served different hits: {same}")
            raw = {
                "chunk_hashes() unscoped": lambda: memory.chunk_hashes(),
                "chunk_hashes() scoped u0": lambda: view.chunk_hashes(),
                "_change_position()": lambda: memory._change_position(),
            }
            for case, fn in raw.items():
                for _ in range(WARMUP):
                    fn()
                cases[case] = {"graph": None, **common.latency_summary([timed(fn) for _ in range(n_calls)])}
    out["cases"] = cases
    return out


def _hits(graph: Any) -> list[str]:
    """Community ids ``global_search`` serves for :data:`QUESTION` (checked against the memory or view the graph
    was built with)."""
    return [h.community_id for h in graph.global_search(QUESTION, token_budget=2000).hits]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks in the memory (default 20000)")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per case (default 30)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    common.ensure_core_importable()
    payload = run(args.chunks, args.calls)
    cases = payload["cases"]
    rows = [
        [case, c["p50_ms"], c["p95_ms"], c.get("hash_reads_per_call", "")]
        for case, c in cases.items()
        if c["graph"] is not None
    ]
    rows += [[case, c["p50_ms"], c["p95_ms"], ""] for case, c in cases.items() if c["graph"] is None]
    print(
        f"{payload['chunks']} chunks (load {payload['load_s']} s, both graphs {payload['graph_build_s']} s): "
        + "; ".join(f"{name}: {g['chunks']} chunks, {g['reports_ok']} reports" for name, g in payload["graphs"].items())
    )
    print(common.format_table(rows, ["case", "p50 ms", "p95 ms", "hash reads / call"]))
    for name in payload["graphs"]:
        before = next(c for k, c in cases.items() if c["graph"] == name and k.endswith("(before)"))
        after = next(c for k, c in cases.items() if c["graph"] == name and k.endswith("(after)"))
        payload.setdefault("speedup_p50", {})[name] = round(before["p50_ms"] / after["p50_ms"], 2)
    print("p50 before / after: " + ", ".join(f"{k} {v}x" for k, v in payload["speedup_p50"].items()))
    path = common.write_results("graph_global_latency", payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
