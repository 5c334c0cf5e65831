from hybrid_memory.graph import GraphIndex
from hybrid_memory.graph.build import build_graph


def _snapshot(graph):
    nodes = {n: dict(d) for n, d in graph.nodes(data=True)}
    edges = {(u, v, k): dict(d) for u, v, k, d in graph.edges(keys=True, data=True)}
    return nodes, edges


def test_every_node_and_edge_records_its_chunks(memory):
    index = GraphIndex.build(memory, save=False)
    assert index.graph.nodes["err_conn_reset"]["chunk_ids"] == ["n1", "n2"]
    assert index.graph.nodes["http 504"]["chunk_ids"] == ["n1"]
    assert all(d["chunk_ids"] for _, _, d in index.graph.edges(data=True))


def test_delete_removes_entities_and_edges_unless_other_chunks_support_them(memory):
    index = GraphIndex.build(memory, save=False)
    memory.delete(["n1"])
    stats = index.refresh(memory, save=False)
    assert stats.deleted == ["n1"] and stats.added == [] and stats.changed == []
    assert "http 504" not in index.graph  # only n1 mentioned it
    assert index.graph.nodes["billing-service"]["chunk_ids"] == ["n2"]  # n2 still supports it
    edge = index.graph.edges["billing-service", "db-prod-3", "retries on"]
    assert edge["weight"] == 1.0 and edge["chunk_ids"] == ["n2"]
    assert not index.graph.has_edge("billing-service", "db-prod-3", "co-occurs with")  # n1's, gone with it
    assert index.graph.number_of_edges() == 3 + 3 + 3 + 3  # n2, n3, n4, n5: three pairs each


def test_incremental_update_equals_a_full_rebuild(memory):
    index = GraphIndex.build(memory, save=False)
    memory.upsert(
        [
            {"chunk_id": "n2", "text": "billing-service now talks to db-prod-4 and logs HTTP 503."},
            {"chunk_id": "n6", "text": "search-indexer on es-node-1 recovered after ETIMEDOUT."},
        ]
    )
    memory.delete(["n4"])
    stats = index.refresh(memory, save=False)
    assert (stats.added, stats.changed, stats.deleted) == (["n6"], ["n2"], ["n4"])
    assert _snapshot(index.graph) == _snapshot(build_graph(index.extractions))
    assert "v2.3.1" not in index.graph
    assert index.graph.nodes["err_conn_reset"]["chunk_ids"] == ["n1"]


def test_refresh_without_changes_does_nothing(memory):
    index = GraphIndex.build(memory, save=False)
    stats = index.refresh(memory, save=False)
    assert (stats.added, stats.changed, stats.deleted, stats.stale, stats.summarised) == ([], [], [], [], 0)
