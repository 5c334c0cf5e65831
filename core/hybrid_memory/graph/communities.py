"""Hierarchical Leiden communities (Traag, Waltman & van Eck 2019, "From Louvain to Leiden").

Two backends, chosen by ``backend``:

- ``"graspologic"`` (default): ``graspologic_native.hierarchical_leiden``, the Rust implementation Microsoft
  GraphRAG clusters with (package ``graspologic-native``, MIT licence). It runs Leiden (modularity, resolution 1,
  randomness 0.001) and re-runs it on every cluster of at least its ``max_cluster_size`` members; it is given
  ``max_cluster_size + 1`` so that, as documented here, communities *larger than* ``max_cluster_size`` are split.
- ``"cdlib"``: ``cdlib.algorithms.leiden`` (leidenalg on igraph, RB configuration / modularity), re-run here on
  each community larger than ``max_cluster_size``. leidenalg and igraph are GPL-3 / GPL-2+; install them with the
  ``graph-cdlib`` extra.

Either way level 0 is Leiden on every connected component of the graph separately (so every entity is in exactly
one level-0 community: coverage 100%, and an edit in one component never moves another's communities). Each
community larger than ``max_cluster_size`` is clustered again, giving level 1, and so on, as in Edge et al. 2024
(GraphRAG). A community that Leiden cannot split has no children.

Determinism: the multigraph is reduced to an undirected simple graph (parallel and reverse edge weights summed,
self-loops dropped) whose nodes and edges are sorted before they reach the backend, and Leiden gets an explicit
seed, so the same graph gives the same communities whatever order its edges were inserted in. Exact partitions
can change with the backend's version: the versions are saved in the graph manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import networkx as nx

from .errors import INSTALL_HINT, MissingDependencyError
from .models import Community

logger = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "backend_versions",
    "check_backend",
    "clustering_graph",
    "community_fingerprint",
    "hierarchical_leiden",
    "leiden_partition",
]

MAX_LEVELS = 8
BACKENDS = ("graspologic", "cdlib")
DEFAULT_BACKEND = "graspologic"
_BACKEND_PACKAGES = {"graspologic": ("graspologic-native",), "cdlib": ("cdlib", "leidenalg", "igraph")}
_CDLIB_HINT = "pip install 'hybrid-memory[graph-cdlib]' (GPL: leidenalg, igraph)"


def check_backend(backend: str) -> str:
    """``backend`` if it is one of ``BACKENDS``; raises ValueError naming the choices otherwise."""
    if backend not in BACKENDS:
        raise ValueError(f"community backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    return backend


def backend_versions(backend: str) -> dict[str, str]:
    """Installed versions of the packages ``backend`` clusters with ("" when absent), for the manifest."""
    from importlib import metadata

    out = {}
    for package in _BACKEND_PACKAGES[check_backend(backend)]:
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = ""
    return out


@lru_cache(maxsize=1)
def _graspologic() -> Any:
    try:
        import graspologic_native
    except ImportError as exc:
        raise MissingDependencyError(f"community detection needs graspologic-native: {INSTALL_HINT}") from exc
    return graspologic_native


@lru_cache(maxsize=1)
def _cdlib_leiden() -> Any:
    """``cdlib.algorithms.leiden``, imported once with cdlib's import-time notices kept off the terminal."""
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cdlib import algorithms
    except ImportError as exc:
        raise MissingDependencyError(
            f"the cdlib community backend needs cdlib, leidenalg and igraph: {_CDLIB_HINT}"
        ) from exc
    if sink.getvalue():
        logger.debug("cdlib import output: %s", sink.getvalue().strip())
    return algorithms.leiden


def clustering_graph(graph: nx.MultiDiGraph) -> nx.Graph:
    """Undirected simple graph for clustering: edge weight = sum of ``weight`` over both directions and all
    parallel edges (1.0 when absent); self-loops dropped; every node kept. Nodes and edges in sorted order."""
    weights: dict[tuple[str, str], float] = {}
    for u, v, data in graph.edges(data=True):
        if u == v:
            continue
        pair = (u, v) if u < v else (v, u)
        weights[pair] = weights.get(pair, 0.0) + float(data.get("weight", 1.0))
    simple: nx.Graph[str] = nx.Graph()
    simple.add_nodes_from(sorted(graph.nodes))
    simple.add_weighted_edges_from((u, v, w) for (u, v), w in sorted(weights.items()))
    return simple


