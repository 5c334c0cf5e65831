"""HybridMemory composes exactly one Backend (issue 32): the embedded one for a folder or RAM, the given one for
``backend=``; one class either way, every method running on both."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.backends.base import Backend
from hybrid_memory.backends.embedded.backend import EmbeddedBackend

CHUNKS = [
    {"chunk_id": "a", "text": "kafka broker lag on the payments cluster", "metadata": {"service": "kafka"}},
    {"chunk_id": "b", "text": "postgres vacuum freezes the orders table", "metadata": {"service": "postgres"}},
]


def _edge(tmp_path):
    pytest.importorskip("qdrant_edge")
    return HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16), payload_indexes=False)


def test_a_folder_and_ram_compose_the_embedded_backend(tmp_path):
    for path in (tmp_path / "mem", None):
        with HybridMemory(path, embedder=HashingEmbedder(16)) as memory:
            assert type(memory) is HybridMemory
            assert isinstance(memory.backend, EmbeddedBackend) and isinstance(memory.backend, Backend)
            assert memory.backend.path == (None if path is None else path.resolve())
            memory.add(CHUNKS)
            assert (
                len(memory),
                memory.backend.store.count(),
                len(memory.backend.sparse),
                len(memory.backend.dense),
            ) == (2, 2, 2, 2)


def test_qdrant_is_the_same_class_over_another_backend(tmp_path):
    with _edge(tmp_path) as memory:
        assert type(memory) is HybridMemory
        assert isinstance(memory.backend, Backend) and not isinstance(memory.backend, EmbeddedBackend)
        assert memory.backend.name == "qdrant-edge"
        with memory.bulk():  # nothing to defer on Qdrant; the block runs unchanged
            memory.add(CHUNKS)
        assert len(memory) == 2
        assert memory.count({"service": "kafka"}) == 1
        assert memory.chunk_hashes() == {c.chunk_id: c.content_hash for c in memory.get(["a", "b"])}
        assert [r.chunk_id for r in memory.search("kafka broker lag", top_k=1).results] == ["a"]
        assert memory.delete(["a", "missing"]) == 1
        assert [c.chunk_id for c in memory.iter_chunks()] == ["b"]
        assert memory.stats()["path"] == str(tmp_path / "shard")


def test_a_backend_takes_no_path_and_no_option_of_the_embedded_indexes(tmp_path):
    pytest.importorskip("qdrant_edge")
    from hybrid_memory.backends.qdrant.backend import QdrantBackend

    backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
    with pytest.raises(InvalidRequestError) as info:
        HybridMemory(tmp_path / "mem", backend=backend, embedder=HashingEmbedder(16))
    assert str(info.value).startswith("a memory on a backend keeps no directory (got path ")
    with pytest.raises(InvalidRequestError) as info:
        HybridMemory(backend=backend, embedder=HashingEmbedder(16), k1=1.2, dense_index="flat")
    assert str(info.value) == (
        "k1, dense_index configure the embedded memory's own indexes; a memory on a backend takes embedder, "
        "candidate_multiplier, dedup, recency_prior and show_progress (configure the backend itself, e.g. "
        "QdrantBackend.edge(path, k1=...))"
    )
    assert not (tmp_path / "mem").exists()
    with HybridMemory(backend=backend, embedder=HashingEmbedder(16), k1=1.5) as memory:  # the default is no option
        assert memory.backend is backend
