"""The public surface is pinned both ways: every name in ``__all__`` exists, every public name is in ``__all__``,
and ``from <package> import *`` works, for the adapters without the graph extra too."""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys
import textwrap
import types

import pytest

CORE = [
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
    "MAX_SEARCH_TEXT_CHARS",
    "MAX_TOP_K",
    "MAX_WEIGHT",
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
LANGCHAIN = [
    "HybridMemoryRetriever",
    "LangChainEmbedder",
    "as_core_embedder",
    "document_to_chunk",
    "result_to_document",
]
LLAMAINDEX = [
    "HybridMemoryRetriever",
    "LlamaIndexEmbedder",
    "as_core_embedder",
    "node_to_chunk",
    "result_to_node",
    "to_core_filter",
]
GRAPH = {
    "langchain_hybrid_memory": ["GlobalGraphRetriever", "hit_to_document"],
    "llamaindex_hybrid_memory": ["GlobalGraphRetriever", "hit_to_node"],
}


def _public(module: types.ModuleType) -> list[str]:
    """Names a user sees: no underscore, not a submodule, not a ``from __future__`` feature."""
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), (types.ModuleType, __future__._Feature))
    )


@pytest.mark.parametrize(
    ("package", "expected"),
    [("hybrid_memory", CORE), ("langchain_hybrid_memory", LANGCHAIN), ("llamaindex_hybrid_memory", LLAMAINDEX)],
)
def test_all_is_exactly_the_public_surface(package, expected):
    if package != "hybrid_memory":
        pytest.importorskip("langchain_core" if package.startswith("langchain") else "llama_index.core")
    module = importlib.import_module(package)
    graph = GRAPH.get(package, [])
    assert sorted(module.__all__) == sorted(expected + graph)  # the graph extra is installed in this venv
    for name in module.__all__:  # every exported name resolves (the graph ones lazily)
        assert getattr(module, name) is not None
    assert _public(module) == sorted(expected)  # nothing public outside __all__ (graph names are lazy)
    namespace: dict = {}
    exec(f"from {package} import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(expected + graph)


BLOCK_GRAPH = textwrap.dedent("""
    import sys, importlib.abc
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("networkx", "graspologic_native", "json_repair", "cdlib", "leidenalg", "igraph",
                                       "tiktoken"):
                raise ImportError(f"No module named {name!r} (blocked by test)")
            return None
    sys.meta_path.insert(0, Block())
""")


@pytest.mark.parametrize("package", ["langchain_hybrid_memory", "llamaindex_hybrid_memory"])
def test_star_import_of_an_adapter_works_without_the_graph_extra(package):
    pytest.importorskip("langchain_core" if package.startswith("langchain") else "llama_index.core")
    code = BLOCK_GRAPH + textwrap.dedent(f"""
        namespace = {{}}
        exec("from {package} import *", namespace)
        print(sorted(k for k in namespace if k != "__builtins__"))
        import {package} as module
        try:
            module.GlobalGraphRetriever
        except ImportError as exc:
            print("graph:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == repr(sorted(LANGCHAIN if package.startswith("langchain") else LLAMAINDEX))
    assert lines[1].startswith("graph:") and "pip install 'hybrid-memory[graph]'" in lines[1]


def test_importing_the_core_imports_no_qdrant_module():
    """export_to_qdrant is re-exported from hybrid_memory; the qdrant extra is imported only when it is called."""
    code = textwrap.dedent("""
        import sys
        from hybrid_memory import export_to_qdrant
        from hybrid_memory.memory.export import export_to_qdrant as defined
        print(export_to_qdrant is defined, sorted(m for m in sys.modules if m.split(".")[0].startswith("qdrant")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True []"]
