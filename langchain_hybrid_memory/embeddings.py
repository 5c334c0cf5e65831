"""Bridge from any LangChain ``Embeddings`` to the core :class:`hybrid_memory.Embedder` protocol."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from hybrid_memory import DimensionMismatchError, HybridMemoryError

__all__ = ["LangChainEmbedder", "as_core_embedder"]

_PROBE_TEXT = "dimension probe"


def _model_label(embeddings: Embeddings) -> str:
    """Class name, plus the model identifier when the object exposes one (``model`` or ``model_name``)."""
    label = type(embeddings).__name__
    for attr in ("model", "model_name", "model_id"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return f"{label}:{value}"
    return label


class LangChainEmbedder:
    """A core ``Embedder`` that delegates to a LangChain ``Embeddings``.

    Vectors come back as float32 numpy arrays; the core L2-normalises them itself. Queries go through
    ``embed_query`` and passages through ``embed_documents``, so models with distinct query and passage
    instructions keep them.

    Args:
        embeddings: any LangChain embeddings model.
        name: identifier saved in the memory's manifest; a memory reopened with another name is refused
            by the core. Defaults to ``"langchain:<class name>[:<model>]"``.
        dim: vector dimension when known; otherwise discovered on first use by embedding one probe
            query.
    """

    def __init__(self, embeddings: Embeddings, *, name: str | None = None, dim: int | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise TypeError(
                f"embeddings must be a langchain_core Embeddings, got {type(embeddings).__name__}"
            )
        self.embeddings = embeddings
        self.name = name or f"langchain:{_model_label(embeddings)}"
        self._dim = dim

    @property
    def dim(self) -> int:
        """Vector dimension; the first access may embed one probe text."""
        if self._dim is None:
            self._dim = int(self._as_matrix([self.embeddings.embed_query(_PROBE_TEXT)], 1).shape[1])
        return self._dim

    def _as_matrix(self, vectors: Sequence[Sequence[float]], n: int) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != n:
            raise HybridMemoryError(
                f"{type(self.embeddings).__name__} returned an array of shape {matrix.shape} for {n} text(s); "
                f"expected ({n}, dim)"
            )
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise DimensionMismatchError(
                f"{type(self.embeddings).__name__} returned vectors of dimension {matrix.shape[1]}, "
                f"expected {self._dim}"
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
        return self._as_matrix(self.embeddings.embed_documents(texts), len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,).

        Raises:
            DimensionMismatchError: the model returned a vector of another dimension than ``dim``.
        """
        return self._as_matrix([self.embeddings.embed_query(text)], 1)[0]

    def __repr__(self) -> str:
        return f"LangChainEmbedder(name={self.name!r})"


def as_core_embedder(embedding: object | None) -> object | None:
    """Return a core ``Embedder`` for ``embedding``.

    A LangChain ``Embeddings`` is wrapped in :class:`LangChainEmbedder`; None (the core's default
    embedder) and objects that already follow the core protocol pass through unchanged.

    Raises:
        TypeError: ``embedding`` is neither a LangChain ``Embeddings`` nor a core ``Embedder``.
    """
    if embedding is None or isinstance(embedding, LangChainEmbedder):
        return embedding
    if isinstance(embedding, Embeddings):
        return LangChainEmbedder(embedding)
    if all(callable(getattr(type(embedding), attr, None)) for attr in ("embed_documents", "embed_query")):
        return embedding
    raise TypeError(
        "embedding must be a langchain_core Embeddings or a hybrid_memory Embedder "
        f"(name, dim, embed_documents, embed_query), got {type(embedding).__name__}"
    )
