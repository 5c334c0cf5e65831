"""Global search: rank community reports with the core's hybrid searcher, pack them under a token budget, and
optionally answer by map-reduce (Edge et al. 2024, "From Local to Global", section 2.6).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import LLMOutputError
from .llm import LLMCallable, call_json
from .models import CommunityReport, Finding, GlobalAnswer, GlobalSearchResult, MapPoint, ReportHit, TokenAccounting
from .tokens import count_tokens, tokenizer_name

logger = logging.getLogger(__name__)

__all__ = [
    "BUDGET_TOO_SMALL_ANSWER",
    "MODEL_FAILED_ANSWER",
    "NO_DATA_ANSWER",
    "OUT_OF_BUDGET_ANSWER",
    "ReportRanker",
    "account_tokens",
    "add_evidence",
    "focus_report",
    "map_reduce_answer",
    "select_reports",
]

NO_DATA_ANSWER = (
    "I don't know: none of the community reports in this memory is relevant to the question, "
    "so there is nothing to answer from."
)


BUDGET_TOO_SMALL_ANSWER = (
    "No answer: relevant community reports exist, but the smallest one ({tokens} tokens) does not fit the token "
    "budget of {budget}; raise token_budget."
)
MODEL_FAILED_ANSWER = (
    "No answer: the model's replies to the map step could not be used ({failures} of {batches} batches failed "
    "after a retry); see the log, or try another model."
)
OUT_OF_BUDGET_ANSWER = (
    "No answer: the call or token budget ran out before an answer could be written; raise max_calls or max_llm_tokens."
)


class ReportRanker:
    """Hybrid search (BM25 + dense, the core's default fusion) over report texts with the store-free
    :class:`hybrid_memory.search.searcher.HybridSearcher`: a BM25 index and a vector index over the reports, no
    second ``HybridMemory`` (no SQLite store, no executor, nothing to close).

    Reports get int ids 0..n-1 in community-id order; the key of each is its community id, so ties rank by
    community id as chunks rank by chunk_id. ``embedder`` is the memory's embedder or any
    ``hybrid_memory.Embedder``; ``vector_cache`` (report text -> float32 (dim,) vector) spares re-embedding
    unchanged reports on refresh.
    """

    def __init__(self, reports: Iterable[CommunityReport], embedder: Any, *, vector_cache: dict | None = None):
        from hybrid_memory.embedders import l2_normalize
        from hybrid_memory.engines.bm25.index import BM25Index
        from hybrid_memory.engines.dense.index import FaissIndex
        from hybrid_memory.search.engine import DenseEngine, SparseEngine
        from hybrid_memory.search.searcher import HybridSearcher

        kept = [r for r in sorted(reports, key=lambda r: r.community_id) if r.status == "ok" and r.text().strip()]
        self._keys = [r.community_id for r in kept]
        self._texts = [r.text() for r in kept]
        self._levels = np.array([r.level for r in kept], dtype=np.int64)
        ids = np.arange(len(kept), dtype=np.int64)
        sparse = BM25Index()
        sparse.build(ids, self._texts)
        dense = FaissIndex(int(embedder.dim))
        if kept:
            cache = vector_cache if vector_cache is not None else {}
            missing = sorted({t for t in self._texts if t not in cache})
            if missing:
                vectors = np.asarray(embedder.embed_documents(missing), dtype=np.float32)
                cache.update(zip(missing, vectors, strict=True))
            dense.add(ids, l2_normalize(np.stack([cache[t] for t in self._texts]).astype(np.float32)))
        keys = self._keys
        self._searcher = HybridSearcher(
            {"sparse": SparseEngine(sparse), "dense": DenseEngine(dense, embedder)},
            lambda found: {int(i): keys[int(i)] for i in found if 0 <= int(i) < len(keys)},
        )
        self.size = len(kept)

    def rank(self, question: str, *, top_k: int | None = None, level: int | None = None) -> list[Any]:
        """``SearchResult``s of the reports for ``question``, best first by the default fusion (ties by
        community id). ``chunk_id`` is the community id; ``rrf_score``, ``score`` and the engines' ranks and
        raw scores are filled as for chunks. ``level`` restricts to one level. Returns [] when there are none."""
        if self.size == 0:
            return []
        from hybrid_memory import MAX_TOP_K, SearchResult
        from hybrid_memory.search.engine import Query, RowSet

        allowed = None
        if level is not None:
            allowed = RowSet(np.flatnonzero(self._levels == level), sorted_unique=True)
        k = max(1, min(self.size if top_k is None else top_k, MAX_TOP_K))
        result = self._searcher.search(
            Query(question), top_k=k, depth=max(k, 2 * k if top_k is not None else k), weights={}, allowed=allowed
        )
        return [
            SearchResult(
                chunk_id=hit.key,
                rrf_score=hit.rrf_score,
                score=hit.score,
                text=self._texts[hit.doc_id],
                source="",
                sparse_rank=hit.ranks.get("sparse"),
                sparse_score=hit.raw_scores.get("sparse"),
                dense_rank=hit.ranks.get("dense"),
                dense_score=hit.raw_scores.get("dense"),
            )
            for hit in result.hits
        ]

    def close(self) -> None:
        """Nothing to release (kept for callers of the former HybridMemory-backed ranker)."""


def _ancestors(community_id: str, parents: Mapping[str, str | None]) -> list[str]:
    out = []
    current = parents.get(community_id)
    while current is not None:
        out.append(current)
        current = parents.get(current)
    return out


def select_reports(
    ranked: Sequence[Any],
    reports: Mapping[str, CommunityReport],
    *,
    token_budget: int,
    parents: Mapping[str, str | None] | None = None,
    min_dense_score: float = 0.3,
    max_reports: int | None = None,
    chosen: Sequence[ReportHit] = (),
    render: Any = None,
) -> list[ReportHit]:
    """Best relevant reports whose tokens fit ``token_budget`` (greedy in rank order; one that does not fit is
    skipped and smaller ones after it may still fit).

    A report is relevant when a question term matched it (BM25 rank present) or its dense score is at least
    ``min_dense_score``. With ``parents`` (community id -> parent id), a report whose ancestor or descendant is
    already chosen is skipped, so the budget is not spent twice on the same entities. ``chosen``: hits picked
    by an earlier pass, which count as chosen (they are not returned again). ``render``: report -> (text,
    quoted chunk ids) handed over instead of the full report (``focus_report``); its tokens are what counts
    against the budget. Pure function.
    """
    parents = parents or {}
    before = list(chosen)
    chosen = []
    chosen_ids: set[str] = {h.community_id for h in before}
    covered: set[str] = set(chosen_ids) | {a for h in before for a in _ancestors(h.community_id, parents)}
    used = 0
    for result in ranked:
        report = reports.get(result.chunk_id)
        if report is None:
            continue
        lexical = result.sparse_rank is not None
        semantic = result.dense_score is not None and result.dense_score >= min_dense_score
        if not (lexical or semantic):
            continue
        lineage = _ancestors(report.community_id, parents)
        if report.community_id in covered or any(a in chosen_ids for a in lineage):
            continue
        if render is not None:
            text, quoted = render(report)
            tokens = count_tokens(text)
        else:
            text, quoted, tokens = report.text(), list(report.quoted_chunk_ids), report.tokens
        if used + tokens > token_budget:
            continue
        used += tokens
        chosen_ids.add(report.community_id)
        covered.update([report.community_id, *lineage])
        chosen.append(
            ReportHit(
                rank=len(chosen) + 1,
                community_id=report.community_id,
                level=report.level,
                rating=report.rating,
                score=float(result.score if result.score is not None else result.rrf_score),
                sparse_rank=result.sparse_rank,
                dense_score=result.dense_score,
                title=report.title,
                text=text,
                tokens=tokens,
                chunk_ids=list(report.chunk_ids),
                quoted_chunk_ids=quoted,
            )
        )
        if max_reports is not None and len(chosen) >= max_reports:
            break
    return chosen


def focus_report(report: CommunityReport, question: str, *, max_findings: int = 2) -> tuple[str, list[str]]:
    """(text, quoted chunk ids) of ``report`` focused on ``question``: an extractive report keeps its title and
    the ``max_findings`` findings sharing the most question terms (the core's BM25 tokenizer; ties keep the
    report's order; the first finding when none shares a term); a model-written report is handed over whole.
    Pure function."""
    if report.method != "extractive" or not report.findings:
        return report.text(), list(report.quoted_chunk_ids)
    tokenize = _tokenizer().tokenize
    terms = set(tokenize(question))
    scored = sorted(((-len(terms & set(tokenize(f.summary))), i) for i, f in enumerate(report.findings)))
    keep = sorted(i for score, i in scored[:max_findings] if score < 0) or [0]
    findings = [report.findings[i] for i in keep]
    lines = [report.title] + [f"- {f.summary}" + (f" ({f.explanation})" if f.explanation else "") for f in findings]
    quoted = sorted({f.explanation[len("source ") :] for f in findings if f.explanation.startswith("source ")})
    return "\n".join(line for line in lines if line), quoted


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from hybrid_memory.tokenizer import TechnicalTokenizer

    return TechnicalTokenizer()


def add_evidence(
    question: str,
    hits: list[ReportHit],
    reports: Mapping[str, CommunityReport],
    *,
    token_budget: int,
    max_per_report: int = 3,
) -> list[ReportHit]:
    """Add to the chosen reports their source sentences that best match ``question``, while ``token_budget``
    (tokens, for reports and evidence together) allows. Pure function; returns new hits.

    Candidates are each report's ``sources`` (one representative sentence per supporting chunk) not already in
    its text. Score = sum over the question's terms in the sentence of idf = ln(1 + N / df) over the N
    candidates (the core's BM25 tokenizer: stemmed, stop words removed); a sentence without a question term is
    never added. Best first across reports, at most ``max_per_report`` per report; each evidence line costs its
    tokens + 1 and is appended to the hit's ``text`` as ``- <sentence> (source <chunk id>)``.
    """
    used = sum(h.tokens for h in hits)
    if used >= token_budget or not hits:
        return list(hits)
    tokenize = _tokenizer().tokenize
    terms = set(tokenize(question))
    if not terms:
        return list(hits)
    pool: list[tuple[int, Finding, set[str]]] = []
    for h, hit in enumerate(hits):
        report = reports.get(hit.community_id)
        if report is None:
            continue
        for source in report.sources:
            if source.summary not in hit.text:
                pool.append((h, source, set(tokenize(source.summary))))
    df: dict[str, int] = {}
    for _, _, words in pool:
        for t in words & terms:
            df[t] = df.get(t, 0) + 1
    n = len(pool)
    scored = []
    for order, (h, source, words) in enumerate(pool):
        score = sum(math.log(1.0 + n / df[t]) for t in words & terms)
        if score > 0:
            scored.append((-score, h, order, source))
    scored.sort(key=lambda t: t[:3])
    added: dict[int, list[Finding]] = {}
    header = count_tokens(_EVIDENCE_HEADER) + 1
    for _, h, _, source in scored:
        if len(added.get(h, [])) >= max_per_report:
            continue
        cost = count_tokens(_evidence_line(source)) + 1 + (header if h not in added else 0)
        if used + cost > token_budget:
            continue
        added.setdefault(h, []).append(source)
        used += cost
    while True:
        out = []
        for h, hit in enumerate(hits):
            extra = added.get(h, [])
            if not extra:
                out.append(hit)
                continue
            text = hit.text + f"\n{_EVIDENCE_HEADER}\n" + "\n".join(_evidence_line(f) for f in extra)
            quoted = sorted(set(hit.quoted_chunk_ids) | {f.explanation[len("source ") :] for f in extra})
            out.append(
                hit.model_copy(
                    update={"text": text, "tokens": count_tokens(text), "evidence": extra, "quoted_chunk_ids": quoted}
                )
            )
        if sum(h.tokens for h in out) <= token_budget or not added:
            return out
        last = max(added)  # joined text may count a token more than its parts: drop the last line added
        added[last].pop()
        if not added[last]:
            del added[last]


_EVIDENCE_HEADER = "Evidence:"


def _evidence_line(source: Finding) -> str:
    return f"- {source.summary} ({source.explanation})"


def account_tokens(hits: Sequence[ReportHit], chunk_tokens: Mapping[str, int], **calls: int) -> TokenAccounting:
    """Tokens of the reports used versus tokens of the distinct raw chunks they stand for (measured, not claimed).

    ``chunk_tokens``: tokens of each chunk's text by chunk id. ``calls``: llm_calls, prompt_tokens,
    completion_tokens. Pure function.
    """
    chunk_ids = {c for h in hits for c in h.chunk_ids}
    report_tokens = sum(h.tokens for h in hits)
    source_tokens = sum(chunk_tokens.get(c, 0) for c in chunk_ids)
    return TokenAccounting(
        tokenizer=tokenizer_name(),
        report_tokens=report_tokens,
        source_chunk_tokens=source_tokens,
        source_chunks=len(chunk_ids),
        saving_ratio=(1.0 - report_tokens / source_tokens) if source_tokens else 0.0,
        **calls,
    )


MAP_PROMPT = """---Role---
You answer questions about a memory, using only the community reports below.

---Question---
{question}

---Reports---
{reports}

---Output---
Reply with one JSON object and nothing else:
{{"points": [{{"description": "<a point that helps answer the question, citing report ids>", "score": <0-100>}}]}}
The score says how much the point helps answer the question. If the reports do not help, reply {{"points": []}}.
Do not make anything up.
"""

REDUCE_PROMPT = """---Role---
You answer a question about a memory from analysts' rated points (higher score = more important).

---Question---
{question}

---Points---
{points}

---Task---
Write a concise answer using only these points; keep the report ids they cite. If they do not answer the
question, say that the memory does not contain the answer. Do not make anything up.
"""


def validate_points(data: Any) -> list[tuple[str, int]]:
    """(description, score 0-100) pairs from parsed map JSON (``{"points": [...]}`` or a bare list).
    Raises ValueError for another shape or a non-numeric score."""
    items = data.get("points") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError('expected {"points": [...]}')
    out = []
    for item in items:
        if not isinstance(item, dict) or not str(item.get("description", "")).strip():
            continue
        try:
            score = int(round(float(item.get("score", 0))))
        except (TypeError, ValueError):
            raise ValueError(f"'score' must be a number from 0 to 100, got {item.get('score')!r}") from None
        out.append((str(item["description"]).strip(), min(100, max(0, score))))
    return out


def _batches(hits: Sequence[ReportHit], max_tokens: int) -> list[list[ReportHit]]:
    batches: list[list[ReportHit]] = []
    current: list[ReportHit] = []
    used = 0
    for hit in hits:
        if current and used + hit.tokens > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(hit)
        used += hit.tokens
    if current:
        batches.append(current)
    return batches


def _render(hit: ReportHit) -> str:
    return f"[report {hit.community_id}, level {hit.level}, rating {hit.rating:g}]\n{hit.text}"


def map_reduce_answer(
    search: GlobalSearchResult,
    llm: LLMCallable,
    chunk_tokens: Mapping[str, int],
    *,
    max_calls: int = 8,
    max_llm_tokens: int = 32000,
    map_context_tokens: int = 3000,
    reduce_context_tokens: int = 3000,
) -> GlobalAnswer:
    """Map-reduce answer over the reports of ``search``: one map call per batch of reports (at most
    ``map_context_tokens`` report tokens each) returning rated points, then one reduce call over the points with a
    score > 0, best first, packed under ``reduce_context_tokens``.

    Budgets: at most ``max_calls`` model calls (retries included; one is kept for the reduce step) and at most
    ``max_llm_tokens`` prompt tokens in total; batches left unread set ``truncated``. When there are no relevant
    reports or every point scores 0, no reduce call is made and the answer is ``NO_DATA_ANSWER``. A map batch whose
    reply stays unusable after its retry is skipped (logged). Raises ValueError when ``max_calls`` < 2.
    """
    if max_calls < 2:
        raise ValueError(f"max_calls must be >= 2 (one map and one reduce call), got {max_calls}")
    calls = prompt_tokens = completion_tokens = 0
    points: list[tuple[int, int, int, MapPoint]] = []
    truncated = False
    batches = list(_batches(search.hits, map_context_tokens))
    map_ok = map_failed = 0
    for b, batch in enumerate(batches):
        prompt = MAP_PROMPT.format(question=search.question, reports="\n\n".join(_render(h) for h in batch))
        budget_left = max_calls - 1 - calls
        cost = count_tokens(prompt)
        if budget_left < 1 or prompt_tokens + cost > max_llm_tokens:
            truncated = True
            break
        try:
            result = call_json(llm, prompt, validate_points, retries=1 if budget_left >= 2 else 0)
        except LLMOutputError as exc:
            calls += exc.attempts
            prompt_tokens += exc.prompt_tokens
            completion_tokens += exc.completion_tokens
            logger.warning("map step failed for reports %s: %s", [h.community_id for h in batch], exc)
            map_failed += 1
            continue
        map_ok += 1
        calls += result.attempts
        prompt_tokens += result.prompt_tokens
        completion_tokens += result.completion_tokens
        ids = [h.community_id for h in batch]
        for i, (description, score) in enumerate(result.value):
            if score > 0:
                points.append((-score, b, i, MapPoint(description=description, score=score, community_ids=ids)))
    points.sort(key=lambda t: t[:3])
    kept = [p for *_, p in points]

    def finish(answer: str, no_data: bool, used: list[MapPoint], model_failed: bool = False) -> GlobalAnswer:
        tokens = account_tokens(
            search.hits, chunk_tokens, llm_calls=calls, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        return GlobalAnswer(
            question=search.question,
            answer=answer,
            no_data=no_data,
            points=used,
            search=search,
            tokens=tokens,
            truncated=truncated,
            model_failed=model_failed,
        )

    if not kept:
        if map_ok == 0 and map_failed:
            return finish(MODEL_FAILED_ANSWER.format(failures=map_failed, batches=len(batches)), False, [], True)
        if map_ok == 0 and truncated:
            return finish(OUT_OF_BUDGET_ANSWER, False, [])
        return finish(NO_DATA_ANSWER, True, [])
    lines: list[str] = []
    used_points: list[MapPoint] = []
    used = 0
    # the reduce prompt counts against max_llm_tokens too: its points get what the map step left
    frame = count_tokens(REDUCE_PROMPT.format(question=search.question, points=""))
    points_budget = min(reduce_context_tokens, max_llm_tokens - prompt_tokens - frame)
    for point in kept:
        line = f"- (score {point.score}) {point.description}"
        cost = count_tokens(line) + 1
        if used + cost > points_budget:
            truncated = True
            continue
        lines.append(line)
        used_points.append(point)
        used += cost
    if not lines:
        return finish(OUT_OF_BUDGET_ANSWER, False, [])
    prompt = REDUCE_PROMPT.format(question=search.question, points="\n".join(lines))
    calls += 1
    prompt_tokens += count_tokens(prompt)
    answer = llm(prompt)
    completion_tokens += count_tokens(answer)
    return finish(answer.strip(), False, used_points)
