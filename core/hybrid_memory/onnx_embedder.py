"""The default embedder: all-MiniLM-L6-v2 on ONNX Runtime, from the graph that ships inside this package.

The same vectors as sentence-transformers gives (cosine >= 0.9999 on every text of
``tests/embedders/test_onnx_parity.py``, about 0.99999 typically) without torch: ``onnxruntime`` (CPU) runs the
encoder and the mean pooling, ``tokenizers`` runs the model's own ``tokenizer.json``. How the graph was made, and
how to make it again: ``tools/export_minilm.py``; its provenance: ``_model/all-MiniLM-L6-v2/NOTICE``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._exceptions import HybridMemoryError, InvalidRequestError, MissingDependencyError
from .embedders import DEFAULT_MODEL_NAME, l2_normalize

__all__ = ["MODEL_DIR", "ModelFileError", "OnnxEmbedder"]

logger = logging.getLogger(__name__)

MODEL_DIR = Path(__file__).resolve().parent / "_model" / "all-MiniLM-L6-v2"
"""The packaged model: ``model.onnx`` (float16-stored weights, run in float32), ``tokenizer.json``,
``provenance.json`` (sha256 of each file), ``LICENSE`` (Apache-2.0) and ``NOTICE``."""

MAX_SEQ_LENGTH = 256
"""Word pieces per text, [CLS] and [SEP] included: all-MiniLM-L6-v2's ``sentence_bert_config.json``
(``max_seq_length``), which sentence-transformers applies; the tokenizer.json's own 128 is not used."""

REINSTALL = "pip install --force-reinstall --no-deps hybrid-memory"


class ModelFileError(HybridMemoryError):
    """The packaged model's files are missing or damaged (the message names the file and the reinstall)."""


MAX_THREADS = 256
"""The most intra-op threads ``OnnxEmbedder`` accepts (ONNX Runtime starts every one of them: a million was an
out-of-memory kill)."""
MAX_BATCH_SIZE = 256
"""The largest ``batch_size`` ``OnnxEmbedder`` accepts: a batch's peak memory grows by about 10 MB per text of 256 word
pieces (measured: 1.5 GB at 128, 2.7 GB at 256, 5.1 GB at 512; 4,096 was an out-of-memory kill at 23 GB), and
batches past 32 gain no speed on a CPU (``benchmarks/embed_speed.py``: 32 and 128 within a few %)."""


def _count(name: str, value: Any, upper: int, default: str) -> int:
    """``value`` as an int in [1, ``upper``], or InvalidRequestError naming ``name`` and the value to pass."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= int(value) <= upper:
        raise InvalidRequestError(
            f"OnnxEmbedder: {name} must be an int from 1 to {upper}, got {type(value).__name__} {value!r:.40}; "
            f"pass {default}"
        )
    return int(value)


def _model_dir(value: Any) -> Path:
    """``value`` (str or os.PathLike, ``~`` expanded) as a folder path, or InvalidRequestError naming the fix."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise InvalidRequestError(
            f"OnnxEmbedder: model_dir must be a folder path (str or os.PathLike), got {type(value).__name__} "
            f"{value!r:.40}; pass a folder with model.onnx and tokenizer.json, or leave model_dir out for the packaged "
            f"all-MiniLM-L6-v2"
        )
    return Path(os.fspath(value)).expanduser()


def _text(value: Any, where: str) -> str:
    """``value`` if it is a str of valid Unicode (no lone surrogate), else InvalidRequestError naming ``where``."""
    if not isinstance(value, str):
        raise InvalidRequestError(
            f"OnnxEmbedder: {where} must be a str, got {type(value).__name__} {value!r:.40}; pass the text itself"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"OnnxEmbedder: {where} is not valid Unicode text ({exc.reason} at position {exc.start}: a lone surrogate, "
            "as from undecodable bytes); decode the bytes with the right encoding, or with errors='replace'"
        ) from None
    return value


