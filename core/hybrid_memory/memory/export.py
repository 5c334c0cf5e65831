"""Copy an embedded memory into a Qdrant collection, with the vectors it stores (no re-embedding).

Every chunk is copied as it is stored: text, source, metadata, scope and validity fields, ``superseded_by``,
merged ids, ``created_at`` / ``updated_at``, and its stored dense vector; the BM25 sparse vector is computed
from the text by the library's tokenizer (:class:`~hybrid_memory.backends.qdrant.backend.SparseEncoder`). The
insertion order is kept (``iter_chunks`` order).

**A target that holds points is refused** unless ``replace=True`` (``export-qdrant --replace``), which clears
it first: copying onto an earlier copy would keep the chunks deleted from the memory since then, and mix the
BM25 normalisations of two average lengths, in a shard that looks current. An interrupted copy is run again
with ``--replace``. An Edge shard also gets its export record (:mod:`~hybrid_memory.backends.qdrant.edge_info`: the
BM25 parameters it was written with and where it came from), which reopening and ``stats`` read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._exceptions import DimensionMismatchError, InvalidRequestError
from ..backends.base import ChunkVersion
from ..backends.embedded.backend import EmbeddedBackend
from ..backends.qdrant.edge_info import read_export_info, remove_export_info, shard_dim, write_export_info

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.embedded.store import SQLiteStore
    from ..backends.qdrant.backend import QdrantBackend
    from ..models import StoredChunk
    from .hybrid import HybridMemory

__all__ = ["check_bm25", "check_target", "export_to_qdrant", "open_target"]

logger = logging.getLogger(__name__)


def check_target(backend: QdrantBackend, *, replace: bool = False) -> int:
    """How many points the opened ``backend``'s collection holds, which a copy with ``replace`` clears.

    Raises:
        InvalidRequestError: the collection holds points and ``replace`` is False; the message says what it
            holds (for an Edge shard, the export record's source and chunk count) and gives the fix.
    """
    held = int(backend.collection.count(None))
    if held and not replace:
        folder = getattr(backend, "path", None)
        info = read_export_info(folder) if folder is not None else None
        origin = ""
        if info:
            state = (
                f"a complete copy of {info.get('memory')}, {info.get('chunks')} chunks"
                if info.get("complete")
                else f"a partial copy of {info.get('memory')} (interrupted)"
            )
            origin = f": {state}, avgdl {info['avgdl']:.6g}"
        what = f"Qdrant Edge shard {folder}" if folder is not None else f"Qdrant collection {backend.collection.name!r}"
        other = "another --edge-path" if folder is not None else "another --collection"
        raise InvalidRequestError(
            f"{what} already holds {held} points{origin}; copying onto it would keep the chunks deleted from the "
            f"memory since then and mix two BM25 length normalisations: give --replace (replace=True) to clear it "
            f"and copy again, or {other}"
        )
    return held


def _embedded(memory: HybridMemory) -> EmbeddedBackend:
    """The embedded backend of the memory a copy reads (its BM25 index, its store's vectors).

    Raises:
        InvalidRequestError: the memory is on another backend (its chunks are there already).
    """
    held = memory.backend
    if not isinstance(held, EmbeddedBackend):
        raise InvalidRequestError(
            "export_to_qdrant copies an embedded HybridMemory (a folder), got a memory on a backend "
            f"({type(held).__name__}), whose chunks are already there; pass HybridMemory.open(path)"
        )
    return held


def check_bm25(memory: HybridMemory, backend: QdrantBackend, *, avgdl: float | None = None) -> None:
    """Refuse a ``backend`` whose BM25 ``k1`` / ``b`` / ``avgdl`` are not the ones the copy is meant to rank with.

    A point's sparse values are fixed when it is written (``tf / (tf + k1 · (1 - b + b · |d| / avgdl))``, Lucene
    BM25 as in bm25s), so a copy written with other parameters ranks differently from the memory. The memory does
    not persist ``k1`` / ``b``: they are the values it was opened with (``memory.bm25_params``). ``avgdl`` is the
    memory's own average chunk length in tokens (``memory.bm25_params["avgdl"]``) unless one is given (``export-qdrant
    --avgdl``); it is not checked for a memory that holds no chunks (there is no length to normalise by, and
    nothing is copied), unless given.

    Raises:
        InvalidRequestError: they differ; the message names both values of each (repr) and how to open the
            backend.
    """
    params = memory.bm25_params
    want = {"k1": params["k1"], "b": params["b"]}
    have = {"k1": float(backend.encoder.k1), "b": float(backend.encoder.b)}
    if avgdl is not None or len(_embedded(memory).sparse):
        want["avgdl"] = float(avgdl if avgdl is not None else params["avgdl"])
        have["avgdl"] = float(backend.encoder.avgdl)
    names = [name for name in want if want[name] != have[name]]
    if names:

        def values(of: dict[str, float]) -> str:
            return ", ".join(f"{name}={of[name]!r}" for name in names)

        raise InvalidRequestError(
            f"the memory ranks with BM25 {values(want)} but the Qdrant backend writes {values(have)}, so the copy "
            f"would rank differently from the memory; nothing was written: open the backend with {values(want)} "
            f"(QdrantBackend.edge(path, {values(want)}) or QdrantBackend.client(url, {values(want)}))"
        )


def open_target(backend: QdrantBackend, dim: int) -> None:
    """Open ``backend`` for vectors of ``dim`` (``QdrantBackend.open``), after checking that an Edge shard there
    holds that dimension: a shard keeps the dimension it was created with (``replace`` clears its points, not its
    schema), and the engine's own refusal read as a Qdrant config error whose fix was the wrong one.

    Raises:
        DimensionMismatchError: the Edge shard (its ``edge_config.json``) holds another dimension; the message
            names both and the fix (a new ``--edge-path``, or remove the shard folder).
    """
    folder = getattr(backend, "path", None)
    held = shard_dim(folder) if folder is not None else None
    if held is not None and held != dim:
        raise DimensionMismatchError(
            f"Qdrant Edge shard {folder} holds vectors of dimension {held}, this memory's are {dim}: a shard keeps "
            f"its dimension (--replace clears its points, not its schema); give a new --edge-path, or remove the "
            f"shard folder {folder} and export again"
        )
    backend.open(dim)


def _clear(backend: QdrantBackend, batch: int = 1000) -> int:
    """Delete every point of ``backend``'s collection (and an Edge shard's export record); returns how many."""
    folder = getattr(backend, "path", None)
    if folder is not None:
        remove_export_info(folder)  # first: a clear that is interrupted leaves no record of a complete copy
    removed = 0
    while True:
        records, _ = backend.collection.scroll(None, batch, None, payload=False)
        if not records:
            break
        backend.collection.delete([r.id for r in records])
        removed += len(records)
    backend._ids.clear()  # the id map of the deleted points
    if backend.corpus is not None:
        backend.corpus.invalidate()  # deleted past the backend's own writes
    return removed


def _checked_avgdl(avgdl: object) -> float | None:
    """``export_to_qdrant``'s ``avgdl``: None, or a finite real number > 0 (tokens) as a float.

    Raises:
        InvalidRequestError: a string, bool, complex or other non-number, or a value <= 0 or not finite; the
            message names the value and the fix.
    """
    if avgdl is None:
        return None
    if isinstance(avgdl, (bool, np.bool_)) or not isinstance(avgdl, (int, float, np.integer, np.floating)):
        raise InvalidRequestError(
            f"avgdl must be a number of tokens > 0, got {type(avgdl).__name__} {avgdl!r}; leave it out to copy "
            "with the memory's own average chunk length, or pass a float such as avgdl=120.0"
        )
    value = float(avgdl)
    if not (value > 0 and np.isfinite(value)):
        raise InvalidRequestError(
            f"avgdl must be a finite number of tokens > 0, got {avgdl!r}; leave it out to copy with the memory's "
            "own average chunk length, or pass a float such as avgdl=120.0"
        )
    return value


def _checked_batch_size(batch_size: object) -> int:
    """``export_to_qdrant``'s ``batch_size``: an int >= 1 (a numpy integer too), as an int.

    Raises:
        InvalidRequestError: a bool, float, string or other non-int, or an int < 1; the message names the value
            and the fix.
    """
    if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        shown = f"{type(batch_size).__name__} {batch_size!r:.60}"
        raise InvalidRequestError(
            f"batch_size must be an int >= 1 (chunks per upsert request), got {shown}; nothing was written: pass an "
            "int such as batch_size=256 (the default)"
        )
    return int(batch_size)


def _checked_backend(backend: object) -> None:
    """``export_to_qdrant``'s ``backend``: a :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend` not closed.

    Raises:
        InvalidRequestError: a path (str / os.PathLike) or anything else, naming what was given and the fix; a
            closed backend (its collection raised a raw AttributeError or RuntimeError), naming how to open
            one again.
    """
    from ..backends.qdrant.backend import QdrantBackend

    if isinstance(backend, QdrantBackend):
        if not backend.closed:
            return
        if backend.path is not None:
            what, fix = (
                f"of the Qdrant Edge shard {str(backend.path)!r}",
                f"QdrantBackend.edge({str(backend.path)!r}, **memory.bm25_params)",
            )
        else:
            name = getattr(backend.collection, "name", None)
            what, fix = (
                f"of the Qdrant collection {name!r}",
                f"QdrantBackend.client(url_or_client, collection={name!r}, **memory.bm25_params)",
            )
        raise InvalidRequestError(
            f"export_to_qdrant was given a closed QdrantBackend ({what}: backend.close() was called); nothing was "
            f"written: open it again, {fix}, and pass that"
        )
    if isinstance(backend, (str, os.PathLike)):
        raise InvalidRequestError(
            f"export_to_qdrant writes to a QdrantBackend, got the path {str(backend)!r}; nothing was written: open "
            f"the shard first, QdrantBackend.edge({str(backend)!r}, **memory.bm25_params), and pass that"
        )
    raise InvalidRequestError(
        f"export_to_qdrant writes to a QdrantBackend, got {type(backend).__name__} {backend!r}"[:200]
        + "; nothing was written: pass QdrantBackend.edge(path, **memory.bm25_params) or "
        "QdrantBackend.client(url_or_client, collection=..., **memory.bm25_params)"
    )


def _checked_progress_and_replace(progress: object, replace: object) -> None:
    """``export_to_qdrant``'s ``progress`` (a callable or None) and ``replace`` (a bool).

    Raises:
        InvalidRequestError: ``progress`` is not callable (``progress=5`` failed after the first batch, leaving an
            interrupted-copy record), or ``replace`` is not a bool (``"yes"`` was taken as true and cleared the
            target); the message names the value and the fix.
    """
    if progress is not None and not callable(progress):
        raise InvalidRequestError(
            f"progress must be a function called with the number of chunks copied, or None, got "
            f"{type(progress).__name__} {progress!r:.60}; nothing was written: pass e.g. progress=print, or leave it "
            "out"
        )
    if not isinstance(replace, (bool, np.bool_)):
        raise InvalidRequestError(
            f"replace must be a bool, got {type(replace).__name__} {replace!r:.60}; nothing was written: pass "
            "replace=True to clear a target that holds points, or False (the default) to refuse one"
        )


def _checked_memory(memory: object) -> None:
    """``export_to_qdrant``'s ``memory``: an open embedded :class:`~hybrid_memory.HybridMemory`.

    Raises:
        InvalidRequestError: a folder path (str / os.PathLike; the message says to open it with
            ``HybridMemory.open(path)`` and pass that), a memory on a backend, or anything else; the message
            names what was given and the fix.
        MemoryClosedError: the memory is closed (checked here: its BM25 parameters would otherwise be compared
            first, and a closed memory's refusal named a BM25 fix).
    """
    from .hybrid import HybridMemory

    if isinstance(memory, (str, os.PathLike)):
        raise InvalidRequestError(
            f"export_to_qdrant copies an open HybridMemory, got the path {str(memory)!r}; open it first and pass "
            f"the memory: with HybridMemory.open({str(memory)!r}) as memory: export_to_qdrant(memory, backend)"
        )
    if isinstance(memory, HybridMemory):
        _embedded(memory)  # a memory on a backend is refused, naming it
    if not isinstance(memory, HybridMemory):
        raise InvalidRequestError(
            f"export_to_qdrant copies an open HybridMemory, got {type(memory).__name__} {memory!r:.80}; pass "
            "HybridMemory.open(path) of the memory's folder"
        )
    memory._check_open()


def export_to_qdrant(
    memory: HybridMemory,
    backend: QdrantBackend,
    *,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
    replace: bool = False,
    avgdl: float | None = None,
) -> int:
    """Copy every chunk of an embedded ``memory`` with its stored vector into ``backend``'s collection.

    Args:
        memory: an open embedded :class:`~hybrid_memory.HybridMemory` (read only).
        backend: the target; opened here for the memory's embedding dimension (created when absent, schema
            checked when present), unless the caller already opened it for that dimension (the CLI does, so
            an unreachable server fails before its progress bar is drawn).
        batch_size: chunks per upsert request, an int >= 1 (default 256).
        progress: a function called with the number of chunks copied after each batch (the CLI's progress bar),
            or None.
        replace: a bool: clear a target that holds points before copying (default False: such a target is
            refused).
        avgdl: the BM25 average length in tokens the copy is meant to be written with (``export-qdrant --avgdl``);
            default None: the memory's own (``memory.bm25_params["avgdl"]``), so the copy ranks as the memory does. The
            backend must be opened with it (``QdrantBackend.edge(path, avgdl=...)``; Qdrant's default is 256).

    It first waits for the memory's background index maintenance (:meth:`HybridMemory.flush`): a BM25 merge that
    ends changes the average length the memory ranks with, so the copy is checked against the settled one.

    An Edge shard's calibration statistics (the default fusion's corpus counts) are kept in step during the copy, so
    closing the backend saves them beside the shard and its first default search reads them instead of building
    them (:mod:`~hybrid_memory.backends.qdrant.calibration`).

    Returns:
        The number of chunks copied.

    Raises:
        InvalidRequestError: ``memory`` is not an embedded HybridMemory (a folder path: the message says to pass
            ``HybridMemory.open(path)``), ``batch_size`` is not an int >= 1, ``avgdl`` is not a number of tokens
            > 0, the backend's BM25 ``k1`` / ``b`` differ from the memory's, or its ``avgdl`` from
            ``avgdl`` (default the memory's; :func:`check_bm25`),
            or the target holds points and ``replace`` is False (:func:`check_target`); nothing is written.
        StoreFormatError: the collection exists with another schema (dimension, distance, sparse modifier).
        DimensionMismatchError: a stored vector does not have the memory's dimension, or the Edge shard holds
            another dimension (:func:`open_target`).
        MemoryClosedError: ``memory`` is closed.
        InvalidRequestError: ``backend`` is not a QdrantBackend (a path, None) or is closed
            (:func:`_checked_backend`); ``progress`` is not callable or None, ``replace`` is not a bool.
    """
    _checked_memory(memory)  # first: a refused copy writes nothing, not even its record
    _checked_backend(backend)
    _checked_progress_and_replace(progress, replace)
    batch_size = _checked_batch_size(batch_size)
    avgdl = _checked_avgdl(avgdl)
    # a BM25 merge still running (after a bulk load) changes the memory's avgdl when it ends: compare with the
    # settled one, so a copy never keeps a normalisation the memory has just left
    memory.flush()
    check_bm25(memory, backend, avgdl=avgdl)  # before the target is opened or cleared: a refused copy writes nothing
    dim = int(memory.embedder.dim)
    if getattr(backend, "dim", None) != dim:
        open_target(backend, dim)
    if check_target(backend, replace=replace):
        logger.info("cleared %d points of %s before the copy", _clear(backend), backend.name)
    folder = getattr(backend, "path", None)
    if folder is not None:
        # an Edge shard: its calibration statistics are made now, over no point, and kept in step by the copy's
        # writes, so closing the backend saves them and the shard's first default search need not scroll every
        # point to build them (qdrant_calibration: about 0.06-0.1 ms a point); on a server each write would cost a
        # read of the points it replaces, and nothing is saved, so they are left to the first search there
        backend.calibration()

    def record(chunks: int, complete: bool) -> None:
        if folder is not None:
            write_export_info(
                folder,
                avgdl=backend.encoder.avgdl,
                k1=backend.encoder.k1,
                b=backend.encoder.b,
                memory=None if memory.path is None else str(Path(memory.path).absolute()),
                chunks=chunks,
                complete=complete,
                embedder={"name": memory.embedder.name, "dim": dim},
                indexed_keys=backend.indexed_keys,
            )

    record(0, False)
    store = _embedded(memory).store  # the embedded store: the vectors live there, keyed by rowid
    copied = 0
    position = 0
    batch = []
    for chunk in memory.iter_chunks():
        batch.append(chunk)
        if len(batch) >= batch_size:
            copied += _copy(store, backend, batch, dim, position)
            position += len(batch)
            batch = []
            if progress is not None:
                progress(copied)
    if batch:
        copied += _copy(store, backend, batch, dim, position)
        if progress is not None:
            progress(copied)
    record(copied, True)
    logger.info("copied %d chunks to %s", copied, backend.name)
    return copied


def _copy(store: SQLiteStore, backend: QdrantBackend, batch: list[StoredChunk], dim: int, position: int) -> int:
    rows = store.lookup([c.chunk_id for c in batch])
    found, _, vectors = store.index_rows([rows[c.chunk_id][0] for c in batch if c.chunk_id in rows], dim)
    vector_of = {int(r): vectors[j] for j, r in enumerate(found)}
    versions, seqs = [], {}
    for j, chunk in enumerate(batch):
        rowid = rows.get(chunk.chunk_id, (None,))[0]
        vector = vector_of.get(rowid) if rowid is not None else None
        if vector is None:  # deleted while the copy ran
            continue
        if vector.shape != (dim,) or not np.isfinite(vector).all():
            raise DimensionMismatchError(f"stored vector of {chunk.chunk_id!r} has shape {vector.shape}, not ({dim},)")
        versions.append(ChunkVersion(chunk, vector))
        seqs[chunk.chunk_id] = position + j
    backend.write(versions, seqs)
    return len(versions)
