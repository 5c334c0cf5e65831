"""A writer-preferring readers-writer lock for threads (searches share it, index updates take it alone).

Searches in one process may run in parallel; a write holds the lock exclusively from the store commit
until every derived index has applied the change, so no search sees a store and indexes that disagree.
Writer preference (a waiting writer stops new readers) keeps a stream of searches from starving writes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """Shared / exclusive lock. Not reentrant for writers across threads; a writer thread may re-enter."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None  # thread id of the holder
        self._writer_depth = 0
        self._waiting_writers = 0

    def acquire_read(self) -> None:
        """Block until no writer holds or waits for the lock (a thread holding it exclusively may also read)."""
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._writer_depth += 1
                return
            while self._writer is not None or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        """Release a shared hold (may be called from another thread than the one that acquired it)."""
        with self._cond:
            if self._writer == threading.get_ident():
                self._writer_depth -= 1
                return
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        """Block until no reader or other writer holds the lock. Reentrant in the holding thread."""
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._writer_depth += 1
                return
            self._waiting_writers += 1
            try:
                while self._writer is not None or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer, self._writer_depth = me, 1

    def release_write(self) -> None:
        """Release an exclusive hold."""
        with self._cond:
            self._writer_depth -= 1
            if not self._writer_depth:
                self._writer = None
                self._cond.notify_all()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """``with lock.read():`` shared section."""
        self.acquire_read()
        try:
            yield
        finally:
            self.release_read()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """``with lock.write():`` exclusive section."""
        self.acquire_write()
        try:
            yield
        finally:
            self.release_write()