def leiden_partition(graph: nx.Graph, *, seed: int) -> list[list[str]]:
    """cdlib backend: Leiden (RB configuration / modularity, resolution 1) on one connected undirected graph.

    Returns communities as sorted node lists, ordered by (-size, first node). A graph with one node or no edge is
    one community per connected piece without calling Leiden.
    """
    nodes = sorted(graph.nodes)
    if len(nodes) <= 1 or graph.number_of_edges() == 0:
        return [nodes] if len(nodes) <= 1 else [[n] for n in nodes]
    leiden = _cdlib_leiden()
    import igraph as ig

    index = {n: i for i, n in enumerate(nodes)}
    edges = sorted(
        (min(index[u], index[v]), max(index[u], index[v]), float(d.get("weight", 1.0)))
        for u, v, d in graph.edges(data=True)
    )
    ig_graph = ig.Graph(n=len(nodes), edges=[(a, b) for a, b, _ in edges], directed=False)
    ig_graph.vs["name"] = nodes
    ig_graph.es["weight"] = [w for _, _, w in edges]
    clustering = leiden(ig_graph, weights="weight", seed=seed)
    parts = [sorted(str(n) for n in community) for community in clustering.communities if community]
    return sorted(parts, key=lambda c: (-len(c), c[0]))


# A tree of communities: (sorted members, child trees ordered by (-size, first member)).
_Tree = tuple[list[str], list["_Tree"]]


def _order(trees: list[_Tree]) -> list[_Tree]:
    return sorted(trees, key=lambda t: (-len(t[0]), t[0][0]))


def _cdlib_trees(component: nx.Graph, max_cluster_size: int, seed: int, depth: int = 0) -> list[_Tree]:
    """cdlib backend on one connected component: Leiden, then again on each part larger than max_cluster_size."""
    trees: list[_Tree] = []
    for part in leiden_partition(component, seed=seed):
        children: list[_Tree] = []
        if len(part) > max_cluster_size and depth + 1 < MAX_LEVELS:
            sub = component.subgraph(part)
            pieces = [
                t
                for piece in sorted((sorted(c) for c in nx.connected_components(sub)), key=lambda c: c[0])
                for t in _cdlib_trees(sub.subgraph(piece), max_cluster_size, seed, depth + 1)
            ]
            children = pieces if len(pieces) > 1 else []  # Leiden keeps it whole: a leaf
        trees.append((part, _order(children)))
    return _order(trees)


def _graspologic_trees(component: nx.Graph, max_cluster_size: int, seed: int) -> list[_Tree]:
    """graspologic backend on one connected component: ``hierarchical_leiden`` as Microsoft GraphRAG calls it
    (edges as (source, target, weight) string/float triples, sorted; an explicit seed)."""
    nodes = sorted(component.nodes)
    if len(nodes) <= 1 or component.number_of_edges() == 0:
        return [([n], []) for n in nodes]
    edges = sorted((min(u, v), max(u, v), float(d.get("weight", 1.0))) for u, v, d in component.edges(data=True))
    entries = _graspologic().hierarchical_leiden(
        edges,
        max_cluster_size=max_cluster_size + 1,
        seed=seed,
        resolution=1.0,
        randomness=0.001,
        use_modularity=True,
        iterations=1,
    )
    members: dict[tuple[int, int], list[str]] = {}
    parent_of: dict[tuple[int, int], tuple[int, int] | None] = {}
    for entry in entries:
        key = (int(entry.level), int(entry.cluster))
        members.setdefault(key, []).append(str(entry.node))
        parent_of[key] = None if entry.parent_cluster is None else (int(entry.level) - 1, int(entry.parent_cluster))
    children_of: dict[tuple[int, int] | None, list[tuple[int, int]]] = {}
    for key, parent in parent_of.items():
        children_of.setdefault(parent, []).append(key)

    def tree(key: tuple[int, int], depth: int) -> _Tree:
        kids = [tree(k, depth + 1) for k in children_of.get(key, [])] if depth + 1 < MAX_LEVELS else []
        if len(kids) == 1:  # a "split" into one part is no split
            kids = []
        return sorted(members[key]), _order(kids)

    return _order([tree(k, 0) for k in children_of.get(None, [])])


