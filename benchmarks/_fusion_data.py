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

Any other BEIR-layout set works too, named by its folder under ``shared/data`` or by a path to a folder holding
``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` (:func:`load`): one class ``all``, or the classes a
query field or query metadata key names (``--class-key``), and each query's ``metadata_filter`` when it has one.
So the scripts built on these sets (``fusion_eval.py``, ``fusion_robustness.py``, ``fusion_cost.py``) measure the
default fusion against both engines on a corpus of one's own.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

DATASETS = ("scifact", "hotpotqa100", "locomo5", "techdocs", "apidocs", "hotpotqa100-long", "locomo5-long")


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


def _beir(folder: Path, name: str, class_key: str | None) -> EvalSet:
    from hybrid_memory.ingest import read_beir_corpus, read_qrels

    chunks = [c.model_dump() for c in read_beir_corpus(folder / "corpus.jsonl", source=name)]
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    raw: dict[str, dict[str, Any]] = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            raw[str(doc["_id"])] = doc
    missing = [q for q in qrels if q not in raw]
    if missing:
        raise SystemExit(
            f"{folder / 'qrels' / 'test.tsv'} names {len(missing)} queries that {folder / 'queries.jsonl'} "
            f"lacks, e.g. {missing[:3]}: add them there or remove their qrels rows"
        )
    queries = {q: raw[q]["text"] for q in qrels}
    if class_key is not None and not any(
        class_key in raw[q] or class_key in (raw[q].get("metadata") or {}) for q in qrels
    ):
        raise SystemExit(
            f"no query of {folder / 'queries.jsonl'} has the field or metadata key {class_key!r} "
            "(--class-key); leave it out for one class"
        )
    classes: dict[str, str] = {}
    filters: dict[str, dict[str, Any]] = {}
    for q in qrels:
        doc = raw[q]
        if class_key is None:
            classes[q] = "all"
        else:
            value = doc[class_key] if class_key in doc else (doc.get("metadata") or {}).get(class_key)
            classes[q] = "other" if value is None else str(value)  # 0 and false are classes too
        if doc.get("metadata_filter"):
            filters[q] = doc["metadata_filter"]
    return EvalSet(name, chunks, queries, dict(qrels), classes, filters)


_CLASS_KEYS = {"scifact": None, "hotpotqa100": "type", "locomo5": "set"}
"""The query field (or query metadata key) that gives each query's class, for the shared BEIR sets."""


def load(name: str, *, vectors: bool = True, class_key: str | None = None) -> EvalSet:
    """The evaluation set ``name``, with cached vectors when ``vectors``.

    Args:
        name: one of :data:`DATASETS`, or any BEIR-layout set: a folder name under ``shared/data`` or a path to the
            folder (the set is named by the folder's name in tables, results and the vector cache).
        vectors: attach the cached MiniLM document and query vectors (embedding what is missing, once).
        class_key: for a set outside :data:`DATASETS`, the query field or query metadata key whose value is each
            query's class (None: one class, ``all``; a query without it: ``other``); the four sets have their own
            and ignore it.

    Exits 0 with a message when one of the shared sets is absent (``_common.require_dataset``); with an error that
    says what is wrong when ``name`` is neither a known set nor a BEIR folder (naming the files a folder lacks), when
    the qrels name a query that queries.jsonl lacks, or when no query has ``class_key``.
    """
    common.ensure_core_importable()
    if name in _CLASS_KEYS:
        data = _beir(common.require_dataset(name), name, _CLASS_KEYS[name])
    elif name in ("techdocs", "apidocs"):
        import apidocs
        import techdocs

        module = techdocs if name == "techdocs" else apidocs
        built = module.build()
        data = EvalSet(
            name,
            built.chunks,
            built.queries,
            built.qrels,
            built.query_class,
            built.query_filter,
            fingerprint=module.fingerprint(built),
        )
    elif name in LONG:
        return _long(name)
    elif (folder := common.dataset_dir(name)) is not None:
        data = _beir(folder, label(name), class_key)
    else:
        _unknown(name)
    if vectors:
        attach_vectors(data)
    return data


LONG = {"hotpotqa100-long": "hotpotqa100", "locomo5-long": "locomo5"}
"""Long-query variants (:func:`_long`): set name -> the set whose corpus and qrels they are drawn from."""
LONG_SEED = 20261206


def _long(name: str) -> EvalSet:
    """A long-query variant of a shared set: a whole document as the query, its companions as the qrels.

    For every query of the base set with at least two relevant documents, one of them (drawn with
    ``random.Random(LONG_SEED)``) becomes the query -- its whole text, a paragraph (HotpotQA-100: one of the two
    supporting paragraphs of a multi-hop question) or a chat message (LoCoMo-5: one evidence turn of a question
    with several) -- and the others are its relevant documents: the paragraph the question bridges to, the other
    turns the answer needs. Every document drawn as a query is removed from the corpus (it would find itself),
    and from the qrels of the others; a query left without qrels is dropped. This is the shape of
    counter-argument and duplicate-question retrieval (BEIR's ArguAna, CQADupStack): a long query of the corpus'
    own kind, where both engines see the same words and the same topic, so they are comparable. One class (the base
    sets' classes would leave some with a dozen queries); filters: the base query's (LoCoMo-5: its conversation).
    Document vectors are the base set's
    cached rows (the corpus is a subset); query vectors are embedded once and cached.
    """
    import random

    base = load(LONG[name])
    rng = random.Random(f"{LONG_SEED}:{name}")
    drawn: dict[str, tuple[str, list[str]]] = {}
    for qid in sorted(base.qrels):
        relevant = sorted(d for d, grade in base.qrels[qid].items() if grade > 0)
        if len(relevant) >= 2:
            pick = rng.choice(relevant)
            drawn[qid] = (pick, [d for d in relevant if d != pick])
    removed = {pick for pick, _ in drawn.values()}
    text = {c["chunk_id"]: c["text"] for c in base.chunks}
    keep = [i for i, c in enumerate(base.chunks) if c["chunk_id"] not in removed]
    data = EvalSet(name, [base.chunks[i] for i in keep], {}, {}, {}, {})
    for qid, (pick, others) in drawn.items():
        others = [d for d in others if d not in removed]
        if others:
            data.queries[qid] = text[pick]
            data.qrels[qid] = dict.fromkeys(others, 1)
            data.query_class[qid] = "all"
            if qid in base.query_filter:
                data.query_filter[qid] = base.query_filter[qid]
    assert base.doc_vectors is not None
    data.doc_vectors = base.doc_vectors[keep]
    embedder = common.make_embedder("minilm")
    qids = list(data.queries)
    qvec = common.load_or_embed(
        f"{name}-queries",
        embedder.name,
        embedder.dim,
        [data.queries[q] for q in qids],
        lambda t: np.stack([embedder.embed_query(x) for x in t]),
    )
    data.query_vectors = dict(zip(qids, qvec, strict=True))
    return data


def _unknown(name: str) -> NoReturn:
    """Exit naming what is accepted instead of ``name`` (and, for a folder, the BEIR files it lacks)."""
    path = Path(name).expanduser()
    lacking = f" (the folder lacks {', '.join(common.missing_beir_files(path))})" if path.is_dir() else ""
    raise SystemExit(
        f"unknown dataset {name!r}{lacking}: use one of {', '.join(DATASETS)}, a folder under "
        f"{common.DATA_DIR} or a path to a folder holding corpus.jsonl, queries.jsonl and "
        "qrels/test.tsv (BEIR layout)"
    )


def is_full_run(names: list[str]) -> bool:
    """Whether ``names`` are the four built-in sets (in any order): only such a run writes the results the README
    quotes; others write ``*_subset.json``."""
    return sorted(names) == sorted(DATASETS)


def label(name: str) -> str:
    """How tables, results and the vector cache name the set ``name``: a built-in set by its name, a BEIR folder by
    the folder's name, or by its resolved path when that name is a built-in set's (a path to a copy of
    ``scifact`` is not judged against SciFact's targets, nor does it take its query classes)."""
    if name in DATASETS:
        return name
    folder = common.dataset_label(name)
    return str(Path(name).expanduser().resolve()) if folder in DATASETS else folder


def check_datasets(names: list[str]) -> None:
    """Exit with a message naming the problem before any set runs: a name that is neither a built-in set nor a BEIR
    folder (as :func:`load` would), or two sets that would share a label (results keyed by it would overwrite)."""
    for name in names:
        if name not in DATASETS and common.dataset_dir(name) is None:  # (LONG's names are in DATASETS)
            _unknown(name)
    labels = [label(name) for name in names]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise SystemExit(
            f"two sets are named {', '.join(map(repr, twice))} (a folder's name labels it): give each once, "
            "or rename one folder"
        )


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """``--datasets`` (default :data:`DATASETS`; also any BEIR folder, see :func:`load`) and ``--class-key``."""
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=list(DATASETS),
        metavar="SET",
        help=f"sets to run: {', '.join(DATASETS)} (default: all four), a BEIR folder under shared/data, "
        "or a path to one",
    )
    parser.add_argument(
        "--class-key",
        default=None,
        metavar="KEY",
        help="for a set of one's own: the query field or query metadata key that names each query's "
        "class (default: one class, 'all')",
    )


def attach_vectors(data: EvalSet) -> None:
    """Fill ``doc_vectors`` and ``query_vectors`` from the cache (embedding what is missing, once)."""
    embedder = common.make_embedder("minilm")
    texts = [c["text"] for c in data.chunks]
    data.doc_vectors = common.document_vectors(data.name, embedder, texts)
    qids = list(data.queries)
    qtexts = [data.queries[q] for q in qids]
    qvec = common.load_or_embed(
        f"{data.name}-queries",
        embedder.name,
        embedder.dim,
        qtexts,
        lambda t: np.stack([embedder.embed_query(x) for x in t]),
    )
    data.query_vectors = dict(zip(qids, qvec, strict=True))


if __name__ == "__main__":  # pragma: no cover - ``python benchmarks/_fusion_data.py warm techdocs ...``
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for dataset in sys.argv[2:] or DATASETS:
        d = load(dataset)
        print(dataset, len(d.chunks), "chunks", len(d.queries), "queries", flush=True)
