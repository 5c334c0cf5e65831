"""Names every collection and Edge shard this library writes shares: the collection's module and the shard's
export record both read them, so neither imports the other for a constant."""

from __future__ import annotations

__all__ = ["DENSE", "SPARSE"]

DENSE, SPARSE = "dense", "bm25"
"""Names of the dense and the sparse vector in every collection this library writes."""
