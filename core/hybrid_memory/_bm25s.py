"""bm25s, imported without numba.

bm25s imports numba at its own import whenever numba is installed (the ``eval`` extra brings it, through ranx),
which cost 0.3-0.6 s of every process start on this project's 2-core machines, a cold ``hybrid-memory search``
included. This library never runs bm25s's numba backend: it builds bm25s's score matrix itself
(:mod:`hybrid_memory.engines.bm25.build`) and scores from it (:mod:`hybrid_memory.engines.bm25.index`), using bm25s
for its stopword list, its index format and ``BM25.load``. So bm25s is imported with numba hidden from it (an entry
of None in ``sys.modules`` makes ``import numba`` raise ImportError, which bm25s catches and then runs on numpy),
once per process, and the entry is removed again at once: a later ``import numba`` of the caller's works as usual.
Where numba was imported before bm25s, bm25s sees it, as without this module.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

__all__ = ["import_bm25s"]

_lock = threading.Lock()


def import_bm25s(module: str = "bm25s") -> ModuleType:
    """``bm25s`` (or one of its submodules, e.g. ``"bm25s.stopwords"``), imported without numba the first time.

    Raises:
        ImportError: bm25s is not installed (a core dependency: reinstall hybrid-memory).
    """
    with _lock:
        if module in sys.modules:
            return sys.modules[module]
        hide = "numba" not in sys.modules
        if hide:
            sys.modules["numba"] = None  # type: ignore[assignment]  # `import numba` raises ImportError while set
        try:
            return importlib.import_module(module)
        finally:
            if hide and sys.modules.get("numba", 0) is None:
                del sys.modules["numba"]
