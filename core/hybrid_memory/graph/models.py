"""Typed records of the GraphRAG layer (pydantic v2).

Every record crosses a JSON edge (the files under ``<memory>/graph/`` and the answers returned to callers),
so each one is a pydantic model with a docstring under every field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChunkExtraction",
    "Community",
    "CommunityReport",
    "ExtractedEntity",
    "ExtractedRelation",
    "ExtractionFailure",
    "Finding",
    "GlobalAnswer",
    "GlobalSearchResult",
    "MapPoint",
    "RefreshStats",
    "ReportHit",
    "TokenAccounting",
]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExtractedEntity(_Record):
    """One entity mention as an extractor returned it, before resolution."""

    name: str
    """Surface form as written in the chunk or by the model (not normalised)."""
    type: str = ""
    """Entity type, upper case by convention (``SERVICE``, ``PERSON``); empty when unknown."""
    description: str = ""
    """Free-text description from the extractor; empty for the offline extractor."""


class ExtractedRelation(_Record):
    """One relation mention as an extractor returned it, before resolution."""

    source: str
    """Surface form of the source entity."""
    target: str
    """Surface form of the target entity."""
    description: str = ""
    """What links them (``"calls"``, ``"co-occurs with"``)."""
    strength: float = 1.0
    """Weight of this mention, > 0 (LLM: 1-10 scale; offline: co-occurrence count in the chunk)."""


class ChunkExtraction(_Record):
    """What an extractor found in one chunk: the unit the graph is built from and updated by."""

    chunk_id: str
    """Id of the chunk in the memory."""
    content_hash: str
    """sha256 hex of the chunk text when it was extracted (change detection)."""
    tokens: int = 0
    """Length of the chunk text in tokens (see ``tokens.count_tokens``)."""
    entities: list[ExtractedEntity] = Field(default_factory=list)
    """Entity mentions, in extractor order."""
    relations: list[ExtractedRelation] = Field(default_factory=list)
    """Relation mentions, in extractor order."""


class ExtractionFailure(_Record):
    """A chunk whose extraction failed: recorded, visible, retried by ``GraphIndex.retry_failed``/``refresh``."""

    chunk_id: str
    """Id of the chunk."""
    content_hash: str
    """Hash of the text that failed (a changed chunk is re-extracted anyway)."""
    error: str
    """Last error message (e.g. the JSON parse error)."""
    attempts: int
    """Model calls made for this chunk in the last try (2 = first call + one retry)."""
    failed_at: float
    """Unix seconds of the last failure."""


class Community(_Record):
    """One community of one level of the hierarchical Leiden clustering."""

    community_id: str
    """Deterministic id ``"L{level}-C{index}"``; index orders communities by (-size, first entity key)."""
    level: int
    """0 = clustering of the whole graph; level l+1 splits communities of level l larger than max_cluster_size."""
    parent: str | None = None
    """Id of the enclosing community one level up, None at level 0."""
    children: list[str] = Field(default_factory=list)
    """Ids of the sub-communities one level down, sorted by id index."""
    entities: list[str] = Field(default_factory=list)
    """Normalised entity keys of the members, sorted."""
    chunk_ids: list[str] = Field(default_factory=list)
    """Chunks that support any member entity or internal edge, sorted."""
    n_edges: int = 0
    """Number of multigraph edges with both ends inside the community."""
    fingerprint: str = ""
    """sha256 hex over members, internal edges and supporting (chunk_id, content_hash); it changes iff content does."""


class Finding(_Record):
    """One insight of a community report."""

    summary: str
    """Short statement."""
    explanation: str = ""
    """Supporting detail."""


class CommunityReport(_Record):
    """Summary of one community (Edge et al. 2024, 'From Local to Global', section 2.5)."""

    community_id: str
    """Id of the community it summarises."""
    level: int
    """Level of that community."""
    title: str = ""
    """Short name of the community."""
    summary: str = ""
    """Executive summary, a few sentences."""
    findings: list[Finding] = Field(default_factory=list)
    """Key insights, most important first."""
    rating: float = 0.0
    """Importance, 0-10 (LLM: as rated by the model; extractive: min(10, 2 * log2(1 + internal edge weight)))."""
    rating_explanation: str = ""
    """Why that rating."""
    method: Literal["llm", "extractive"] = "extractive"
    """How it was written: by a chat model or offline (extractive, no model)."""
    status: Literal["ok", "failed"] = "ok"
    """``failed`` when the model never produced valid JSON; the community stays stale and is retried."""
    error: str = ""
    """Error of a failed report."""
    fingerprint: str = ""
    """Fingerprint of the community content the report was written from (staleness check)."""
    chunk_ids: list[str] = Field(default_factory=list)
    """Chunks the report stands for (every chunk supporting the community), sorted."""
    quoted_chunk_ids: list[str] = Field(default_factory=list)
    """Chunks a sentence of which is quoted in the report's text (extractive reports), sorted."""
    sources: list[Finding] = Field(default_factory=list)
    """One representative source sentence per supporting chunk (``explanation`` = ``"source <chunk id>"``), not
    part of ``text()``: ``global_search`` adds the ones matching a question when its budget allows."""
    tokens: int = 0
    """Tokens of ``text()``."""

    def text(self) -> str:
        """Plain-text rendering used for ranking, token accounting and prompts: title, summary, findings."""
        lines = [self.title, self.summary]
        lines += [f"- {f.summary}" + (f" ({f.explanation})" if f.explanation else "") for f in self.findings]
        return "\n".join(line for line in lines if line)


