"""Evaluation sets for ``fusion_eval.py``: chunks, queries, qrels, query classes, filters and cached vectors.

Each set is an :class:`EvalSet`. Document and query vectors are all-MiniLM-L6-v2 (the core's
``SentenceTransformerEmbedder``), cached under ``$HYBRID_MEMORY_BENCH_CACHE`` by ``_common.load_or_embed``
(keyed by a hash of the texts), so every row of every table uses the same vectors.

* ``scifact`` -- BEIR SciFact, 300 test queries; one class (``claim``).
* ``hotpotqa100`` -- 100 HotpotQA questions; classes from query metadata ``type`` (``bridge``, ``comparison``).
* ``locomo5`` -- 760 LoCoMo questions; classes from the query's ``set``; every query carries its
  ``metadata_filter`` (``{"conversation": id}``), so retrieval is scoped to one conversation.
* ``techdocs`` -- the technical set of ``techdocs.py``; classes ``identifier``, ``paraphrase``, ``error``,
  ``filtered`` (the last with a ``{"package": ...}`` filter).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

DATASETS = ("scifact", "hotpotqa100", "locomo5", "techdocs")


@dataclass
class EvalSet:
    """One evaluation set with its cached MiniLM vectors."""

    name: str
    chunks: list[dict[str, Any]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    query_class: dict[str, str]
    query_filter: dict[str, dict[str, Any]] = field(default_factory=dict)
    doc_vectors: np.ndarray | None = None
    """float32 (len(chunks), 384), corpus order."""
    query_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """query id -> float32 (384,)."""
    fingerprint: str = ""


def _beir(name: str, class_key: str | None) -> EvalSet:
    from hybrid_memory.ingest import read_beir_corpus, read_qrels

    folder = common.require_dataset(name)
    chunks = [c.model_dump() for c in read_beir_corpus(folder / "corpus.jsonl", source=name)]
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    raw: dict[str, dict[str, Any]] = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            raw[str(doc["_id"])] = doc
    queries = {q: raw[q]["text"] for q in qrels}
    classes: dict[str, str] = {}
    filters: dict[str, dict[str, Any]] = {}
    for q in qrels:
        doc = raw[q]
        if class_key is None:
            classes[q] = "all"
        else:
            classes[q] = str(doc.get(class_key) or (doc.get("metadata") or {}).get(class_key) or "other")
        if doc.get("metadata_filter"):
            filters[q] = doc["metadata_filter"]
    return EvalSet(name, chunks, queries, dict(qrels), classes, filters)


def load(name: str, *, vectors: bool = True) -> EvalSet:
    """The evaluation set ``name`` (one of :data:`DATASETS`), with cached vectors when ``vectors``.

    Exits 0 with a message when a BEIR folder is absent (``_common.require_dataset``).
    """
    common.ensure_core_importable()
    if name == "scifact":
        data = _beir("scifact", None)
    elif name == "hotpotqa100":
        data = _beir("hotpotqa100", "type")
    elif name == "locomo5":
        data = _beir("locomo5", "set")
    elif name == "techdocs":
        import techdocs

        built = techdocs.build()
        data = EvalSet("techdocs", built.chunks, built.queries, built.qrels, built.query_class, built.query_filter,
                       fingerprint=techdocs.fingerprint(built))
    else:
        raise SystemExit(f"unknown dataset {name!r}; choose from {DATASETS}")
    if vectors:
        attach_vectors(data)
    return data


def attach_vectors(data: EvalSet) -> None:
    """Fill ``doc_vectors`` and ``query_vectors`` from the cache (embedding what is missing, once)."""
    embedder = common.make_embedder("minilm")
    texts = [c["text"] for c in data.chunks]
    data.doc_vectors = common.document_vectors(data.name, embedder, texts)
    qids = list(data.queries)
    qtexts = [data.queries[q] for q in qids]
    qvec = common.load_or_embed(f"{data.name}-queries", embedder.name, embedder.dim, qtexts,
                                lambda t: np.stack([embedder.embed_query(x) for x in t]))
    data.query_vectors = dict(zip(qids, qvec, strict=True))


if __name__ == "__main__":  # pragma: no cover - ``python benchmarks/_fusion_data.py warm techdocs ...``
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for dataset in sys.argv[2:] or DATASETS:
        d = load(dataset)
        print(dataset, len(d.chunks), "chunks", len(d.queries), "queries", flush=True)
