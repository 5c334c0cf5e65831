"""Hierarchical Leiden communities (Traag, Waltman & van Eck 2019, "From Louvain to Leiden") through cdlib.

Level 0 is Leiden on every connected component of the graph (so every entity is in exactly one level-0
community: coverage 100%). Each community larger than ``max_cluster_size`` is clustered again, giving level 1,
and so on, as in Edge et al. 2024 (GraphRAG). A community that Leiden cannot split has no children.

Determinism: the multigraph is reduced to an undirected simple graph (parallel and reverse edge weights summed,
self-loops dropped) whose nodes and edges are sorted before the igraph is built, and Leiden gets an explicit seed,
so the same graph gives the same communities whatever order its edges were inserted in. Results can change with
the leidenalg/igraph version: their versions are saved in the graph manifest.
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

__all__ = ["clustering_graph", "community_fingerprint", "hierarchical_leiden", "leiden_partition"]

MAX_LEVELS = 8


@lru_cache(maxsize=1)
def _cdlib_leiden() -> Any:
    """``cdlib.algorithms.leiden``, imported once with cdlib's import-time notices kept off the terminal."""
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cdlib import algorithms
    except ImportError as exc:
        raise MissingDependencyError(f"community detection needs cdlib and leidenalg: {INSTALL_HINT}") from exc
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
    simple = nx.Graph()
    simple.add_nodes_from(sorted(graph.nodes))
    simple.add_weighted_edges_from((u, v, w) for (u, v), w in sorted(weights.items()))
    return simple


def leiden_partition(graph: nx.Graph, *, seed: int) -> list[list[str]]:
    """Leiden (RB configuration / modularity, resolution 1) on one connected undirected graph.

    Returns communities as sorted node lists, ordered by (-size, first node). A graph with one node or no edge is
    one community per connected piece without calling Leiden.
    """
    nodes = sorted(graph.nodes)
    if len(nodes) <= 1 or graph.number_of_edges() == 0:
        return [nodes] if len(nodes) <= 1 else [[n] for n in nodes]
    import igraph as ig

    index = {n: i for i, n in enumerate(nodes)}
    edges = sorted((min(index[u], index[v]), max(index[u], index[v]), float(d.get("weight", 1.0)))
                   for u, v, d in graph.edges(data=True))
    ig_graph = ig.Graph(n=len(nodes), edges=[(a, b) for a, b, _ in edges], directed=False)
    ig_graph.vs["name"] = nodes
    ig_graph.es["weight"] = [w for _, _, w in edges]
    clustering = _cdlib_leiden()(ig_graph, weights="weight", seed=seed)
    parts = [sorted(str(n) for n in community) for community in clustering.communities if community]
    return sorted(parts, key=lambda c: (-len(c), c[0]))


def _cluster(graph: nx.Graph, nodes: list[str], seed: int) -> list[list[str]]:
    """Leiden on each connected component of the subgraph induced by ``nodes`` (all of them, not the largest)."""
    sub = graph.subgraph(nodes)
    parts: list[list[str]] = []
    for component in sorted((sorted(c) for c in nx.connected_components(sub)), key=lambda c: c[0]):
        parts.extend(leiden_partition(sub.subgraph(component), seed=seed))
    return sorted(parts, key=lambda c: (-len(c), c[0]))


def hierarchical_leiden(graph: nx.MultiDiGraph, *, max_cluster_size: int = 10, seed: int = 42) -> list[Community]:
    """Hierarchical Leiden communities of ``graph``, levels 0..L, ids ``"L{level}-C{i}"``.

    Within a level, ``i`` runs over the communities ordered by (parent's index, -size, first entity key).
    ``chunk_ids``, ``n_edges`` and ``fingerprint`` are filled by ``describe_communities``. An empty graph gives [].
    Raises ValueError if ``max_cluster_size`` < 1; MissingDependencyError without cdlib/leidenalg.
    """
    if max_cluster_size < 1:
        raise ValueError(f"max_cluster_size must be >= 1, got {max_cluster_size}")
    simple = clustering_graph(graph)
    if simple.number_of_nodes() == 0:
        return []
    communities: list[Community] = []
    level_parts: list[tuple[str | None, list[str]]] = [(None, p) for p in _cluster(simple, sorted(simple.nodes), seed)]
    level = 0
    while level_parts:
        current: list[Community] = []
        for i, (parent, members) in enumerate(level_parts):
            current.append(Community(community_id=f"L{level}-C{i}", level=level, parent=parent, entities=members))
        communities.extend(current)
        by_id = {c.community_id: c for c in current}
        next_parts: list[tuple[str | None, list[str]]] = []
        if level + 1 < MAX_LEVELS:
            for community in current:
                if len(community.entities) <= max_cluster_size:
                    continue
                parts = _cluster(simple, community.entities, seed)
                if len(parts) <= 1:
                    continue  # Leiden keeps it whole: a leaf
                next_parts.extend((community.community_id, p) for p in parts)
        for i, (parent, _) in enumerate(next_parts):
            by_id[parent].children.append(f"L{level + 1}-C{i}")  # type: ignore[index]
        level_parts = next_parts
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
