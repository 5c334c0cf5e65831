"""Search over engines, store-free: ``engine.py`` (the engine seam: ``Engine``, ``Query``, ``RowSet``) and
``searcher.py`` (:class:`~hybrid_memory.search.searcher.HybridSearcher`: runs both engines over one allowed set and
fuses their runs with :mod:`hybrid_memory.fusion`)."""
