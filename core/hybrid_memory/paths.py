"""Checks of the folders a memory or a Qdrant Edge shard is kept in, before anything is created there.

An embedded memory is a folder holding :data:`STORE_FILE` (the SQLite store, the source of truth) and its
derived index files; a Qdrant Edge shard is a folder holding :data:`EDGE_CONFIG` and its segments. The two
must never share a folder: each writes files the other does not know, and deleting one (``rm -r`` of the
folder) would delete the other. These checks refuse the mix-up, and the paths that cannot be folders, with an
:class:`~hybrid_memory.InvalidRequestError` naming the fix, before a single file is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._exceptions import InvalidRequestError, StoreFormatError

__all__ = [
    "EDGE_CONFIG",
    "INDEX_LOCK",
    "MEMORY_FILES",
    "STORE_FILE",
    "check_edge_path",
    "check_local_mode_path",
    "check_store_present",
    "embedded_memory_at",
    "memory_files_without_store",
    "memory_path",
]

STORE_FILE = "store.sqlite3"
"""The SQLite store of an embedded memory, inside its folder."""

INDEX_LOCK = ".indexes.lock"
"""The inter-process lock file of a memory's derived index files (``filelock``; saves, loads and the ingest
clean-up take it)."""

EDGE_CONFIG = "edge_config.json"
"""The file a Qdrant Edge shard (qdrant-edge-py 0.x) writes first in its folder."""

MEMORY_FILES: tuple[str, ...] = (
    "manifest.json",
    "indexes.json",
    "bm25/manifest.json",
    "dense/manifest.json",
    "filters/meta.json",
    f"{STORE_FILE}-wal",
)
"""Files (relative to a memory folder) that only a memory writes besides :data:`STORE_FILE`, and only after its
store exists: the manifest's readable copy, the derived indexes' own manifests and state file, the store's
write-ahead log. A folder holding one of them but no store is a memory whose store was lost, not a new folder."""


def memory_path(path: Any, what: str = "path") -> Path:
    """The memory folder ``path`` as a :class:`~pathlib.Path`, refused when it cannot be one.

    Args:
        path: a ``str`` or ``os.PathLike`` (e.g. ``pathlib.Path``).
        what: the argument's name in the message.

    Raises:
        InvalidRequestError: ``path`` is another type (``5``, bytes, a client object), an empty string (which
            would mean the current directory), or an existing regular file (a memory is a folder).
    """
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise InvalidRequestError(
            f"{what} must be a memory folder path, a str or os.PathLike such as pathlib.Path (or None for a memory "
            f"kept in process memory only), got {type(path).__name__}: {path!r:.80}; a Qdrant memory is "
            "HybridMemory.qdrant(...) or HybridMemory(backend=...)"
        )
    folder = Path(path)
    if not os.fspath(path):
        raise InvalidRequestError(
            f"{what} is empty; give a memory folder, e.g. './memory' (or None for a memory kept in process memory only)"
        )
    if folder.exists() and not folder.is_dir():
        hint = f": its folder is {folder.parent}" if folder.name == STORE_FILE else ""
        raise InvalidRequestError(
            f"memory path {folder} is a file; give a directory: a memory is a folder (holding {STORE_FILE} and its "
            f"index files), not one file{hint}"
        )
    return folder


def memory_files_without_store(folder: Path) -> list[str]:
    """The :data:`MEMORY_FILES` found in ``folder`` when it holds no :data:`STORE_FILE`, shown as a user would
    look for them (``bm25/``, not ``bm25/manifest.json``), in that order; ``[]`` when the store is there, or when
    none of them is (a missing or empty folder, or any folder a memory never wrote)."""
    if (folder / STORE_FILE).exists():
        return []
    return [name.split("/")[0] + "/" if "/" in name else name for name in MEMORY_FILES if (folder / name).exists()]


def check_store_present(folder: Path) -> None:
    """Refuse a memory folder whose store is gone while its other files are there, before anything is written:
    opening it would create an empty store beside the old index files (which it would then rebuild to nothing),
    and every chunk would silently be lost for good. Nothing in ``folder`` is changed or removed.

    Raises:
        StoreFormatError: ``folder`` holds no :data:`STORE_FILE` but one of :data:`MEMORY_FILES`; the message
            names the files found and the fix (restore the store from a backup, or move the folder aside and
            ingest again).
    """
    found = memory_files_without_store(folder)
    if found:
        raise StoreFormatError(
            f"{folder} holds a memory's files ({', '.join(found)}) but not its store, {STORE_FILE}: the store is the "
            "source of truth (the chunks' texts, metadata and vectors) and cannot be rebuilt from the index files; "
            f"nothing was changed. Restore {STORE_FILE} from a backup (put the copy into an empty folder and open "
            f"that: its indexes are rebuilt from it), or move {folder} aside and ingest the documents into a new "
            "memory"
        )


def embedded_memory_at(path: Path) -> Path | None:
    """The folder of the embedded memory that ``path`` is, or lies inside (``path`` or an ancestor holds
    :data:`STORE_FILE`); None when there is none."""
    absolute = path.absolute()
    for folder in (absolute, *absolute.parents):
        if (folder / STORE_FILE).is_file():
            return folder
    return None


def check_edge_path(path: Any) -> Path:
    """The folder ``path`` for a Qdrant Edge shard, refused when the shard cannot or must not be kept there.

    Raises:
        InvalidRequestError: ``path`` is not a str / os.PathLike, is empty, is a regular file or lies below one,
            or is (or lies inside) an embedded memory's folder: the message says to use another folder.
    """
    return _foreign_folder(
        path,
        "edge_path",
        "a Qdrant Edge shard",
        "-edge",
        " (hybrid-memory export-qdrant --edge-path copies the memory there)",
    )


def check_local_mode_path(path: Any) -> Path:
    """The folder ``path`` for qdrant-client's local mode (``QdrantClient(path=...)``), refused as
    :func:`check_edge_path` refuses an Edge shard's: a file, or an embedded memory's folder (local mode writes
    ``collection/``, ``meta.json`` and ``.lock`` there)."""
    return _foreign_folder(path, "client_or_url", "a qdrant-client local-mode folder", "-qdrant", "")


def _foreign_folder(path: Any, what: str, kind: str, suffix: str, hint: str) -> Path:
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise InvalidRequestError(f"{what} must be a folder path (str or os.PathLike), got {path!r:.80}")
    folder = Path(path)
    for existing in (folder.absolute(), *folder.absolute().parents):
        if existing.exists():
            if not existing.is_dir():
                where = "is a file" if existing == folder.absolute() else f"lies below the file {existing}"
                raise InvalidRequestError(
                    f"{what} {folder} {where}; {kind} is a folder (created when absent): give a folder path"
                )
            break
    memory = embedded_memory_at(folder)
    if memory is not None:
        where = (
            "is the embedded memory folder"
            if memory == folder.absolute()
            else f"is inside the embedded memory folder {memory}"
        )
        raise InvalidRequestError(
            f"{what} {folder} {where} (it holds {STORE_FILE}); "
            f"{kind} must not share a memory's folder: use another folder, e.g. "
            f"{memory.parent / (memory.name + suffix)}{hint}"
        )
    return folder
