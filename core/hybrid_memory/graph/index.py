"""``GraphIndex``: the stateful GraphRAG layer over a ``HybridMemory``.

State: per-chunk extractions (the source of truth), the entity multigraph derived from them, hierarchical
communities, community reports, and failed extractions. ``refresh(memory)`` diffs ``memory.chunk_hashes()`` against
the hashes it processed last, so it works across processes without callbacks: only added, changed and previously
failed chunks are extracted, the graph is updated incrementally, communities are re-clustered (each connected
component separately, so an edit elsewhere never moves a community), and only the communities whose content
fingerprint has no report yet are summarised.

Scopes: a graph is built **per scope**. ``GraphIndex.build(memory.scoped(user_id="u1"))`` extracts, clusters and
summarises only that scope's chunks (the view's ``chunk_hashes`` and ``get`` see nothing else) and saves under
``<memory>/graph_scopes/<scope key>``; the unscoped memory's graph lives in ``<memory>/graph``. A graph records
the scope it was built for and refuses to be refreshed or opened with another. Why per scope rather than one
graph whose reports are shown only to a scope owning all their chunks: shared entities (``PostgreSQL``, a common
service name) link the scopes' chunks, so Leiden would put most communities across scopes and those reports
would be hidden from every scope; a report's text is also written from its chunks, so a mixed community cannot be
summarised without mixing. Each chunk belongs to one scope, so per-scope graphs cost the same extraction work.

Serving only current reports without re-reading: ``global_search`` (and ``ask``) must not serve a report citing a
chunk deleted or replaced since the graph was built, which needs the scope's chunk hashes; reading them costs
220-420 ms at 100,000 chunks. The index keeps what it last worked out from them (:class:`_Served`: the chunks gone,
the reports still served) keyed by the scope and the memory's change position (``memory._change_position()``,
internal: :meth:`hybrid_memory.backends.base.Backend.change_position`), which moves on every committed write of any
process; it reads the hashes again only when that position moved, is unknown (None: Qdrant, a memory-like object
without it) or the index itself changed (``sync``/``refresh``, ``summarize_stale``, merges, ``restore``/``load``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import reprlib
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import networkx as nx
from tqdm.auto import tqdm

from .._exceptions import InvalidRequestError, MemoryClosedError
from ..limits import check_graph_level, check_question
from .build import build_graph, update_graph
from .communities import DEFAULT_BACKEND, check_backend, describe_communities, hierarchical_leiden
from .errors import GraphStateError
from .extract import Extractor
from .llm import as_llm_callable
from .models import (
    ChunkExtraction,
    Community,
    CommunityReport,
    ExtractionFailure,
    GlobalAnswer,
    GlobalSearchResult,
    RefreshStats,
)
from .normalize import normalize_name
from .patterns import OfflineExtractor
from .reports import CommunityContext, ExtractiveSummarizer, Summarizer, sort_for_summarising
from .resolve import AUTO_MERGE_THRESHOLD, AliasCandidate, Merge, alias_candidates, resolve_key
from .search import (
    BUDGET_TOO_SMALL_ANSWER,
    NO_DATA_ANSWER,
    ReportRanker,
    account_tokens,
    add_evidence,
    focus_report,
    map_reduce_answer,
    select_reports,
)
from .tokens import count_tokens

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother = 80, 80

if TYPE_CHECKING:
    from .store import GraphState

logger = logging.getLogger(__name__)

__all__ = ["GraphIndex", "graph_path", "scope_of"]


def scope_of(memory: Any) -> dict[str, str]:
    """Bound scope fields of a memory or scoped view ({} for an unscoped memory)."""
    scope: Any = getattr(memory, "scope", None)
    return dict(scope.bound()) if hasattr(scope, "bound") else {}


def graph_path(memory: Any) -> Path | None:
    """Where the graph of ``memory`` is saved: ``<memory>/graph``, or a scoped view's ``graph_path``
    (``<memory>/graph_scopes/<scope key>``); None for a memory in RAM."""
    if getattr(memory, "graph_path", None) is not None:
        return Path(memory.graph_path)
    return Path(memory.path) / "graph" if getattr(memory, "path", None) is not None else None


_FETCH_BATCH = 256
_CONTEXT_ENTITIES = 20
_CONTEXT_CHUNKS = 50


def _position_key(memory: Any) -> tuple[tuple[tuple[str, str], ...], Hashable] | None:
    """``(scope items, change position)`` of ``memory``: equal between two calls exactly when ``memory.
    chunk_hashes()`` would answer the same (the position belongs to one memory object and moves on every committed
    write, see ``HybridMemory._change_position``); None when the memory has no position (a Qdrant backend, an
    object without ``_change_position``): read the hashes every time. Read it before the hashes.

    Raises:
        MemoryClosedError: the memory is closed.
    """
    read = getattr(memory, "_change_position", None)
    position = read() if callable(read) else None
    return None if position is None else (tuple(sorted(scope_of(memory).items())), position)


@dataclass(frozen=True)
class _Served:
    """What ``global_search`` may serve after one read of a memory's chunk hashes; immutable, replaced whole (so a
    thread reads either the old or the new one, never a mix).

    Attributes:
        key: :func:`_position_key` read before the hashes.
        extractions_version: ``GraphIndex._extractions_version`` when ``gone`` was worked out.
        gone: ids of the extracted or failed chunks no longer stored with the text they were extracted from.
        reports_version: ``GraphIndex._reports_version`` when ``reports`` was worked out (0: not yet).
        reports: community id -> report, the reports citing no chunk of ``gone``.
    """

    key: Hashable
    extractions_version: int
    gone: frozenset[str]
    reports_version: int = 0
    reports: Mapping[str, CommunityReport] | None = None


class GraphIndex:
    """Entity graph, hierarchical Leiden communities and community reports over one memory.

    Args:
        extractor: an ``Extractor``; default ``OfflineExtractor()`` (no model).
        summarizer: a ``Summarizer``; default ``ExtractiveSummarizer()`` (no model).
        max_cluster_size: communities larger than this are split again at the next level (default 10).
        seed: Leiden seed (default 42); the same seed, graph and backend version give the same communities.
        community_backend: ``"graspologic"`` (default; graspologic-native, MIT, what Microsoft GraphRAG uses) or
            ``"cdlib"`` (leidenalg + igraph, GPL; extra ``graph-cdlib``). See ``communities``.
        auto_merge_threshold: alias candidates (``resolve.py``) that are unambiguous and whose evidence score is at
            least this (0-1; default 0.5) are merged at each sync; None merges only what ``merge_entities`` asks.
        embedder: embedder for ranking reports (``hybrid_memory.Embedder``); default the memory's embedder.
        path: folder ``refresh``/``build`` save to (default ``<memory.path>/graph`` for persisted memories).
        show_progress: tqdm bars while extracting and summarising (off in library calls; the CLI turns it on).

    Raises ValueError for max_cluster_size < 1 or an unknown community backend.
    """

    def __init__(
        self,
        *,
        extractor: Extractor | None = None,
        summarizer: Summarizer | None = None,
        max_cluster_size: int = 10,
        seed: int = 42,
        community_backend: str = DEFAULT_BACKEND,
        auto_merge_threshold: float | None = AUTO_MERGE_THRESHOLD,
        embedder: Any = None,
        path: str | Path | None = None,
        show_progress: bool = False,
    ):
        if not isinstance(max_cluster_size, int) or max_cluster_size < 1:
            raise ValueError(f"max_cluster_size must be an int >= 1, got {max_cluster_size!r}")
        self.extractor: Extractor = extractor if extractor is not None else OfflineExtractor()
        self.summarizer: Summarizer = summarizer if summarizer is not None else ExtractiveSummarizer()
        self.max_cluster_size = max_cluster_size
        self.seed = int(seed)
        self.community_backend = check_backend(community_backend)
        if auto_merge_threshold is not None and not (
            isinstance(auto_merge_threshold, (int, float)) and 0.0 <= float(auto_merge_threshold) <= 1.0
        ):
            raise ValueError(f"auto_merge_threshold must be a number in [0, 1] or None, got {auto_merge_threshold!r}")
        self.auto_merge_threshold = None if auto_merge_threshold is None else float(auto_merge_threshold)
        self.merges: dict[str, Merge] = {}
        """Merges in force by undo token (automatic and confirmed)."""
        self.rejected_merges: set[tuple[str, str]] = set()
        """(alias, canonical) pairs whose automatic merge was undone: never merged automatically again."""
        self.embedder = embedder
        self.path = Path(path) if path is not None else None
        self.show_progress = show_progress
        self.graph: nx.MultiDiGraph = nx.MultiDiGraph()
        self.extractions: dict[str, ChunkExtraction] = {}
        self.failures: dict[str, ExtractionFailure] = {}
        self.communities: dict[str, Community] = {}
        self.reports: dict[str, CommunityReport] = {}
        self._ranker: ReportRanker | None = None
        self._report_vectors: dict[str, Any] = {}  # report text -> embedding, for the current embedder
        self._report_vectors_for: str | None = None  # name of that embedder
        self.scope: dict[str, str] = {}
        """Bound fields of the scope this graph was built for ({} for the whole memory)."""
        self._source: Any = None  # the memory (or view) opened, built or synced with: global_search checks it
        # what global_search serves, by memory change position (see the module docstring): versions are taken
        # from one counter (itertools.count: atomic under the GIL), bumped after each change they track
        self._versions = itertools.count(1)
        self._extractions_version = next(self._versions)  # extractions and failures
        self._reports_version = next(self._versions)  # reports
        self._served: _Served | None = None

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def build(cls, memory: Any, *, save: bool = True, **kwargs: Any) -> GraphIndex:
        """New index over every chunk of ``memory``, summarised, and saved under ``<memory.path>/graph`` when the
        memory is persisted and ``save`` is true. Keyword arguments as for the constructor."""
        if kwargs.get("path") is None:
            kwargs["path"] = graph_path(memory)
        index = cls(**kwargs)
        index.scope = scope_of(memory)
        index.refresh(memory, save=save)
        return index

    @classmethod
    def open(cls, memory: Any, **kwargs: Any) -> GraphIndex:
        """The index saved under ``<memory.path>/graph`` (``load``), or a new empty one; call ``refresh`` next.
        Keyword arguments as for ``load``/the constructor."""
        path = graph_path(memory)
        kwargs.setdefault("embedder", getattr(memory, "embedder", None))
        if path is not None and (path / "manifest.json").is_file():
            index = cls.load(path, **kwargs)
            index.check_scope(memory)
            index._source = memory
            return index
        index = cls(path=path, **kwargs)
        index.scope = scope_of(memory)
        index._source = memory
        return index

    def check_scope(self, memory: Any) -> None:
        """Raise GraphStateError unless ``memory`` (a memory or a scoped view) has the scope this graph was
        built for: a graph never mixes scopes, nor answers another scope."""
        asked = scope_of(memory)
        if asked != self.scope:
            raise GraphStateError(
                f"this graph was built for scope {self.scope or 'all (unscoped)'}, not {asked or 'all (unscoped)'}; "
                "build one per scope: GraphIndex.build(memory.scoped(...))"
            )

    # -- change tracking ------------------------------------------------------------------------------
    def processed_hashes(self) -> dict[str, str]:
        """chunk_id -> content hash of every chunk processed (extracted or failed)."""
        out = {cid: f.content_hash for cid, f in self.failures.items()}
        out.update({cid: e.content_hash for cid, e in self.extractions.items()})
        return out

    def sync(self, memory: Any, *, only: set[str] | None = None) -> RefreshStats:
        """Bring the graph and communities up to date with ``memory``; no summarising (see ``stale_communities``).

        Extracts added, changed and previously failed chunks (``only`` restricts extraction to those ids),
        removes deleted ones, updates the graph incrementally and re-clusters. Extraction errors are recorded in
        ``failures`` (chunk id, error, attempts), never dropped.
        """
        started = time.perf_counter()
        if not self.extractions and not self.failures and not self.scope:
            self.scope = scope_of(memory)  # a fresh index takes the scope of the memory it first syncs with
        self.check_scope(memory)
        self._source = memory
        if getattr(memory, "embedder", None) is not None and self.embedder is None:
            self.embedder = memory.embedder
        key = _position_key(memory)  # before the hashes: a write in between only makes the next check re-read
        current: Mapping[str, str] = memory.chunk_hashes()
        stats = RefreshStats()
        stats.deleted = sorted(c for c in self.processed_hashes() if c not in current)
        stats.added = sorted(c for c in current if c not in self.extractions and c not in self.failures)
        stats.changed = sorted(
            c for c, h in current.items() if c in self.extractions and self.extractions[c].content_hash != h
        )
        stats.changed += sorted(c for c, f in self.failures.items() if c in current and f.content_hash != current[c])
        stats.changed.sort()
        stats.retried = sorted(c for c, f in self.failures.items() if c in current and f.content_hash == current[c])
        if only is not None:  # the others stay pending for the next sync
            stats.added, stats.changed, stats.retried = (
                [c for c in ids if c in only] for ids in (stats.added, stats.changed, stats.retried)
            )
        todo = stats.added + stats.changed + stats.retried
        before = dict(self.extractions)
        after = dict(self.extractions)
        for cid in stats.deleted:
            after.pop(cid, None)
            self.failures.pop(cid, None)
        chunks = self._fetch(memory, sorted(todo))
        for chunk in tqdm(
            chunks, total=len(todo), desc="extracting", unit="chunk", disable=None if self.show_progress else True
        ):  # None: off unless stderr is a terminal
            extraction = self._extract(chunk)
            if extraction is None:
                after.pop(chunk.chunk_id, None)
                stats.failed.append(chunk.chunk_id)
            else:
                after[chunk.chunk_id] = extraction
                self.failures.pop(chunk.chunk_id, None)
        touched = set(stats.deleted) | set(todo)
        update_graph(self.graph, before, after, touched, self.aliases)
        self.extractions = after
        self._extractions_version = next(self._versions)
        if touched and self._auto_merge():
            self.graph = build_graph(self.extractions, self.aliases)
        if touched or (self.graph.number_of_nodes() and not self.communities):
            self._recluster()  # an unchanged graph keeps its communities (same seed, same result)
        stats.stale = self.stale_communities()
        if key is not None:  # the hashes just read stand for this position: global_search need not read them
            self._served = _Served(key, self._extractions_version, self._gone(current))
        stats.seconds = time.perf_counter() - started
        logger.info(
            "graph sync: +%d ~%d -%d chunks, %d failed, %d entities, %d edges, %d communities, %d stale",
            len(stats.added),
            len(stats.changed),
            len(stats.deleted),
            len(stats.failed),
            self.graph.number_of_nodes(),
            self.graph.number_of_edges(),
            len(self.communities),
            len(stats.stale),
        )
        return stats

    # -- entity resolution ----------------------------------------------------------------------------
    @property
    def aliases(self) -> dict[str, str]:
        """Merged alias key -> canonical key, for every merge in force."""
        return {m.alias: m.canonical for m in self.merges.values()}

    def alias_candidates(self) -> list[AliasCandidate]:
        """Alias candidates of the current graph with their evidence (see ``resolve.py``), sorted by
        (alias, canonical); ``auto`` says whether the threshold would merge it at the next sync."""
        threshold = self.auto_merge_threshold if self.auto_merge_threshold is not None else float("inf")
        return alias_candidates(self.graph, threshold=threshold, rejected=self.rejected_merges)

    def _auto_merge(self) -> bool:
        """Merge the qualifying candidates, re-examining after each round (a merge can resolve another's
        ambiguity, e.g. ``Dr. Chen`` once ``Chen`` is ``Alice Chen``). Returns True when anything was merged."""
        if self.auto_merge_threshold is None:
            return False
        merged = False
        for _ in range(4):
            fresh = [c for c in self.alias_candidates() if c.auto]
            for candidate in fresh:
                if resolve_key(candidate.canonical, self.aliases) != candidate.alias:
                    self._add_merge(candidate.alias, candidate.canonical, "auto", candidate)
            if not fresh:
                break
            merged = True
            self.graph = build_graph(self.extractions, self.aliases)
        return merged

    def _add_merge(
        self, alias: str, canonical: str, source: Literal["auto", "caller"], evidence: AliasCandidate | None
    ) -> Merge:
        token = "m-" + hashlib.sha256(f"{alias}\x1f{canonical}".encode()).hexdigest()[:12]
        merge = Merge(token=token, alias=alias, canonical=canonical, source=source, evidence=evidence)
        self.merges[token] = merge
        return merge

    def _node_key(self, name: str, role: str) -> str:
        key = normalize_name(name) if isinstance(name, str) else ""
        if not key or key not in self.graph:
            raise InvalidRequestError(
                f"{role} {_SHORT.repr(name)} is not an entity of this graph; pick one from alias_candidates() or "
                "graph.nodes (names or keys)"
            )
        return key

    def merge_entities(self, alias: str, canonical: str) -> Merge:
        """Merge the entity ``alias`` into ``canonical`` (names or node keys): from now on every mention of the
        alias counts as the canonical entity. The graph is rebuilt and re-clustered at once; the reports that
        changed are stale until the next ``refresh`` (or ``summarize_stale``). Returns the merge, whose ``token``
        undoes it (``unmerge_entities``). Raises InvalidRequestError for an unknown entity, the same entity
        twice, or a merge that would make a cycle."""
        a, b = self._node_key(alias, "alias"), self._node_key(canonical, "canonical")
        if a == b or resolve_key(b, self.aliases) == a:
            raise InvalidRequestError(f"cannot merge {_SHORT.repr(alias)} into {_SHORT.repr(canonical)}: same entity")
        evidence = next((c for c in self.alias_candidates() if (c.alias, c.canonical) == (a, b)), None)
        self.rejected_merges.discard((a, b))
        merge = self._add_merge(a, b, "caller", evidence)
        self.rebuild_graph()
        return merge

    def unmerge_entities(self, token: str) -> Merge:
        """Undo a merge by its token (or by the alias's name or key). An undone automatic merge is remembered
        and never redone automatically. The graph is rebuilt and re-clustered. Returns the undone merge. Raises
        InvalidRequestError when no merge in force matches."""
        merge = self.merges.get(token) if isinstance(token, str) else None
        if merge is None and isinstance(token, str):
            merge = next((m for m in self.merges.values() if m.alias == normalize_name(token)), None)
        if merge is None:
            raise InvalidRequestError(f"no merge {_SHORT.repr(token)} in force; see graph.merges")
        del self.merges[merge.token]
        if merge.source == "auto":
            self.rejected_merges.add((merge.alias, merge.canonical))
        self.rebuild_graph()
        return merge

    def _fetch(self, memory: Any, chunk_ids: list[str]) -> Iterator[Any]:
        for i in range(0, len(chunk_ids), _FETCH_BATCH):
            yield from memory.get(chunk_ids[i : i + _FETCH_BATCH])

    def _extract(self, chunk: Any) -> ChunkExtraction | None:
        calls_before = getattr(self.extractor, "calls", None)
        try:
            entities, relations = self.extractor.extract(chunk.text)
        except Exception as exc:  # recorded and retried, never dropped: a model may fail in any way
            attempts = getattr(exc, "attempts", None)
            if attempts is None and calls_before is not None:
                attempts = getattr(self.extractor, "calls", calls_before) - calls_before
            self.failures[chunk.chunk_id] = ExtractionFailure(
                chunk_id=chunk.chunk_id,
                content_hash=chunk.content_hash,
                error=f"{type(exc).__name__}: {exc}",
                attempts=int(attempts or 1),
                failed_at=time.time(),
            )
            logger.warning("extraction failed for chunk %s: %s", chunk.chunk_id, exc)
            return None
        return ChunkExtraction(
            chunk_id=chunk.chunk_id,
            content_hash=chunk.content_hash,
            tokens=count_tokens(chunk.text),
            entities=entities,
            relations=relations,
        )

    def _recluster(self) -> None:
        communities = hierarchical_leiden(
            self.graph, max_cluster_size=self.max_cluster_size, seed=self.seed, backend=self.community_backend
        )
        hashes = {cid: e.content_hash for cid, e in self.extractions.items()}
        describe_communities(self.graph, communities, hashes)
        by_fingerprint = {r.fingerprint: r for r in self.reports.values() if r.status == "ok"}
        failed = {r.community_id: r for r in self.reports.values() if r.status == "failed"}
        self.communities = {c.community_id: c for c in communities}
        reports: dict[str, CommunityReport] = {}
        for community in communities:
            report = by_fingerprint.get(community.fingerprint)
            if report is not None:  # same content: keep the report, follow the community's new id
                reports[community.community_id] = report.model_copy(
                    update={"community_id": community.community_id, "level": community.level}
                )
            elif (old := failed.get(community.community_id)) is not None and old.fingerprint == community.fingerprint:
                reports[community.community_id] = old
        self.reports = reports
        self._ranker = None
        self._reports_version = next(self._versions)

    def stale_communities(self) -> list[str]:
        """Ids of the communities whose report is missing, failed or written from other content, sorted."""
        return sorted(
            cid
            for cid, c in self.communities.items()
            if cid not in self.reports
            or self.reports[cid].status != "ok"
            or self.reports[cid].fingerprint != c.fingerprint
        )

    def summarize_stale(self, memory: Any) -> tuple[int, list[str]]:
        """Summarise exactly the stale communities, deepest level first (children before parents).

        Returns (summariser calls, ids of the communities whose report failed). A failed report is kept with
        ``status="failed"`` and the error, and stays stale for the next refresh.
        """
        stale = [self.communities[cid] for cid in self.stale_communities()]
        calls = 0
        failed: list[str] = []
        ordered = sort_for_summarising(stale)
        for community in tqdm(
            ordered, desc="summarising", unit="community", disable=None if self.show_progress else True
        ):
            context = self._context(memory, community)
            calls += 1
            try:
                report = self.summarizer.summarize(context)
            except Exception as exc:  # recorded as a failed report, retried by the next refresh
                logger.warning("report failed for community %s: %s", community.community_id, exc)
                report = CommunityReport(
                    community_id=community.community_id,
                    level=community.level,
                    method="llm" if getattr(self.summarizer, "name", "") == "llm" else "extractive",
                    status="failed",
                    error=f"{type(exc).__name__}: {exc}",
                    fingerprint=community.fingerprint,
                    chunk_ids=list(community.chunk_ids),
                )
                failed.append(community.community_id)
            self.reports[community.community_id] = report
        self._ranker = None
        self._reports_version = next(self._versions)
        return calls, sorted(failed)

    def _context(self, memory: Any, community: Community) -> CommunityContext:
        sub = self.graph.subgraph(community.entities)
        degree = dict(sub.degree(weight="weight"))
        central = sorted(community.entities, key=lambda n: (-degree.get(n, 0.0), n))[:_CONTEXT_ENTITIES]
        support: dict[str, int] = {}
        for n in central:
            for cid in self.graph.nodes[n].get("chunk_ids", []):
                support[cid] = support.get(cid, 0) + 1
        chunk_ids = sorted(support, key=lambda c: (-support[c], c))[:_CONTEXT_CHUNKS]
        chunks = {c.chunk_id: c.text for c in self._fetch(memory, sorted(chunk_ids))}
        children = [self.reports[c] for c in community.children if c in self.reports]
        return CommunityContext(community=community, graph=sub, chunks=chunks, child_reports=children)

    def refresh(self, memory: Any, *, save: bool = True) -> RefreshStats:
        """``sync`` then ``summarize_stale``; saves to ``self.path`` when set and ``save`` is true.

        Summariser calls == number of stale communities (``stats.summarised``).
        """
        return self._update(memory, only=None, save=save)

    def retry_failed(self, memory: Any, *, save: bool = True) -> RefreshStats:
        """Retry only the failed extractions (and re-summarise what they change, plus failed reports)."""
        return self._update(memory, only=set(self.failures), save=save)

    def _update(self, memory: Any, *, only: set[str] | None, save: bool) -> RefreshStats:
        started = time.perf_counter()
        stats = self.sync(memory, only=only)
        stats.summarised, stats.failed_reports = self.summarize_stale(memory)
        if save and self.path is not None:
            self.prepare_search()  # embed new reports now, so the saved index answers without re-embedding
            self.save(self.path)
        stats.seconds = time.perf_counter() - started
        return stats

    # -- queries --------------------------------------------------------------------------------------
    def _get_ranker(self) -> ReportRanker:
        if self._ranker is None:
            embedder = self.embedder
            if embedder is None:
                from hybrid_memory import HashingEmbedder

                logger.info("no embedder given: ranking reports with HashingEmbedder(dim=256)")
                embedder = self.embedder = HashingEmbedder(256)
            if self._report_vectors_for != getattr(embedder, "name", None):
                self._report_vectors = {}
                self._report_vectors_for = getattr(embedder, "name", None)
            live = {r.text() for r in self.reports.values()}
            self._report_vectors = {t: v for t, v in self._report_vectors.items() if t in live}
            self._ranker = ReportRanker(self.reports.values(), embedder, vector_cache=self._report_vectors)
        return self._ranker

    def prepare_search(self) -> int:
        """Build the hybrid index over the reports now (embedding only reports not embedded before) rather than
        at the next ``global_search``. Returns the number of reports indexed."""
        return self._get_ranker().size

    def global_search(
        self,
        question: str,
        *,
        token_budget: int = 2000,
        level: int | None = None,
        max_reports: int | None = None,
        min_dense_score: float = 0.3,
        dedupe_hierarchy: bool = True,
        evidence: bool = True,
        focus: int | None = 2,
        evidence_share: float = 0.2,
        memory: Any = None,
    ) -> GlobalSearchResult:
        """Community reports for a question about the whole memory, best first, fitting ``token_budget`` tokens.

        Reports are ranked by hybrid search (BM25 + dense, the core's default fusion) over their text; irrelevant ones
        (no question
        term and dense score < ``min_dense_score``) are dropped; with ``dedupe_hierarchy`` a report whose ancestor
        or descendant is already chosen is skipped. ``no_relevant_reports`` is true when none is left.
        ``focus`` (default 2): an extractive report is handed over as its title and the ``focus`` findings that
        share most question terms (``search.focus_report``); None hands over whole reports. With ``evidence``
        (default), reports get ``1 - evidence_share`` (0.8) of ``token_budget``, then the chosen reports' source
        sentences that best match the question are appended to their hits (``search.add_evidence``), and the
        budget still left takes more reports; ``token_budget`` covers everything handed over.

        Deleted and replaced chunks are forgotten at once: the reports are checked against ``memory`` (default:
        the memory or view this index was opened, built or last refreshed with), and a report written from a
        chunk that is no longer stored with the text it was extracted from (deleted, or upserted with a new
        text) is not served, nor its source sentences, until :meth:`refresh` rewrites its community without
        that chunk (which also removes the old text from the saved files: ``reports.json``, the extractions).
        The check reads the scope's chunk hashes (``memory.chunk_hashes()``, one indexed SQL read, 220-420 ms at
        100,000 chunks) only when something changed since it last did: its answer is kept with the memory's change
        position, which every committed write moves, this process's or another's on the same folder (a Qdrant
        memory has none and is read at every call), and with the index's own state (a ``refresh``, a merge or a
        reload start again). An index with no memory (``GraphIndex.load(path)`` alone, or a memory since closed)
        serves its reports as saved.
        Raises InvalidRequestError (a ValueError) for a question ``search_text`` would refuse
        (:func:`hybrid_memory.limits.check_question`: blank, longer than ``MAX_SEARCH_TEXT_CHARS``, a NUL
        character), token_budget < 1, a level that is not an int or not one of the graph's
        (:func:`~hybrid_memory.limits.check_graph_level`) or max_reports < 1; the message names the fix.
        """
        check_question(question)  # the rules of search_text: every path refuses what search_memory refuses
        if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
            raise InvalidRequestError(f"token_budget must be an int >= 1 (tokens), got {_SHORT.repr(token_budget)}")
        check_graph_level(level, (c.level for c in self.communities.values()))
        if max_reports is not None and (
            isinstance(max_reports, bool) or not isinstance(max_reports, int) or max_reports < 1
        ):
            raise InvalidRequestError(f"max_reports must be an int >= 1 or None, got {_SHORT.repr(max_reports)}")
        if focus is not None and (isinstance(focus, bool) or not isinstance(focus, int) or focus < 1):
            raise InvalidRequestError(
                f"focus must be an int >= 1 (findings per report) or None, got {_SHORT.repr(focus)}"
            )
        if (
            isinstance(evidence_share, bool)
            or not isinstance(evidence_share, (int, float))
            or not (0.0 <= float(evidence_share) < 1.0)
        ):
            raise InvalidRequestError(f"evidence_share must be a number in [0, 1), got {_SHORT.repr(evidence_share)}")
        chunk_tokens = {cid: e.tokens for cid, e in self.extractions.items()}
        reports = self._current_reports(memory if memory is not None else self._source)
        ranked = [r for r in self._get_ranker().rank(question, level=level) if r.chunk_id in reports]
        parents = {cid: c.parent for cid, c in self.communities.items()} if dedupe_hierarchy else None
        render: Callable[[CommunityReport], tuple[str, list[str]]] | None = None
        if focus is not None:

            def render(report: CommunityReport) -> tuple[str, list[str]]:
                return focus_report(report, question, max_findings=focus)

        share = evidence_share if evidence else 0.0
        hits = select_reports(
            ranked,
            reports,
            token_budget=max(1, int(token_budget * (1.0 - share))),
            parents=parents,
            min_dense_score=min_dense_score,
            max_reports=max_reports,
            render=render,
        )
        if evidence and hits:  # the budget the reports left: their best source sentences for this question
            hits = add_evidence(question, hits, reports, token_budget=token_budget)
        left = token_budget - sum(h.tokens for h in hits)
        if share and left > 0 and (max_reports is None or len(hits) < max_reports):  # unused share: more reports
            more = select_reports(
                ranked,
                reports,
                token_budget=left,
                parents=parents,
                min_dense_score=min_dense_score,
                max_reports=None if max_reports is None else max_reports - len(hits),
                chosen=hits,
                render=render,
            )
            hits = hits + [h.model_copy(update={"rank": len(hits) + i + 1}) for i, h in enumerate(more)]
        smallest = None
        if not hits:  # nothing fits: is nothing relevant, or is the budget too small?
            unbounded = select_reports(
                ranked,
                reports,
                token_budget=10**12,
                parents=None,
                min_dense_score=min_dense_score,
                max_reports=None,
                render=render,
            )
            smallest = min((h.tokens for h in unbounded), default=None)
        return GlobalSearchResult(
            question=question,
            hits=hits,
            no_relevant_reports=not hits and smallest is None,
            smallest_relevant_report_tokens=smallest,
            token_budget=token_budget,
            tokens=account_tokens(hits, chunk_tokens),
        )

    def _current_reports(self, memory: Any) -> Mapping[str, CommunityReport]:
        """The reports every chunk of which is still stored with the text it was extracted from in ``memory``
        (all of them when ``memory`` is None or closed): the ones ``global_search`` may serve.

        Reads ``memory.chunk_hashes()`` only when needed: the answer is kept (:class:`_Served`) with the memory's
        change position (:func:`_position_key`, read first) and reused while neither that position nor the index's
        extractions moved; the kept reports are worked out again from the kept ``gone`` set when only the reports
        changed (a summarise). A position of None (Qdrant) reads the hashes on every call. Thread-safe: versions
        are read before the state they describe and bumped after it changed, and the snapshot is replaced whole.
        """
        if memory is None:
            return self.reports
        extractions_version, reports_version = self._extractions_version, self._reports_version
        try:
            key = _position_key(memory)
            served = self._served
            if key is None or served is None or served.key != key or served.extractions_version != extractions_version:
                current: Mapping[str, str] = memory.chunk_hashes()
                served = _Served(key, extractions_version, self._gone(current))
                fresh = True
            else:
                fresh = False
        except MemoryClosedError:  # the memory it was built with is closed: the index answers as saved
            return self.reports
        if served.reports is not None and served.reports_version == reports_version:
            return served.reports
        kept = self._kept(served.gone)
        if fresh and served.gone:
            logger.info(
                "global_search: %d reports cite %d deleted or replaced chunks and are not served; refresh the "
                "graph to rewrite them",
                len(self.reports) - len(kept),
                len(served.gone),
            )
        if key is not None:
            self._served = _Served(key, extractions_version, served.gone, reports_version, kept)
        return kept

    def _gone(self, current: Mapping[str, str]) -> frozenset[str]:
        """Ids of the extracted or failed chunks that ``current`` (``chunk_hashes()``) no longer holds with the
        text they were extracted from: deleted, or upserted with a new text."""
        gone = {cid for cid, e in self.extractions.items() if current.get(cid) != e.content_hash}
        gone |= {cid for cid, f in self.failures.items() if cid not in current}
        return frozenset(gone)

    def _kept(self, gone: frozenset[str]) -> Mapping[str, CommunityReport]:
        """The reports citing (``chunk_ids``) and quoting (``quoted_chunk_ids``) no chunk of ``gone``; the index's
        own mapping when ``gone`` is empty."""
        if not gone:
            return self.reports
        return {
            cid: r
            for cid, r in self.reports.items()
            if gone.isdisjoint(r.chunk_ids) and gone.isdisjoint(r.quoted_chunk_ids)
        }

    def ask(
        self,
        question: str,
        llm: Any = None,
        *,
        token_budget: int = 2000,
        level: int | None = None,
        max_calls: int = 8,
        max_llm_tokens: int = 32000,
        map_context_tokens: int = 3000,
        reduce_context_tokens: int = 3000,
    ) -> GlobalAnswer:
        """Answer a global question. With ``llm`` (a chat model or ``prompt -> str``): map-reduce over the chosen
        reports under ``max_calls`` calls and ``max_llm_tokens`` prompt tokens (see ``search.map_reduce_answer``).
        Without: the chosen reports' text. Either way, when no report is relevant the answer says so
        (``no_data``) and no model is called."""
        search = self.global_search(question, token_budget=token_budget, level=level)
        chunk_tokens = {cid: e.tokens for cid, e in self.extractions.items()}
        if search.smallest_relevant_report_tokens is not None:
            answer = BUDGET_TOO_SMALL_ANSWER.format(tokens=search.smallest_relevant_report_tokens, budget=token_budget)
            return GlobalAnswer(question=question, answer=answer, search=search, tokens=search.tokens)
        if search.no_relevant_reports:
            return GlobalAnswer(
                question=question, answer=NO_DATA_ANSWER, no_data=True, search=search, tokens=search.tokens
            )
        if llm is None:
            answer = "\n\n".join(f"[{h.community_id}] {h.text}" for h in search.hits)
            return GlobalAnswer(question=question, answer=answer, search=search, tokens=search.tokens)
        return map_reduce_answer(
            search,
            as_llm_callable(llm),
            chunk_tokens,
            max_calls=max_calls,
            max_llm_tokens=max_llm_tokens,
            map_context_tokens=map_context_tokens,
            reduce_context_tokens=reduce_context_tokens,
        )

    # -- inspection -----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts: entities, edges, communities per level, coverage (share of entities in a level-0
        community, 0-1), reports ok/failed, failed extractions."""
        per_level: dict[int, int] = {}
        for c in self.communities.values():
            per_level[c.level] = per_level.get(c.level, 0) + 1
        covered = {n for c in self.communities.values() if c.level == 0 for n in c.entities}
        n = self.graph.number_of_nodes()
        return {
            "chunks": len(self.extractions),
            "entities": n,
            "edges": self.graph.number_of_edges(),
            "communities_per_level": dict(sorted(per_level.items())),
            "coverage": (len(covered & set(self.graph.nodes)) / n) if n else 1.0,
            "reports_ok": sum(r.status == "ok" for r in self.reports.values()),
            "reports_failed": sum(r.status == "failed" for r in self.reports.values()),
            "failed_extractions": len(self.failures),
            "stale": len(self.stale_communities()),
        }

    def rebuild_graph(self) -> None:
        """Recompute the graph from the saved extractions (the source of truth) and re-cluster."""
        self.graph = build_graph(self.extractions, self.aliases)
        self._recluster()

    # -- persistence ----------------------------------------------------------------------------------
    def to_state(self) -> GraphState:
        """Everything :meth:`save` writes, as a :class:`~hybrid_memory.graph.store.GraphState` (the store reads
        this, never the index's fields). The containers are the index's own, not copies."""
        from .store import GraphState

        return GraphState(
            scope=self.scope,
            extractions=self.extractions,
            failures=self.failures,
            communities=self.communities,
            reports=self.reports,
            merges=self.merges,
            rejected_merges=self.rejected_merges,
            graph=self.graph,
            parameters={
                "max_cluster_size": self.max_cluster_size,
                "seed": self.seed,
                "community_backend": self.community_backend,
                "auto_merge_threshold": self.auto_merge_threshold,
                "extractor": getattr(self.extractor, "name", type(self.extractor).__name__),
                "summarizer": getattr(self.summarizer, "name", type(self.summarizer).__name__),
            },
            report_vectors=self._report_vectors,
            report_vectors_for=self._report_vectors_for,
        )

    def restore(self, state: GraphState) -> None:
        """Take the saved contents of ``state`` (from :func:`~hybrid_memory.graph.store.load_state`): scope,
        extractions, failures, communities, reports, merges, graph and the report-vector cache. The constructor's
        parameters stay as constructed."""
        self.scope = dict(state.scope)
        self.extractions, self.failures = state.extractions, state.failures
        self.communities, self.reports = state.communities, state.reports
        self.merges, self.rejected_merges = state.merges, state.rejected_merges
        self.graph = state.graph
        self._report_vectors, self._report_vectors_for = state.report_vectors, state.report_vectors_for
        self._ranker = None
        self._extractions_version = next(self._versions)
        self._reports_version = next(self._versions)
        self._served = None

    def save(self, path: str | Path | None = None) -> Path:
        """Write the index to ``path`` (default ``self.path``) as JSON + GraphML (see ``store.save_state``).
        Raises GraphStateError when there is no path."""
        from .store import save_state

        target = Path(path) if path is not None else self.path
        if target is None:
            raise GraphStateError("no path to save to: pass save(path) or build from a persisted memory")
        save_state(self.to_state(), target)
        return target

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> GraphIndex:
        """Reopen an index written by ``save``. Keyword arguments as for the constructor (extractor, summarizer,
        embedder); max_cluster_size, seed, community backend and auto-merge threshold come from the manifest
        unless given. Raises GraphFormatError for a missing manifest, another format version or a damaged file."""
        from .store import load_state, read_manifest, saved_parameters

        directory = Path(path)
        manifest = read_manifest(directory)
        for key, value in saved_parameters(manifest).items():
            kwargs.setdefault(key, value)
        kwargs.setdefault("path", directory)
        if kwargs.get("extractor") is None and manifest.get("extractor") == "offline-rules-technical":
            kwargs["extractor"] = OfflineExtractor(proper_nouns=False)
        index = cls(**kwargs)
        for role in ("extractor", "summarizer"):
            current = getattr(getattr(index, role), "name", "")
            if manifest.get(role) and manifest[role] != current:
                logger.warning(
                    "graph at %s was built with %s %r; refreshing it with %r mixes both",
                    directory,
                    role,
                    manifest[role],
                    current,
                )
        index.restore(load_state(directory, manifest, getattr(index.embedder, "name", None)))
        return index

    def __repr__(self) -> str:
        return (
            f"GraphIndex(entities={self.graph.number_of_nodes()}, edges={self.graph.number_of_edges()}, "
            f"communities={len(self.communities)}, reports={len(self.reports)}, failures={len(self.failures)})"
        )
