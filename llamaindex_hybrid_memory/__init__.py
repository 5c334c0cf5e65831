"""LlamaIndex adapter of hybrid_memory: a retriever, filter translation and an embedding bridge.

Install with ``pip install 'hybrid-memory[llamaindex]'``. The store is the core's: a memory folder built
here opens in the LangChain adapter and in :class:`hybrid_memory.HybridMemory` unchanged.
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:
    from hybrid_memory._adapter_support import missing_dependency

    raise missing_dependency("llama-index-core", "llamaindex") from exc

from hybrid_memory import _adapter_support as _support

from .embeddings import LlamaIndexEmbedder, as_core_embedder
from .filters import to_core_filter
from .retrievers import HybridMemoryRetriever, node_to_chunk, result_to_node

_GRAPH_NAMES = ("GlobalGraphRetriever", "hit_to_node")


# the graph names are public only with the graph extra, so ``from llamaindex_hybrid_memory import *`` works without it
__all__ = [
    "HybridMemoryRetriever",
    "LlamaIndexEmbedder",
    "as_core_embedder",
    "node_to_chunk",
    "result_to_node",
    "to_core_filter",
] + (list(_GRAPH_NAMES) if _support.extra_installed(_support.GRAPH_EXTRA_MODULES) else [])


# the global-question retriever is loaded lazily: it needs the graph extra, the local retriever does not
__getattr__ = _support.lazy_exports(__name__, "graph", _GRAPH_NAMES)
