"""Storage and retrieval backends of :class:`~hybrid_memory.HybridMemory`.

The embedded backend (SQLite + bm25s + FAISS) is the memory's own code path, :mod:`hybrid_memory.memory.hybrid`.
:mod:`hybrid_memory.backends.qdrant.backend` keeps a memory in a Qdrant collection instead (the ``qdrant`` extra);
:mod:`hybrid_memory.backends.base` states what a backend provides.
"""
