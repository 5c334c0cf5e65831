"""A memory kept in a Qdrant collection (the ``qdrant`` extra): :class:`QdrantBackend` and what it is built from.

``backend.py`` holds the backend and its engines, ``collection.py`` one collection over qdrant-client or
qdrant-edge, ``filters.py`` the filter translation, ``calibration.py`` the corpus statistics its surprises read,
``edge_info.py`` an Edge shard's export record. qdrant-client and qdrant-edge are imported only when a
collection is opened.
"""

from .backend import (
    MIN_TERMS,
    NAMESPACE,
    QdrantBackend,
    QdrantFilter,
    SparseEncoder,
    engine_id,
    point_id,
    point_uuid,
    token_index,
)

__all__ = [
    "MIN_TERMS",
    "NAMESPACE",
    "QdrantBackend",
    "QdrantFilter",
    "SparseEncoder",
    "engine_id",
    "point_id",
    "point_uuid",
    "token_index",
]
