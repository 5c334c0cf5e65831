"""Community reports: the summariser protocol, context packing, the LLM and the offline extractive summarisers.

Reports follow Edge et al. 2024 ("From Local to Global", section 2.5): title, summary, findings and an
importance rating, written from the community's entities, relations and source excerpts packed under a token
budget; a community whose own content does not fit is described from its sub-communities' reports instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import networkx as nx

from .llm import LLMCallable, as_llm_callable, call_json
from .models import Community, CommunityReport, Finding
from .normalize import normalize_name
from .patterns import CO_OCCURS, split_sentences
from .tokens import count_tokens, truncate_to_tokens

logger = logging.getLogger(__name__)

__all__ = [
    "CommunityContext",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "pack_community_context",
    "validate_report",
]


@dataclass
class CommunityContext:
    """Everything a summariser may read about one community."""

    community: Community
    """The community (members, level, chunk ids, fingerprint)."""
    graph: nx.MultiDiGraph
    """The entity subgraph induced by the members (a read-only view)."""
    chunks: dict[str, str] = field(default_factory=dict)
    """Text of the supporting chunks by chunk id."""
    child_reports: list[CommunityReport] = field(default_factory=list)
    """Reports of the sub-communities (already written: levels are summarised deepest first)."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes the report of one community."""

    name: str
    """Stable identifier, saved in the graph manifest."""

    def summarize(self, context: CommunityContext) -> CommunityReport:
        """Return the report (``status="ok"``). Raises LLMOutputError when a model reply stays unusable."""
        ...


def _entity_rows(graph: nx.MultiDiGraph) -> list[tuple[str, str]]:
    degree = dict(graph.degree(weight="weight"))
    rows = []
    for key in sorted(graph.nodes, key=lambda n: (-degree.get(n, 0.0), n)):
        data = graph.nodes[key]
        description = data.get("description", "").replace("\n", " ")
        rows.append((key, f"{data.get('name', key)} | {','.join(data.get('types', [])) or '-'} | {description}"))
    return rows


def _relation_rows(graph: nx.MultiDiGraph) -> list[str]:
    edges = sorted(graph.edges(keys=True, data=True), key=lambda e: (-e[3].get("weight", 0.0), e[0], e[1], e[2]))
    names = nx.get_node_attributes(graph, "name")
    return [
        f"{names.get(u, u)} -> {names.get(v, v)} | {d.get('description', k)} | {d.get('weight', 0.0):g}"
        for u, v, k, d in edges
    ]


_CUTTABLE = ("-Sources-", "-Sub-community reports-")


def pack_community_context(context: CommunityContext, max_tokens: int) -> tuple[str, bool]:
    """Text describing the community in at most ``max_tokens`` tokens, and whether child reports were used.

    Order: entities (by weighted degree), relations (by weight), then source excerpts (chunks in id order). When
    entities and relations alone exceed the budget and child reports exist, the child reports come first (largest
    community first) and the remaining budget takes entities and relations. Lines that do not fit are skipped,
    except that the first source excerpt or child report is cut to fit rather than left out.
    """
    entity_lines = ["-Entities- (name | types | description)"] + [row for _, row in _entity_rows(context.graph)]
    relation_lines = ["-Relations- (source -> target | description | weight)"] + _relation_rows(context.graph)
    local_tokens = count_tokens("\n".join(entity_lines + relation_lines))
    use_children = local_tokens > max_tokens and bool(context.child_reports)
    sections: list[list[str]] = []
    if use_children:
        children = sorted(context.child_reports, key=lambda r: (-len(r.chunk_ids), r.community_id))
        sections.append(["-Sub-community reports-"] + [r.text() for r in children if r.status == "ok"])
    sections += [entity_lines, relation_lines]
    if not use_children:
        sections.append(["-Sources-"] + [f"[{cid}] {text}" for cid, text in sorted(context.chunks.items())])
    out: list[str] = []
    used = 0
    for section in sections:
        header, lines = section[0], section[1:]
        header_cost = count_tokens(header) + 1
        if used + header_cost > max_tokens:
            break
        added = False
        for line in lines:
            cost = count_tokens(line) + 1
            if used + header_cost * (not added) + cost > max_tokens:
                if header in _CUTTABLE and not added and used + header_cost + 20 <= max_tokens:
                    line = truncate_to_tokens(line, max_tokens - used - header_cost - 1)  # one item, cut
                    cost = count_tokens(line) + 1
                else:
                    continue
            if not added:
                out.append(header)
                used += header_cost
                added = True
            out.append(line)
            used += cost
    return "\n".join(out), use_children


