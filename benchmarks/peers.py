"""Peers side by side: what a user would pick instead of hybrid-memory, on the same data, vectors and top 10.

Usage::

    python benchmarks/peers.py                                   # the four sets; writes results/peers.json
    python benchmarks/peers.py --datasets hotpotqa100 --repeats 1 # one set (writes results/peers_subset.json)

Needs the ``bench`` extra: ``pip install 'hybrid-memory[bench]'`` (langchain-classic, langchain-community,
rank-bm25, llama-index-retrievers-bm25, matplotlib, ranx).

Systems (every one sees the same chunk texts and the same cached all-MiniLM-L6-v2 document vectors; nobody
re-embeds the corpus; every one returns its top 10):

* ``hybrid-memory BM25`` / ``dense`` / ``RRF`` / ``default``: one in-memory :class:`hybrid_memory.HybridMemory`
  per set, loaded in bulk with the cached vectors, searched through ``HybridMemory.search`` with
  ``hybrid_params`` ``{"dense_weight": 0}``, ``{"sparse_weight": 0}``, ``{"fusion": "rrf"}`` and nothing (the
  default fusion). Library defaults otherwise (``candidate_multiplier`` 2: 20 candidates per engine).
* ``LangChain EnsembleRetriever``: ``BM25Retriever.from_documents(docs, k=20)`` (langchain-community, rank_bm25's
  ``BM25Okapi``, its default ``preprocess_func``: ``str.split``) and ``FAISS.from_documents(docs, embeddings)``
  (langchain-community's default flat L2 index; the vectors are unit length, so its order is cosine order) as
  ``as_retriever(search_kwargs={"k": 20})``, fused by ``EnsembleRetriever(retrievers=[bm25, faiss],
  weights=[0.5, 0.5])`` (langchain-classic; weighted RRF with its default ``c=60``, 1-based ranks, documents
  identified by ``page_content`` as its default ``id_key=None`` does); the first 10 of the fused list count.
  That is the configuration of LangChain's own EnsembleRetriever how-to, with k raised to the library's depth.
* ``LlamaIndex QueryFusionRetriever``: ``VectorStoreIndex(nodes, embed_model=...)`` (the default in-memory
  ``SimpleVectorStore``: a typical user's first index, and the LlamaIndex store that applies metadata filters)
  as ``as_retriever(similarity_top_k=20)`` and ``BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=20)``
  (llama-index-retrievers-bm25: bm25s with English stop words and PyStemmer), fused by
  ``QueryFusionRetriever([vector, bm25], similarity_top_k=10, num_queries=1, mode="reciprocal_rerank",
  use_async=True)`` (``num_queries=1``: no LLM query generation, so its ``llm`` is a ``MockLLM`` that is never
  called; RRF with ``k=60`` over 0-based ranks; nodes identified by their content hash). That is the
  configuration of LlamaIndex's "Reciprocal Rerank Fusion Retriever" example without the generated queries.
  The nodes exclude their metadata from the text the index embeds and BM25 tokenises
  (``excluded_embed_metadata_keys``), so they index the same text as the other systems.

Query embedding: every system embeds each query live, once per search, with the same
``OnnxEmbedder`` object (the default: all-MiniLM-L6-v2 on ONNX Runtime, CPU): hybrid-memory through its own embedder,
the peers through a LangChain ``Embeddings`` / LlamaIndex ``BaseEmbedding`` whose query method calls it and whose
document method looks the cached vector up by text. The latency columns therefore include the query embedding
(except the BM25-only row, which needs none). A counting wrapper checks the number of embeddings per search.

Filters (LoCoMo-5: ``{"conversation": id}`` on every query; TechDocs' ``filtered`` class: ``{"package": name}``):

* hybrid-memory: the request's ``metadata_filter``;
* LangChain: FAISS filters (``search_kwargs["filter"]``, with ``fetch_k`` set to the corpus size so the
  post-filter sees every document: its default ``fetch_k=20`` would filter the 20 nearest of the whole corpus);
  ``BM25Retriever`` has no metadata filter, so each filter value gets its own ``BM25Retriever`` over the matching
  documents (the workaround a user writes; its idf is that partition's);
* LlamaIndex: both legs take ``MetadataFilters`` (``SimpleVectorStore`` pre-filters; the BM25 retriever builds a
  weight mask at construction), so one retriever pair per filter value is built ahead.
Retrievers per filter value are built before timing; building is not part of any latency.

Timing: after a warm-up of 3 queries, every query runs every system (and a row that only embeds the query, the floor
under every row that embeds) ``--repeats`` times (2 by default) in an
order shuffled with a fixed seed; the fastest counts (as ``timeit`` advises on a shared machine). p50 and p95
over the queries, in ms, from query text to the list of ids. nDCG@10 and recall@10 by ranx. A set with more than
``--max-queries`` queries (default 300) is subsampled deterministically (``random.Random(SEED)``, kept in qrels
order); the table and the JSON say so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import random
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import _fusion_data as fdata

TOP_K = 10
DEPTH = 20
"""Candidates per leg for every system: hybrid-memory's default ``candidate_multiplier`` 2 x ``top_k`` 10."""
WARMUP = 3
SEED = 20261206
MAX_QUERIES = 300