def hierarchical_leiden(
    graph: nx.MultiDiGraph, *, max_cluster_size: int = 10, seed: int = 42, backend: str = DEFAULT_BACKEND
) -> list[Community]:
    """Hierarchical Leiden communities of ``graph``, levels 0..L, ids ``"L{level}-C{i}"``.

    ``backend``: ``"graspologic"`` (default, MIT) or ``"cdlib"`` (leidenalg/igraph, GPL), see the module notes.
    Within a level, ``i`` runs over the communities ordered by (parent's index, -size, first entity key).
    ``chunk_ids``, ``n_edges`` and ``fingerprint`` are filled by ``describe_communities``. An empty graph gives [].
    Raises ValueError if ``max_cluster_size`` < 1 or the backend is unknown; MissingDependencyError when the
    backend's packages are not installed.
    """
    if max_cluster_size < 1:
        raise ValueError(f"max_cluster_size must be >= 1, got {max_cluster_size}")
    check_backend(backend)
    simple = clustering_graph(graph)
    if simple.number_of_nodes() == 0:
        return []
    trees: list[_Tree] = []
    for component in sorted((sorted(c) for c in nx.connected_components(simple)), key=lambda c: c[0]):
        sub = simple.subgraph(component)
        if backend == "graspologic":
            trees.extend(_graspologic_trees(sub, max_cluster_size, seed))
        else:
            trees.extend(_cdlib_trees(sub, max_cluster_size, seed))
    communities: list[Community] = []
    level_trees: list[tuple[str | None, _Tree]] = [(None, t) for t in _order(trees)]
    level = 0
    while level_trees:
        current = [
            Community(community_id=f"L{level}-C{i}", level=level, parent=parent, entities=tree[0])
            for i, (parent, tree) in enumerate(level_trees)
        ]
        communities.extend(current)
        next_trees: list[tuple[str | None, _Tree]] = []
        for community, (_, tree) in zip(current, level_trees, strict=True):
            for child in tree[1]:
                community.children.append(f"L{level + 1}-C{len(next_trees)}")
                next_trees.append((community.community_id, child))
        level_trees = next_trees
        level += 1
    return communities


def community_fingerprint(
    graph: nx.MultiDiGraph, entities: list[str], chunk_hashes: Mapping[str, str]
) -> tuple[str, list[str], int]:
    """(fingerprint, supporting chunk ids sorted, number of internal edges) of the community ``entities``.

    The fingerprint is the sha256 hex of the sorted members, the sorted internal edges (u, v, relation key) and
    the sorted (chunk_id, content_hash) of every chunk supporting a member: it changes iff the community's content
    can have changed.
    """
    members = set(entities)
    chunk_ids = sorted({c for n in entities for c in graph.nodes[n].get("chunk_ids", [])})
    internal = sorted((u, v, k) for u, v, k in graph.subgraph(members).edges(keys=True))
    payload = json.dumps(
        {"entities": sorted(entities), "edges": internal, "chunks": [[c, chunk_hashes.get(c, "")] for c in chunk_ids]},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest(), chunk_ids, len(internal)


def describe_communities(
    graph: nx.MultiDiGraph, communities: list[Community], chunk_hashes: Mapping[str, str]
) -> list[Community]:
    """Fill ``chunk_ids``, ``n_edges`` and ``fingerprint`` of each community (in place); returns the list."""
    for community in communities:
        community.fingerprint, community.chunk_ids, community.n_edges = community_fingerprint(
            graph, community.entities, chunk_hashes
        )
    return communities
