"""LlamaIndex adapter of hybrid_memory: a retriever, filter translation and an embedding bridge.

Install with ``pip install 'hybrid-memory[llamaindex]'``. The store is the core's: a memory folder built
here opens in the LangChain adapter and in :class:`hybrid_memory.HybridMemory` unchanged.
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:
    from hybrid_memory._exceptions import missing_dependency

    raise missing_dependency("llama-index-core", "llamaindex") from exc

from .embeddings import LlamaIndexEmbedder, as_core_embedder
from .filters import to_core_filter
from .retrievers import HybridMemoryRetriever, node_to_chunk, result_to_node


_GRAPH_NAMES = ('GlobalGraphRetriever', 'hit_to_node')


def _graph_extra_installed() -> bool:
    """True when the graph extra's packages can be found (without importing them)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(name) is not None for name in ("networkx", "cdlib", "leidenalg", "igraph"))
    except (ImportError, ValueError):  # a broken or blocked install counts as absent
        return False


# the graph names are public only with the graph extra, so ``from llamaindex_hybrid_memory import *`` works without it
__all__ = [
    "HybridMemoryRetriever",
    "LlamaIndexEmbedder",
    "as_core_embedder",
    "node_to_chunk",
    "result_to_node",
    "to_core_filter",
] + (list(_GRAPH_NAMES) if _graph_extra_installed() else [])


def __getattr__(name: str) -> object:
    """Load the global-question retriever lazily: it needs the graph extra, the local retriever does not."""
    if name in _GRAPH_NAMES:
        from . import graph

        return getattr(graph, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
