"""Bridge from any LlamaIndex ``BaseEmbedding`` to the core :class:`hybrid_memory.Embedder` protocol."""

from __future__ import annotations

from hybrid_memory import InvalidEmbedderError
from hybrid_memory._adapter_support import coerce_embedder
from hybrid_memory.embedders import CallableEmbedder, Embedder
from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = ["LlamaIndexEmbedder", "as_core_embedder"]


class LlamaIndexEmbedder(CallableEmbedder):
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

    Raises:
        InvalidEmbedderError (a TypeError): ``embed_model`` is not a LlamaIndex ``BaseEmbedding``.
    """

    def __init__(self, embed_model: BaseEmbedding, *, name: str | None = None, dim: int | None = None) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise InvalidEmbedderError(
                "embed_model must be a llama_index BaseEmbedding (for example HuggingFaceEmbedding(...), an instance), "
                f"got {type(embed_model).__name__}; for a hybrid_memory Embedder pass it to the retriever or memory "
                "directly"
            )
        self.embed_model = embed_model
        super().__init__(
            embed_model.get_text_embedding_batch,
            embed_model.get_query_embedding,
            name=name or f"llamaindex:{type(embed_model).__name__}:{embed_model.model_name}",
            dim=dim,
            label=type(embed_model).__name__,
        )


def as_core_embedder(embed_model: object | None) -> Embedder | None:
    """Return a core ``Embedder`` for ``embed_model``.

    A LlamaIndex ``BaseEmbedding`` is wrapped in :class:`LlamaIndexEmbedder`; None (the core's default
    embedder) and objects that already follow the core protocol pass through unchanged.

    Raises:
        InvalidEmbedderError (a TypeError): ``embed_model`` is neither a ``BaseEmbedding`` nor a core ``Embedder``.
    """
    return coerce_embedder(
        embed_model,
        framework_type=BaseEmbedding,
        wrapper=LlamaIndexEmbedder,
        argument="embed_model",
        framework="llama_index BaseEmbedding",
    )
