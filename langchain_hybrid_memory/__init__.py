"""LangChain adapter of hybrid_memory: a retriever and an embedding bridge.

Install with ``pip install 'hybrid-memory[langchain]'``. Imports only ``langchain_core`` (never
``langchain_community``). The store is the core's: a memory folder built here opens in the LlamaIndex
adapter and in :class:`hybrid_memory.HybridMemory` unchanged.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
except ImportError as exc:
    from hybrid_memory._exceptions import missing_dependency

    raise missing_dependency("langchain-core", "langchain") from exc

from .embeddings import LangChainEmbedder, as_core_embedder
from .retrievers import HybridMemoryRetriever, document_to_chunk, result_to_document

__all__ = [
    "HybridMemoryRetriever",
    "LangChainEmbedder",
    "as_core_embedder",
    "document_to_chunk",
    "result_to_document",
]
