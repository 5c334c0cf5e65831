import hybrid_memory.graph as graph

EXPECTED = [
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


def test_public_names_are_pinned():
    assert graph.__all__ == EXPECTED
    assert all(hasattr(graph, name) for name in EXPECTED)


def test_errors_join_the_core_tree():
    from hybrid_memory import HybridMemoryError, MissingDependencyError

    assert graph.MissingDependencyError is MissingDependencyError
    assert issubclass(graph.LLMOutputError, HybridMemoryError) and issubclass(graph.LLMOutputError, ValueError)
    assert issubclass(graph.GraphFormatError, HybridMemoryError)