LIBRARY_ROWS: tuple[tuple[str, dict[str, Any] | None], ...] = (
    ("hybrid-memory BM25", {"dense_weight": 0.0, "sparse_weight": 1.0, "fusion": "rrf"}),
    ("hybrid-memory dense", {"dense_weight": 1.0, "sparse_weight": 0.0, "fusion": "rrf"}),
    ("hybrid-memory RRF", {"fusion": "rrf"}),
    ("hybrid-memory default", None),
)
EMBED_ONLY = "query embedding alone"
"""A timed row that only embeds the query (``embed_query``, the same object): the floor under every row that embeds."""
LANGCHAIN = "LangChain EnsembleRetriever"
LLAMAINDEX = "LlamaIndex QueryFusionRetriever"
SYSTEMS = tuple(label for label, _ in LIBRARY_ROWS) + (LANGCHAIN, LLAMAINDEX)

PEER_PACKAGES = (
    "langchain-core",
    "langchain-classic",
    "langchain-community",
    "rank-bm25",
    "faiss-cpu",
    "llama-index-core",
    "llama-index-retrievers-bm25",
    "bm25s",
    "PyStemmer",
    "sentence-transformers",
    "torch",
)

FILTER_SUPPORT = {
    "hybrid-memory": "metadata_filter on the request (both engines)",
    LANGCHAIN: "FAISS leg: search_kwargs filter with fetch_k = corpus size; BM25Retriever has no metadata filter, "
    "so one BM25Retriever per filter value over the matching documents",
    LLAMAINDEX: "both legs: MetadataFilters (SimpleVectorStore pre-filter; BM25Retriever weight mask), one retriever "
    "pair per filter value",
}

NOTES = [
    "every system: the same chunk texts, the same cached document vectors, top 10, 20 candidates per leg",
    (
        "LangChain's BM25Retriever tokenises with its default preprocess_func, str.split (case and punctuation kept); "
        "hybrid-memory RRF is the same fusion (RRF, k=60, equal weights, the same dense list) over bm25s with stemming "
        "and stop words, so those two rows differ in the BM25 leg (tokenizer; rank_bm25 vs bm25s; a partition's idf "
        "under a filter), not in the fusion"
    ),
    (
        "LlamaIndex ranks from 0 in RRF (the top item scores 1/60) and identifies nodes by content hash; LangChain "
        "identifies documents by page_content"
    ),
    (
        "latency: query text to ids, the live query embedding included (BM25-only row: none needed); a shared 2-core "
        "machine, so compare systems within a set, not runs"
    ),
]


