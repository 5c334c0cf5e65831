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


_GRAPH_NAMES = ('GlobalGraphRetriever', 'hit_to_document')


def _graph_extra_installed() -> bool:
    """True when the graph extra's packages can be found (without importing them)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(name) is not None for name in ("networkx", "cdlib", "leidenalg", "igraph"))
    except (ImportError, ValueError):  # a broken or blocked install counts as absent
        return False


# the graph names are public only with the graph extra, so ``from langchain_hybrid_memory import *`` works without it
__all__ = [
    "HybridMemoryRetriever",
    "LangChainEmbedder",
    "as_core_embedder",
    "document_to_chunk",
    "result_to_document",
] + (list(_GRAPH_NAMES) if _graph_extra_installed() else [])


def __getattr__(name: str) -> object:
    """Load the global-question retriever lazily: it needs the graph extra, the local retriever does not."""
    if name in _GRAPH_NAMES:
        from . import graph

        return getattr(graph, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
