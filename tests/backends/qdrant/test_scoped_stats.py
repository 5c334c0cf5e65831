"""Scope-local statistics on the Qdrant backends (issue 35 class 2; hybrid_memory.backends.qdrant.scoped)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")
pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')")

ENGINES = ["qdrant-edge", "qdrant-client-local"]
ANN = {"tenant": "acme", "user_id": "ann"}
BOB = {"tenant": "acme", "user_id": "bob"}


def _open(engine: str, tmp_path) -> HybridMemory:
    embedder = HashingEmbedder(dim=64)
    if engine == "qdrant-edge":
        return HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=embedder, payload_indexes=False)
    return HybridMemory.qdrant(str(tmp_path / "local"), collection="notes", embedder=embedder, payload_indexes=False)


@pytest.mark.parametrize("engine", ENGINES)
def test_scoped_bm25_score_is_the_scopes_idf_times_the_stored_value(engine, tmp_path):
    """BM25 of a one-token probe in ann's scope, worked out by hand: N = 3 of ann's chunks, df = 2 (the probe and
    one note), the tf part of a one-token chunk with the backend's avgdl 256; bob's nine 'zebra' chunks change
    nothing of it, and the unscoped view keeps the memory-wide idf (N = 12, df = 11)."""
    with _open(engine, tmp_path) as mem:
        mem.scoped(BOB).add([{"chunk_id": f"b{i}", "text": f"zebra herd {i}"} for i in range(9)])
        ann = mem.scoped(ANN)
        ann.add(
            [
                {"chunk_id": "a1", "text": "zebra crossing near the office"},
                {"chunk_id": "a2", "text": "the on-call rota"},
                {"chunk_id": "probe", "text": "zebra"},
            ]
        )
        k1, b, avgdl = 1.5, 0.75, 256.0
        value = 1 / (1 + k1 * (1 - b + b * 1 / avgdl))
        if engine == "qdrant-edge":  # Edge stores float32 values; qdrant-client's local mode keeps Python floats
            value = float(np.float32(value))
        scoped = {r.chunk_id: r.sparse_score for r in ann.search("zebra", top_k=5).results if r.sparse_rank}
        idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
        assert scoped["probe"] == pytest.approx(idf * value, rel=1e-12)
        assert set(scoped) == {"probe", "a1"}
        unscoped = {r.chunk_id: r.sparse_score for r in mem.search("zebra", top_k=20).results if r.sparse_rank}
        probe = next(k for k in unscoped if k.endswith(":probe"))  # the administrator's id of ann's probe
        assert unscoped[probe] == pytest.approx(math.log(1 + (12 - 11 + 0.5) / (11 + 0.5)) * value, rel=1e-6)


def _kept(mem):
    registry = mem.backend.scopes
    assert len(registry._kept) == 1
    return next(iter(registry._kept.values()))


@pytest.mark.parametrize("engine", ENGINES)
def test_kept_scope_statistics_follow_writes_as_a_rebuild_counts_them(engine, tmp_path):
    """After upserts (a new text, an unchanged one), deletes, another scope's writes and an unscoped write that moves
    a chunk out of the scope, the kept statistics equal a fresh scroll of the scope's points."""
    with _open(engine, tmp_path) as mem:
        ann, bob = mem.scoped(ANN), mem.scoped(BOB)
        ann.add([{"chunk_id": f"a{i}", "text": f"kafka lag on db-prod-{i} billing"} for i in range(6)])
        bob.add([{"chunk_id": f"b{i}", "text": f"kafka consumer {i}"} for i in range(4)])
        ann.search("kafka lag", top_k=3)  # the scope is kept from here on
        stats = _kept(mem)
        assert stats.points == 6
        ann.upsert(
            [
                {"chunk_id": "a0", "text": "postgres pool exhausted"},
                {"chunk_id": "a1", "text": "kafka lag on db-prod-1 billing"},
            ]
        )
        ann.delete(["a2"])
        ann.add([{"chunk_id": "a9", "text": "zebra kafka"}])
        bob.add([{"chunk_id": "b9", "text": "kafka kafka lag"}])
        bob.delete(["b0"])
        stored = [c.chunk_id for c in mem.iter_chunks() if c.chunk_id.endswith(":a3")]
        mem.upsert(
            [{"chunk_id": stored[0], "text": "kafka lag on db-prod-3 billing", "user_id": "carol", "tenant": "acme"}]
        )  # the same text: a payload-only write, out of ann's scope
        ann.search("kafka lag", top_k=3)
        kept = _kept(mem)
        fresh = mem.backend.scopes._build(kept.scope, kept.filter)
        assert kept.points == fresh.points == 5 == ann.count()
        assert kept.df == fresh.df
        assert kept.members == fresh.members
        q = np.asarray(mem.embedder.embed_query("kafka lag"), dtype=np.float32)
        assert kept.moments.count == fresh.moments.count == 5
        assert kept.moments.chance(q) == pytest.approx(fresh.moments.chance(q), rel=1e-9, abs=1e-12)


def test_a_shard_written_before_the_plain_vector_opens_without_it(tmp_path):
    """A shard created with the dense, bm25 and presence vectors only (before bm25_tf) opens, and its scoped
    searches run with the collection-wide idf (the bm25 leg)."""
    import qdrant_edge as qe

    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=64, distance=qe.Distance.Cosine)},
        sparse_vectors={
            "bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf),
            "terms": qe.EdgeSparseVectorParams(),
        },
    )
    qe.EdgeShard.create(str(tmp_path / "shard"), config).close()
    with _open("qdrant-edge", tmp_path) as mem:
        assert mem.backend.collection.terms is True and mem.backend.collection.tf is False
        mem.scoped(ANN).add([{"chunk_id": "a1", "text": "zebra crossing"}, {"chunk_id": "a2", "text": "rota"}])
        assert [r.chunk_id for r in mem.scoped(ANN).search("zebra", top_k=2).results][0] == "a1"
        assert mem.backend.scopes._kept == {}
