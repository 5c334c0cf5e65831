"""The public names of llamaindex_hybrid_memory, pinned; what importing it pulls in; and the missing extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("llama_index.core")

import llamaindex_hybrid_memory  # noqa: E402

EXPECTED_ALL = [
    "GlobalGraphRetriever",
    "hit_to_node",
    "HybridMemoryRetriever",
    "LlamaIndexEmbedder",
    "as_core_embedder",
    "node_to_chunk",
    "result_to_node",
    "to_core_filter",
]


def test_all_imports():
    assert sorted(llamaindex_hybrid_memory.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert getattr(llamaindex_hybrid_memory, name) is not None


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_import_pulls_no_langchain():
    proc = _run(
        """
        import sys
        import llamaindex_hybrid_memory
        print(sorted(m for m in sys.modules if m.split(".")[0].startswith("langchain")))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_missing_llamaindex_fails_with_install_line():
    proc = _run(
        """
        import sys
        sys.modules["llama_index"] = None  # simulate llama-index-core not installed
        sys.modules["llama_index.core"] = None
        from hybrid_memory import MissingDependencyError
        try:
            import llamaindex_hybrid_memory
        except MissingDependencyError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        else:
            raise SystemExit("imported without llama-index-core")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'hybrid-memory[llamaindex]'" in proc.stdout
