"""In-process retrieval engines over integer ids, knowing nothing of the store: ``bm25/`` (bm25s, with a delta
segment and background merges) and ``dense/`` (FAISS), plus ``calibration.py``, the corpus statistics both keep so
a search can tell a confident top hit from chance."""
