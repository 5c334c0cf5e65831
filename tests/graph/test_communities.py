import random
import subprocess
import sys

import networkx as nx
import pytest

from hybrid_memory.graph.communities import clustering_graph, hierarchical_leiden


def _ring(n_cliques=24, size=3, shuffle_seed=None):
    edges = [(f"n{u:02d}", f"n{v:02d}") for u, v in nx.ring_of_cliques(n_cliques, size).edges()]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(edges)
        edges = [(v, u) if i % 2 else (u, v) for i, (u, v) in enumerate(edges)]
    graph = nx.MultiDiGraph()
    graph.add_edges_from(edges, weight=1.0)
    return graph


def _shape(communities):
    return [(c.community_id, c.level, c.parent, c.children, c.entities) for c in communities]


def test_hierarchy_levels_and_parent_links():
    communities = hierarchical_leiden(_ring(), max_cluster_size=4, seed=42)
    by_id = {c.community_id: c for c in communities}
    level0 = [c for c in communities if c.level == 0]
    level1 = [c for c in communities if c.level == 1]
    # structure, not leidenalg's exact partition (it may change across cdlib / leidenalg / igraph versions):
    # every community is a union of whole triangles, and those above max_cluster_size are split to triangles
    triangle = {f"n{i:02d}": i // 3 for i in range(72)}
    for community in communities:
        groups = {triangle[n] for n in community.entities}
        assert len(community.entities) == 3 * len(groups)
    assert sorted(n for c in level0 for n in c.entities) == sorted(triangle)  # level 0 covers each node once
    assert all(len(c.entities) > 4 for c in level0 if c.children)
    assert all(not c.children for c in level0 if len(c.entities) <= 4)
    assert sorted(len(c.entities) for c in level1) == [3] * len(level1)  # each triangle of the ring
    assert len(level1) == sum(len(c.entities) // 3 for c in level0 if c.children)
    for child in level1:
        assert child.community_id in by_id[child.parent].children
        assert set(child.entities) <= set(by_id[child.parent].entities)
    for parent in level0:  # children partition their parent
        assert sorted(n for cid in parent.children for n in by_id[cid].entities) == parent.entities
    assert [c.community_id for c in level0] == [f"L0-C{i}" for i in range(len(level0))]


def test_same_seed_same_communities_whatever_the_insertion_order():
    reference = _shape(hierarchical_leiden(_ring(), max_cluster_size=4, seed=7))
    for shuffle_seed in (1, 2, 3):
        assert _shape(hierarchical_leiden(_ring(shuffle_seed=shuffle_seed), max_cluster_size=4, seed=7)) == reference


def test_every_component_is_clustered_coverage_is_total():
    graph = _ring(6, 3)
    graph.add_edge("x1", "x2", weight=3.0)  # a second component
    graph.add_edge("y1", "y1", weight=1.0)  # a self-loop only
    graph.add_node("z")  # isolated
    communities = hierarchical_leiden(graph, max_cluster_size=10, seed=42)
    level0 = [c for c in communities if c.level == 0]
    covered = sorted(n for c in level0 for n in c.entities)
    assert covered == sorted(graph.nodes)
    assert [c.entities for c in level0 if len(c.entities) <= 2] == [["x1", "x2"], ["y1"], ["z"]]


@pytest.mark.parametrize(
    ("nodes", "edges", "expected"),
    [
        ([], [], []),
        (["a"], [], [["a"]]),
        (["b", "a", "c"], [], [["a"], ["b"], ["c"]]),
    ],
    ids=["empty", "single-node", "no-edges"],
)
def test_degenerate_graphs_complete(nodes, edges, expected):
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(edges)
    assert [c.entities for c in hierarchical_leiden(graph, seed=42)] == expected


def test_clustering_graph_sums_parallel_and_reverse_edges():
    graph = nx.MultiDiGraph()
    graph.add_edge("a", "b", key="calls", weight=2.0)
    graph.add_edge("a", "b", key="reads", weight=1.0)
    graph.add_edge("b", "a", key="calls", weight=0.5)
    graph.add_edge("a", "a", key="self", weight=9.0)
    simple = clustering_graph(graph)
    assert list(simple.edges(data="weight")) == [("a", "b", 3.5)]


def test_max_cluster_size_is_validated():
    with pytest.raises(ValueError, match="max_cluster_size must be >= 1, got 0"):
        hierarchical_leiden(_ring(), max_cluster_size=0)


def test_cdlib_import_notices_stay_off_the_terminal():
    code = (
        "from hybrid_memory.graph.communities import _cdlib_leiden\n"
        "_cdlib_leiden()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "Note:" not in done.stderr
