"""Bridge from any LangChain ``Embeddings`` to the core :class:`hybrid_memory.Embedder` protocol."""

from __future__ import annotations

from hybrid_memory import InvalidEmbedderError
from hybrid_memory._adapter_support import coerce_embedder
from hybrid_memory.embedders import CallableEmbedder, Embedder
from langchain_core.embeddings import Embeddings

__all__ = ["LangChainEmbedder", "as_core_embedder"]


def _model_label(embeddings: Embeddings) -> str:
    """Class name, plus the model identifier when the object exposes one (``model`` or ``model_name``)."""
    label = type(embeddings).__name__
    for attr in ("model", "model_name", "model_id"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return f"{label}:{value}"
    return label


class LangChainEmbedder(CallableEmbedder):
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

    Raises:
        InvalidEmbedderError (a TypeError): ``embeddings`` is not a LangChain ``Embeddings``.
    """

    def __init__(self, embeddings: Embeddings, *, name: str | None = None, dim: int | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise InvalidEmbedderError(
                "embeddings must be a langchain_core Embeddings (for example HuggingFaceEmbeddings(...), an "
                f"instance), got {type(embeddings).__name__}; for a hybrid_memory Embedder pass it to the retriever or "
                "memory directly"
            )
        self.embeddings = embeddings
        super().__init__(
            embeddings.embed_documents,
            embeddings.embed_query,
            name=name or f"langchain:{_model_label(embeddings)}",
            dim=dim,
            label=type(embeddings).__name__,
        )


def as_core_embedder(embedding: object | None) -> Embedder | None:
    """Return a core ``Embedder`` for ``embedding``.

    A LangChain ``Embeddings`` is wrapped in :class:`LangChainEmbedder`; None (the core's default
    embedder) and objects that already follow the core protocol pass through unchanged.

    Raises:
        InvalidEmbedderError (a TypeError): ``embedding`` is neither a LangChain ``Embeddings`` nor a core ``Embedder``.
    """
    return coerce_embedder(
        embedding,
        framework_type=Embeddings,
        wrapper=LangChainEmbedder,
        argument="embedding",
        framework="langchain_core Embeddings",
    )