def _cores() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where that is missing)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Runtime:
    """A loaded model: the tokenizer and up to two ONNX Runtime sessions, one per use.

    ``query`` runs one text at a time on ``query_threads`` intra-op threads (1 by default: the calling thread
    alone, while a search runs its BM25 leg on the other core); ``batch`` runs document batches on ``threads``
    intra-op threads (the cores by default) that do not spin between runs (``session.intra_op.allow_spinning=0``),
    so they hold no core while FAISS or BM25 work. A query session of more than one thread keeps ONNX Runtime's
    default spinning: its workers wake for each of the graph's ~30 parallel kernels, and without spinning each
    wake-up costs more than the split saves (measured in ``benchmarks/embed_speed.py``). Each session is created on
    first use; ``run`` calls are thread-safe (ONNX Runtime's ``InferenceSession.run``).
    """

    def __init__(self, folder: Path, threads: int, query_threads: int = 1) -> None:
        self.folder = folder
        self.threads = threads
        self.query_threads = query_threads
        self._sessions: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.tokenizer = self._load_tokenizer()

    def _packaged(self) -> bool:
        return self.folder.resolve() == MODEL_DIR.resolve()

    def _file(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_file():
            if not self._packaged():
                what = (
                    "does not exist"
                    if not self.folder.exists()
                    else "is not a folder"
                    if not self.folder.is_dir()
                    else f"has no {name}"
                )
                raise ModelFileError(
                    f"the ONNX model folder {self.folder} {what}; pass OnnxEmbedder(model_dir=...) a folder "
                    f"with model.onnx and tokenizer.json, or leave model_dir out for the packaged all-MiniLM-L6-v2"
                )
            raise ModelFileError(
                f"the default embedder's model file {path} is missing; reinstall hybrid-memory to restore it: "
                f"{REINSTALL}"
            )
        return path

    def _damaged(self, path: Path, why: str) -> ModelFileError:
        if not self._packaged():
            return ModelFileError(
                f"the ONNX model file {path} is damaged ({why}); export it again, or leave model_dir out for the "
                f"packaged all-MiniLM-L6-v2"
            )
        return ModelFileError(
            f"the default embedder's model file {path} is damaged ({why}); reinstall hybrid-memory to restore it: "
            f"{REINSTALL}"
        )

    def _check_sha(self, path: Path) -> None:
        """Compare ``path`` with what ``provenance.json`` records, where the folder has one (the packaged model
        does): the sha256 of ``tokenizer.json``; the size of ``model.onnx`` (its sha256 would cost about 0.1 s
        of every cold start; a cut file fails the size check, a garbled one ONNX Runtime's own parse)."""
        if not (self.folder / "provenance.json").is_file() and self.folder.resolve() != MODEL_DIR:
            return
        try:
            expected = json.loads(self._file("provenance.json").read_text())
        except ValueError as exc:
            raise self._damaged(self.folder / "provenance.json", f"not JSON: {exc}") from None
        if path.name == "model.onnx":
            size = path.stat().st_size
            if expected.get("model_onnx_bytes") and size != expected["model_onnx_bytes"]:
                raise self._damaged(
                    path, f"{size:,} bytes, not the {expected['model_onnx_bytes']:,} that provenance.json records"
                )
        elif expected.get("tokenizer_json_sha256") and _sha256(path) != expected["tokenizer_json_sha256"]:
            raise self._damaged(
                path, f"its sha256 is not the {expected['tokenizer_json_sha256'][:12]}... that provenance.json records"
            )

    def _load_tokenizer(self) -> Any:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError(f"tokenizers is not installed; install it with: {REINSTALL}") from exc
        path = self._file("tokenizer.json")
        self._check_sha(path)
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a malformed file
            raise self._damaged(path, str(exc)[:200]) from None
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_SEQ_LENGTH)  # longest_first, as transformers' truncation=True
        return tokenizer

    def session(self, kind: str) -> Any:
        """The ``"query"`` (``query_threads``) or ``"batch"`` (``threads``) ONNX Runtime session, created on first
        use."""
        found = self._sessions.get(kind)
        if found is not None:
            return found
        with self._lock:
            if kind not in self._sessions:
                query = kind == "query"
                self._sessions[kind] = self._new_session(self.query_threads if query else self.threads, spin=query)
            return self._sessions[kind]

    def _new_session(self, threads: int, *, spin: bool) -> Any:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise MissingDependencyError(f"onnxruntime is not installed; install it with: {REINSTALL}") from exc
        path = self._file("model.onnx")
        if not self._sessions:
            self._check_sha(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only: ORT's own warnings go to stderr, not to logging
        if threads > 1 and not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        logger.info("loading the ONNX embedding model from %s (%d intra-op threads)", path, threads)
        try:
            return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail / InvalidProtobuf for a damaged file
            raise self._damaged(path, f"{type(exc).__name__}: {str(exc)[:200]}") from None


_SHARED: weakref.WeakValueDictionary[tuple[str, int, int], _Runtime] = weakref.WeakValueDictionary()
"""Loaded runtimes by (real path of the model folder, batch threads, query threads), while an embedder holds them."""

_SHARED_LOCK = threading.Lock()


def _shared_runtime(folder: Path, threads: int, query_threads: int) -> _Runtime:
    key = (os.path.realpath(folder), threads, query_threads)
    with _SHARED_LOCK:
        runtime = _SHARED.get(key)
        if runtime is None:
            runtime = _Runtime(folder, threads, query_threads)
            _SHARED[key] = runtime
        return runtime


class OnnxEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime: the default embedder, with sentence-transformers' vectors and no torch.

    It runs as sentence-transformers runs the model (``SentenceTransformer.encode(..., normalize_embeddings=True)``
    with all-MiniLM-L6-v2's configuration): each text tokenized by the model's ``tokenizer.json`` (BERT uncased word
    pieces) and cut to 256 word pieces, the encoder's last hidden states averaged over the attention mask, the mean
    scaled to unit L2 norm. The texts of a call are sorted by token
    count and cut into batches of ``batch_size``, each padded to its longest text only, as sentence-transformers
    sorts by length (it sorts by characters; word pieces are what padding costs). The vectors are those of
    :class:`~hybrid_memory.SentenceTransformerEmbedder` (cosine >= 0.9999, measured over 1,000+ texts in
    ``tests/embedders/test_onnx_parity.py``), under the same ``name``, so a memory written with either opens with the
    other and is not embedded again.

    Threads: one query runs on ``query_threads`` intra-op threads (default 1: the calling thread alone); a batch of
    documents runs on ``threads`` (default: the CPUs this process may use). One thread is the default for a query
    because a search embeds it while its BM25 leg runs on another core and a server answers several queries at
    once; ``query_threads=2`` makes a lone query faster on an idle machine (about 30 % here: the 42 MB of float32
    weights a query streams from memory come in through two cores), at the cost of a spinning worker thread.
    Measured in ``benchmarks/embed_speed.py``.

    The graph is ONNX Runtime's fused BERT (``Attention`` reads each row's length from its mask), so rows are padded
    on the right, as this class pads them.

    The model loads lazily, on the first call, and embedders of the same folder and thread counts share one
    loaded model in a process (about 250-350 MB resident with both sessions and their buffers, measured by a fresh
    user; ``peak RSS`` in ``benchmarks/embed_speed.py``).

    Args:
        model_dir: a folder with ``model.onnx`` (inputs ``input_ids``, ``attention_mask``; output the mean-pooled
            ``sentence_embedding``) and ``tokenizer.json``; None: the packaged all-MiniLM-L6-v2. Another folder is
            named ``onnx:<folder name>`` in the manifest.
        batch_size: documents per forward pass (default 32).
        threads: intra-op threads for document batches; None: the CPUs this process may use.
        query_threads: intra-op threads for one query (default 1).
        shared: share the loaded model with the process's other embedders of the same folder and thread counts.

    Raises:
        InvalidRequestError: at construction, ``batch_size`` not an int in [1, 4096] or ``threads`` /
            ``query_threads`` not an int in [1, 256] (:data:`MAX_BATCH_SIZE`, :data:`MAX_THREADS`).
        ModelFileError: on first use, a model file is missing or damaged; the message names the file and the
            reinstall (for the packaged model) or the folder to pass (for a ``model_dir`` of your own).
        MissingDependencyError: on first use, onnxruntime or tokenizers is not installed.
    """

    name: str
    """``sentence-transformers/all-MiniLM-L6-v2`` for the packaged model (the manifest name), else ``onnx:<folder>``."""
    dim: int
    """384."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 32,
        threads: int | None = None,
        query_threads: int = 1,
        shared: bool = True,
    ) -> None:
        self.model_dir = MODEL_DIR if model_dir is None else _model_dir(model_dir)
        self.batch_size = _count("batch_size", batch_size, MAX_BATCH_SIZE, "batch_size=32 (the default)")
        self.threads = (
            _cores()
            if threads is None
            else _count("threads", threads, MAX_THREADS, "threads=None (the default: the CPUs this process may use)")
        )
        self.query_threads = _count("query_threads", query_threads, MAX_THREADS, "query_threads=1 (the default)")
        if not isinstance(shared, (bool, np.bool_)):
            raise InvalidRequestError(
                f"OnnxEmbedder: shared must be a bool, got {type(shared).__name__} {shared!r:.40}; pass shared=True "
                "(the default) or False"
            )
        self.shared = bool(shared)
        resolved = self.model_dir.resolve()
        self.name = DEFAULT_MODEL_NAME if resolved == MODEL_DIR.resolve() else f"onnx:{resolved.name}"
        self.dim = 384
        self._runtime: _Runtime | None = None
        self._lock = threading.Lock()

    def _loaded(self) -> _Runtime:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = (
                        _shared_runtime(self.model_dir, self.threads, self.query_threads)
                        if self.shared
                        else _Runtime(self.model_dir, self.threads, self.query_threads)
                    )
        return self._runtime

    def _run(self, kind: str, encodings: Sequence[Any]) -> np.ndarray:
        """Mean-pooled float32 (len(encodings), dim) for tokenized texts, padded to the longest of them."""
        width = max(len(encoding.ids) for encoding in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        output = self._loaded().session(kind).run(None, {"input_ids": ids, "attention_mask": mask})[0]
        if output.shape != (len(encodings), self.dim):
            if self.name != DEFAULT_MODEL_NAME:
                raise ModelFileError(
                    f"the model {self.model_dir / 'model.onnx'} returned shape {output.shape}, expected "
                    f"({len(encodings)}, {self.dim}): OnnxEmbedder runs mean-pooled 384-dimensional encoders (inputs "
                    "input_ids and attention_mask, output (batch, 384)); export such a graph, or wrap another model "
                    "in a CallableEmbedder"
                )
            raise ModelFileError(
                f"the model {self.model_dir / 'model.onnx'} returned shape {output.shape}, expected "
                f"({len(encodings)}, {self.dim}); reinstall hybrid-memory to restore it: {REINSTALL}"
            )
        return output

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents. Returns float32 (len(texts), 384), unit-L2 rows, in the order of ``texts``.

        Raises:
            InvalidRequestError: ``texts`` is one str or not a sequence, or holds something that is not a str of
                valid Unicode.
            ModelFileError: a model file is missing or damaged.
        """
        if isinstance(texts, str):
            raise InvalidRequestError(
                "OnnxEmbedder.embed_documents takes a sequence of texts, got one str; pass [text], or use embed_query"
            )
        if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
            raise InvalidRequestError(
                f"OnnxEmbedder.embed_documents takes a sequence of str, got {type(texts).__name__} {texts!r:.40}; "
                "pass a list of texts"
            )
        texts = [_text(text, f"texts[{i}]") for i, text in enumerate(texts)]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        runtime = self._loaded()
        encodings = runtime.tokenizer.encode_batch(texts, add_special_tokens=True)
        if len(texts) == 1:
            return l2_normalize(self._run("query", encodings))
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run("batch", [encodings[i] for i in rows])
        return l2_normalize(out)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query on ``query_threads`` intra-op threads (default 1: the calling thread alone). Returns
        float32 (384,), unit L2 norm.

        Raises:
            InvalidRequestError: ``text`` is not a str of valid Unicode.
            ModelFileError: a model file is missing or damaged.
        """
        text = _text(text, "the query")
        runtime = self._loaded()
        encoding = runtime.tokenizer.encode(text, add_special_tokens=True)
        return l2_normalize(self._run("query", [encoding]))[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, threads={self.threads}, query_threads={self.query_threads})"
