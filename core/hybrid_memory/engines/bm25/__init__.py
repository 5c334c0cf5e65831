"""BM25 (Lucene's variant, through bm25s): ``index.py`` (:class:`~hybrid_memory.engines.bm25.index.BM25Index`),
``build.py`` (vectorised construction of the bm25s score matrix), ``token_cache.py`` (every document's token ids)."""
