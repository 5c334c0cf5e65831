"""BM25 engine: a bm25s index over the bulk of the corpus plus a small delta segment for recent adds.

bm25s (Lù 2024, "BM25S: Orders of magnitude faster lexical search via eager sparse scoring") precomputes
every (document, term) score, so it cannot take one more document without a rebuild. Agents add memories
one at a time, so new documents go to an in-memory *delta* segment, scored at query time with the same
Lucene BM25 formula (Kamphuis et al., ECIR 2020)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d, q) = Σ_{t in q} idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))

Both segments are scored with one set of statistics: N and df(t) count main + delta documents, and avgdl is
the main segment's (the delta's own while there is no main segment). bm25s stores idf_main(t) · tfc(t, d), so
the main segment's per-term scores are rescaled by idf(t) / idf_main(t) at query time; a chunk therefore
scores the same whether it sits in the main segment or arrived a second ago. Removed documents are masked out
of the main segment and still count in N and df until the next merge, as in Lucene. When the delta plus the
removed documents exceed ``max(compact_min, compact_ratio × main size)``, everything is rebuilt into a
new main segment (compaction, as in Lucene's segment merges), which brings avgdl and the removed documents up
to date: until then scores equal a full rebuild's up to the drift of avgdl. Rows that bm25s pads results with
(score 0) never leave this module.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..._bm25s import import_bm25s
from ..._checksums import file_checksums, verify_files
from ...tokenizer import TechnicalTokenizer
from .. import calibration
from ..rowset import RowSet, as_rowset, id_bounds
from .token_cache import TokenCache

__all__ = [
    "ALLOWED_ROW_COST",
    "HOLDERS_MAX",
    "HOLDS_ALL_COUNT_MAX",
    "PREPARE_DF_MAX",
    "TIE_PREFIX",
    "UNION_ENTRY_COST",
    "BM25Index",
]

logger = logging.getLogger(__name__)

_FORMAT_VERSION = 2

HOLDERS_MAX = 1024
""":meth:`BM25Index.prepare_exact_matches` keeps the documents holding every query token as a set when at most
this many do (a query of common words only is answered per candidate instead)."""

PREPARE_DF_MAX = 4096
""":meth:`BM25Index.prepare_exact_matches` intersects the query's columns from the rarest token's documents when
it has at most this many; above, the per-candidate test (:meth:`BM25Index.holds_all_terms`) is left to the
fusion step. Measured in the search loop at 100k chunks: the intersection took 0.1 ms median in the sparse
engine's thread, the per-candidate test 0.12-0.16 ms in the fusion step."""

HOLDS_ALL_COUNT_MAX = 65_536
"""``holds_all_terms`` counts tokens with one ``bincount`` (O(column entries + main documents), about a ns an
entry) when the query's main-segment columns and the segment hold at most this many entries together; above,
it binary-searches each term's column for the candidates (O(terms x candidates x log df), a few µs of numpy calls
per term), which wins on large segments and common terms."""


UNION_ENTRY_COST = 64
"""A query whose terms' columns hold few entries is scored over those entries only (:class:`_MainHits`: the distinct
documents among them, by ``np.unique``, summed with ``bincount`` over that inverse) when ``entries x UNION_ENTRY_COST``
is at most the entries a pass over every main document touches (main documents + column entries); else one
``bincount`` over every main document. Measured on 3-token queries: at 100k chunks (859 entries) 0.17 ms against
0.27 ms for the full pass, at 1M (8,656 entries) 2.1 ms against 5.2 ms, about 200-240 ns an entry (the sort and the
random reads of the alive flags and ids) against 2.4 ns per main document: a ratio of 85-100, rounded down."""

TIE_PREFIX = 32
"""When BM25's candidate cut falls inside a tie, :meth:`BM25Index.search` orders this many times ``k`` documents at
once and keeps them for the query: the searcher asks again at 2, 4, ... x the depth up to its tie limit of 512 hits
(``hybrid_memory.search.searcher.TIE_DEPTH_LIMIT``, 5 more rounds from a depth of 21), which then read that prefix
instead
of partitioning every candidate again (at 1M chunks each round was 10-15 ms for a term every chunk holds)."""

ALLOWED_ROW_COST = 6
"""A filtered search scores only the allowed documents (:meth:`BM25Index._allowed_state`: a binary search of each
query term's column per allowed main document) when ``|allowed| x terms x ALLOWED_ROW_COST`` is at most the cost
of the cheaper pass over the query (every main document plus the terms' column entries, or the entries times
:data:`UNION_ENTRY_COST`); else that pass scores and the allowed ones are kept. Measured at 100k chunks (3-token
queries): the full pass 0.24-0.34 ms at any
filter, scoring the allowed ones 0.08 ms at 11 of them, 0.16 ms at 1,000, 0.29 at 3,000 and 0.69 at 10,000, about
13 ns per (document, term) against 2.4 ns per main document for the full pass: a ratio of 5.4, rounded up."""


