"""Every Python example of the docs runs in the test suite (sybil), so none can go stale.

A line ``print(...)  # text`` states what it prints: a block with such lines must print exactly those texts, in
order (so a stale output comment fails). Each page runs top to bottom in one namespace, in an empty temporary
folder of its own (a page's ``./memory`` is that folder's). A block that needs a server or the network is preceded by
``<!-- skip: next -->``. Memories a page left open are closed when it ends. ``python -m pytest -q`` collects these
from the repository root (pyproject's ``testpaths``); ``python -m pytest -q docs`` runs only them.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.myst import CodeBlockParser, SkipParser


def expected_prints(source: str) -> list[str]:
    """What the block's ``print(...)  # text`` lines say they print, in order (write them where they run once)."""
    return [
        line.split("  # ", 1)[1].strip()
        for line in source.splitlines()
        if line.lstrip().startswith("print(") and "  # " in line
    ]


class CheckedPythonEvaluator:
    """Run a block as sybil's PythonEvaluator does, then compare its output with its ``print`` comments."""

    def __init__(self) -> None:
        self._run = PythonEvaluator()

    def __call__(self, example: Example) -> str | None:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            self._run(example)
        expected = expected_prints(str(example.parsed))
        printed = captured.getvalue().splitlines()
        if expected and printed != expected:
            return f"the block printed {printed!r}; its comments say {expected!r}"
        return None


_START = os.getcwd()


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory):
    """An empty working folder per page. The page's teardown (:func:`_end_page`) goes back to the starting folder,
    after closing the page's memories: pytest may finalise this fixture first, and a memory opened with a relative
    path saves its index files relative to the working directory of the moment it closes."""
    folder = tmp_path_factory.mktemp("docs-page")
    os.chdir(folder)
    return folder


def _end_page(namespace: dict) -> None:
    from hybrid_memory import HybridMemory

    try:
        for value in list(namespace.values()):
            if isinstance(value, HybridMemory):
                value.close()
    finally:
        os.chdir(_START)


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser("python", CheckedPythonEvaluator()), SkipParser()],
    patterns=["*.md"],
    excludes=["ARCHITECTURE.md"],  # the architecture page's code is a sketch of the public contract, not a program
    fixtures=["docs_folder"],
    teardown=_end_page,
).pytest()