REPORT_PROMPT = """You are writing a report about a community of related entities found in a memory.

-Community data-
{context}

-Output-
Reply with one JSON object and nothing else:
{{"title": "<short name of the community, naming its key entities>",
 "summary": "<executive summary: how the entities relate, what matters>",
 "rating": <importance from 0 to 10>,
 "rating_explanation": "<one sentence>",
 "findings": [{{"summary": "<insight>", "explanation": "<details grounded in the data>"}}]}}
Use only the data above.
"""


def validate_report(data: Any) -> dict[str, Any]:
    """Fields of a report from parsed model JSON. Raises ValueError when title or summary is missing, or the
    rating is not a number; the rating is clipped to 0-10; findings without a summary are skipped."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    title, summary = data.get("title"), data.get("summary")
    if not isinstance(title, str) or not title.strip() or not isinstance(summary, str) or not summary.strip():
        raise ValueError("the report needs a non-empty 'title' and 'summary'")
    try:
        rating = float(data.get("rating", 0.0))
    except (TypeError, ValueError):
        raise ValueError(f"'rating' must be a number from 0 to 10, got {data.get('rating')!r}") from None
    findings = []
    for item in data.get("findings") or []:
        if isinstance(item, dict) and isinstance(item.get("summary"), str) and item["summary"].strip():
            findings.append(
                Finding(summary=item["summary"].strip(), explanation=str(item.get("explanation", "")).strip())
            )
        elif isinstance(item, str) and item.strip():
            findings.append(Finding(summary=item.strip()))
    return {
        "title": title.strip(),
        "summary": summary.strip(),
        "rating": min(10.0, max(0.0, rating)),
        "rating_explanation": str(data.get("rating_explanation", "")).strip(),
        "findings": findings,
    }


def _report(context: CommunityContext, method: Literal["llm", "extractive"], **fields: Any) -> CommunityReport:
    report = CommunityReport(
        community_id=context.community.community_id,
        level=context.community.level,
        method=method,
        fingerprint=context.community.fingerprint,
        chunk_ids=list(context.community.chunk_ids),
        **fields,
    )
    report.tokens = count_tokens(report.text())
    return report


def _fit_report(report: CommunityReport, max_tokens: int) -> CommunityReport:
    """Drop findings from the end, then words from the end of the summary, until the report fits max_tokens."""
    while report.tokens > max_tokens and report.findings:
        report.findings = report.findings[:-1]
        report.tokens = count_tokens(report.text())
    words = report.summary.split()
    while report.tokens > max_tokens and len(words) > 1:
        words = words[: max(1, int(len(words) * 0.9))]
        report.summary = " ".join(words) + " …"
        report.tokens = count_tokens(report.text())
    return report


class LLMSummarizer:
    """Community reports written by a chat model (JSON: title, summary, rating, rating_explanation, findings).

    ``max_context_tokens``: budget of the community data in the prompt (tokens). ``max_report_tokens``: the
    longest report kept (tokens); a longer reply loses findings from the end, then the end of its summary, so a
    report always fits a global-search budget of that size. Bad JSON is repaired, then retried ``retries`` times
    with the error; after that ``summarize`` raises LLMOutputError and the report is marked failed.
    """

    def __init__(self, model: Any, *, max_context_tokens: int = 4000, max_report_tokens: int = 600, retries: int = 1):
        if max_context_tokens < 100:
            raise ValueError(f"max_context_tokens must be >= 100, got {max_context_tokens}")
        if isinstance(max_report_tokens, bool) or not isinstance(max_report_tokens, int) or max_report_tokens < 50:
            raise ValueError(f"max_report_tokens must be an int >= 50, got {max_report_tokens!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        self.llm: LLMCallable = as_llm_callable(model)
        self.max_context_tokens = max_context_tokens
        self.max_report_tokens = max_report_tokens
        self.retries = retries
        self.name = "llm"
        self.calls = 0
        """Model calls made so far, retries included."""

    def summarize(self, context: CommunityContext) -> CommunityReport:
        """See ``Summarizer.summarize``."""
        text, _ = pack_community_context(context, self.max_context_tokens)
        try:
            result = call_json(self.llm, REPORT_PROMPT.format(context=text), validate_report, retries=self.retries)
        except Exception as exc:
            self.calls += getattr(exc, "attempts", 1)
            raise
        self.calls += result.attempts
        return _fit_report(_report(context, "llm", **result.value), self.max_report_tokens)


def _pagerank(graph: nx.MultiDiGraph) -> dict[str, float]:
    simple: nx.Graph[str] = nx.Graph()
    simple.add_nodes_from(sorted(graph.nodes))
    for u, v, d in sorted(graph.edges(data=True), key=lambda e: (e[0], e[1])):
        if u != v:
            w = float(d.get("weight", 1.0))
            if simple.has_edge(u, v):
                simple[u][v]["weight"] += w
            else:
                simple.add_edge(u, v, weight=w)
    if simple.number_of_edges() == 0:
        return {n: 1.0 / max(1, simple.number_of_nodes()) for n in simple.nodes}
    return nx.pagerank(simple, alpha=0.85, weight="weight", tol=1e-10, max_iter=500)


class ExtractiveSummarizer:
    """Offline report, no model (``method="extractive"``): title from the most central entities (PageRank, Page et
    al. 1999, weighted, undirected, damping 0.85), the strongest stated relations, and source sentences chosen to
    cover the community's evidence, in at most ``max_report_tokens`` tokens.

    Sentence choice is budgeted maximum coverage by the cost-effective greedy rule (Khuller, Moss & Naor 1999,
    "The budgeted maximum coverage problem"): the elements to cover are the community's chunks (weight 1 each)
    and its member entities (weight = PageRank x number of members, so an average entity weighs 1); each step
    takes the sentence with the largest uncovered weight per token, until nothing fits. The first sentences thus
    come from distinct chunks and name distinct central entities, rather than repeating the hub (the redundancy
    penalty of MMR, Carbonell & Goldstein 1998, falls out of counting covered elements once). Sentences longer
    than ``max_sentence_tokens`` are cut.

    ``sources``: besides the text, every report keeps one representative sentence per supporting chunk (the one
    naming the most central members), which ``global_search`` can add under a question when its budget allows.

    Rating: ``min(10, 2 * log2(1 + total internal edge weight))``, a property of the community alone, so a
    report reused after a refresh keeps a consistent rating.
    """

    def __init__(
        self,
        *,
        max_report_tokens: int = 300,
        top_entities: int = 5,
        top_relations: int = 2,
        max_sentences: int = 12,
        max_sentence_tokens: int = 60,
    ):
        if max_report_tokens < 20:
            raise ValueError(f"max_report_tokens must be >= 20, got {max_report_tokens}")
        self.max_report_tokens = max_report_tokens
        self.top_entities = top_entities
        self.top_relations = top_relations
        self.max_sentences = max_sentences
        self.max_sentence_tokens = max_sentence_tokens
        self.name = "extractive"
        self.calls = 0
        """Reports written so far."""

    def summarize(self, context: CommunityContext) -> CommunityReport:
        """See ``Summarizer.summarize``; never raises for a well-formed context."""
        self.calls += 1
        graph = context.graph
        rank = _pagerank(graph)
        central = sorted(graph.nodes, key=lambda n: (-rank.get(n, 0.0), n))
        names = {n: graph.nodes[n].get("name", n) for n in graph.nodes}
        title = ", ".join(names[n] for n in central[:3]) + (f" and {len(central) - 3} more" if len(central) > 3 else "")
        summary = (
            f"{len(central)} entities, {graph.number_of_edges()} relations, {len(context.community.chunk_ids)} "
            f"source chunks. Most central: {', '.join(names[n] for n in central[: self.top_entities])}."
        )
        findings: list[Finding] = []
        edges = sorted(
            graph.edges(keys=True, data=True),
            key=lambda e: (e[2] == normalize_name(CO_OCCURS), -e[3].get("weight", 0.0), e[0], e[1], e[2]),
        )
        for u, v, k, d in edges[: self.top_relations]:
            findings.append(
                Finding(
                    summary=f"{names[u]} {d.get('description', k)} {names[v]}",
                    explanation=f"weight {d.get('weight', 0.0):g} from {len(d.get('chunk_ids', []))} chunk(s)",
                )
            )
        total_weight = sum(float(d.get("weight", 1.0)) for _, _, d in graph.edges(data=True))
        report = _report(
            context,
            "extractive",
            title=title,
            summary=summary,
            findings=findings,
            rating=round(min(10.0, 2.0 * math.log2(1.0 + total_weight)), 2),
            rating_explanation=f"total internal edge weight {total_weight:g}",
        )
        candidates = self._candidates(context, rank, names)
        report.sources = self._representatives(candidates)
        used = count_tokens(report.text())
        if used > self.max_report_tokens:
            report.findings = []
            used = count_tokens(report.text())
        chosen = self._cover(candidates, rank, len(central), self.max_report_tokens - used)
        report.findings = report.findings + [Finding(summary=text, explanation=f"source {cid}") for cid, text in chosen]
        while count_tokens(report.text()) > self.max_report_tokens and report.findings:
            report.findings = report.findings[:-1]
        if count_tokens(report.text()) > self.max_report_tokens:
            report.summary = truncate_to_tokens(report.summary, self.max_report_tokens - count_tokens(title) - 2)
        report.quoted_chunk_ids = sorted(
            {f.explanation[len("source ") :] for f in report.findings if f.explanation.startswith("source ")}
        )
        report.tokens = count_tokens(report.text())
        return report

    def _candidates(
        self, context: CommunityContext, rank: dict[str, float], names: dict[str, str]
    ) -> list[tuple[str, int, str, frozenset[str], int]]:
        """(chunk id, position, sentence (cut to max_sentence_tokens), members it names, tokens) of every
        sentence of the member chunks that names at least one member (by any alias)."""
        aliases = {
            n: sorted({normalize_name(a) for a in context.graph.nodes[n].get("aliases", [names[n]])} - {""})
            for n in context.graph.nodes
        }
        out = []
        seen: set[str] = set()
        for cid in sorted(context.chunks):
            for i, sentence in enumerate(split_sentences(context.chunks[cid])):
                if sentence in seen:
                    continue
                folded = normalize_name(sentence)
                members = frozenset(n for n, forms in aliases.items() if any(f in folded for f in forms))
                if not members:
                    continue
                seen.add(sentence)
                text = sentence
                if count_tokens(text) > self.max_sentence_tokens:
                    text = truncate_to_tokens(text, self.max_sentence_tokens).rstrip() + " …"
                out.append((cid, i, text, members, count_tokens(text) + 2))
        return out

    @staticmethod
    def _representatives(candidates: list[tuple[str, int, str, frozenset[str], int]]) -> list[Finding]:
        """One sentence per chunk: the one naming the most members, earliest on ties."""
        best: dict[str, tuple[int, int, str]] = {}
        for cid, i, text, members, _ in candidates:
            key = (-len(members), i, text)
            if cid not in best or key < best[cid]:
                best[cid] = key
        return [Finding(summary=best[cid][2], explanation=f"source {cid}") for cid in sorted(best)]

    def _cover(
        self,
        candidates: list[tuple[str, int, str, frozenset[str], int]],
        rank: dict[str, float],
        n_members: int,
        budget: int,
    ) -> list[tuple[str, str]]:
        """Greedy budgeted maximum coverage of chunks and members (see the class notes); in chosen order."""
        covered_chunks: set[str] = set()
        covered_members: set[str] = set()
        chosen: list[tuple[str, str]] = []
        remaining = list(candidates)
        while remaining and budget > 0 and len(chosen) < self.max_sentences:
            best = None
            for j, (cid, i, _text, members, cost) in enumerate(remaining):
                if cost > budget:
                    continue
                gain = (cid not in covered_chunks) + sum(
                    rank.get(m, 0.0) * n_members for m in members - covered_members
                )
                if gain <= 0:
                    continue
                key = (-gain / cost, i, cid)  # best ratio; ties: earlier sentence, then smaller chunk id
                if best is None or key < best[0]:
                    best = (key, j)
            if best is None:
                break
            cid, _, text, members, cost = remaining.pop(best[1])
            chosen.append((cid, text))
            covered_chunks.add(cid)
            covered_members |= members
            budget -= cost
        return chosen


def summarizer_calls(summarizer: Any) -> int:
    """Calls counted by a summariser that keeps a ``calls`` counter (0 otherwise)."""
    return int(getattr(summarizer, "calls", 0))


def sort_for_summarising(communities: Sequence[Community]) -> list[Community]:
    """Deepest level first (children before parents), then by id index."""
    return sorted(communities, key=lambda c: (-c.level, int(c.community_id.split("-C")[1])))
