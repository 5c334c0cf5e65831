"""Dense vectors through FAISS: ``index.py`` (:class:`~hybrid_memory.engines.dense.index.FaissIndex`)."""
