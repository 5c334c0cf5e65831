"""The example notebooks run end to end, offline, so they cannot rot.

Each notebook is executed with nbclient in a fresh ``python3`` kernel, from ``examples/`` as the working
directory. Their cells assert what they show. They load the packaged all-MiniLM-L6-v2 (offline), hence
``slow``: deselect with ``-m "not slow"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

NOTEBOOKS = [
    pytest.param("langchain_agent_memory.ipynb", "langchain_core", id="langchain_agent_memory"),
    pytest.param("llamaindex_query_engine.ipynb", "llama_index.core", id="llamaindex_query_engine"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "framework"), NOTEBOOKS)
def test_notebook_runs(name, framework, monkeypatch):
    pytest.importorskip(framework)
    pytest.importorskip("ipykernel")
    # the kernel inherits the environment: nothing may reach the network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    )
    client.execute()  # raises CellExecutionError, with the failing cell and traceback, on any error
