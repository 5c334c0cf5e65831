"""Bridge from any LlamaIndex ``BaseEmbedding`` to the core :class:`hybrid_memory.Embedder` protocol."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from hybrid_memory import DimensionMismatchError, HybridMemoryError

__all__ = ["LlamaIndexEmbedder", "as_core_embedder"]

_PROBE_TEXT = "dimension probe"


class LlamaIndexEmbedder:
    """A core ``Embedder`` that delegates to a LlamaIndex ``BaseEmbedding``.

    Vectors come back as float32 numpy arrays; the core L2-normalises them itself. Queries go through
    ``get_query_embedding`` and documents through ``get_text_embedding_batch``, so models with distinct
    query and passage instructions keep them.

    Args:
        embed_model: any LlamaIndex embedding model.
        name: identifier saved in the memory's manifest; a memory reopened with another name is refused
            by the core. Defaults to ``"llamaindex:<class name>:<model_name>"``.
        dim: vector dimension when known; otherwise discovered on first use by embedding one probe
            query.
    """

    def __init__(self, embed_model: BaseEmbedding, *, name: str | None = None, dim: int | None = None) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
            )
        self.embed_model = embed_model
        self.name = name or f"llamaindex:{type(embed_model).__name__}:{embed_model.model_name}"
        self._dim = dim

    @property
    def dim(self) -> int:
        """Vector dimension; the first access may embed one probe text."""
        if self._dim is None:
            self._dim = int(self._as_matrix([self.embed_model.get_query_embedding(_PROBE_TEXT)], 1).shape[1])
        return self._dim

    def _as_matrix(self, vectors: Sequence[Sequence[float]], n: int) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != n:
            raise HybridMemoryError(
                f"{type(self.embed_model).__name__} returned an array of shape {matrix.shape} for {n} text(s); "
                f"expected ({n}, dim)"
            )
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise DimensionMismatchError(
                f"{type(self.embed_model).__name__} returned vectors of dimension {matrix.shape[1]}, "
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
        return self._as_matrix(self.embed_model.get_text_embedding_batch(texts), len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,).

        Raises:
            DimensionMismatchError: the model returned a vector of another dimension than ``dim``.
        """
        return self._as_matrix([self.embed_model.get_query_embedding(text)], 1)[0]

    def __repr__(self) -> str:
        return f"LlamaIndexEmbedder(name={self.name!r})"


def as_core_embedder(embed_model: object | None) -> object | None:
    """Return a core ``Embedder`` for ``embed_model``.

    A LlamaIndex ``BaseEmbedding`` is wrapped in :class:`LlamaIndexEmbedder`; None (the core's default
    embedder) and objects that already follow the core protocol pass through unchanged.

    Raises:
        TypeError: ``embed_model`` is neither a ``BaseEmbedding`` nor a core ``Embedder``.
    """
    if embed_model is None or isinstance(embed_model, LlamaIndexEmbedder):
        return embed_model
    if isinstance(embed_model, BaseEmbedding):
        return LlamaIndexEmbedder(embed_model)
    if all(callable(getattr(type(embed_model), attr, None)) for attr in ("embed_documents", "embed_query")):
        return embed_model
    raise TypeError(
        "embed_model must be a llama_index BaseEmbedding or a hybrid_memory Embedder "
        f"(name, dim, embed_documents, embed_query), got {type(embed_model).__name__}"
    )
