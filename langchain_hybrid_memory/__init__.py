"""LangChain adapter of hybrid_memory: a retriever and an embedding bridge.

Install with ``pip install 'hybrid-memory[langchain]'``. Imports only ``langchain_core`` (never
``langchain_community``). The store is the core's: a memory folder built here opens in the LlamaIndex
adapter and in :class:`hybrid_memory.HybridMemory` unchanged.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
except ImportError as exc:
    from hybrid_memory._adapter_support import missing_dependency

    raise missing_dependency("langchain-core", "langchain") from exc

from hybrid_memory import _adapter_support as _support

from .embeddings import LangChainEmbedder, as_core_embedder
from .retrievers import HybridMemoryRetriever, document_to_chunk, result_to_document

_GRAPH_NAMES = ("GlobalGraphRetriever", "hit_to_document")


# the graph names are public only with the graph extra, so ``from langchain_hybrid_memory import *`` works without it
__all__ = [
    "HybridMemoryRetriever",
    "LangChainEmbedder",
    "as_core_embedder",
    "document_to_chunk",
    "result_to_document",
] + (list(_GRAPH_NAMES) if _support.extra_installed(_support.GRAPH_EXTRA_MODULES) else [])


# the global-question retriever is loaded lazily: it needs the graph extra, the local retriever does not
__getattr__ = _support.lazy_exports(__name__, "graph", _GRAPH_NAMES)