class BM25Index:
    """BM25 over documents keyed by int64 ids (the store's rowids).

    Args:
        tokenizer: the tokenizer for documents and queries.
        k1: term-frequency saturation (default 1.5, bm25s's default; Robertson and Zaragoza 2009 give 1.2-2.0).
        b: length normalisation in [0, 1] (default 0.75, Robertson and Zaragoza 2009).
        compact_min: compaction never runs before the delta + removed documents reach this many.
        compact_ratio: ... or this fraction of the main segment, whichever is larger.
        bulk_delta_max: during a bulk load, the delta is merged once it holds this many documents (default
            100,000: ~0.5 GB of delta postings), see :meth:`needs_compaction`.

    Thread-safe: searches and writes take a lock; searches are read-only on numpy arrays.
    """

    def __init__(
        self,
        tokenizer: TechnicalTokenizer | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        compact_min: int = 500,
        compact_ratio: float = 0.1,
        bulk_delta_max: int = 100_000,
    ) -> None:
        if not (k1 >= 0 and math.isfinite(k1)):
            raise ValueError(f"k1 must be a finite number >= 0, got {k1}")
        if not 0 <= b <= 1:
            raise ValueError(f"b must be in [0, 1], got {b}")
        self.tokenizer = tokenizer or TechnicalTokenizer()
        self.k1 = float(k1)
        self.b = float(b)
        self.compact_min = compact_min
        self.compact_ratio = compact_ratio
        self.bulk_delta_max = bulk_delta_max
        self._lock = threading.RLock()
        self._vocab: dict[str, int] = {"": 0}  # token -> id; "" is bm25s's empty-document token
        self._tokens = TokenCache()  # doc id -> int32 token ids, kept so compaction never re-tokenizes
        self._compacting = False
        self._thread: threading.Thread | None = None
        self._generation = 0  # bumped by every change, so per-query score caches know when they are stale
        self._reset_main()
        self._reset_delta()

    # -- state --------------------------------------------------------------------------------------
    def _reset_main(self) -> None:
        self._generation += 1
        self._main: Any = None  # bm25s.BM25 | None (bm25s ships no types)
        self._main_token: str | None = None  # names the saved bm25s files that hold exactly this main segment
        self._main_crcs: tuple[str | None, dict[str, list[int]]] = (None, {})  # (token, its bm25s/ files' CRC-32s)
        self._main_ids = np.zeros(0, dtype=np.int64)
        self._main_alive = np.zeros(0, dtype=np.float32)
        self._main_df: np.ndarray = np.zeros(0, dtype=np.int64)
        self._main_total_len = 0.0
        self._main_dead = 0
        self._main_pos_of: np.ndarray | None = None

    def _index_main(self) -> None:
        """Build the lookup id -> position of that live document in the main segment, an int64 array over the
        id range and one entry past it; an id that is not a live main document points one past the segment,
        at the entry the score arrays of :meth:`_score_main` hold ``nan`` in, when the ids are dense enough for it (the
        store's rowids are: at most 4 ids
        per main document); else None, and lookups binary-search the sorted ids. Caller holds the lock, after
        setting ``_main_ids`` and ``_main_alive``."""
        ids = self._main_ids
        self._main_pos_of = None
        if len(ids) and ids[0] >= 0 and ids[-1] < 4 * len(ids) + 1024:
            # one entry past the last main id, a miss: where a gather clipping larger ids lands
            pos_of = np.full(int(ids[-1]) + 2, len(ids), dtype=np.int64)
            live = np.flatnonzero(self._main_alive > 0)
            pos_of[ids[live]] = live
            self._main_pos_of = pos_of

    def _reset_delta(self) -> None:
        self._generation += 1
        self._delta_tf: dict[int, Counter] = {}
        self._delta_len: dict[int, int] = {}
        self._postings: dict[str, dict[int, int]] = {}
        self._delta_total_len = 0

    def __len__(self) -> int:
        """Number of live documents."""
        return int(self._main_alive.sum()) + len(self._delta_tf)

    @property
    def avgdl(self) -> float:
        """The average document length, in tokens, BM25's length normalisation divides by (Robertson and
        Zaragoza 2009): the main segment's mean (every document scores with it, delta ones too), else the
        delta's; 1.0 for an empty index. A Qdrant copy built with this ``avgdl`` ranks as this index does."""
        n_main = len(self._main_ids)
        if n_main:
            avgdl = self._main_total_len / n_main
        else:
            avgdl = self._delta_total_len / max(len(self._delta_tf), 1)
        return avgdl if avgdl > 0 else 1.0

    def ids(self) -> np.ndarray:
        """Live document ids, int64 (n,), ascending."""
        with self._lock:
            live = self._main_ids[self._main_alive > 0]
            return np.sort(np.concatenate([live, np.fromiter(self._delta_tf, dtype=np.int64)]))

    def _encode(self, tokens: list[str]) -> np.ndarray:
        vocab = self._vocab
        return np.fromiter((vocab.setdefault(t, len(vocab)) for t in tokens), dtype=np.int32, count=len(tokens))

    @property
    def delta_size(self) -> int:
        """Documents in the delta segment."""
        return len(self._delta_tf)

    # -- writes -------------------------------------------------------------------------------------
    def build(self, ids: Sequence[int] | np.ndarray, texts: Sequence[str], *, show_progress: bool = False) -> None:
        """Replace everything by a main segment over ``texts`` (ids int64, one per text). Synchronous."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        tokens = self.tokenizer.tokenize_many(texts)
        self.wait()
        with self._lock:
            self._reset_main()
            self._reset_delta()
            self._tokens = TokenCache()
            for i, t in zip(ids, tokens, strict=True):
                self._tokens[int(i)] = self._encode(t)
            snapshot = np.sort(ids)
            corpus = [self._tokens[int(i)] for i in snapshot]
            segment = self._make_segment(corpus, dict(self._vocab), show_progress)
            self._install(snapshot, corpus, segment)

    def _make_segment(self, corpus: list[np.ndarray], vocab: dict[str, int], show_progress: bool) -> Any:
        """A bm25s index over int32 token-id arrays; pure (touches no state), so it can run without the lock.

        Built by :func:`~hybrid_memory.engines.bm25.build.build_bm25s`: the matrix ``bm25s.BM25.index`` would build,
        bit for bit, in numpy passes instead of a Python loop over documents (1M documents: seconds and one
        token array instead of minutes and lists of Python ints). ``show_progress`` is accepted for the
        callers' signature; the build has no per-document loop to report on.
        """
        from .build import build_bm25s

        if not corpus:
            return None
        # vocab is a copy: later adds grow self._vocab, and bm25s's vocabulary must match its matrix
        return build_bm25s(corpus, vocab, k1=self.k1, b=self.b)

    def _install(self, snapshot: np.ndarray, corpus: list[np.ndarray], segment: Any) -> None:
        """Swap in a main segment built over ``snapshot`` (sorted ids); caller holds the lock.

        Documents removed since the snapshot are masked; documents added since stay in the delta; delta
        documents that the snapshot covers leave the delta.
        """
        # live = what the current segments serve, plus documents whose tokens are cached (remove() drops both)
        live_now = np.union1d(self.ids(), np.fromiter(self._tokens, dtype=np.int64, count=len(self._tokens)))
        covered = set(snapshot.tolist())
        for doc_id in [d for d in self._delta_tf if d in covered]:
            self._drop_from_delta(doc_id)
        self._reset_main()
        if segment is None:
            return
        self._main = segment
        self._main_ids = snapshot
        self._main_alive = np.isin(snapshot, live_now).astype(np.float32)
        self._main_dead = int((self._main_alive == 0).sum())
        self._index_main()
        self._main_df = np.diff(np.asarray(segment.scores["indptr"], dtype=np.int64))
        self._main_total_len = float(sum(len(doc) for doc in corpus))
        logger.debug("installed BM25 main segment over %d documents", len(snapshot))

    def add(self, ids: Sequence[int] | np.ndarray, texts: Sequence[str]) -> None:
        """Add documents to the delta segment (ids must be new)."""
        tokens = self.tokenizer.tokenize_many(texts)
        with self._lock:
            self._generation += 1
            for doc_id, doc_tokens in zip(ids, tokens, strict=True):
                doc_id = int(doc_id)
                self._tokens[doc_id] = self._encode(doc_tokens)
                self._add_to_delta(doc_id, doc_tokens)

    def _add_to_delta(self, doc_id: int, doc_tokens: list[str]) -> None:
        tf = Counter(doc_tokens)
        self._delta_tf[doc_id] = tf
        self._delta_len[doc_id] = len(doc_tokens)
        self._delta_total_len += len(doc_tokens)
        for token, count in tf.items():
            self._postings.setdefault(token, {})[doc_id] = count

    def remove(self, ids: Sequence[int] | np.ndarray) -> None:
        """Remove documents (unknown ids are ignored)."""
        with self._lock:
            self._generation += 1
            for doc_id in (int(i) for i in ids):
                self._tokens.pop(doc_id, None)
                if self._drop_from_delta(doc_id):
                    continue
                pos = int(np.searchsorted(self._main_ids, doc_id))
                if pos < len(self._main_ids) and self._main_ids[pos] == doc_id and self._main_alive[pos] > 0:
                    self._main_alive[pos] = 0.0
                    self._main_dead += 1
                    if self._main_pos_of is not None:
                        self._main_pos_of[doc_id] = len(self._main_ids)

    def _drop_from_delta(self, doc_id: int) -> bool:
        tf = self._delta_tf.pop(doc_id, None)
        if tf is None:
            return False
        self._delta_total_len -= self._delta_len.pop(doc_id)
        for token in tf:
            posting = self._postings[token]
            del posting[doc_id]
            if not posting:
                del self._postings[token]
        return True

    def needs_compaction(self, *, bulk: bool = False) -> bool:
        """True when the delta and removed documents outgrow ``max(compact_min, compact_ratio × main)``.

        Args:
            bulk: the policy for a bulk load, which bounds the delta's memory instead (its per-document
                ``Counter`` and postings cost about 5 KB a document in CPython): True once the delta holds
                ``max(compact_min, min(main size, bulk_delta_max))`` documents. The main segment so doubles
                while it is small, then grows by ``bulk_delta_max`` per merge.
        """
        if bulk:
            return len(self._delta_tf) >= max(self.compact_min, min(len(self._main_ids), self.bulk_delta_max))
        pending = len(self._delta_tf) + self._main_dead
        return pending >= max(self.compact_min, self.compact_ratio * len(self._main_ids))

    def compact(
        self,
        load_texts: Callable[[np.ndarray], list[str]],
        *,
        show_progress: bool = False,
        background: bool = False,
    ) -> bool:
        """Merge the delta and drop removed documents: one new main segment over the live documents.

        The bm25s build runs without the lock, so searches and writes go on meanwhile (they see the old
        segments); the new segment is swapped in atomically, keeping what changed during the build.
        Tokens are cached per document: only documents of a segment loaded from disk are tokenized again,
        from ``load_texts(ids) -> texts`` (which may raise KeyError for an id another process deleted meanwhile:
        such ids are left out of the new segment, see :func:`_present_texts`).

        Args:
            background: run in a thread and return at once (see :meth:`wait`). Not a daemon thread: the
                interpreter waits for it at exit, as :meth:`HybridMemory.close` does (a daemon thread still in
                bm25s's C++ code while the process ran its exit handlers aborted it, "terminate called without an
                active exception", about one exit in twenty on a loaded machine when a memory was not closed).

        Returns:
            False when a compaction is already running (nothing started), else True.
        """
        with self._lock:
            if self._compacting:
                return False
            self._compacting = True
        if not background:
            self._compact(load_texts, show_progress)
            return True
        self._thread = threading.Thread(
            target=self._compact, args=(load_texts, show_progress), name="bm25-compaction", daemon=False
        )
        self._thread.start()
        return True

    def _compact(self, load_texts: Callable[[np.ndarray], list[str]], show_progress: bool) -> None:
        try:
            with self._lock:
                snapshot = self.ids()
                unknown = np.array([i for i in snapshot.tolist() if i not in self._tokens], dtype=np.int64)
            extra: dict[int, list[str]] = {}
            if len(unknown):
                present = _present_texts(load_texts, unknown)
                extra = dict(zip(present, self.tokenizer.tokenize_many(list(present.values())), strict=True))
            with self._lock:
                for doc_id, tokens in extra.items():
                    self._tokens[doc_id] = self._encode(tokens)
                missing = [i for i in snapshot.tolist() if i not in self._tokens]  # removed meanwhile
                if missing:
                    snapshot = np.setdiff1d(snapshot, np.array(missing, dtype=np.int64))
                corpus = [self._tokens[i] for i in snapshot.tolist()]
                vocab = dict(self._vocab)
                logger.info("compacting BM25 index: %d documents (%d in delta)", len(snapshot), len(self._delta_tf))
            segment = self._make_segment(corpus, vocab, show_progress)
            with self._lock:
                self._install(snapshot, corpus, segment)
        except Exception:  # pragma: no cover - logged; the old segments stay in service
            logger.exception("BM25 compaction failed; the index keeps serving from its current segments")
        finally:
            with self._lock:
                self._compacting = False

    def wait(self) -> None:
        """Block until a background compaction (if any) has finished."""
        thread = self._thread
        if thread is not None:
            thread.join()

    # -- search -------------------------------------------------------------------------------------
    def _idf(self, n_docs: int, df: int) -> float:
        """Lucene idf (Kamphuis et al. 2020; bm25s ``_score_idf_lucene``): ln(1 + (N - df + 0.5) / (df + 0.5))."""
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    def _terms(self, query: str, cache: dict | None) -> _QueryTerms:
        """The query's analysis (tokens, distinct tokens, identifiers, content words), computed once per query
        and kept in ``cache`` (a :class:`~hybrid_memory.search.engine.Query`'s cache): the search, the exact
        re-scoring and the exact-match guard all read it. Depends on the text and the tokenizer only."""
        if cache is not None:
            hit = cache.get("bm25_terms")
            if hit is not None and hit.text == query:
                return hit
        terms = _QueryTerms(query, self.tokenizer)
        if cache is not None:
            cache["bm25_terms"] = terms
        return terms

    def _spans(self, tokens: list[str], cache: dict | None) -> dict[str, tuple[int, int]]:
        """token -> (begin, end) of its column in the main segment's CSC score matrix (bm25s's ``indptr``) for
        each of ``tokens``, (0, 0) for a token the main segment lacks ({} without a main segment); kept in
        ``cache`` for the same main segment, so the exact-match guard's lookups cost a dict read per token
        after the search's. Caller holds the lock."""
        main = self._main
        if main is None:
            return {}
        held = cache.get("bm25_spans") if cache is not None else None
        if held is None or held[0] is not main:
            held = (main, {})
            if cache is not None:
                cache["bm25_spans"] = held
        spans: dict[str, tuple[int, int]] = held[1]
        missing = [t for t in tokens if t not in spans]
        if missing:
            indptr, vocab = main.scores["indptr"], main.vocab_dict
            for token in missing:
                token_id = vocab.get(token)
                spans[token] = (0, 0) if token_id is None else (int(indptr[token_id]), int(indptr[token_id + 1]))
        return spans

    def _main_positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions of the int64 ``ids`` in the main segment, bool: which are live main documents there);
        positions of the others are meaningless. Caller holds the lock and checked the segment is not empty."""
        pos, held = _find(self._main_ids, ids)
        return pos, held & (self._main_alive.take(pos, mode="clip") > 0)

    def _state(self, tokens: list[str], cache: dict | None) -> tuple[np.ndarray | _MainHits | None, dict[int, float]]:
        """Scores of every document for ``tokens`` at the global statistics; caller holds the lock.

        Returns (main, delta): the main segment's scores (see :meth:`_score_main`), or None when no token is in
        the main segment, and {delta doc id: score > 0}. Kept in ``cache`` (a
        :class:`~hybrid_memory.search.engine.Query`'s cache), so
        :meth:`score` right after :meth:`search` costs a gather, as long as no write came in between.
        """
        key = (self._generation, tuple(tokens))
        if cache is not None:
            hit = cache.get("bm25")
            if hit is not None and hit[0] == key:
                return hit[1], hit[2]
        main = self._score_main(tokens, cache)
        delta = self._score_delta(tokens) if self._delta_tf else {}
        if cache is not None:
            cache["bm25"] = (key, main, delta)
        return main, delta

    def _columns(self, tokens: list[str], cache: dict | None) -> list[tuple[int, int, float]]:
        """(begin, end, weight) of each of ``tokens`` (repeats kept) that the main segment holds: its column span in
        bm25s's CSC score matrix and the factor idf(t) / idf_main(t) that rescales the column to the statistics of
        main + delta (see :meth:`_score_main`); kept in ``cache`` for the same index state, so a filtered search
        that weighs the allowed-only path against a pass computes them once. Caller holds the lock and checked
        there is a main segment."""
        key = (self._generation, tuple(tokens))
        held = cache.get("bm25_columns") if cache is not None else None
        if held is not None and held[0] == key:
            return held[1]
        n_main = len(self._main_ids)
        n_all = n_main + len(self._delta_tf)
        spans = self._spans(tokens, cache)
        out = []
        for token in tokens:
            begin, end = spans[token]
            if begin == end:
                continue
            df_main = end - begin
            df = df_main + len(self._postings.get(token, ()))
            out.append((begin, end, self._idf(n_all, df) / self._idf(n_main, df_main)))
        if cache is not None:
            cache["bm25_columns"] = (key, out)
        return out

    def _pass_cost(self, columns: list[tuple[int, int, float]]) -> tuple[int, bool]:
        """(cost, union) of scoring the main segment for ``columns``: the cheaper of one pass over every main
        document (main documents + column entries) and the union of the columns only (entries x
        :data:`UNION_ENTRY_COST`), in units of one main document of the full pass; ``union`` says which."""
        entries = sum(end - begin for begin, end, _ in columns)
        full = len(self._main_ids) + entries
        union = entries * UNION_ENTRY_COST
        return (union, True) if union <= full else (full, False)

    def _score_main(self, tokens: list[str], cache: dict | None = None) -> np.ndarray | _MainHits | None:
        """BM25 of the main-segment documents, rescaled to the statistics of main + delta (``cache``: a per-query
        dict, where the terms' column spans are kept, :meth:`_spans`).

        bm25s stores, for each (term t, document d), idf_main(t) x tfc(t, d) (Lucene BM25 factors that way;
        Kamphuis et al. 2020), with idf_main over the main segment alone. A term's column (bm25s's CSC score
        matrix) is multiplied by idf(t) / idf_main(t), idf over all N = main + delta documents and
        df = df_main + df_delta, so a main document scores what it would score next to the delta documents,
        which are scored with the same idf and the same length normalisation (the main segment's avgdl).
        A query token repeated counts once per occurrence, as in bm25s. Caller holds the lock.

        Returns None when no token is in the main segment; else, as the cheaper of the two (see
        :data:`UNION_ENTRY_COST`), float64 (len(main ids) + 1,) over every main position (the last entry nan,
        see :meth:`_index_main`), or :class:`_MainHits` of the documents holding a query term. Both sum each
        document's terms in query order in float64 (``bincount``), so their scores are bit-identical.
        """
        main = self._main
        if main is None or not tokens:
            return None
        n_main = len(self._main_ids)
        data, indices = main.scores["data"], main.scores["indices"]
        columns = self._columns(tokens, cache)
        if not columns:
            return None
        # unrounded float64: readers round what they gather to float32 (:func:`_float32`), like bm25s's own
        # scores and the delta's, so equal documents compare equal across segments; rounding only the
        # gathered values saves two passes over every main document per query (milliseconds at 1M)
        positions = np.concatenate([indices[begin:end] for begin, end, _ in columns])
        weights = np.concatenate([data[begin:end].astype(np.float64) * weight for begin, end, weight in columns])
        if self._pass_cost(columns)[1]:
            held, inverse = np.unique(positions, return_inverse=True)
            return _MainHits(held.astype(np.int64), np.bincount(inverse, weights=weights, minlength=len(held)))
        # one entry more, nan: where the id lookup (_index_main) sends ids that are not live main documents
        out = np.bincount(positions, weights=weights, minlength=n_main + 1)
        out[n_main] = np.nan
        return out

    def _allowed_state(self, tokens: list[str], allowed: RowSet | None, cache: dict | None) -> _AllowedScores | None:
        """Scores of the allowed documents only, when that is cheaper than scoring every main document (see
        :data:`ALLOWED_ROW_COST`); None otherwise (and when there is no filter, no main segment, or the full
        scores of this query are already at hand). Caller holds the lock.

        Returns :class:`_AllowedScores`, kept in ``cache`` for the same ``allowed`` object, so :meth:`score` of the
        other engine's candidates (allowed ones) is a gather, and the searcher's deeper asks at a tied cut reuse
        the candidates (and :meth:`_top`'s prefix, kept for the same candidate array).

        Each term's column lists its documents ascending (:mod:`hybrid_memory.engines.bm25.build`), so an allowed
        document's entry is found by binary search; the terms are added in query order in float64, the
        operations of :meth:`_score_main`'s ``bincount``, so the scores are bit-identical to the full pass.
        """
        main = self._main
        if allowed is None or main is None or not tokens:
            return None
        key = (self._generation, tuple(tokens))
        if cache is not None:
            full = cache.get("bm25")
            if full is not None and full[0] == key:
                return None
            held = cache.get("bm25_allowed")
            if held is not None and held[0] == key and held[1] is allowed:
                return held[2]
        columns = self._columns(tokens, cache)
        n_main = len(self._main_ids)
        if not columns or len(allowed) * len(columns) * ALLOWED_ROW_COST > self._pass_cost(columns)[0]:
            return None
        ids = allowed.ids
        if len(ids) and ids[0] < 0:
            return None  # not a store's rowids: the full pass handles any id
        if self._main_pos_of is not None:
            pos = self._main_pos_of.take(ids, mode="clip")  # misses and dead documents point past the segment
            live = pos < n_main
        else:
            pos, live = self._main_positions(ids)
        if not live.all():
            ids, pos = ids[live], pos[live]
        data, indices = main.scores["data"], main.scores["indices"]
        scores = np.zeros(len(pos))
        for begin, end, weight in columns:
            at, found = _find(indices[begin:end], pos)
            scores[found] += data[begin + at[found]].astype(np.float64) * weight
        hit = scores > 0
        state = _AllowedScores(
            ids, scores, self._score_delta(tokens) if self._delta_tf else {}, ids[hit], _float32(scores[hit])
        )
        if cache is not None:
            cache["bm25_allowed"] = (key, allowed, state)
        return state

    @staticmethod
    def _top(ids: np.ndarray, scores: np.ndarray, k: int, cache: dict | None) -> np.ndarray:
        """Positions in ``ids`` / ``scores`` (the main candidates: int64 ids ascending, float64 scores, more than
        ``k``) of the top ``k`` by score descending then id ascending.

        The k-th best score by ``np.partition``, then the documents above it and, of those tied with it, the ones
        of the smallest ids (``ids`` is ascending): a tie at the cut costs two passes, not a sort of the tie
        (a query term every chunk holds, such as the ``inc`` of ``INC-0012345``, ties hundreds of thousands of
        chunks). A tie makes the searcher ask again with twice the depth, up to its tie limit
        (``HybridSearcher._run``); so the first tie orders :data:`TIE_PREFIX` x ``k`` documents at once, kept in
        ``cache`` for the same ``ids`` array, and the deeper asks read that prefix.
        """
        held = cache.get("bm25_top") if cache is not None else None
        if held is not None and held[0] is ids and (len(held[1]) >= k or len(held[1]) == len(ids)):
            return held[1][:k]
        n = len(scores)
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        want = k
        if len(above) + len(tied) > k and cache is not None:  # a tie at the cut: the deeper asks will follow
            want = min(n, k * TIE_PREFIX)
            if want > k:
                kth = np.partition(scores, n - want)[n - want]
                above = np.flatnonzero(scores > kth)
                tied = np.flatnonzero(scores == kth)
        chosen = np.concatenate([above, tied[: want - len(above)]])
        chosen = chosen[np.lexsort((ids[chosen], -scores[chosen]))]
        if cache is not None:
            cache["bm25_top"] = (ids, chosen)
        return chosen[:k]

    def _gather_main(self, main: np.ndarray | _MainHits, positions: np.ndarray) -> np.ndarray:
        """float64 (len(positions),): the unrounded scores at int64 main ``positions`` (0 .. len(main ids); the last,
        one past the segment, is where the id lookup sends misses: nan), from either form of :meth:`_score_main`.
        Caller holds the lock."""
        if not isinstance(main, _MainHits):
            return main.take(positions)
        n_main = len(self._main_ids)
        out = np.where(positions < n_main, 0.0, np.nan)  # a live document without a query term scores 0
        at, found = _find(main.positions, positions)
        out[found] = main.scores[at[found]]
        return out

    def _main_candidates(
        self, main: np.ndarray | _MainHits, allowed: RowSet | None, cache: dict | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64 (m,), scores float64 (m,) rounded to float32) of the live main documents among
        ``allowed`` scoring > 0, for the score array ``main``; kept in ``cache`` for the same ``main`` and
        ``allowed`` objects, so the searcher's deeper searches at a tied cut (``HybridSearcher._run``) cost a
        partition, not passes over every document again. Caller holds the lock."""
        if cache is not None:
            held = cache.get("bm25_main_candidates")
            if held is not None and held[0] is main and held[1] is allowed:
                return held[2], held[3]
        if isinstance(main, _MainHits):
            scored = main.scores > 0
            hit, values = main.positions[scored], main.scores[scored]
            live = self._main_alive[hit] > 0
            hit, values = hit[live], values[live]
        else:
            hit = np.flatnonzero(main > 0)
            hit = hit[self._main_alive[hit] > 0]
            values = main[hit]
        ids = self._main_ids[hit]
        if allowed is not None:
            keep = allowed.contains(ids)
            ids, values = ids[keep], values[keep]
        scores = _float32(values)
        if cache is not None:
            cache["bm25_main_candidates"] = (main, allowed, ids, scores)
        return ids, scores

    def search(
        self, query: str, k: int, allowed: RowSet | np.ndarray | None = None, *, cache: dict | None = None
    ) -> list[tuple[int, float]]:
        """Top ``k`` documents for the query among ``allowed`` ids (None: all).

        Args:
            query: query text (tokenized like the documents).
            k: number of results wanted, >= 1.
            allowed: the ids results must belong to (the resolved metadata filter, a RowSet or int64 ids); None for all.
            cache: a per-query dict (``Query.cache``) keeping the score arrays for a later :meth:`score`.

        Returns:
            ``(id, score)`` pairs, score > 0 only, by score descending then id ascending; fewer than k
            when fewer documents share a term with the query. Main and delta documents are scored with one
            set of statistics (see :meth:`_score_main`). A selective ``allowed`` set is scored on its own,
            without a pass over every main document (:data:`ALLOWED_ROW_COST`), with the same scores.
        """
        allowed = as_rowset(allowed)
        tokens = self._terms(query, cache).tokens
        if not tokens or k < 1:
            return []
        with self._lock:
            direct = self._allowed_state(tokens, allowed, cache)
            if direct is not None:
                ids, scores, delta = direct.hit_ids, direct.hit_scores, direct.delta
            else:
                main, delta = self._state(tokens, cache)
                ids, scores = (None, None) if main is None else self._main_candidates(main, allowed, cache)
            parts_ids, parts_scores = [], []
            if ids is not None and scores is not None:  # both or neither
                if len(ids) > k:
                    top = self._top(ids, scores, k, cache)
                    ids, scores = ids[top], scores[top]
                parts_ids.append(ids)
                parts_scores.append(scores)
            if delta:
                delta_ids = np.fromiter(delta, dtype=np.int64, count=len(delta))
                delta_scores = np.fromiter(delta.values(), dtype=np.float64, count=len(delta))
                if allowed is not None:
                    keep = allowed.contains(delta_ids)
                    delta_ids, delta_scores = delta_ids[keep], delta_scores[keep]
                parts_ids.append(delta_ids)
                parts_scores.append(delta_scores)
        if not parts_ids:
            return []
        ids = np.concatenate(parts_ids)
        scores = np.concatenate(parts_scores)
        order = np.lexsort((ids, -scores))[:k]
        return [(int(ids[i]), float(scores[i])) for i in order]

    def score(self, query: str, ids: np.ndarray, *, cache: dict | None = None) -> np.ndarray:
        """Exact BM25 scores of the int64 ``ids`` for ``query``, float64 (len(ids),), on :meth:`search`'s scale.

        Ids that are not live (never added, or removed) score ``nan``; a live document without any query
        term scores 0. With the ``cache`` a :meth:`search` of the same query filled, this is a gather (from the
        allowed set's scores after a filtered search that scored only those, while every id is allowed).
        """
        ids = np.asarray(ids, dtype=np.int64)
        tokens = self._terms(query, cache).tokens
        with self._lock:
            held = cache.get("bm25_allowed") if cache is not None else None
            if held is not None and held[0] == (self._generation, tuple(tokens)):
                out = self._score_allowed(held[2], held[1], ids)
                if out is not None:
                    return out
            main, delta = self._state(tokens, cache)
            main_ids = self._main_ids
            pos_of = self._main_pos_of
            if pos_of is not None and main is not None and (not len(ids) or id_bounds(ids)[0] >= 0):
                # the common case: one gather through the id lookup, whose misses (and, clipped to its last
                # entry, ids past its range: the delta's newer ones) point at main's last entry, nan; then
                # the delta's documents by their ids
                return self._with_delta(_float32(self._gather_main(main, pos_of.take(ids, mode="clip"))), ids, delta)
            if len(main_ids) and len(ids):
                pos, in_main = self._main_positions(ids)
                if not self._delta_tf and main is not None and in_main.all():
                    return _float32(
                        self._gather_main(main, pos)
                    )  # every id a live main document (ids too sparse for the lookup)
                out = np.full(len(ids), np.nan)
                out[in_main] = 0.0 if main is None else _float32(self._gather_main(main, pos[in_main]))
            else:
                out = np.full(len(ids), np.nan)
            return self._with_delta(out, ids, delta)

    def _with_delta(self, out: np.ndarray, ids: np.ndarray, delta: dict[int, float]) -> np.ndarray:
        """``out`` (float64 scores of the int64 ``ids``) with each delta document's entry set to its delta score
        (0 without a query term); returns ``out``. Caller holds the lock."""
        if self._delta_tf:
            delta_tf = self._delta_tf
            for j, doc_id in enumerate(ids.tolist()):
                if doc_id in delta_tf:
                    out[j] = delta.get(doc_id, 0.0)
        return out

    def _score_allowed(self, state: _AllowedScores, allowed: RowSet, ids: np.ndarray) -> np.ndarray | None:
        """:meth:`score` from a filtered search's :class:`_AllowedScores` over ``allowed``: a gather, when every id is
        an allowed main document, a delta document, or an allowed id that is no live document (nan); None when an
        id lies outside the allowed set (the caller then scores it by a full pass). Caller holds the lock."""
        at, found = _find(state.ids, ids)
        if found.all():
            return _float32(state.scores.take(at))
        others = ids[~found].tolist()
        delta_tf = self._delta_tf
        if not all(d in delta_tf or _holds_id(allowed.ids, d) for d in others):
            return None
        out = _float32(state.scores.take(at, mode="clip")) if len(state.ids) else np.full(len(ids), np.nan)
        out[~found] = [state.delta.get(d, 0.0) if d in delta_tf else np.nan for d in others]
        return out

    def identifier_matches(
        self, query: str, ids: np.ndarray, max_df: int, min_share: float = 0.0, *, cache: dict | None = None
    ) -> np.ndarray:
        """How many of the query's rare identifiers each of the int64 ``ids`` contains, int64 (len(ids),).

        A rare identifier is a whole-identifier token of the query (:meth:`TechnicalTokenizer.identifiers`:
        a joiner, a case change or a digit), or the one distinct token of a query that has no identifier
        (:meth:`TechnicalTokenizer.names`), held by 1 to ``max_df`` documents of the index (main + delta).
        When the rare identifiers are fewer than ``min_share`` of the query's content words
        (:meth:`TechnicalTokenizer.content_runs`), the identifier is a detail of a longer question rather than
        what the query looks up, and every count is 0. Reading a term's documents costs its document
        frequency, so this is cheap exactly for rare terms. ``cache``: a per-query dict (``Query.cache``).
        """
        ids = np.asarray(ids, dtype=np.int64)
        terms = self._terms(query, cache)
        if not terms.identifiers or not len(ids):
            return np.zeros(len(ids), dtype=np.int64)
        with self._lock:
            rare = self._rare_holders(terms, max_df, min_share, cache)
        if not rare:
            return np.zeros(len(ids), dtype=np.int64)
        return np.array([sum(1 for h in rare if i in h) for i in ids.tolist()], dtype=np.int64)

    def _rare_holders(self, terms: _QueryTerms, max_df: int, min_share: float, cache: dict | None) -> list[set[int]]:
        """The live holders of each rare identifier of the query (held by 1 to ``max_df`` documents), one set
        each; [] when there is none or they are fewer than ``min_share`` of the query's content words (see
        :meth:`identifier_matches`). Caller holds the lock."""
        if not terms.identifiers:
            return []
        main, postings = self._main, self._postings
        spans = self._spans(terms.identifiers, cache)
        # which identifiers are rare is known from the document frequencies alone: decide the share rule
        # before reading any term's documents
        rare = []
        for token in terms.identifiers:
            begin, end = spans.get(token, (0, 0))
            if 0 < end - begin + len(postings.get(token, ())) <= max_df:
                rare.append((token, begin, end))
        if not rare or len(rare) < min_share * terms.content_runs:
            return []
        out = []
        for token, begin, end in rare:
            holders: list[np.ndarray] = []
            if end > begin:
                rows = np.asarray(main.scores["indices"][begin:end], dtype=np.int64)
                holders.append(self._main_ids[rows[self._main_alive[rows] > 0]])
            posting = postings.get(token)
            if posting:
                holders.append(np.fromiter(posting, dtype=np.int64, count=len(posting)))
            out.append(set(np.concatenate(holders).tolist()))  # at most max_df ids
        return out

    def _all_term_holders(self, terms: _QueryTerms, cache: dict | None) -> set[int] | None:
        """The live documents holding every distinct token of the query, when that is cheap to know for the
        whole index; else None (ask :meth:`holds_all_terms` per candidate). Caller holds the lock.

        The main segment's holders are the rarest token's documents that every other token's column (bm25s's
        CSC score matrix, row indices ascending) also lists, intersected rarest first by binary search, so the
        cost is O(terms x df_min x log df) and independent of the segment's size; the delta's are read from the
        postings the same way. None when the rarest token is held by more than :data:`PREPARE_DF_MAX`
        main documents, or more than :data:`HOLDERS_MAX` documents hold them all.
        """
        tokens = terms.distinct
        main_ids, postings = self._main_ids, self._postings
        spans = self._spans(tokens, cache)
        columns = sorted((spans.get(t, (0, 0)) for t in tokens), key=lambda c: c[1] - c[0])
        out: set[int] = set()
        if len(main_ids) and columns[0][1] > columns[0][0]:  # every token is in the main segment
            begin, end = columns[0]
            if end - begin > PREPARE_DF_MAX:
                return None
            indices = self._main.scores["indices"]
            rows = np.asarray(indices[begin:end])
            for begin, end in columns[1:]:
                rows = rows[_find(indices[begin:end], rows)[1]]
                if not len(rows):
                    break
            if len(rows) > HOLDERS_MAX:
                return None
            out.update(main_ids[rows[self._main_alive[rows] > 0]].tolist())
        if self._delta_tf:
            lists = [postings.get(t) or {} for t in tokens]
            smallest = min(lists, key=len)
            out.update(d for d in smallest if all(d in p for p in lists))
            if len(out) > HOLDERS_MAX:
                return None
        return out

    def prepare_exact_matches(
        self, query: str, max_df: int, min_share: float, *, min_terms: int = 3, cache: dict
    ) -> None:
        """Work out, for the whole index, what :meth:`exact_matches` with these arguments needs (the holders of
        each rare identifier, and of every query token), and keep it in ``cache``; :meth:`exact_matches` of the
        same query then answers with set lookups. Meant for the engine's own search thread, which finishes
        before the dense engine's scan on most corpora, so the work comes off the fusion step. Cheap when it
        does not apply (no identifier, a short query, common words only: :meth:`_all_term_holders`)."""
        terms = self._terms(query, cache)
        key = (self._generation, max_df, min_share, min_terms)
        held = cache.get("bm25_exact")
        if held is not None and held[0] == key:
            return
        with self._lock:
            key = (self._generation, max_df, min_share, min_terms)
            rare = self._rare_holders(terms, max_df, min_share, cache)
            full = self._all_term_holders(terms, cache) if len(terms.distinct) >= min_terms else set()
        cache["bm25_exact"] = (key, rare, full)

    def surprise(self, query: str, doc_id: int, n: int | None = None, *, cache: dict | None = None) -> float | None:
        """The surprise of document ``doc_id`` as the query's top BM25 hit, in nats
        (:func:`~hybrid_memory.engines.calibration.term_surprise`): ``-(ln n + sum_t ln(df_t / N))`` over the distinct
        query
        tokens ``t`` the document holds, with the document frequencies and the document count BM25 scores with
        (main + delta, :meth:`_columns`).

        Args:
            query: the query text (tokenized once per ``cache``, a per-query dict).
            doc_id: the top hit's int64 id.
            n: documents the query may return (the allowed set's size); None: every live document.

        Returns:
            nats, or None when ``doc_id`` is not a live document or holds no query token. Reads which query tokens
            the document holds from its delta term counts or its cached token ids (one set of some dozens of
            ids; a binary search in each term's column where an older save kept no tokens), and their document
            frequencies from the column spans the search already looked up.
        """
        terms = self._terms(query, cache)
        with self._lock:
            n_main = len(self._main_ids)
            if n is None:
                n = n_main - self._main_dead + len(self._delta_tf)
            doc_id = int(doc_id)
            tf = self._delta_tf.get(doc_id)
            row = -1 if tf is not None else self._main_row(doc_id)
            if tf is None and row < 0:
                return None
            distinct = terms.distinct
            tokens = self._tokens.get(doc_id) if tf is None else None  # its token ids, in the index's vocabulary
            if tf is not None:
                held = [t for t in distinct if t in tf]
            elif tokens is not None:
                ids, vocab = set(tokens.tolist()), self._vocab
                held = [t for t in distinct if vocab.get(t, -1) in ids]
            else:  # a main document whose tokens an older save did not keep: its row in each term's column
                indices = self._main.scores["indices"]
                columns = self._spans(distinct, cache)
                held = [t for t in distinct if (c := columns[t])[0] < c[1] and _holds_id(indices[c[0] : c[1]], row)]
            spans, postings = self._spans(held, cache), self._postings  # {} without a main segment
            dfs = [(c := spans.get(t, (0, 0)))[1] - c[0] + len(postings.get(t, ())) for t in held]
            n_docs = n_main + len(self._delta_tf)
        return calibration.term_surprise(dfs, n_docs, n)

    def _main_row(self, doc_id: int) -> int:
        """Position of ``doc_id`` in the main segment if it is a live main document, else -1 (the id map, else a
        binary search); caller holds the lock."""
        n_main = len(self._main_ids)
        if not n_main:
            return -1
        pos_of = self._main_pos_of
        if pos_of is not None:  # n_main marks an id that is not a live main document
            row = int(pos_of[doc_id]) if 0 <= doc_id < len(pos_of) else n_main
            return row if row < n_main else -1
        pos, found = self._main_positions(np.array([doc_id], dtype=np.int64))
        return int(pos[0]) if found[0] else -1

    def holds_all_terms(self, query: str, ids: np.ndarray, *, cache: dict | None = None) -> np.ndarray:
        """bool (len(ids),): which of the int64 ``ids`` hold every distinct token of ``query`` (a conjunctive
        match, Lucene's ``coord`` = 1).

        Main-segment documents are looked up in each term's column of bm25s's CSC score matrix by binary
        search (its row indices are ascending within a column), delta documents in the term's posting dict,
        so the cost is O(terms x candidates x log df), never a scan of a posting list. Terms are tried rarest
        first, and only on the candidates that held every term so far. When the query's columns and the
        segment are small (at most :data:`HOLDS_ALL_COUNT_MAX` entries together), one ``bincount`` over the
        columns counts the distinct tokens every main document holds instead: the same answer, with a few
        numpy calls instead of several per term. ``cache``: a per-query dict.
        """
        ids = np.asarray(ids, dtype=np.int64)
        tokens = self._terms(query, cache).distinct
        ok = np.zeros(len(ids), dtype=bool)
        if not tokens or not len(ids):
            return ok
        with self._lock:
            main, main_ids, postings = self._main, self._main_ids, self._postings
            spans = self._spans(tokens, cache)
            columns = [spans.get(t, (0, 0)) for t in tokens]
            in_main = all(begin < end for begin, end in columns)
            if not in_main and not all(t in postings for t, (b, e) in zip(tokens, columns, strict=True) if b == e):
                return ok  # a token no document holds
            # main candidates: (position in ids, row in the main segment); the others are delta documents
            at_main = rows = np.zeros(0, dtype=np.int64)
            if in_main and len(main_ids):
                pos, found = self._main_positions(ids)
                at_main = found.nonzero()[0]
                rows = pos[at_main]
            delta = [j for j, i in enumerate(ids.tolist()) if i in self._delta_tf] if self._delta_tf else []
            # bm25s's CSC row indices (bm25s ships no types); None without a main segment, when rows is empty
            indices: Any = main.scores["indices"] if main is not None else None
            if len(rows) and sum(end - begin for begin, end in columns) + len(main_ids) <= HOLDS_ALL_COUNT_MAX:
                # a small segment: count the query's distinct tokens each main document holds in one pass over
                # their columns (each lists a document once) instead of a binary search per term, whose numpy
                # calls cost more than the pass here
                held = np.bincount(np.concatenate([indices[b:e] for b, e in columns]), minlength=len(main_ids))
                ok[at_main[held.take(rows) == len(tokens)]] = True
                at_main = rows = at_main[:0]  # decided
            if not len(rows) and not delta:
                return ok
            # rarest term first: the conjunction usually fails on it, and the loop stops
            df = {t: end - begin + len(postings.get(t, ())) for t, (begin, end) in zip(tokens, columns, strict=True)}
            for token in sorted(tokens, key=lambda t: (df[t], t)):
                if len(rows):
                    begin, end = spans[token]
                    keep = _find(indices[begin:end], rows)[1]
                    at_main, rows = at_main[keep], rows[keep]
                if delta:
                    posting = postings.get(token) or {}
                    delta = [j for j in delta if int(ids[j]) in posting]
                if not len(rows) and not delta:
                    return ok
            ok[at_main] = True
            ok[delta] = True
        return ok

    def exact_matches(
        self,
        query: str,
        ids: np.ndarray,
        max_df: int,
        *,
        min_share: float = 0.25,
        min_terms: int = 3,
        cache: dict | None = None,
    ) -> np.ndarray:
        """Exact-match strength of each of the int64 ``ids`` for ``query``, int64 (len(ids),); 0 for most.

        Two kinds of exact match, both "what the query names, few chunks hold":

        * rare identifiers (:meth:`identifier_matches` with ``max_df`` and ``min_share``): +1 per identifier;
        * the whole query: a candidate holding every distinct token of a query of at least ``min_terms``
          tokens (:meth:`holds_all_terms`, a quoted error message, a name with its words), when at most
          ``max_df`` of the candidates do, and holding them in the query's order (:meth:`holds_in_order`):
          ranked above any identifier count, +(1 + identifiers of the query). For a query that names nothing
          (:meth:`TechnicalTokenizer.names` empty: plain words, a heading or a description rather than a quoted
          message with its exception name or code), only when exactly one candidate holds it in order: a
          sentence that several chunks share is a common phrase of the corpus, and the guard would put those
          chunks above the one the query describes (measured in ``benchmarks/fusion_eval.py``: APIDocs'
          paraphrases +0.010 nDCG@10, nothing lost elsewhere; issue 36).

        ``cache``: a per-query dict (``Query.cache``), so the query is analysed once per search.
        """
        ids = np.asarray(ids, dtype=np.int64)
        terms = self._terms(query, cache)
        held = cache.get("bm25_exact") if cache is not None else None
        if held is not None and held[0] == (self._generation, max_df, min_share, min_terms):
            _, rare, full_holders = held  # prepared in the search thread (prepare_exact_matches)
        else:
            with self._lock:
                rare = self._rare_holders(terms, max_df, min_share, cache)
            full_holders = None
        id_list = ids.tolist()
        # each holder set has at most max_df ids: walk those, not every candidate against every set
        where = {i: j for j, i in enumerate(id_list)}
        unique = len(where) == len(id_list)
        if not rare:
            counts = [0] * len(id_list)
        elif unique:
            counts = [0] * len(id_list)
            for holders in rare:
                for i in holders:
                    j = where.get(i)
                    if j is not None:
                        counts[j] += 1
        else:
            counts = [sum(1 for h in rare if i in h) for i in id_list]
        if len(terms.distinct) >= min_terms:
            if full_holders is not None and unique and len(full_holders) < len(where):
                full_at = sorted(where[i] for i in full_holders if i in where)  # set lookups, the smaller side
            elif full_holders is not None:
                full_at = [j for j, i in enumerate(id_list) if i in full_holders]
            else:
                full_at = np.flatnonzero(self.holds_all_terms(query, ids, cache=cache)).tolist()
            if full_at and len(full_at) <= max_df:
                in_order = self.holds_in_order(query, ids[full_at], cache=cache).tolist()
                bonus = 1 + len(terms.identifiers)
                # a query naming nothing (plain words: a heading, a description) counts as quoted only where one
                # candidate alone holds it in order; a sentence several chunks share is a common phrase there
                if terms.identifiers or sum(in_order) == 1:
                    for j, ok in zip(full_at, in_order, strict=True):
                        if ok:
                            counts[j] += bonus
        return np.array(counts, dtype=np.int64)

    def holds_in_order(self, query: str, ids: np.ndarray, *, cache: dict | None = None) -> np.ndarray:
        """bool (len(ids),): which of the int64 ``ids`` contain the query's tokens in the query's order (an
        ordered match with any gaps: Lucene's ``SpanNearQuery`` with ``inOrder`` and unlimited slop; Indri's
        ordered window ``#od``), read from the token ids the index keeps for every document.

        A quoted error message or a name with its words appears in the chunk in that order; a bag of the same
        common words rarely does. Gaps are allowed because a message written as an f-string has its
        placeholders between the quoted words. Repeated query tokens must repeat in the document. A document
        whose token ids are not kept (an index saved in format 1, before its first merge) counts as holding
        them in order when it holds them all (the plain conjunctive match). ``cache``: a per-query dict.
        """
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros(len(ids), dtype=bool)
        tokens = self._terms(query, cache).tokens
        with self._lock:
            wanted = [self._vocab.get(t, -1) for t in tokens]
            if not wanted or min(wanted) < 0:
                return out
            # each token id as the 4 bytes it has in a document's int32 array: the greedy search for the
            # earliest occurrence of each query token in turn is then a run of bytes.find calls
            packed = np.array(wanted, dtype=np.int32).tobytes()
            needles = [packed[i : i + 4] for i in range(0, len(packed), 4)]
            for j, doc_id in enumerate(ids.tolist()):
                doc = self._tokens.get(doc_id)
                if doc is None:
                    out[j] = bool(self.holds_all_terms(query, ids[j : j + 1], cache=cache)[0])
                    continue
                out[j] = _in_order(np.asarray(doc, dtype=np.int32).tobytes(), needles)
        return out

    def _score_delta(self, tokens: list[str]) -> dict[int, float]:
        """{delta doc id: BM25 score > 0} with the statistics :meth:`_score_main` uses: idf over main + delta,
        length normalisation by the main segment's avgdl when there is one (else the delta's own).

        For a term the main segment holds, the term's score is computed the way a main document gets it --
        bm25s's float32 ``idf_main(t) x tfc(t, d)``, then times ``idf(t) / idf_main(t)`` -- so a chunk scores
        exactly (to the bit) the same in either segment and equal chunks tie, whatever segment they sit in.
        """
        n_main = len(self._main_ids)
        n_docs = n_main + len(self._delta_tf)
        avgdl = self.avgdl
        vocab = self._main.vocab_dict if self._main is not None else {}
        k1, b = self.k1, self.b
        scores: dict[int, float] = {}
        for token in tokens:
            posting = self._postings.get(token)
            if not posting:
                continue
            token_id = vocab.get(token)
            df_main = int(self._main_df[token_id]) if token_id is not None else 0
            idf = self._idf(n_docs, df_main + len(posting))
            idf_main32 = float(np.float32(self._idf(n_main, df_main))) if df_main else 0.0
            weight = idf / self._idf(n_main, df_main) if df_main else 0.0
            for doc_id, tf in posting.items():
                # bm25s's order of operations (scoring._score_tfc_robertson), in float64
                tfc = tf / (k1 * ((1 - b) + b * self._delta_len[doc_id] / avgdl) + tf)
                value = float(np.float32(idf_main32 * tfc)) * weight if df_main else idf * tfc
                scores[doc_id] = scores.get(doc_id, 0.0) + value
        # float32 like bm25s's precomputed scores, so main and delta scores compare on one scale
        return {d: float(np.float32(v)) for d, v in scores.items() if v > 0}

    # -- persistence --------------------------------------------------------------------------------
    def config(self) -> dict[str, object]:
        """Parameters that must match for a saved index to be reused."""
        return {"k1": self.k1, "b": self.b, "method": "lucene", "tokenizer": self.tokenizer.config()}

    def save(self, directory: Path, previous: Path | None = None) -> None:
        """Write the index to ``directory``: the main segment (bm25s npy + json), its id map, the delta's ids and
        the token cache, so a reopened index neither re-tokenizes the delta nor, at its next merge, the main
        segment's documents.

        Files (``numpy.save`` / JSON, no pickle): ``bm25s/`` (bm25s's own save), ``ids.npy`` int64 and
        ``alive.npy`` float32 (main segment), ``delta_ids.npy`` int64, ``tokens.npy`` int32 (every cached
        document's token ids, one after another), ``token_doc_ids.npy`` int64 and ``token_lengths.npy`` int64
        (which document, how many tokens), ``vocab.json`` (tokens in id order) and ``manifest.json``, which
        records every other file's CRC-32 per 64 MiB block (:mod:`hybrid_memory._checksums`), checked by
        :meth:`load`: a damaged file of any shape is rebuilt from the store instead of changing rankings.

        The main segment changes only at a merge (removals are the separate ``alive.npy``), so when
        ``previous`` (the folder of the last save) holds this very segment (its manifest's ``main_token``),
        its ``bm25s/`` files are hard-linked instead of written again (400 MB at a million chunks).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self._main is not None and not _link_main(previous, directory, self._main_token):
                self._main.save(str(directory / "bm25s"), show_progress=False)
                self._main_token = uuid.uuid4().hex
            np.save(directory / "ids.npy", self._main_ids, allow_pickle=False)
            np.save(directory / "alive.npy", self._main_alive, allow_pickle=False)
            delta_ids = np.fromiter(self._delta_tf, dtype=np.int64, count=len(self._delta_tf))
            np.save(directory / "delta_ids.npy", delta_ids, allow_pickle=False)
            doc_ids, lengths, data = self._tokens.export()
            np.save(directory / "token_doc_ids.npy", doc_ids, allow_pickle=False)
            np.save(directory / "token_lengths.npy", lengths, allow_pickle=False)
            np.save(directory / "tokens.npy", data, allow_pickle=False)
            vocab = list(self._vocab)  # tokens in id order: ids are handed out as len(vocab), so insertion order
            in_order = np.fromiter(self._vocab.values(), dtype=np.int64, count=len(vocab))
            if not np.array_equal(in_order, np.arange(len(vocab))):
                vocab = sorted(self._vocab, key=self._vocab.__getitem__)
            forgotten = _forget_unheld(vocab, data, len(doc_ids) == len(self.ids()))
            del data
            manifest = {
                "format_version": _FORMAT_VERSION,
                "config": self.config(),
                "total_len": self._main_total_len,
                "has_main": self._main is not None,
                "n_docs": len(self._main_ids),
                "ids_sum": int(self._main_ids.sum()),
                "delta_docs": len(delta_ids),
                "delta_ids_sum": int(delta_ids.sum()),
                "token_docs": len(doc_ids),
                "tokens": int(lengths.sum()),
                "vocab_size": len(vocab),
                "main_token": self._main_token if self._main is not None else None,
            }
            main_token, (token, known) = manifest["main_token"], self._main_crcs
        (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        if main_token is not None and forgotten:
            _rewrite_main_vocab(directory / "bm25s" / _BM25S_VOCAB, vocab)
        # the main segment's files never change under one token: a linked segment keeps its recorded CRC-32s
        main_files = [f"bm25s/{f.name}" for f in (directory / "bm25s").iterdir()] if main_token is not None else []
        if forgotten:  # its vocabulary file was just rewritten
            known = {k: v for k, v in known.items() if k != f"bm25s/{_BM25S_VOCAB}"}
        crcs = file_checksums(
            directory, [*main_files, *_CACHE_FILES], known if token is not None and token == main_token else None
        )
        self._main_crcs = (None if main_token is None else str(main_token), {name: crcs[name] for name in main_files})
        manifest["crc32"] = crcs  # per file, per 64 MiB block: checked on load (_checksums.verify_files)
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))

    def load(self, directory: Path) -> bool:
        """Load a saved index (main segment, delta and token cache) without re-tokenizing anything.

        Returns False (and keeps an empty index) if it is missing, damaged (a file that does not match the CRC-32
        its manifest records: a WARNING names it) or was built with other parameters; the caller then rebuilds it from
        the store. An index saved before the delta and token
        cache were written (format 1) loads its main segment only: the caller re-adds the delta's documents
        and the next merge re-tokenizes the main segment's texts.
        """
        bm25s = import_bm25s()

        directory = Path(directory)
        self.wait()
        if not (directory / "manifest.json").exists():
            return False
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
            if manifest.get("format_version") not in (1, _FORMAT_VERSION) or manifest.get("config") != json.loads(
                json.dumps(self.config())
            ):
                logger.info("saved BM25 index has other parameters; it will be rebuilt")
                return False
            verify_files(directory, manifest.get("crc32"))  # damage that keeps the shapes: a rebuild, not a ranking
            ids = np.load(directory / "ids.npy", allow_pickle=False)
            alive = np.load(directory / "alive.npy", allow_pickle=False)
            if len(ids) != manifest["n_docs"] or int(ids.sum()) != manifest["ids_sum"]:
                raise ValueError("id map does not match the manifest (files from two saves)")
            main = None
            if manifest["has_main"]:
                # format 2 keeps the main vocabulary as the first ids of vocab.json (one save writes both):
                # bm25s's own copy (a JSON object of a million tokens at 1M chunks) is not parsed a second time
                # the score matrix is memory-mapped read-only (searches read a few term columns; nothing writes it)
                main = bm25s.BM25.load(
                    str(directory / "bm25s"),
                    show_progress=False,
                    verbosity=0,
                    mmap=True,
                    load_vocab=manifest["format_version"] < 2,
                )
                if int(main.scores["num_docs"]) != len(ids) or len(alive) != len(ids):
                    raise ValueError("id map and bm25s index disagree")
                # plain ndarray views of the maps (the mapping stays open through ``.base``): every slice of an
                # ``np.memmap`` is a memmap whose ``__array_finalize__`` costs more than the slice itself, which
                # was a third of a search's CPU at 100k chunks
                for name in ("data", "indices", "indptr"):
                    if isinstance(main.scores.get(name), np.memmap):
                        main.scores[name] = main.scores[name].view(np.ndarray)
            cache = None
            if manifest["format_version"] >= 2:
                cache = self._read_cache(directory, manifest, main)
        except Exception as exc:  # noqa: BLE001 - any damage means: rebuild from the store
            logger.warning("saved BM25 index at %s is unreadable (%s); it will be rebuilt", directory, exc)
            return False
        with self._lock:
            self._reset_main()
            self._reset_delta()
            self._tokens = TokenCache()
            if main is not None:
                self._main = main
                self._main_token = manifest.get("main_token")
                recorded = manifest.get("crc32") or {}
                self._main_crcs = (
                    self._main_token,
                    {n: list(v) for n, v in recorded.items() if n.startswith("bm25s/")},
                )
                self._main_ids = ids.astype(np.int64)
                self._main_alive = alive.astype(np.float32)
                self._main_df = np.diff(np.asarray(main.scores["indptr"], dtype=np.int64))
                self._main_total_len = float(manifest["total_len"])
                self._main_dead = int((self._main_alive == 0).sum())
                self._index_main()
                if cache is None:
                    self._vocab = dict(main.vocab_dict)
                    self._vocab.setdefault("", len(self._vocab))
            if cache is not None:
                vocab, tokens, delta_ids = cache
                # the main vocabulary is its first ids: a copy of that dict (a copy is pre-sized: 0.1 s for 2M
                # tokens where building one from a list takes 2 s), plus the tokens the delta brought
                n_main = len(main.vocab_dict) if main is not None else 0
                self._vocab = dict(main.vocab_dict) if main is not None else {}
                self._vocab.update(zip(vocab[n_main:], range(n_main, len(vocab)), strict=True))
                self._tokens = tokens
                for doc_id in delta_ids.tolist():
                    self._add_to_delta(doc_id, [vocab[t] for t in tokens[doc_id].tolist()])
        return True

    @staticmethod
    def _read_cache(directory: Path, manifest: dict, main: Any) -> tuple[list[str], TokenCache, np.ndarray]:
        """The saved vocabulary, token cache and delta ids, checked against the manifest and the main segment;
        gives the main segment (loaded without its vocabulary) the vocabulary's first ids as its own."""
        vocab = json.loads((directory / "vocab.json").read_text())
        doc_ids = np.load(directory / "token_doc_ids.npy", allow_pickle=False)
        lengths = np.load(directory / "token_lengths.npy", allow_pickle=False)
        data = np.load(directory / "tokens.npy", allow_pickle=False, mmap_mode="r")  # read only by merges and saves
        delta_ids = np.load(directory / "delta_ids.npy", allow_pickle=False)
        if (
            len(vocab) != manifest["vocab_size"]
            or len(doc_ids) != manifest["token_docs"]
            or len(lengths) != len(doc_ids)
            or int(lengths.sum()) != manifest["tokens"]
            or len(data) != manifest["tokens"]
            or len(delta_ids) != manifest["delta_docs"]
            or int(delta_ids.sum()) != manifest["delta_ids_sum"]
        ):
            raise ValueError("token cache does not match the manifest (files from two saves)")
        if len(data) and (int(data.min()) < 0 or int(data.max()) >= len(vocab)):
            raise ValueError("token ids outside the vocabulary")
        # the main segment's vocabulary is the first ids of the saved one (both written by one save, which the
        # manifest's counts check), as many as its score matrix has term columns
        if main is not None:
            n_main = len(main.scores["indptr"]) - 1
            if n_main > len(vocab):
                raise ValueError("vocabulary disagrees with the bm25s index")
            main.vocab_dict = dict(zip(vocab[:n_main], range(n_main), strict=True))
            main.unique_token_ids_set = range(n_main)  # what bm25s's load sets, as a set of its ids: a range holds them
        tokens = TokenCache(doc_ids, lengths, data)  # one array, no Python object per document
        if not all(d in tokens for d in delta_ids.tolist()):
            raise ValueError("a delta document has no cached tokens")
        return vocab, tokens, delta_ids


def _present_texts(load_texts: Callable[[np.ndarray], list[str]], ids: np.ndarray) -> dict[int, str]:
    """``{id: text}`` for the ``ids`` the store still holds. ``load_texts`` (``SQLiteStore.texts``) raises KeyError
    for a rowid another process deleted after the merge took its snapshot (this process has not caught up with
    that delete yet); such ids are left out, so the merge drops them from the new segment (they are gone from
    the store, and the catch-up's ``remove`` of them is then a no-op) instead of failing."""
    try:
        return dict(zip(ids.tolist(), load_texts(ids), strict=True))
    except KeyError:
        found: dict[int, str] = {}
        for doc_id in ids.tolist():
            try:
                found[doc_id] = load_texts(np.array([doc_id], dtype=np.int64))[0]
            except KeyError:
                logger.debug("BM25 merge: rowid %d was deleted by another process meanwhile; left out", doc_id)
        return found


class _AllowedScores(NamedTuple):
    """A filtered query's scores over the allowed documents only (:meth:`BM25Index._allowed_state`)."""

    ids: np.ndarray
    """int64 (m,), ascending: the live main documents among the allowed ones."""
    scores: np.ndarray
    """float64 (m,): their unrounded scores, 0 for a document without a query term."""
    delta: dict[int, float]
    """{delta doc id: score > 0}, every delta document (the allowed set is applied by the reader)."""
    hit_ids: np.ndarray
    """int64: the ``ids`` scoring > 0, the main candidates of the search."""
    hit_scores: np.ndarray
    """float64: their scores rounded to float32 (:func:`_float32`)."""


class _MainHits(NamedTuple):
    """The main segment's scores for one query over the documents holding a query term (:meth:`BM25Index._score_main`
    when its columns are short): every other main document scores 0."""

    positions: np.ndarray
    """int64 (m,), ascending: main-segment positions of the documents holding at least one query term."""
    scores: np.ndarray
    """float64 (m,): their unrounded scores."""


class _QueryTerms:
    """One query's analysis by the index's tokenizer (see :meth:`BM25Index._terms`)."""

    __slots__ = ("content_runs", "distinct", "identifiers", "text", "tokens")

    def __init__(self, text: str, tokenizer: TechnicalTokenizer) -> None:
        self.text = text
        self.tokens: list[str] = tokenizer.tokenize(text)
        """BM25 tokens in order, repeats kept (BM25 counts them)."""
        self.distinct: list[str] = sorted(set(self.tokens))
        self.identifiers: list[str] = tokenizer.names(text, self.tokens)
        """What the query names (:meth:`TechnicalTokenizer.names`): its whole-identifier tokens, distinct, in order
        of appearance; else its one distinct token, when it has exactly one."""
        self.content_runs: int = tokenizer.content_runs(text)
        """Runs that give at least one token (the query's content words)."""


def _in_order(doc: bytes, needles: list[bytes]) -> bool:
    """Whether the 4-byte tokens ``needles`` occur in ``doc`` (int32 token ids as bytes) in this order, gaps
    allowed: the earliest occurrence of each in turn (greedy is exact for subsequences), at 4-byte boundaries."""
    at = 0
    for needle in needles:
        found = doc.find(needle, at)
        while found > 0 and found % 4:  # a match across two tokens' bytes: look on
            found = doc.find(needle, found + 1)
        if found < 0:
            return False
        at = found + 4
    return True


def _find(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(at, found) for the ascending ``keys``: ``at`` int64 (len(values),), where each of ``values`` is or would go
    (``np.searchsorted``), and bool ``found``, which of them ``keys`` holds (``keys[at]``, read with ``clip`` so a
    value past the end compares with the last key; none found in an empty ``keys``)."""
    at = keys.searchsorted(values)
    if not len(keys):
        return at, np.zeros(len(at), dtype=bool)
    return at, keys.take(at, mode="clip") == values


def _holds_id(ids: np.ndarray, doc_id: int) -> bool:
    """Whether the ascending int64 ``ids`` hold ``doc_id`` (binary search)."""
    at = int(ids.searchsorted(doc_id))
    return at < len(ids) and int(ids[at]) == doc_id


def _float32(scores: np.ndarray) -> np.ndarray:
    """float64 scores rounded to float32 precision (the precision of bm25s's stored scores), as float64."""
    return scores.astype(np.float32).astype(np.float64)


_BM25S_VOCAB = "vocab.index.json"
"""bm25s's own copy of the main segment's vocabulary, inside ``bm25s/`` (not read back since format 2)."""


def _forget_unheld(vocab: list[str], data: np.ndarray, complete: bool) -> int:
    """Replace in ``vocab`` (tokens by id, changed in place) every token no live document holds by
    ``"\\x00<id>"``, so that a saved vocabulary never keeps the words of a deleted text (issue 35). ``data`` is
    the token ids of every live document (the token cache); ``complete`` says it covers every live document
    (an index loaded from a format 1 save does not cache the main segment's documents: nothing is replaced).
    Id 0 (the empty token bm25s reserves) is kept. A NUL cannot occur in a token (chunk texts and queries hold
    none), so the placeholders match no query, as the lost tokens matched only dead documents. Returns how many
    tokens were replaced."""
    if not complete or not vocab:
        return 0
    held = np.zeros(len(vocab), dtype=bool)
    held[np.asarray(data, dtype=np.int64)] = True
    held[0] = True
    gone = np.flatnonzero(~held).tolist()
    for i in gone:
        if not vocab[i].startswith("\x00"):
            vocab[i] = f"\x00{i}"
    return len(gone)


def _rewrite_main_vocab(path: Path, vocab: list[str]) -> None:
    """Rewrite bm25s's vocabulary file of the main segment with ``vocab``'s first ids (as many as it holds), as a
    new file (the old one may be a hard link shared with the previous save)."""
    if not path.is_file():
        return
    n_main = len(json.loads(path.read_text()))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(zip(vocab[:n_main], range(n_main), strict=True)), ensure_ascii=False))
    os.replace(tmp, path)


_CACHE_FILES = (
    "ids.npy",
    "alive.npy",
    "delta_ids.npy",
    "token_doc_ids.npy",
    "token_lengths.npy",
    "tokens.npy",
    "vocab.json",
)
"""The files :meth:`BM25Index.save` writes anew every time (besides ``bm25s/`` and ``manifest.json``)."""


def _link_main(previous: Path | None, directory: Path, token: str | None) -> bool:
    """Hard-link the ``bm25s/`` files of ``previous`` into ``directory`` when ``previous``'s manifest names the
    main segment ``token``; False (nothing left behind) when it does not, or without hard links."""
    if previous is None or token is None:
        return False
    previous = Path(previous)
    try:
        if json.loads((previous / "manifest.json").read_text()).get("main_token") != token:
            return False
        (directory / "bm25s").mkdir()
        for file in (previous / "bm25s").iterdir():
            os.link(file, directory / "bm25s" / file.name)
    except (OSError, ValueError):
        shutil.rmtree(directory / "bm25s", ignore_errors=True)
        return False
    return True