class CountingEmbedder:
    """Wraps the core's embedder and counts ``embed_query`` calls (a check that every system embeds once)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.queries = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("peers.py passes every document vector; no document may be embedded")

    def embed_query(self, text: str) -> np.ndarray:
        """float32 (dim,): the live query embedding of the wrapped embedder."""
        self.queries += 1
        return np.asarray(self.inner.embed_query(text), dtype=np.float32)


def simple_filter(filt: dict[str, Any]) -> dict[str, Any]:
    """The filter as ``{key: scalar}``; exits if it uses operators (only equality is translated to the peers)."""
    if not all(isinstance(v, (str, int, float, bool)) for v in filt.values()):
        raise SystemExit(f"peers.py translates equality filters only, got {filt!r}")
    return dict(filt)


def filter_key(filt: dict[str, Any] | None) -> str:
    return "" if filt is None else json.dumps(filt, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# systems: each is a callable (query text, filter or None) -> chunk ids, best first, at most TOP_K


def build_library(data: fdata.EvalSet, embedder: CountingEmbedder) -> tuple[Any, dict[str, Callable[..., list[str]]]]:
    """One in-memory HybridMemory with the set's chunks and cached vectors; a search callable per library row."""
    from hybrid_memory import HybridMemory

    memory = HybridMemory(None, embedder=embedder)
    with memory.bulk():
        for i in range(0, len(data.chunks), 2000):
            memory.add(data.chunks[i : i + 2000], vectors=data.doc_vectors[i : i + 2000])
    memory.flush()

    def searcher(params: dict[str, Any] | None) -> Callable[..., list[str]]:
        def search(text: str, filt: dict[str, Any] | None) -> list[str]:
            req: dict[str, Any] = {"search_text": text, "top_k": TOP_K}
            if params is not None:
                req["hybrid_params"] = params
            if filt is not None:
                req["metadata_filter"] = filt
            return [r.chunk_id for r in memory.search(req).results]

        return search

    return memory, {label: searcher(params) for label, params in LIBRARY_ROWS}


def build_langchain(
    data: fdata.EvalSet, embedder: CountingEmbedder, filters: list[dict[str, Any]]
) -> Callable[..., list[str]]:
    """LangChain's EnsembleRetriever over BM25Retriever + FAISS (see the module docstring for the settings)."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    table = {c["text"]: data.doc_vectors[i] for i, c in enumerate(data.chunks)}

    class CachedEmbeddings(Embeddings):
        """Documents: the cached vector of the text; queries: the shared embedder, live."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [table[t].tolist() for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return embedder.embed_query(text).tolist()

    docs = [
        Document(page_content=c["text"], metadata={**c["metadata"], "chunk_id": c["chunk_id"]}, id=c["chunk_id"])
        for c in data.chunks
    ]
    store = FAISS.from_documents(docs, CachedEmbeddings())

    def ensemble(bm25_docs: list[Any], filt: dict[str, Any] | None) -> Any:
        bm25 = BM25Retriever.from_documents(bm25_docs, k=DEPTH)
        kwargs: dict[str, Any] = {"k": DEPTH}
        if filt is not None:
            kwargs.update(filter=filt, fetch_k=len(docs))
        return EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs=kwargs)], weights=[0.5, 0.5])

    retrievers = {"": ensemble(docs, None)}
    for filt in filters:
        subset = [d for d in docs if all(d.metadata.get(k) == v for k, v in filt.items())]
        retrievers[filter_key(filt)] = ensemble(subset, filt)

    def search(text: str, filt: dict[str, Any] | None) -> list[str]:
        found = retrievers[filter_key(filt)].invoke(text)
        return [d.metadata["chunk_id"] for d in found[:TOP_K]]

    return search


