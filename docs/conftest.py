"""Every Python example of the docs runs in the test suite (sybil), so none can go stale.

Each page runs top to bottom in one namespace, in an empty temporary folder of its own (a page's ``./memory`` is
that folder's). A block that needs a server or the network is preceded by ``<!-- skip: next -->``. Memories a page
left open are closed when it ends. ``python -m pytest -q`` collects these from the repository root (pyproject's
``testpaths``); ``python -m pytest -q docs`` runs only them.
"""

from __future__ import annotations

import os

import pytest
from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory):
    """An empty working folder per page; the previous working directory is restored after it."""
    folder = tmp_path_factory.mktemp("docs-page")
    previous = os.getcwd()
    os.chdir(folder)
    yield folder
    os.chdir(previous)


def _close_memories(namespace: dict) -> None:
    from hybrid_memory import HybridMemory

    for value in list(namespace.values()):
        if isinstance(value, HybridMemory):
            value.close()


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["*.md"],
    excludes=["ARCHITECTURE.md"],  # the architecture page's code is a sketch of the public contract, not a program
    fixtures=["docs_folder"],
    teardown=_close_memories,
).pytest()
