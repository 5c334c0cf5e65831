import random
import subprocess
import sys
from importlib import metadata

import networkx as nx
import pytest
from hybrid_memory.graph.communities import BACKENDS, clustering_graph, hierarchical_leiden

HAS_CDLIB = all(__import__("importlib").util.find_spec(n) is not None for n in ("cdlib", "leidenalg", "igraph"))
backends = pytest.mark.parametrize(
    "backend",
    [
        pytest.param(b, marks=pytest.mark.skipif(b == "cdlib" and not HAS_CDLIB, reason="graph-cdlib extra absent"))
        for b in BACKENDS
    ],
)


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


@backends
def test_hierarchy_levels_and_parent_links(backend):
    communities = hierarchical_leiden(_ring(), max_cluster_size=4, seed=42, backend=backend)
    by_id = {c.community_id: c for c in communities}
    level0 = [c for c in communities if c.level == 0]
    level1 = [c for c in communities if c.level == 1]
    # structure, not the backend's exact partition (it may change with graspologic-native / leidenalg versions):
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


@backends
def test_same_seed_same_communities_whatever_the_insertion_order(backend):
    reference = _shape(hierarchical_leiden(_ring(), max_cluster_size=4, seed=7, backend=backend))
    assert reference == _shape(hierarchical_leiden(_ring(), max_cluster_size=4, seed=7, backend=backend))
    for shuffle_seed in (1, 2, 3):
        shuffled = hierarchical_leiden(_ring(shuffle_seed=shuffle_seed), max_cluster_size=4, seed=7, backend=backend)
        assert _shape(shuffled) == reference


@pytest.mark.skipif(
    metadata.version("graspologic-native") != "1.3.1", reason="exact partition pinned to graspologic-native 1.3.1"
)
def test_exact_partition_for_graspologic_native_1_3_1():
    """The one exact-partition assertion, pinned to the backend version: two triangles joined by one edge and
    a path; the triangles are the two level-0 communities, nothing is split further."""
    graph = nx.MultiDiGraph()
    graph.add_edges_from(
        [("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "f"), ("f", "d"), ("c", "d"), ("p", "q"), ("q", "r")],
        weight=1.0,
    )
    got = [(c.community_id, c.parent, c.children, c.entities) for c in hierarchical_leiden(graph, seed=42)]
    assert got == [
        ("L0-C0", None, [], ["a", "b", "c"]),
        ("L0-C1", None, [], ["d", "e", "f"]),
        ("L0-C2", None, [], ["p", "q", "r"]),
    ]


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="community backend must be one of 'graspologic', 'cdlib', got 'louvain'"):
        hierarchical_leiden(_ring(), backend="louvain")


@backends
def test_every_component_is_clustered_coverage_is_total(backend):
    graph = _ring(6, 3)
    graph.add_edge("x1", "x2", weight=3.0)  # a second component
    graph.add_edge("y1", "y1", weight=1.0)  # a self-loop only
    graph.add_node("z")  # isolated
    communities = hierarchical_leiden(graph, max_cluster_size=10, seed=42, backend=backend)
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


@pytest.mark.skipif(not HAS_CDLIB, reason="graph-cdlib extra absent")
def test_cdlib_import_notices_stay_off_the_terminal():
    code = "from hybrid_memory.graph.communities import _cdlib_leiden\n_cdlib_leiden()\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "Note:" not in done.stderr
