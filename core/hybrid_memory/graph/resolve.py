"""Entity resolution beyond exact names: alias candidates with their evidence, merges that can be undone.

Exact duplicates are one node already: every mention is keyed by ``normalize_name`` in every chunk. This module
finds the names that differ but may denote one entity, among name-like nodes (type ``PROPER_NOUN``,
``PERSON``, ``ORGANIZATION``, ``LOCATION`` or untyped):

- ``surname``: a one-word name equal to the last word of a longer name (``Chen`` -> ``Alice Chen``), titles
  ignored (``Dr. Chen`` -> ``Alice Chen``);
- ``acronym``: an all-capitals word of 2-6 letters equal to the initials of a longer name's significant words
  (``FEMA`` -> ``Federal Emergency Management Agency``; ``of``, ``the``, ``and``, ``for`` skipped);
- ``title``: the same name with and without a title (``Dr. Alice Chen`` -> ``Alice Chen``).

Each candidate carries its evidence: the chunks naming both (``shared_chunks``), the neighbours both have in the
graph (``shared_neighbours``), ``chunk_overlap`` = |shared chunks| / |chunks of the alias| and
``neighbour_jaccard`` = |N(a) & N(b)| / |N(a) | N(b)| (each other excluded). ``score`` = max of the two.

A candidate is merged automatically only when it is unambiguous (the alias has exactly one candidate full
name) and ``score >= AUTO_MERGE_THRESHOLD`` (0.5: at least half of the alias's chunks also name the full form,
or at least half of their neighbours are shared). A surname shared by two people (``Chen`` with ``Alice Chen`` and
``Bob Chen``) is never merged automatically, nor is one without evidence; both are reported for a caller to
confirm with ``GraphIndex.merge_entities``. Every merge is a record with an undo token
(``GraphIndex.unmerge_entities``); an undone automatic merge is remembered and not redone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

from .patterns import TITLES

__all__ = ["AUTO_MERGE_THRESHOLD", "AliasCandidate", "Merge", "alias_candidates", "resolve_key"]

AUTO_MERGE_THRESHOLD = 0.5
"""Evidence score at or above which an unambiguous alias candidate is merged without a caller."""

NAME_TYPES = {"PROPER_NOUN", "PERSON", "ORGANIZATION", "LOCATION"}
_MINOR = {
    "of",
    "the",
    "and",
    "for",
    "de",
    "du",
    "des",
    "la",
    "le",
    "van",
    "von",
    "der",
    "den",
    "a",
    "an",
    "&",
    "on",
    "in",
    "at",
    "to",
}
_TOKEN = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*", re.UNICODE)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AliasCandidate(_Record):
    """Two nodes that may name one entity, and the evidence for it."""

    alias: str
    """Node key of the shorter form (merged into ``canonical`` when confirmed)."""
    canonical: str
    """Node key of the fuller form."""
    alias_name: str
    """Display name of the alias node."""
    canonical_name: str
    """Display name of the canonical node."""
    kind: Literal["surname", "acronym", "title"]
    """Why they match: surname to full name, acronym to its expansion, same name with/without a title."""
    shared_chunks: list[str] = Field(default_factory=list)
    """Chunks that mention both, sorted."""
    shared_neighbours: list[str] = Field(default_factory=list)
    """Node keys linked to both in the graph, sorted."""
    chunk_overlap: float = 0.0
    """|shared chunks| / |chunks of the alias|, 0-1."""
    neighbour_jaccard: float = 0.0
    """|shared neighbours| / |union of their neighbours|, each other excluded, 0-1."""
    score: float = 0.0
    """max(chunk_overlap, neighbour_jaccard), 0-1."""
    ambiguous: bool = False
    """True when the alias has more than one candidate full name (never merged automatically)."""
    auto: bool = False
    """True when the candidate qualifies for an automatic merge (unambiguous, score >= the threshold)."""


class Merge(_Record):
    """One merge of an alias node into a canonical node; undone by ``GraphIndex.unmerge_entities(token)``."""

    token: str
    """Undo token."""
    alias: str
    """Node key merged away."""
    canonical: str
    """Node key it was merged into."""
    source: Literal["auto", "caller"]
    """``auto`` (above the threshold during a sync) or ``caller`` (``merge_entities``)."""
    evidence: AliasCandidate | None = None
    """The candidate that justified it (None for a caller's merge without a candidate)."""


def resolve_key(key: str, aliases: Mapping[str, str]) -> str:
    """The canonical key ``key`` is merged into, following chains (``a -> b -> c``); ``key`` when unmerged.
    Cycles cannot be created by ``GraphIndex.merge_entities``; a damaged map stops after len(aliases) steps."""
    seen = 0
    while key in aliases and seen <= len(aliases):
        key = aliases[key]
        seen += 1
    return key


def _name_like(data: Mapping) -> bool:
    types = set(data.get("types", []))
    return not types or bool(types & NAME_TYPES)


def _core(name: str) -> tuple[list[str], bool]:
    """(words without leading titles, whether a title was removed) of a display name."""
    words = _TOKEN.findall(name)
    titled = False
    while len(words) > 1 and words[0].rstrip(".").casefold() in TITLES:
        words.pop(0)
        titled = True
    return words, titled


def _initials(words: list[str]) -> str:
    significant = [w for w in words if w.casefold() not in _MINOR]
    return "".join(w[0].upper() for w in significant) if len(significant) >= 2 else ""


def _neighbours(graph: nx.MultiDiGraph, node: str) -> set[str]:
    return (set(graph.successors(node)) | set(graph.predecessors(node))) - {node}


def alias_candidates(
    graph: nx.MultiDiGraph, *, threshold: float = AUTO_MERGE_THRESHOLD, rejected: Iterable[tuple[str, str]] = ()
) -> list[AliasCandidate]:
    """Alias candidates among the name-like nodes of ``graph``, sorted by (alias, canonical).

    ``rejected``: (alias, canonical) pairs a caller undid; they are reported but never ``auto``.
    Pure function of the graph; O(nodes) index building plus the candidates' neighbourhoods.
    """
    rejected = set(rejected)
    nodes = {n: d for n, d in graph.nodes(data=True) if _name_like(d)}
    cores = {n: _core(str(d.get("name", n))) for n, d in nodes.items()}
    by_last: dict[str, list[str]] = {}
    by_initials: dict[str, list[str]] = {}
    by_core: dict[str, list[str]] = {}
    for n, (words, titled) in cores.items():
        if len(words) >= 2:
            by_last.setdefault(words[-1].casefold(), []).append(n)
            initials = _initials(words)
            if initials:
                by_initials.setdefault(initials, []).append(n)
        if not titled:
            by_core.setdefault(" ".join(words).casefold(), []).append(n)
    pairs: dict[str, list[tuple[str, str]]] = {}
    for n, (words, titled) in sorted(cores.items()):
        found: list[tuple[str, str]] = []
        if titled:
            found += [(m, "title") for m in by_core.get(" ".join(words).casefold(), []) if m != n]
        if len(words) == 1:
            word = words[0]
            found += [(m, "surname") for m in by_last.get(word.casefold(), []) if m != n]
            letters = word.rstrip(".")
            if 2 <= len(letters) <= 6 and letters.isalpha() and letters.isupper():
                found += [(m, "acronym") for m in by_initials.get(letters, []) if m != n]
        unique: dict[str, str] = {}
        for m, kind in found:
            unique.setdefault(m, kind)
        if unique:
            pairs[n] = sorted(unique.items())
    out: list[AliasCandidate] = []
    for alias, targets in sorted(pairs.items()):
        alias_chunks = set(nodes[alias].get("chunk_ids", []))
        alias_neighbours = _neighbours(graph, alias)
        for canonical, kind in targets:
            chunks = alias_chunks & set(nodes[canonical].get("chunk_ids", []))
            neighbours = _neighbours(graph, canonical)
            a, b = alias_neighbours - {canonical}, neighbours - {alias}
            union = a | b
            overlap = len(chunks) / len(alias_chunks) if alias_chunks else 0.0
            jaccard = len(a & b) / len(union) if union else 0.0
            score = max(overlap, jaccard)
            ambiguous = len(targets) > 1
            out.append(
                AliasCandidate(
                    alias=alias,
                    canonical=canonical,
                    alias_name=str(nodes[alias].get("name", alias)),
                    canonical_name=str(nodes[canonical].get("name", canonical)),
                    kind=kind,  # type: ignore[arg-type]
                    shared_chunks=sorted(chunks),
                    shared_neighbours=sorted(a & b),
                    chunk_overlap=round(overlap, 6),
                    neighbour_jaccard=round(jaccard, 6),
                    score=round(score, 6),
                    ambiguous=ambiguous,
                    auto=not ambiguous and score >= threshold and (alias, canonical) not in rejected,
                )
            )
    return out