class TokenAccounting(_Record):
    """Measured (not estimated) cost of an answer, in tokens of ``tokenizer``."""

    tokenizer: str
    """``"cl100k_base"`` (tiktoken) or the name of the stated approximation, see ``tokens.py``."""
    report_tokens: int = 0
    """Tokens of the reports used."""
    source_chunk_tokens: int = 0
    """Tokens of the distinct raw chunks those reports stand for."""
    source_chunks: int = 0
    """Number of those distinct chunks."""
    saving_ratio: float = 0.0
    """``1 - report_tokens / source_chunk_tokens`` (0 when there are no source tokens); may be negative."""
    llm_calls: int = 0
    """Model calls made (map + reduce, retries included)."""
    prompt_tokens: int = 0
    """Tokens sent to the model, all calls."""
    completion_tokens: int = 0
    """Tokens received from the model, all calls."""


class ReportHit(_Record):
    """One community report chosen for a global question."""

    rank: int
    """1-based position in the community ranking."""
    community_id: str
    """Community id."""
    level: int
    """Community level."""
    rating: float
    """Importance rating of the report, 0-10."""
    score: float
    """Fused score the reports were ranked by in the hybrid search over reports (the core's default fusion)."""
    sparse_rank: int | None = None
    """1-based BM25 rank, None when no query term matched."""
    dense_score: float | None = None
    """Inner product with the question (L2-normalised embeddings), None when not in the dense list."""
    title: str
    """Report title."""
    text: str
    """Report text (title, summary, findings), then the evidence lines when any were added."""
    tokens: int
    """Tokens of ``text`` (report and evidence)."""
    chunk_ids: list[str]
    """Chunks the report stands for, sorted."""
    evidence: list[Finding] = Field(default_factory=list)
    """Source sentences added for this question (``explanation`` = ``"source <chunk id>"``), best first."""
    quoted_chunk_ids: list[str] = Field(default_factory=list)
    """Chunks quoted in ``text`` (by the report or the evidence), sorted."""


class GlobalSearchResult(_Record):
    """Reports chosen for a question under a token budget."""

    question: str
    """The question as asked."""
    hits: list[ReportHit] = Field(default_factory=list)
    """Chosen reports, best first; empty when none is relevant."""
    no_relevant_reports: bool = False
    """True when no report matched the question (the caller should say so rather than invent)."""
    smallest_relevant_report_tokens: int | None = None
    """When relevant reports exist but none fits ``token_budget``: the smallest one's size in tokens (raise the
    budget to at least this); None otherwise."""
    token_budget: int
    """Budget the reports' tokens had to fit, in tokens."""
    tokens: TokenAccounting
    """Reports used versus raw chunks they stand for."""

    @property
    def chunk_ids(self) -> list[str]:
        """Sorted union of the chunk ids the chosen reports stand for."""
        return sorted({c for h in self.hits for c in h.chunk_ids})

    @property
    def quoted_chunk_ids(self) -> list[str]:
        """Sorted union of the chunk ids quoted in the hits' text (report sentences and evidence)."""
        return sorted({c for h in self.hits for c in h.quoted_chunk_ids})


class MapPoint(_Record):
    """One rated point of the map step of a map-reduce global answer."""

    description: str
    """The point, as the model stated it."""
    score: int
    """Helpfulness for the question, 0-100 (0 = irrelevant)."""
    community_ids: list[str] = Field(default_factory=list)
    """Reports of the batch the point came from."""


class GlobalAnswer(_Record):
    """Answer to a global question."""

    question: str
    """The question as asked."""
    answer: str
    """The reduced answer, or the extractive reports' text without a model, or the no-data sentence."""
    no_data: bool = False
    """True when no report was relevant (or every map point scored 0): the answer says so."""
    points: list[MapPoint] = Field(default_factory=list)
    """Map-step points kept for the reduce step, by descending score."""
    search: GlobalSearchResult
    """The reports the answer was built from."""
    tokens: TokenAccounting
    """Token and call accounting for the whole answer."""
    truncated: bool = False
    """True when the call or token budget left some reports unread."""
    model_failed: bool = False
    """True when every map call's reply stayed unusable after its retry: no answer was made (not the same as
    'nothing relevant')."""


class RefreshStats(_Record):
    """What one ``GraphIndex.refresh`` / ``sync`` did."""

    added: list[str] = Field(default_factory=list)
    """Chunk ids new since the last sync, sorted."""
    changed: list[str] = Field(default_factory=list)
    """Chunk ids whose content hash changed, sorted."""
    deleted: list[str] = Field(default_factory=list)
    """Chunk ids gone from the memory, sorted."""
    retried: list[str] = Field(default_factory=list)
    """Previously failed chunk ids retried, sorted."""
    failed: list[str] = Field(default_factory=list)
    """Chunk ids whose extraction failed in this call, sorted."""
    stale: list[str] = Field(default_factory=list)
    """Community ids whose report is missing or out of date after the sync, sorted."""
    summarised: int = 0
    """Summariser calls made (one per stale community summarised)."""
    failed_reports: list[str] = Field(default_factory=list)
    """Community ids whose report failed, sorted."""
    seconds: float = 0.0
    """Wall time of the call, seconds."""
