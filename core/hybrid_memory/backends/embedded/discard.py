"""Removing the memory folder an ``ingest`` created and stored nothing in, only when that provably loses nothing.

``hybrid-memory ingest --memory NEW`` creates ``NEW`` (and any missing parent). When the run ends with nothing
stored (its first batch failed, it was interrupted, or it read no text), the folder is an empty memory that
only confuses the next run, so the CLI removes it. But between the run's own check and the removal a second
process may open the same new folder and write into it; a plain ``shutil.rmtree`` would delete its chunks.

:func:`remove_new_memory` therefore removes the folder only while it holds both locks writers of that memory
take, and only after re-checking under them:

1. the memory's inter-process index-file lock (``.indexes.lock``, ``filelock``; what saves and loads take),
   taken without waiting;
2. SQLite's own lock on ``store.sqlite3``, taken EXCLUSIVE without waiting (``PRAGMA locking_mode=EXCLUSIVE``
   then ``BEGIN EXCLUSIVE``). In WAL mode every open connection, in any process, holds a SHARED lock on the
   database file for as long as it is open (SQLite's ``wal.c``: ``sqlite3WalClose`` deletes the WAL only when
   an EXCLUSIVE lock can be taken, as then "this connection is the only connection to the database"), so
   getting it proves no other process (or thread) has the memory open, and none can write until it is
   released;
3. under the lock: the store holds 0 chunks; then the folder is renamed to a private name (no process can
   open it by its path any more) and its entries are checked to be only what a new, empty memory writes
   (the store, manifest.json, the lock file, the derived index files). Anything else (a file of the user's,
   an Edge shard, a chunk) and the folder is renamed back and kept.

Before the lock is released the store's header is overwritten, so a process that opened the file by its
path in the last instant (its ``sqlite3.connect`` came before the rename, its first read waits on our
lock) gets SQLite's "file is not a database" instead of writing chunks into a file that no longer has a
name. If any step is in doubt the folder is kept, and the reason is returned for the CLI's message.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sqlite3
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from ...paths import INDEX_LOCK, STORE_FILE

__all__ = ["Discarded", "remove_new_memory"]

logger = logging.getLogger(__name__)

NEW_MEMORY_NAMES: tuple[str, ...] = (
    STORE_FILE,
    f"{STORE_FILE}-wal",
    f"{STORE_FILE}-shm",
    f"{STORE_FILE}-journal",
    "manifest.json",
    INDEX_LOCK,
    "indexes.json",
    "bm25",
    "dense",
    "filters",
    "dense.faiss",
    "bm25.tmp",
    "bm25.old",
    "dense.tmp",
    "dense.old",
    ".bm25-*",
    ".dense-*",
    ".filters-*",
    ".indexes-*",
)
"""Names (fnmatch patterns) of what a memory with 0 chunks may hold: its store and the files derived from it
(``EmbeddedBackend._save_indexes`` and ``_remove_stale_temporaries``). Anything else keeps the folder."""

_NOT_A_DATABASE = b"removed, empty\x00"  # 16 bytes over "SQLite format 3\0": SQLite then says "not a database"


@dataclass(frozen=True)
class Discarded:
    """What :func:`remove_new_memory` did: ``removed`` True, or False with ``reason`` saying why the folder was
    kept (a clause for the CLI's message, e.g. ``"another process has the memory open"``)."""

    removed: bool
    reason: str = ""


def remove_new_memory(created: Path, memory: Path) -> Discarded:
    """Remove ``created`` (a folder the caller created, ``memory`` itself or an ancestor of it) if the memory in
    ``memory`` holds 0 chunks and no other process or thread has it open; keep it otherwise.

    The caller must have closed its own handle on the memory first (an open one counts as another's).

    Args:
        created: the topmost folder the caller created (``--memory a/b`` with no ``a``: ``a``).
        memory: the memory folder inside it (or equal to it).

    Returns:
        ``Discarded(True)`` when the folder is gone; ``Discarded(False, reason)`` when it was kept (another
        process has it open or holds its index lock, it holds chunks or files a new memory does not write, an
        OS error). Never raises for those: an error while removing is a kept folder, never lost data.
    """
    try:
        return _remove(created, memory)
    except OSError as exc:
        return Discarded(False, f"removing it failed ({exc.strerror or exc})")


def _remove(created: Path, memory: Path) -> Discarded:
    if not created.exists():
        return Discarded(False, "it is gone already")
    store = memory / STORE_FILE
    if not store.is_file():  # no store, so no lock to hold: only empty folders go, one os.rmdir at a time
        return _remove_empty_folders(created, memory)

    from filelock import FileLock, Timeout

    files_lock = FileLock(str(memory / INDEX_LOCK))
    try:
        files_lock.acquire(timeout=0)
    except Timeout:
        return Discarded(False, f"another process holds its index lock ({INDEX_LOCK})")
    try:
        return _remove_under_store_lock(created, memory, store)
    finally:
        files_lock.release()


def _remove_under_store_lock(created: Path, memory: Path, store: Path) -> Discarded:
    try:  # mode=rw: never creates the file; timeout=0: a lock held by another is an answer, not a wait
        connection = sqlite3.connect(f"{store.absolute().as_uri()}?mode=rw", uri=True, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        return Discarded(False, f"its store could not be opened ({exc})")
    poison_fd: int | None = None
    try:
        try:
            connection.execute("PRAGMA locking_mode=EXCLUSIVE")
            connection.execute("BEGIN EXCLUSIVE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return Discarded(False, "another process has the memory open")
            return Discarded(False, f"its store could not be locked ({exc})")
        try:
            chunks = int(connection.execute("SELECT count(*) FROM chunks").fetchone()[0])
        except sqlite3.Error as exc:
            return Discarded(False, f"its store could not be counted ({exc})")
        if chunks:
            return Discarded(
                False, f"it holds {chunks} chunk{'' if chunks == 1 else 's'} now, written by another process"
            )
        connection.execute("COMMIT")  # locking_mode=EXCLUSIVE keeps the lock after the transaction
        # WAL -> rollback journal: SQLite checkpoints and deletes -wal and -shm while we hold the lock, so
        # closing the connection later touches no file by its path
        connection.execute("PRAGMA journal_mode=DELETE")
        tomb = created.with_name(f".{created.name}.removing-{os.getpid()}-{secrets.token_hex(4)}")
        os.rename(created, tomb)  # from here on nobody can open the memory by its path
        inner = tomb / memory.relative_to(created)
        foreign = _foreign_entry(tomb, inner)
        if foreign is not None:
            foreign = str(created / foreign)  # named where the user knows it
            try:
                os.rename(tomb, created)
            except OSError as exc:
                return Discarded(
                    False,
                    f"it holds {foreign}, which a new memory does not write; it could not be "
                    f"put back ({exc.strerror or exc}) and is now at {tomb}",
                )
            return Discarded(False, f"it holds {foreign}, which a new memory does not write")
        poison_fd = os.open(inner / STORE_FILE, os.O_WRONLY)  # closed only after the connection: see below
        os.write(poison_fd, _NOT_A_DATABASE)  # at offset 0 (os.pwrite is not on Windows)
    finally:
        connection.close()
        if poison_fd is not None:  # closing another descriptor of the file drops this process's POSIX locks on it,
            os.close(poison_fd)  # so it is closed after the connection let go of them
    try:
        shutil.rmtree(tomb)
    except OSError as exc:
        logger.warning(
            "could not remove %s, the empty memory this ingest created (renamed from %s) (%s); remove it by hand",
            tomb,
            created,
            exc.strerror or exc,
        )
    logger.info("removed %s: this ingest created it and nothing is stored in it", created)
    return Discarded(True)


def _foreign_entry(top: Path, memory: Path) -> str | None:
    """The first entry under ``top`` that is neither a folder on the way down to ``memory`` nor a name of
    :data:`NEW_MEMORY_NAMES` inside ``memory`` (as a path relative to ``top``); None when there is none."""
    folder = top
    while folder != memory:
        entries = sorted(os.listdir(folder))
        step = memory.relative_to(folder).parts[0]
        if entries != [step]:
            return next(str((folder / name).relative_to(top)) for name in entries if name != step)
        folder = folder / step
    for name in sorted(os.listdir(memory)):
        if not any(fnmatchcase(name, pattern) for pattern in NEW_MEMORY_NAMES):
            return str((memory / name).relative_to(top))
    return None


def _remove_empty_folders(created: Path, memory: Path) -> Discarded:
    """``os.rmdir`` from ``memory`` up to ``created``: it removes only empty folders, so it cannot delete a file
    another process just wrote."""
    folder = memory
    while True:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            return Discarded(False, f"{folder} is not empty ({exc.strerror or exc})")
        if folder == created:
            return Discarded(True)
        folder = folder.parent
