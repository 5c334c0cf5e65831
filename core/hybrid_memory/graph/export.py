"""Export the entity graph: GraphML (for Gephi, yEd, networkx) and a self-contained interactive HTML page.

The HTML page is drawn by vis-network through pyvis (``pip install pyvis``), with its scripts inlined
(``cdn_resources="in_line"``) and pyvis's remote Bootstrap links removed, so it opens offline.
"""

from __future__ import annotations

import colorsys
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import MissingDependencyError
from .store import write_graphml

if TYPE_CHECKING:
    from .index import GraphIndex

__all__ = ["community_colors", "export_graphml", "export_html"]

_REMOTE_TAG = re.compile(r"<(?:link|script)\b[^>]*(?:href|src)=\"https?://[^\"]*\"[^>]*>(?:\s*</script>)?", re.I)


def community_colors(community_ids: list[str]) -> dict[str, str]:
    """A distinct hex colour per community id (golden-ratio hue steps, in the given order). Pure function."""
    out = {}
    for i, cid in enumerate(community_ids):
        r, g, b = colorsys.hsv_to_rgb((i * 0.618033988749895) % 1.0, 0.55, 0.92)
        out[cid] = f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"
    return out


def _membership(index: GraphIndex, level: int) -> dict[str, str]:
    """Entity -> id of its community at ``level`` (falling back to its deepest community above that level)."""
    membership: dict[str, str] = {}
    for community in sorted(index.communities.values(), key=lambda c: c.level):
        if community.level <= level:
            for node in community.entities:
                membership[node] = community.community_id
    return membership


def export_graphml(index: GraphIndex, path: str | Path) -> Path:
    """Write the graph as GraphML with, per node, ``community_L{level}`` attributes for every level.
    List attributes (aliases, types, chunk_ids) are JSON strings. Returns the path written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    extra: dict[str, dict[str, str]] = {}
    for community in index.communities.values():
        for node in community.entities:
            extra.setdefault(node, {})[f"community_L{community.level}"] = community.community_id
    write_graphml(index.graph, target, extra)
    return target


def export_html(index: GraphIndex, path: str | Path, *, level: int = 0, height: str = "800px") -> Path:
    """Write an interactive page: nodes coloured by their community at ``level`` (deepest one above it for
    entities in unsplit communities), sized by mentions, hover text with types, aliases and chunk ids; edges
    weighted. Opens offline. Raises MissingDependencyError without pyvis. Returns the path written."""
    try:
        from pyvis.network import Network
    except ImportError as exc:
        raise MissingDependencyError("HTML export needs pyvis: pip install pyvis") from exc
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    membership = _membership(index, level)
    colors = community_colors(
        sorted({*membership.values()}, key=lambda c: (int(c[1:].split("-")[0]), int(c.split("-C")[1])))
    )
    net = Network(height=height, width="100%", directed=True, cdn_resources="in_line", notebook=False)
    for node, data in sorted(index.graph.nodes(data=True)):
        community = membership.get(node, "")
        title = (
            f"{data.get('name', node)}\ntypes: {', '.join(data.get('types', [])) or '-'}\n"
            f"community: {community}\naliases: {', '.join(data.get('aliases', []))}\n"
            f"chunks: {', '.join(data.get('chunk_ids', [])[:20])}"
        )
        net.add_node(
            node,
            label=str(data.get("name", node)),
            title=title,
            color=colors.get(community, "#cccccc"),
            value=int(data.get("mentions", 1)),
            group=community,
        )
    for u, v, k, data in sorted(index.graph.edges(keys=True, data=True), key=lambda e: e[:3]):
        net.add_edge(
            u,
            v,
            title=f"{data.get('description', k)} (weight {data.get('weight', 1.0):g})",
            value=float(data.get("weight", 1.0)),
        )
    net.set_options('{"physics": {"stabilization": {"iterations": 200}}}')
    page = _REMOTE_TAG.sub("", net.generate_html())
    page = page.replace("<title>", f"<title>hybrid-memory graph, level {level} ", 1) if "<title>" in page else page
    target.write_text(page, encoding="utf-8")
    return target
