"""The export record of a Qdrant Edge shard: what ``export-qdrant --edge-path`` wrote the shard with.

A shard's BM25 values are fixed when its points are written (``tf / (tf + k1 · (1 - b + b · |d| / avgdl))``,
:mod:`hybrid_memory.backends.qdrant.backend`), and Qdrant Edge keeps no collection metadata to say with which ``avgdl``,
``k1`` and ``b``. The export writes them, with where the copy came from, in :data:`EXPORT_INFO`, a small JSON
file beside the shard's own files (no pickle): :meth:`QdrantBackend.edge
<hybrid_memory.backends.qdrant.backend.QdrantBackend.edge>` reopens the shard with them (so a later write normalises as
the copied points were), and ``stats`` reports them. The file is written when the copy starts
(``"complete": false``) and rewritten when it ends, so an interrupted copy says that it is partial.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ..._exceptions import StoreFormatError

_DEFAULT_DIM = 384
"""The dimension of the default embedder, all-MiniLM-L6-v2 (what the CLI opens a shard with, without
``--hashing-dim``)."""

__all__ = [
    "EXPORT_INFO",
    "embedder_fix",
    "partial_export",
    "read_export_info",
    "remove_export_info",
    "shard_dim",
    "write_export_info",
]

EXPORT_INFO = "hybrid_memory_export.json"
"""The export record's file name inside the shard's folder."""

FORMAT = 1
"""Version of the record's fields; a record of another version is refused (StoreFormatError)."""


def write_export_info(
    folder: str | os.PathLike[str],
    *,
    avgdl: float,
    k1: float,
    b: float,
    memory: str | None,
    chunks: int,
    complete: bool,
    embedder: dict[str, Any],
    indexed_keys: dict[str, str],
) -> dict[str, Any]:
    """Write the record of an export into ``folder`` (the shard's, which must exist), atomically (a temporary
    file, then ``os.replace``), and return it.

    Args:
        avgdl, k1, b: the BM25 parameters the points were written with (avgdl in tokens).
        memory: the exported memory's folder (absolute), or None for an in-RAM memory.
        chunks: chunks copied so far (all of them when ``complete``).
        complete: whether the copy finished.
        embedder: ``{"name": ..., "dim": ...}`` of the exported memory.
        indexed_keys: the shard's payload indexes, ``{key: type}``.

    Raises:
        OSError: the folder cannot be written (the shard's own files are not touched).
    """
    info = {
        "format": FORMAT,
        "avgdl": float(avgdl),
        "k1": float(k1),
        "b": float(b),
        "memory": memory,
        "chunks": int(chunks),
        "complete": bool(complete),
        "embedder": dict(embedder),
        "indexed_keys": dict(indexed_keys),
        "exported_at": round(time.time(), 3),
    }
    path = Path(folder) / EXPORT_INFO
    tmp = path.with_name(f".{EXPORT_INFO}.tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return info


def read_export_info(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The export record in ``folder``, or None when there is none (a shard not written by ``export-qdrant``,
    or written before this record existed).

    Raises:
        StoreFormatError: the file is not a record of this version (bad JSON, another format, a missing or bad
            ``avgdl``, ``k1`` or ``b``); the message names the file and the fix.
    """
    path = Path(folder) / EXPORT_INFO
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreFormatError(f"{path} cannot be read ({exc}); {_FIX}") from exc
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreFormatError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); {_FIX}") from exc
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        found = info.get("format") if isinstance(info, dict) else type(info).__name__
        raise StoreFormatError(f"{path} is not an export record of format {FORMAT} (found {found!r}); {_FIX}")
    for name in ("avgdl", "k1", "b"):
        value = info.get(name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
            or (name == "avgdl" and value == 0)
        ):
            raise StoreFormatError(f"{path}: {name} must be a finite number (avgdl > 0), got {value!r}; {_FIX}")
    return info


def remove_export_info(folder: str | os.PathLike[str]) -> None:
    """Remove the export record of ``folder`` if there is one (the shard is being cleared)."""
    (Path(folder) / EXPORT_INFO).unlink(missing_ok=True)


def shard_dim(folder: str | os.PathLike[str]) -> int | None:
    """The dense vectors' size in an Edge shard's ``edge_config.json`` (Qdrant Edge writes it); None when there is
    no shard or the file does not say (then opening the shard reports what is wrong)."""
    from ...paths import EDGE_CONFIG
    from .schema import DENSE

    try:
        size = json.loads((Path(folder) / EDGE_CONFIG).read_text(encoding="utf-8"))["vectors"][DENSE]["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def embedder_fix(folder: str | os.PathLike[str], held: int | None = None) -> str:
    """Which embedder opens the shard in ``folder``, as its export record names it, to end the sentence "open it
    with the embedder it was written with": for a :class:`~hybrid_memory.embedders.HashingEmbedder` of n
    dimensions, ``--hashing-dim n`` (the CLI) and ``embedder=HashingEmbedder(n)``; else the record's embedder
    name. Without a readable record, the dimension the shard holds (``held``, when given) with the command-line
    option that gives it (``--hashing-dim held``, or none for the default model's 384), then "or give another
    directory"."""
    try:
        info = read_export_info(folder)
    except StoreFormatError:
        info = None
    embedder = (info or {}).get("embedder") or {}
    name, dim = embedder.get("name"), embedder.get("dim")
    if not isinstance(name, str):
        if held is None:
            return ", or give another directory"
        option = (
            "leave --hashing-dim out: the default all-MiniLM-L6-v2 gives 384"
            if held == _DEFAULT_DIM
            else f"--hashing-dim {held} if it was written with a HashingEmbedder"
        )
        return (
            f", one of dimension {held} (the shard has no export record naming it; on the command line, {option}),"
            " or give another directory"
        )
    if name == f"hashing-{dim}":
        return (
            f", {name!r} (its export record): --hashing-dim {dim} on the command line, "
            f"embedder=HashingEmbedder({dim}) in Python"
        )
    return f", {name!r} (dim {dim}, its export record)"


def partial_export(folder: str | os.PathLike[str], info: dict[str, Any] | None) -> str | None:
    """The warning for a shard whose export record ``info`` says the copy did not finish (``"complete": false``:
    the export failed or was killed part way, so the shard lacks chunks of its memory), naming the fix; None for
    a complete copy or a shard without a record. The shard stays readable (nothing in it is wrong, only missing):
    :meth:`QdrantBackend.edge <hybrid_memory.backends.qdrant.backend.QdrantBackend.edge>` logs it and ``stats`` reports
    it as ``export_warning``."""
    if not info or info.get("complete", True):
        return None
    source = info.get("memory") or "DIR"
    return (
        f"Qdrant Edge shard {folder} holds a partial copy of {source}: its export was interrupted (its record "
        f"{EXPORT_INFO} says complete: false), so searches miss the chunks it did not copy; write it again with: "
        f"hybrid-memory export-qdrant --memory {source} --edge-path {folder} --replace, or remove the folder "
        f"{folder}"
    )


_FIX = (
    "write the shard again with: hybrid-memory export-qdrant --memory DIR --edge-path SHARD --replace "
    "(or remove the file and give the avgdl the shard was written with)"
)
