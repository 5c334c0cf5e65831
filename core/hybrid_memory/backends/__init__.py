"""Storage and retrieval backends of :class:`~hybrid_memory.HybridMemory`.

A :class:`~hybrid_memory.HybridMemory` composes exactly one backend. :mod:`hybrid_memory.backends.embedded.backend`
(SQLite + bm25s + FAISS in a folder or RAM) is the default; :mod:`hybrid_memory.backends.qdrant.backend` keeps a
memory in a Qdrant collection instead (the ``qdrant`` extra); :mod:`hybrid_memory.backends.base` states what a
backend provides (the ``Backend`` protocol).
"""
