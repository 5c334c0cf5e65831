"""Exceptions of the GraphRAG layer, grafted onto the core tree when it is importable.

HybridMemoryError                 (hybrid_memory._exceptions)
├── MissingDependencyError(ImportError)   networkx / graspologic-native / json-repair (or cdlib) absent
├── GraphFormatError              graph/ folder of an unknown format version or damaged
├── GraphStateError               e.g. global_search() before any community report exists
└── LLMOutputError(ValueError)    a model reply that stayed unusable after the retry
"""

from __future__ import annotations

__all__ = ["GraphFormatError", "GraphStateError", "LLMOutputError", "MissingDependencyError"]

INSTALL_HINT = "pip install 'hybrid-memory[graph]'"

try:  # the core's tree, when present
    from hybrid_memory._exceptions import HybridMemoryError, MissingDependencyError
except ImportError:  # pragma: no cover - only while the core is being written

    class HybridMemoryError(Exception):  # type: ignore[no-redef]
        """Root of the package's exceptions (local stand-in until the core defines it)."""

    class MissingDependencyError(HybridMemoryError, ImportError):  # type: ignore[no-redef]
        """An optional dependency is not installed; the message gives the pip line."""


class GraphFormatError(HybridMemoryError):
    """The saved graph folder has an unknown format version or a damaged file."""


class GraphStateError(HybridMemoryError):
    """The operation needs state the index does not have yet (e.g. reports before build())."""


class LLMOutputError(HybridMemoryError, ValueError):
    """A model reply that could not be parsed or validated, even after the retry.

    ``attempts`` is the number of model calls made; ``prompt_tokens`` and ``completion_tokens`` their cost.
    """

    def __init__(self, message: str, *, attempts: int = 1, prompt_tokens: int = 0, completion_tokens: int = 0):
        super().__init__(message)
        self.attempts = attempts
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
