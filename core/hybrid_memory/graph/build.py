"""The entity graph: a networkx ``MultiDiGraph`` aggregated from per-chunk extractions, updated incrementally.

Nodes are keyed by ``normalize_name`` of the entity name; edges by ``(source key, target key, relation key)``
where the relation key is the normalised description, so the same relation stated in many chunks is one edge
whose weight is the sum of its strengths, and different relations between two entities are parallel edges.
Cycles and self-loops are kept.

Node attributes: ``name`` (display form), ``aliases`` (sorted surface forms), ``types`` (sorted; one node may have
several), ``description`` (distinct descriptions joined by newlines, in chunk order), ``chunk_ids`` (sorted),
``mentions`` (int). Edge attributes: ``description``, ``weight`` (float, sum of strengths), ``chunk_ids`` (sorted),
``mentions`` (int).

Every attribute is a function of the extractions of the chunks listed in ``chunk_ids``, which is what lets
``update_graph`` recompute only what a changed or deleted chunk touched and still equal a full rebuild.

Merged aliases (``resolve.py``): with an ``aliases`` map (alias key -> canonical key), every mention of an alias
is counted under its canonical key; the alias's surface forms join the node's ``aliases`` and ``mentions`` but
not its display ``name``, which stays the canonical's own most frequent form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx

from .models import ChunkExtraction
from .normalize import clean_surface, display_name, normalize_name, normalize_type
from .resolve import resolve_key

__all__ = ["build_graph", "chunk_contributions", "update_graph"]

NodeKey = str
EdgeKey = tuple[str, str, str]


@dataclass
class _NodePart:
    surfaces: list[str] = field(default_factory=list)
    alias_surfaces: list[str] = field(default_factory=list)
    types: set[str] = field(default_factory=set)
    descriptions: list[str] = field(default_factory=list)


@dataclass
class _EdgePart:
    descriptions: list[str] = field(default_factory=list)
    weight: float = 0.0
    mentions: int = 0


def chunk_contributions(
    extraction: ChunkExtraction, aliases: Mapping[str, str] | None = None
) -> tuple[dict[NodeKey, _NodePart], dict[EdgeKey, _EdgePart]]:
    """What one chunk adds to the graph: node parts by key and edge parts by (u, v, relation key).

    Relation ends that are not among the chunk's entities still become nodes (with no type), so no edge is lost.
    Names that normalise to "" are dropped. ``aliases``: merged alias key -> canonical key (see the module notes).
    """
    aliases = aliases or {}

    def key_of(name: str) -> tuple[str, bool]:
        raw = normalize_name(name)
        key = resolve_key(raw, aliases) if raw in aliases else raw
        return key, key != raw

    nodes: dict[NodeKey, _NodePart] = {}
    edges: dict[EdgeKey, _EdgePart] = {}
    for entity in extraction.entities:
        key, merged = key_of(entity.name)
        if not key:
            continue
        part = nodes.setdefault(key, _NodePart())
        (part.alias_surfaces if merged else part.surfaces).append(clean_surface(entity.name))
        if normalize_type(entity.type):
            part.types.add(normalize_type(entity.type))
        if entity.description and entity.description not in part.descriptions:
            part.descriptions.append(entity.description)
    for relation in extraction.relations:
        (u, u_merged), (v, v_merged) = key_of(relation.source), key_of(relation.target)
        if not u or not v:
            continue
        for key, surface, merged in ((u, relation.source, u_merged), (v, relation.target, v_merged)):
            if key not in nodes:
                nodes[key] = (
                    _NodePart(alias_surfaces=[clean_surface(surface)])
                    if merged
                    else _NodePart(surfaces=[clean_surface(surface)])
                )
        rel_key = normalize_name(relation.description) or "related to"
        part_e = edges.setdefault((u, v, rel_key), _EdgePart())
        if relation.description and relation.description not in part_e.descriptions:
            part_e.descriptions.append(relation.description)
        part_e.weight += relation.strength
        part_e.mentions += 1
    return nodes, edges


def _node_attributes(key: NodeKey, parts: list[tuple[str, _NodePart]]) -> dict:
    own = [s for _, p in parts for s in p.surfaces]
    merged = [s for _, p in parts for s in p.alias_surfaces]
    surfaces = own + merged
    descriptions: list[str] = []
    for _, p in parts:
        descriptions += [d for d in p.descriptions if d not in descriptions]
    return {
        "name": display_name(own or merged) if surfaces else key,
        "aliases": sorted(set(surfaces)),
        "types": sorted({t for _, p in parts for t in p.types}),
        "description": "\n".join(descriptions),
        "chunk_ids": sorted(cid for cid, _ in parts),
        "mentions": len(surfaces),
    }


def _edge_attributes(key: EdgeKey, parts: list[tuple[str, _EdgePart]]) -> dict:
    descriptions = [d for _, p in parts for d in p.descriptions]
    return {
        "description": display_name(descriptions) if descriptions else key[2],
        "weight": float(sum(p.weight for _, p in parts)),
        "chunk_ids": sorted(cid for cid, _ in parts),
        "mentions": sum(p.mentions for _, p in parts),
    }


def build_graph(
    extractions: Mapping[str, ChunkExtraction], aliases: Mapping[str, str] | None = None
) -> nx.MultiDiGraph:
    """Full build: aggregate every chunk's contributions (merged aliases counted under their canonical key).
    Nodes and edges are inserted in sorted key order."""
    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    _apply(graph, extractions, sorted(extractions), None, None, aliases)
    return graph


def update_graph(
    graph: nx.MultiDiGraph,
    before: Mapping[str, ChunkExtraction],
    after: Mapping[str, ChunkExtraction],
    changed: Iterable[str],
    aliases: Mapping[str, str] | None = None,
) -> tuple[set[NodeKey], set[EdgeKey]]:
    """Apply the chunks in ``changed`` (added, modified or deleted) to ``graph`` in place.

    ``before``/``after``: extractions by chunk id before and after the change (a deleted chunk is absent from
    ``after``). Only the nodes and edges that a changed chunk contributed to, before or after, are recomputed, from
    the chunks that support them; a deleted chunk's entities and edges disappear unless other chunks still
    support them. The result equals ``build_graph(after)`` up to insertion order. Returns the affected
    (node keys, edge keys).
    """
    changed_set = set(changed)
    node_keys: set[NodeKey] = set()
    edge_keys: set[EdgeKey] = set()
    for cid in sorted(changed_set):
        for extraction in (before.get(cid), after.get(cid)):
            if extraction is not None:
                nodes, edges = chunk_contributions(extraction, aliases)
                node_keys.update(nodes)
                edge_keys.update(edges)
    support = {c for c in changed_set if c in after}
    for key in node_keys:
        if key in graph:
            support.update(c for c in graph.nodes[key]["chunk_ids"] if c in after)
    for u, v, k in edge_keys:
        if graph.has_edge(u, v, k):
            support.update(c for c in graph.edges[u, v, k]["chunk_ids"] if c in after)
    _apply(graph, after, sorted(support), node_keys, edge_keys, aliases)
    return node_keys, edge_keys


def _apply(
    graph: nx.MultiDiGraph,
    extractions: Mapping[str, ChunkExtraction],
    chunk_ids: list[str],
    node_keys: set[NodeKey] | None,
    edge_keys: set[EdgeKey] | None,
    aliases: Mapping[str, str] | None = None,
) -> None:
    """Recompute the given nodes/edges (all when None) from the contributions of ``chunk_ids``."""
    node_parts: dict[NodeKey, list[tuple[str, _NodePart]]] = {}
    edge_parts: dict[EdgeKey, list[tuple[str, _EdgePart]]] = {}
    for cid in chunk_ids:
        nodes, edges = chunk_contributions(extractions[cid], aliases)
        for key, part in nodes.items():
            if node_keys is None or key in node_keys:
                node_parts.setdefault(key, []).append((cid, part))
        for edge_key, edge_part in edges.items():
            if edge_keys is None or edge_key in edge_keys:
                edge_parts.setdefault(edge_key, []).append((cid, edge_part))
    for key in sorted(node_keys if node_keys is not None else node_parts):
        if key in node_parts:
            attrs = _node_attributes(key, node_parts[key])
            graph.add_node(key)
            graph.nodes[key].clear()
            graph.nodes[key].update(attrs)
    for edge_key in sorted(edge_keys if edge_keys is not None else edge_parts):
        u, v, k = edge_key
        if edge_key in edge_parts:
            attrs = _edge_attributes(edge_key, edge_parts[edge_key])
            if graph.has_edge(u, v, k):
                graph.edges[u, v, k].clear()
                graph.edges[u, v, k].update(attrs)
            else:
                graph.add_edge(u, v, key=k, **attrs)
        elif graph.has_edge(u, v, k):
            graph.remove_edge(u, v, k)
    for key in sorted(node_keys or ()):
        if key not in node_parts and key in graph:
            graph.remove_node(key)  # no chunk supports it, so none supports its edges either
