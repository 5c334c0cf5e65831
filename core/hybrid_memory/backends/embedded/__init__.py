"""The embedded backend (:class:`~hybrid_memory.backends.embedded.backend.EmbeddedBackend`): a memory folder with a
SQLite store (the source of truth, ``store.py``), a Roaring-bitmap filter index (``filter_index.py``) and the
in-process engines of :mod:`hybrid_memory.engines`."""
