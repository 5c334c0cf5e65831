"""Exceptions raised by hybrid_memory.

The whole tree::

    HybridMemoryError                      base of everything raised on purpose here
    ├── InvalidRequestError (ValueError)   a request, chunk or parameter is malformed; the message names the fix
    │   ├── InvalidFilterError             the metadata filter uses an unknown operator or a bad operand
    │   ├── DuplicateChunkError            add() got a chunk_id that is already stored (use upsert())
    │   ├── MemoryClosedError              the memory was closed (before the call, or while it ran)
    │   ├── InvalidEmbedderError (TypeError) an adapter's embedder is neither the framework's model nor an Embedder
    │   └── ScopeError                     a scoped view was asked to write or reach outside its scope
    ├── DimensionMismatchError (ValueError) a vector's dimension differs from the memory's
    ├── StoreFormatError                   a memory directory is missing, damaged, or from another version/embedder
    │   └── MemoryNotFoundError (FileNotFoundError) open() found no memory at the path (create=True makes one)
    ├── StoreBusyError                     another process held the memory's write lock longer than the busy timeout
    ├── BackendUnavailableError (ConnectionError) a backend's server (Qdrant) could not be reached: at open or later
    └── MissingDependencyError (ImportError) an optional extra is not installed; the message has the pip line
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "DimensionMismatchError",
    "DiskFullError",
    "DuplicateChunkError",
    "HybridMemoryError",
    "InvalidEmbedderError",
    "InvalidFilterError",
    "InvalidRequestError",
    "MemoryClosedError",
    "MemoryNotFoundError",
    "MissingDependencyError",
    "ScopeError",
    "StoreBusyError",
    "StoreFormatError",
]


class HybridMemoryError(Exception):
    """Base class of every error hybrid_memory raises on purpose."""


class InvalidRequestError(HybridMemoryError, ValueError):
    """A request, a chunk or a parameter is malformed. The message names the field and the fix."""


class InvalidFilterError(InvalidRequestError):
    """The metadata filter has an unknown operator or an operand of the wrong type."""


class DuplicateChunkError(InvalidRequestError):
    """``add()`` was given a ``chunk_id`` that is already stored; ``upsert()`` replaces it instead."""


class InvalidEmbedderError(InvalidRequestError, TypeError):
    """An adapter was given an embedder that is neither the framework's embedding model (LangChain
    ``Embeddings``, LlamaIndex ``BaseEmbedding``) nor a hybrid_memory ``Embedder``. Also a ``TypeError``, which
    the adapters raised before, so ``except TypeError`` keeps working."""


class MemoryClosedError(InvalidRequestError):
    """The memory was closed: before the call, or by another thread while the call ran (a search racing
    ``close()`` either finishes before the memory closes or raises this; nothing stored is affected).
    Open it again with ``HybridMemory.open(path)``."""


class ScopeError(InvalidRequestError):
    """A scoped view (:meth:`HybridMemory.scoped`) was given a chunk of another scope, an id that another scope
    holds, or a scope that contradicts its own."""


class DimensionMismatchError(HybridMemoryError, ValueError):
    """A vector's dimension differs from the dimension the memory was created with."""


class StoreFormatError(HybridMemoryError):
    """A memory directory is missing or damaged, has another format version, or was built with another embedder."""


class MemoryNotFoundError(StoreFormatError, FileNotFoundError):
    """:meth:`HybridMemory.open <hybrid_memory.memory.hybrid.HybridMemory.open>` found no memory at the path (a mistyped
    path must not silently give an empty memory); ``create=True`` makes one. A :class:`StoreFormatError`, which
    it was raised as before, and a ``FileNotFoundError``, what ``open()`` of a missing path raises in Python."""


class StoreBusyError(HybridMemoryError):
    """Another process kept the memory's SQLite write lock longer than the busy timeout; nothing was written."""


class DiskFullError(HybridMemoryError, OSError):
    """The disk (or quota) holding the memory is full. A write is rolled back whole (none of its chunks stored,
    every earlier acknowledged write kept); ``close()`` still releases the store (the indexes, derived data, are
    rebuilt from it at the next open); an open whose index files cannot be saved serves from memory. The message
    names the folder, the cause and what is stored."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk or the quota is full: an OSError with errno ENOSPC or EDQUOT, or SQLite's
    SQLITE_FULL ("database or disk is full")."""
    import errno
    import sqlite3

    if isinstance(exc, sqlite3.OperationalError):
        return "database or disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class BackendUnavailableError(HybridMemoryError, ConnectionError):
    """A backend (a Qdrant server or local-mode folder) could not be reached or opened: at open, or later (the
    server went away mid-session: connection refused or lost, a timeout, HTTP 502/503/504, gRPC UNAVAILABLE).
    The message names the target (URL, collection), the underlying error, and what happened to the call: a read
    or a refused open changed nothing; a write may be partly stored and is safe to run again (an upsert)."""


class MissingDependencyError(HybridMemoryError, ImportError):
    """An optional dependency is not installed. The message gives the ``pip install`` line."""


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """Build the error raised when ``package`` (from the ``extra`` extra) cannot be imported."""
    return MissingDependencyError(f"{package} is not installed; install it with: pip install 'hybrid-memory[{extra}]'")
