"""hybrid_memory: long-term memory for LLM agents with BM25 + dense retrieval fused by weighted RRF.

Quick start::

    from hybrid_memory import HybridMemory
    with HybridMemory("./memory") as memory:
        memory.add([{"chunk_id": "n1", "text": "billing-service: HTTP 504 from pool exhaustion",
                     "metadata": {"environment": "production"}}])
        response = memory.search("HTTP 504", top_k=5, metadata_filter={"environment": "production"})

The GraphRAG layer lives in :mod:`hybrid_memory.graph` (``pip install 'hybrid-memory[graph]'``), imported
only when asked for. :func:`export_to_qdrant` (from :mod:`hybrid_memory.memory.export`) imports the
``qdrant`` extra only when called.
"""

from ._exceptions import (
    BackendUnavailableError,
    DimensionMismatchError,
    DiskFullError,
    DuplicateChunkError,
    HybridMemoryError,
    InvalidEmbedderError,
    InvalidFilterError,
    InvalidRequestError,
    MemoryClosedError,
    MemoryNotFoundError,
    MissingDependencyError,
    ScopeError,
    StoreBusyError,
    StoreFormatError,
)
from .dedup import DedupPolicy, WriteDecision, WriteResult
from .embedders import CallableEmbedder, Embedder, HashingEmbedder, SentenceTransformerEmbedder
from .fusion import FusedHit, reciprocal_rank_fusion
from .memory import HybridMemory
from .memory.export import export_to_qdrant
from .memory.scoped import ScopedMemory
from .models import (
    MAX_SEARCH_TEXT_CHARS,
    MAX_TOP_K,
    MAX_WEIGHT,
    Chunk,
    HybridParams,
    SearchRequest,
    SearchResponse,
    SearchResult,
    StoredChunk,
)
from .onnx_embedder import OnnxEmbedder
from .scopes import Scope
from .temporal import RecencyPrior

__version__ = "0.1.0"

__all__ = [
    "MAX_SEARCH_TEXT_CHARS",
    "MAX_TOP_K",
    "MAX_WEIGHT",
    "CallableEmbedder",
    "Chunk",
    "DedupPolicy",
    "DimensionMismatchError",
    "DiskFullError",
    "DuplicateChunkError",
    "Embedder",
    "FusedHit",
    "HashingEmbedder",
    "HybridMemory",
    "HybridMemoryError",
    "HybridParams",
    "InvalidEmbedderError",
    "InvalidFilterError",
    "InvalidRequestError",
    "MemoryClosedError",
    "MemoryNotFoundError",
    "BackendUnavailableError",
    "MissingDependencyError",
    "OnnxEmbedder",
    "RecencyPrior",
    "Scope",
    "ScopeError",
    "ScopedMemory",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "SentenceTransformerEmbedder",
    "StoreBusyError",
    "StoreFormatError",
    "StoredChunk",
    "WriteDecision",
    "WriteResult",
    "export_to_qdrant",
    "reciprocal_rank_fusion",
]