def build_llamaindex(
    data: fdata.EvalSet, embedder: CountingEmbedder, filters: list[dict[str, Any]]
) -> Callable[..., list[str]]:
    """LlamaIndex's QueryFusionRetriever over a VectorStoreIndex + BM25Retriever (settings in the module docstring)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters
    from llama_index.retrievers.bm25 import BM25Retriever

    table = {c["text"]: data.doc_vectors[i] for i, c in enumerate(data.chunks)}

    class CachedEmbedding(BaseEmbedding):
        """Texts: the cached vector of the text; queries: the shared embedder, live."""

        def _get_text_embedding(self, text: str) -> list[float]:
            return table[text].tolist()

        def _get_query_embedding(self, query: str) -> list[float]:
            return embedder.embed_query(query).tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    embed_model = CachedEmbedding(model_name=embedder.name, embed_batch_size=256)
    nodes = [
        TextNode(
            id_=c["chunk_id"],
            text=c["text"],
            metadata=dict(c["metadata"]),
            excluded_embed_metadata_keys=list(c["metadata"]),
            excluded_llm_metadata_keys=list(c["metadata"]),
        )
        for c in data.chunks
    ]
    from llama_index.core.schema import MetadataMode

    shown = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    if shown != [c["text"] for c in data.chunks]:
        raise SystemExit("LlamaIndex nodes would index text other than the chunk text (metadata not excluded)")
    index = VectorStoreIndex(nodes, embed_model=embed_model)
    llm = MockLLM()

    def fusion(filt: dict[str, Any] | None) -> Any:
        mf = (
            None if filt is None else MetadataFilters(filters=[MetadataFilter(key=k, value=v) for k, v in filt.items()])
        )
        vector = index.as_retriever(similarity_top_k=DEPTH, filters=mf)
        bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=DEPTH, filters=mf)
        return QueryFusionRetriever(
            [vector, bm25], llm=llm, similarity_top_k=TOP_K, num_queries=1, mode="reciprocal_rerank", use_async=True
        )

    retrievers = {"": fusion(None)}
    for filt in filters:
        retrievers[filter_key(filt)] = fusion(filt)

    def search(text: str, filt: dict[str, Any] | None) -> list[str]:
        return [n.node.node_id for n in retrievers[filter_key(filt)].retrieve(text)[:TOP_K]]

    return search


# ---------------------------------------------------------------------------------------------


def subsample(qids: list[str], limit: int | None) -> list[str]:
    """At most ``limit`` query ids, drawn with ``random.Random(SEED)`` and kept in their original order."""
    if limit is None or len(qids) <= limit:
        return qids
    keep = set(random.Random(SEED).sample(qids, limit))
    return [q for q in qids if q in keep]


def run_set(
    data: fdata.EvalSet,
    qids: list[str],
    systems: dict[str, Callable[..., list[str]]],
    embedder: CountingEmbedder,
    repeats: int,
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, list[float]], dict[str, float]]:
    """Every system on every query; returns (runs, seconds per query per system, query embeddings per search)."""
    runs: dict[str, dict[str, dict[str, float]]] = {label: {} for label in systems}
    seconds: dict[str, list[float]] = {label: [] for label in systems}
    embeds: dict[str, int] = {label: 0 for label in systems}
    calls: dict[str, int] = {label: 0 for label in systems}
    warm = qids[:WARMUP]
    for i, qid in enumerate(warm + qids):
        text, filt = data.queries[qid], data.query_filter.get(qid)
        best: dict[str, float] = {}
        for rep in range(repeats):
            order = list(systems)
            random.Random(f"{data.name}:{i}:{rep}").shuffle(order)
            for label in order:
                before = embedder.queries
                t0 = time.perf_counter()
                ids = systems[label](text, filt)
                elapsed = time.perf_counter() - t0
                embeds[label] += embedder.queries - before
                calls[label] += 1
                best[label] = min(elapsed, best.get(label, elapsed))
                if rep == 0 and i >= len(warm):
                    runs[label][qid] = {cid: float(len(ids) - j) for j, cid in enumerate(dict.fromkeys(ids))}
        if i >= len(warm):
            for label, elapsed in best.items():
                seconds[label].append(elapsed)
    return runs, seconds, {label: embeds[label] / calls[label] for label in systems}


def versions() -> dict[str, str]:
    out = {}
    for name in PEER_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=common.PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    out["hybrid-memory (git)"] = commit
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=list(fdata.DATASETS),
        choices=fdata.DATASETS,
        metavar="SET",
        help=f"sets to run: {', '.join(fdata.DATASETS)} (default: all four)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of every system per query; fastest counts")
    parser.add_argument(
        "--max-queries",
        type=int,
        default=MAX_QUERIES,
        help=f"subsample larger sets to this many queries, deterministically (default {MAX_QUERIES}; 0: all)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # langchain-community's sunset notice
    common.ensure_core_importable()
    for name in ("bm25s", "llama_index", "langchain_community", "faiss"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import langchain_classic  # noqa: F401
        import langchain_community  # noqa: F401
        import llama_index.retrievers.bm25  # noqa: F401
        import rank_bm25  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"peers.py needs the peers: pip install 'hybrid-memory[bench]' ({exc})") from exc

    embedder = CountingEmbedder(common.make_embedder("minilm"))
    results: dict[str, Any] = {
        "top_k": TOP_K,
        "depth_per_leg": DEPTH,
        "repeats": args.repeats,
        "warmup_queries": WARMUP,
        "query_embedding": f"live, once per search, {embedder.name} (the core's default OnnxEmbedder, CPU), "
        "the same object for every system; latency includes it (not the BM25-only row, which needs "
        "none)",
        "document_vectors": "cached all-MiniLM-L6-v2 vectors (benchmarks/.cache), the same rows for every system",
        "systems": list(SYSTEMS),
        "filter_support": FILTER_SUPPORT,
        "notes": NOTES,
        "versions": versions(),
        "datasets": {},
    }
    limit = args.max_queries or None
    # a run of other sets must not replace the run of the four that the docs draw
    name_of_results = "peers" if sorted(args.datasets) == sorted(fdata.DATASETS) else "peers_subset"
    for name in args.datasets:
        data = fdata.load(name)
        qids = subsample(list(data.qrels), limit)
        filters = sorted(
            {
                filter_key(simple_filter(data.query_filter[q])): simple_filter(data.query_filter[q])
                for q in qids
                if q in data.query_filter
            }.items()
        )
        t0 = time.perf_counter()
        memory, systems = build_library(data, embedder)
        built = {"hybrid-memory": time.perf_counter() - t0}

        def embed_only(text: str, filt: dict[str, Any] | None) -> list[str]:
            embedder.embed_query(text)
            return []

        systems[EMBED_ONLY] = embed_only
        t0 = time.perf_counter()
        systems[LANGCHAIN] = build_langchain(data, embedder, [f for _, f in filters])
        built[LANGCHAIN] = time.perf_counter() - t0
        t0 = time.perf_counter()
        systems[LLAMAINDEX] = build_llamaindex(data, embedder, [f for _, f in filters])
        built[LLAMAINDEX] = time.perf_counter() - t0
        started = time.perf_counter()
        runs, seconds, embeds = run_set(data, qids, systems, embedder, args.repeats)
        elapsed = time.perf_counter() - started
        memory.close()
        sub = fdata.EvalSet(
            data.name,
            data.chunks,
            {q: data.queries[q] for q in qids},
            {q: data.qrels[q] for q in qids},
            {q: data.query_class[q] for q in qids},
            {q: data.query_filter[q] for q in qids if q in data.query_filter},
        )
        import fusion_eval

        metrics = fusion_eval.evaluate_runs(sub, {label: runs[label] for label in SYSTEMS})
        latency = {label: common.latency_summary(seconds[label]) for label in (*SYSTEMS, EMBED_ONLY)}
        sampled = len(qids) < len(data.qrels)
        note = (
            f"{len(qids)} of {len(data.qrels)} queries (deterministic subsample, seed {SEED})"
            if sampled
            else f"all {len(qids)} queries"
        )
        print(f"\n## {name}: {len(data.chunks)} chunks, {note}, {len(filters)} filter values ({elapsed:.0f} s)")
        columns = [c for c in next(iter(metrics.values())) if c.startswith("ndcg")] + ["recall@10"]
        table = [
            [
                label,
                *(metrics[label][c] for c in columns),
                latency[label]["p50_ms"],
                latency[label]["p95_ms"],
                embeds[label],
            ]
            for label in SYSTEMS
        ]
        table.append(
            [
                EMBED_ONLY,
                *("" for _ in columns),
                latency[EMBED_ONLY]["p50_ms"],
                latency[EMBED_ONLY]["p95_ms"],
                embeds[EMBED_ONLY],
            ]
        )
        print(common.format_table(table, ["system", *columns, "p50 ms", "p95 ms", "query embeds/search"]))
        results["datasets"][name] = {
            "chunks": len(data.chunks),
            "queries": len(qids),
            "queries_in_set": len(data.qrels),
            "subsampled": sampled,
            "filter_values": len(filters),
            "filtered_queries": sum(1 for q in qids if q in data.query_filter),
            "build_seconds": {k: round(v, 2) for k, v in built.items()},
            "run_seconds": round(elapsed, 1),
            "metrics": {label: {k: round(v, 4) for k, v in metrics[label].items()} for label in SYSTEMS},
            "latency_ms": latency,
            "query_embeddings_per_search": embeds,
        }
        # written after every set, so a run stopped part-way keeps the sets it finished ("complete": false)
        results["complete"] = len(results["datasets"]) == len(args.datasets)
        path = common.write_results(name_of_results, results)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()
