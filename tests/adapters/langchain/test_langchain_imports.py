"""The public names of langchain_hybrid_memory, pinned; what importing it pulls in; and the missing extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("langchain_core")

import langchain_hybrid_memory  # noqa: E402

EXPECTED_ALL = [
    "GlobalGraphRetriever",
    "hit_to_document",
    "HybridMemoryRetriever",
    "LangChainEmbedder",
    "as_core_embedder",
    "document_to_chunk",
    "result_to_document",
]


def test_all_imports():
    assert sorted(langchain_hybrid_memory.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert getattr(langchain_hybrid_memory, name) is not None


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_import_pulls_no_langchain_community_and_no_llamaindex():
    proc = _run(
        """
        import sys
        import langchain_hybrid_memory
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("langchain_community", "llama_index"))
        print(bad)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_missing_langchain_fails_with_install_line():
    proc = _run(
        """
        import sys
        sys.modules["langchain_core"] = None  # simulate langchain-core not installed
        from hybrid_memory import MissingDependencyError
        try:
            import langchain_hybrid_memory
        except MissingDependencyError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        else:
            raise SystemExit("imported without langchain-core")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'hybrid-memory[langchain]'" in proc.stdout
