"""QdrantBackend: a memory kept in a Qdrant collection, with this library's tokenizer, filters and fusion.

**Points.** A chunk is one point, the chunk id in the payload. Qdrant ids are unsigned integers or UUIDs;
the id is the top 63 bits of ``uuid5(NAMESPACE, chunk_id)`` as an integer (:func:`point_id`, format 2), which
is also the chunk's engine id, so a response's ids are used as they come: no UUID object per hit, no id
conversion (on SciFact, 0.1 ms less per request, measured against UUID ids). Collections written before
(format 1: the UUID ``uuid5(NAMESPACE, chunk_id)`` itself) are recognised when opened, from the id type of
their points, and keep their UUID ids (read and written as before: no migration, no duplicate points), with the
same engine ids. Two chunk ids share a point id with probability about n² / 2⁶⁴ (5·10⁻⁸ at a million chunks);
a write that would map a second chunk id onto a point this process knows is refused.

Payload: ``chunk_id``, ``text``, ``content_hash``, ``seq`` (first-insertion order, nanoseconds), the typed
filter fields ``f`` (:mod:`hybrid_memory.backends.qdrant.filters`: metadata, scope and validity fields), and
``doc``: source, metadata (as given), the system fields (scope fields, ``valid_from`` / ``valid_to``,
``superseded_by``, ``merged``) and ``created_at`` / ``updated_at`` as JSON text, which is what reads return:
Qdrant (Edge 0.9, measured) re-reads payload floats with up to 1 ULP of error, while a string comes back as
written. Source, metadata, system fields and times are not also stored as payload objects (points written
before this hold those copies too; nothing reads them): Qdrant reads a point's whole payload to return any
key of it, and without them the retrieve of a search's top 10 ``text`` and ``doc`` took 0.21 ms instead of
0.33 ms on SciFact. Payload indexes: the scope fields (keyword), ``content_hash``, ``seq`` and the metadata
keys the caller declares (``indexed_keys``; keyword, float, integer and bool kinds).

**BM25 on Qdrant.** The sparse vector ``bm25`` holds, for each distinct token of
:class:`~hybrid_memory.tokenizer.TechnicalTokenizer` (so identifiers tokenize exactly as in the embedded
backend), index ``crc32(token)`` (a stable 32-bit hash: Qdrant's sparse indices are uint32; two tokens may
collide, about one pair in a 100,000-token vocabulary, and then share a document frequency) and the Lucene
BM25 term-frequency part as value::

    value(t, d) = tf(t, d) / (tf(t, d) + k1 · (1 - b + b · |d| / avgdl))

The collection's IDF modifier multiplies each query term by Qdrant's idf, which is Lucene's
``ln(1 + (N - df + 0.5) / (df + 0.5))`` (Qdrant's sparse-vector docs; checked here to the float: a term in 1
of 3 points scores ln(1 + 2.5 / 1.5)), and the query vector holds each query token's count, so a score is
``Σ_{t in q} idf(t) · value(t, d)``, the formula of :class:`~hybrid_memory.engines.bm25.index.BM25Index`. What differs:

* ``avgdl`` is a parameter fixed when documents are written (Qdrant's own ``Bm25`` takes ``avg_len`` the
  same way, default 256), where the embedded index uses the corpus mean of its last merge; set it to the
  corpus's mean length in tokens (the benchmark does) and the scores agree;
* N and df are counted per shard, over the points that have a non-empty sparse vector (a chunk without a
  single token does not count in N), where the embedded index counts every chunk of the memory.

A **scoped** search (issue 35) does not use the modifier: its legs query the plain vector ``bm25_tf`` (the same
values, no modifier) with weights ``count(t) * idf_scope(t)``, the scope's own N and df kept client-side, and its
BM25 scores are recomputed here from the stored values; its surprises and the exact-match guard's document
frequencies are the scope's too (:mod:`hybrid_memory.backends.qdrant.scoped`).

**Search.** Both legs go in one ``query_batch`` request (one round trip; a ``prefetch`` request would return
only Qdrant's own fusion of the legs, whose weighted RRF differs from this library's, so the legs are
fetched as they are and fused client-side by the core's :class:`~hybrid_memory.search.searcher.HybridSearcher`,
every method of :data:`~hybrid_memory.fusion.FUSION_METHODS` available and exact). Each leg carries the
translated filter, so it is applied inside Qdrant before ranking, at depth ``candidate_multiplier × top_k``.
The legs return ids and scores only: no payload (Edge keeps payload on disk, reading ``chunk_id`` per hit
cost ~0.4 ms a leg on SciFact), chunk ids come from a client-side id map (:class:`QdrantBackend`), and only
the final ``top_k`` are read, in one ``retrieve`` of ``text`` and ``doc``. The score-based fusions' exact
cross-scores are one more batched request, each leg restricted (``has_id``) to the candidates only the
other leg returned. The adaptive fusion's exact-match guard rides along: the document frequencies of the
query's identifiers are one-term sparse queries over the collection in the legs' request (cut at the legs'
depth, > ``top_k``), and so are the chunks holding every distinct query token: one query of the presence
vector ``terms`` (value 1 at each distinct token of a chunk, no modifier; the query has value 1 at each
distinct query token, so a chunk's score is the number of them it holds) with the legs' filter and a score
threshold of that number less one half, cut at the legs' depth. When fewer than the cut come back they are
every such chunk the filter allows; otherwise the test is one presence query over the candidates (``has_id``).
No sparse vector travels: on SciFact, returning the sparse leg's and the cross-scores' sparse vectors to test
them in Python cost 1.0 ms of CPU per hybrid search (5.9 against 4.8 ms). A collection written before the
presence vector (no ``terms``) is opened without it and tests as before, from the sparse vectors the sparse
leg and its cross-scores return. The query is tokenized once per search.

**Calibration.** The default fusion (``adaptive``) weighs each engine per query by the surprise of its top hit
in nats (:mod:`hybrid_memory.engines.calibration`), and the Qdrant engines report the same surprises as the embedded
ones, so the same fusion runs on both backends: ``QdrantSparseEngine.surprise`` is
``-(ln n + sum_t ln(df_t / N))`` over the query's distinct sparse indices the top hit holds, and
``QdrantDenseEngine.surprise`` ``-(ln n + ln Phi_c((top - q.mu) / sqrt(q' Sigma q)))``. ``df_t``, ``N`` (the
collection's points) and the dense moments (:class:`~hybrid_memory.engines.calibration.VectorMoments`, the embedded
backend's class: the same sums for the same vectors) are exact live counts kept client-side by
:class:`~hybrid_memory.backends.qdrant.calibration.CorpusStats`: built from a scroll of the stored vectors the
first time a search needs them (0.47 s for SciFact's 5,183 points on Edge, about 0.1 ms a point), then kept in
step with this backend's writes (an upsert reads the vectors it replaces); on a collection reached through
qdrant-client (a server, shared with other writers) rebuilt when the point count differs, checked at most every
:data:`~hybrid_memory.backends.qdrant.calibration.DRIFT_SECONDS` (5 s): the calibration follows other writers with
that lag. ``n``, the points the query's filter allows, is a ``count`` request kept per filter text until the next
write (0.3-0.9 ms on Edge; on a server one more round trip, once per distinct filter); without a filter it is
``N``. The top hit's sparse indices (which query tokens it holds) are one ``retrieve`` of that point on Edge
(in process; 5-50 us) and ride in the cross-score request through qdrant-client (no extra round trip). With a
single engine returning hits neither surprise is read (the fusion calibrates two or more), so neither is made.
Qdrant's own idf is not used to recover df: it counts the sparse index as it stands (deleted points included
until Qdrant's optimizer rebuilds the segment), and its N is not returned by any request.
"""

from __future__ import annotations

import collections.abc
import contextlib
import functools
import json
import logging
import math
import numbers
import re
import time
import uuid
import zlib
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._exceptions import (
    BackendUnavailableError,
    HybridMemoryError,
    InvalidRequestError,
    StoreBusyError,
)
from ..._rwlock import ReadWriteLock
from ...dedup import covering_filter
from ...embedders import Embedder, l2_normalize
from ...engines.calibration import gaussian_surprise, term_surprise
from ...filters import METADATA, SYSTEM, parse_filter, system_filter
from ...fusion import FUSION_METHODS
from ...models import SCOPE_FIELDS, TIME_FIELDS, StoredChunk
from ...onnx_embedder import OnnxEmbedder
from ...paths import check_local_mode_path
from ...scopes import as_scope
from ...search.engine import Hit, Query
from ...tokenizer import TechnicalTokenizer
from ..base import ChunkVersion, NearSearch, P, StoredState, check_embedder, system_values
from .calibration import CorpusStats
from .collection import (
    DENSE,
    PAYLOAD_CACHE,
    SEARCH_THREADS,
    SPARSE,
    TERMS,
    TF,
    ClientCollection,
    Collection,
    EdgeCollection,
    Leg,
    Point,
)
from .filters import FIELDS, field_key, field_name, filterable_fields, marker_paths, translate
from .scoped import ScopeRegistry, canonical_unit, scope_idf

__all__ = [
    "MIN_TERMS",
    "NAMESPACE",
    "QdrantBackend",
    "QdrantFilter",
    "SparseEncoder",
    "engine_id",
    "point_id",
    "point_uuid",
    "token_index",
]

logger = logging.getLogger(__name__)

_STORED = ("chunk_id", "text", "content_hash", "seq", "doc")
"""Payload keys a read returns (the typed filter fields ``f`` are for Qdrant's filters only)."""

NAMESPACE = uuid.UUID("5c0c3f2e-8a47-5d0e-9a51-6b7d2f7c1e90")
"""The uuid5 namespace of point ids (fixed: the same chunk id maps to the same point everywhere)."""

DEFAULT_AVGDL = 256.0
"""Default average document length (tokens) of the BM25 length normalisation: Qdrant's ``Bm25`` ``avg_len``."""


MIN_TERMS = 3
"""The exact-match guard's whole-query match applies to queries of at least this many distinct tokens
(``BM25Index.exact_matches``'s ``min_terms``)."""


def point_uuid(chunk_id: str) -> uuid.UUID:
    """The format-1 Qdrant point id of a chunk, a UUID: ``uuid5(NAMESPACE, chunk_id)``."""
    return uuid.uuid5(NAMESPACE, chunk_id)


def point_id(chunk_id: str) -> int:
    """The Qdrant point id of a chunk (format 2), also its engine id: the top 63 bits of
    ``uuid5(NAMESPACE, chunk_id)``, an int in [0, 2**63)."""
    return uuid.uuid5(NAMESPACE, chunk_id).int >> 65


def engine_id(pid: int | str | uuid.UUID) -> int:
    """The int64 engine id of a point id as Qdrant returns it: an int id is its own; a format-1 UUID (object or
    string) gives its top 63 bits (non-negative), so a chunk has the same engine id in both formats."""
    if isinstance(pid, int):
        return pid
    return (pid if isinstance(pid, uuid.UUID) else uuid.UUID(pid)).int >> 65


def token_index(token: str) -> int:
    """Sparse index of a token: CRC-32 of its UTF-8 bytes (zlib; stable across processes, unlike ``hash``)."""
    return zlib.crc32(token.encode("utf-8"))


def _in_order(doc: list[str], query: list[str]) -> bool:
    """The query's tokens occur in ``doc`` in the query's order, gaps allowed (each at its earliest place after
    the previous one; a repeated query token must repeat): ``BM25Index.holds_in_order``'s rule."""
    position = 0
    for token in query:
        try:
            position = doc.index(token, position) + 1
        except ValueError:
            return False
    return True


def _terms(tokens: Sequence[str]) -> list[int]:
    """The sparse indices of the distinct tokens, ascending (colliding tokens share one)."""
    return sorted({token_index(t) for t in tokens})


def _holds(indices: Sequence[int], wanted: Sequence[int]) -> bool:
    """Whether the ascending sparse ``indices`` of a point hold every index of ``wanted`` (a binary search per
    wanted index: cheaper than a set of the point's ~100 indices; Qdrant Edge returns a sparse vector's indices
    ascending, and this library writes them so)."""
    n = len(indices)
    for w in wanted:
        i = bisect_left(indices, w)
        if i == n or indices[i] != w:
            return False
    return True


def _json_copy(value: Any) -> Any:
    """A copy of a JSON value (dicts and lists copied to every depth; strings, numbers, booleans and None are
    immutable and shared): what ``json.loads`` of its text would return, at a fraction of the cost (a search's
    top 10 metadata: ~1 against ~8 us a hit)."""
    kind = type(value)
    if kind is dict:
        return {k: _json_copy(v) for k, v in value.items()}
    if kind is list:
        return [_json_copy(v) for v in value]
    return value


def _source_and_metadata(doc: str) -> tuple[str | None, dict[str, Any]]:
    """(source, metadata) of a payload's ``doc`` JSON text (decoded once per distinct text, see
    :meth:`QdrantBackend.hit_rows`; the caller copies the metadata)."""
    decoded = json.loads(doc)
    return decoded["source"], decoded["metadata"]


def _presence_leg(wanted: Sequence[int], flt: Mapping[str, Any] | None, limit: int) -> Leg:
    """A query of the presence vector (:data:`~hybrid_memory.backends.qdrant.collection.TERMS`) with value 1
    at each of the ``wanted`` distinct sparse indices, kept to the chunks scoring their number: those holding
    every one (a chunk holding one fewer scores 1 less; the threshold sits halfway)."""
    return Leg(TERMS, (list(wanted), [1.0] * len(wanted)), flt, limit, (), threshold=len(wanted) - 0.5)


def _df_leg(token: str, limit: int, terms: bool = False, flt: Mapping[str, Any] | None = None) -> Leg:
    """A one-term query over the whole collection: its first ``limit`` holders (a document frequency, cut). On
    the presence vector (``terms``: every holder scores 1, so Qdrant's sparse search stops once it holds
    ``limit`` of them; SciFact's query identifiers, p50 19 against 25 us, max 84 against 304 us a query), else
    on ``bm25``. ``flt``: a scoped search's population filter (the scope's own holders), else None."""
    return Leg(TERMS if terms else SPARSE, ([token_index(token)], [1.0]), flt, limit, ())


def _real(value: Any) -> bool:
    """Whether ``value`` is a real number (int, float, a numpy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class SparseEncoder:
    """Texts to BM25 sparse vectors for a collection with Qdrant's IDF modifier (module docstring).

    Args:
        tokenizer: the library's tokenizer (identifiers whole and split).
        k1, b: Lucene BM25 parameters (bm25s defaults 1.5 and 0.75, as the embedded backend).
        avgdl: average document length in tokens used by the length normalisation, > 0.

    Raises:
        InvalidRequestError: ``k1``, ``b`` or ``avgdl`` is not a real number (a ``str``, a ``bool``, ``None``) or
            is out of its range (``k1=-1``, ``b=2``, ``avgdl=0``, NaN); the message names the value, its type and
            the fix.
    """

    def __init__(
        self,
        tokenizer: TechnicalTokenizer | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        avgdl: float = DEFAULT_AVGDL,
    ) -> None:
        for name, value, rule, in_range, fix in (
            ("k1", k1, "a finite number >= 0", lambda v: v >= 0 and math.isfinite(v), "k1=1.5 (bm25s' default)"),
            ("b", b, "a number in [0, 1]", lambda v: 0 <= v <= 1, "b=0.75 (bm25s' default)"),
            (
                "avgdl",
                avgdl,
                "a finite number of tokens > 0",
                lambda v: v > 0 and math.isfinite(v),
                "avgdl= the memory's average chunk length (export-qdrant prints it)",
            ),
        ):
            if not (_real(value) and in_range(value)):  # a type or a range error: one message, with the fix
                raise InvalidRequestError(
                    f"{name} must be {rule}, got {type(value).__name__} {value!r:.60}; pass a float: {fix}"
                )
        self.tokenizer = tokenizer or TechnicalTokenizer()
        self.k1, self.b, self.avgdl = float(k1), float(b), float(avgdl)

    def document(self, text: str) -> tuple[list[int], list[float]]:
        """(uint32 indices ascending, float values): each distinct token's tf part (tokens colliding on one
        index add their term frequencies)."""
        tokens = self.tokenizer.tokenize(text)
        tf = Counter(token_index(t) for t in tokens)
        norm = self.k1 * (1 - self.b + self.b * len(tokens) / self.avgdl)
        indices = sorted(tf)
        return indices, [tf[i] / (tf[i] + norm) for i in indices]

    def query(self, text: str, tokens: Sequence[str] | None = None) -> tuple[list[int], list[float]]:
        """(indices, counts): a query token repeated counts once per occurrence, as in bm25s. ``tokens``: the
        text's tokens when already computed (``self.tokenizer.tokenize(text)``)."""
        counts = Counter(token_index(t) for t in (self.tokenizer.tokenize(text) if tokens is None else tokens))
        indices = sorted(counts)
        return indices, [float(counts[i]) for i in indices]

    def config(self) -> dict[str, Any]:
        """Parameters (saved in stats)."""
        return {
            "k1": self.k1,
            "b": self.b,
            "avgdl": self.avgdl,
            "method": "lucene",
            "tokenizer": self.tokenizer.config(),
            "index": "crc32",
        }


class QdrantFilter:
    """A resolved filter as the Qdrant engines take it (in place of a :class:`~hybrid_memory.search.engine.RowSet`).

    Attributes:
        filter: Qdrant REST JSON, never None (None means "no restriction" and is passed as None instead).
        population: for a scoped filter, ``(scope fields, the scope's REST filter)``: the points whose statistics a
            scoped search scores with (:mod:`hybrid_memory.backends.qdrant.scoped`); None: the collection's.

    ``len()`` is not a count (Qdrant counts on the server): 0 when the filter matches nothing by
    construction (the searcher then skips the engines), else 1.
    """

    __slots__ = ("filter", "population")

    def __init__(self, flt: Mapping[str, Any], population: tuple[dict[str, str], dict[str, Any]] | None = None) -> None:
        self.filter = dict(flt)
        self.population = population

    def __len__(self) -> int:
        return 0 if self.filter == {"must": [{"is_empty": {"key": "chunk_id"}}]} else 1

    def __repr__(self) -> str:
        return f"QdrantFilter({self.filter!r})"


def _flt(allowed: QdrantFilter | None) -> Mapping[str, Any] | None:
    return None if allowed is None else allowed.filter


class _Legs:
    """Runs the active legs of one query in one batched request, memoised on the :class:`Query` (both
    engines of one search read the same response). ``query.cache["qdrant_legs"]`` names the active legs
    (:meth:`QdrantBackend.prepare_query` sets it from the weights; default both); ``query.cache["qdrant_guard"]`` says
    whether the fusion reads the exact-match guard (set from the method there; default True).

    The legs return ids and scores only (no payload, no vectors): chunk ids come from the backend's id map
    (:meth:`QdrantBackend.keys`). Per query, ``query.cache`` keeps the query's tokens and sparse vector
    (tokenized once per search), each leg's hits, the cross-scores, the guard's inputs (``qdrant_df``: the
    identifiers' one-term hits, as engine ids; ``qdrant_whole``: the sparse hits holding every distinct query
    token, and the ids checked) and the surprises' inputs (``qdrant_top``: the sparse top hit's sparse indices;
    ``qdrant_n``: the filter's point count)."""

    def __init__(self, backend: QdrantBackend, embedder: Any) -> None:
        self.backend = backend
        self.embedder = embedder

    def vector(self, query: Query) -> np.ndarray:
        if query.vector is None:
            vector = np.asarray(self.embedder.embed_query(query.text), dtype=np.float32).reshape(1, -1)
            query.vector = l2_normalize(vector)[0]
        return query.vector

    def dense_list(self, query: Query) -> list[float]:
        """The unit query vector as a list of floats (what the engines take), once per query."""
        found = query.cache.get("qdrant_dense")
        if found is None:
            found = query.cache["qdrant_dense"] = self.vector(query).tolist()
        return found

    def tokens(self, query: Query) -> list[str]:
        """The query's tokens (the library's tokenizer), once per query."""
        tokens = query.cache.get("qdrant_query_tokens")
        if tokens is None:
            tokens = query.cache["qdrant_query_tokens"] = self.backend.encoder.tokenizer.tokenize(query.text)
        return tokens

    def identifiers(self, query: Query) -> list[str]:
        """What the query names for the exact-match guard (``TechnicalTokenizer.names``: its identifiers, else
        its one distinct token), once per query."""
        found = query.cache.get("qdrant_identifiers")
        if found is None:
            found = query.cache["qdrant_identifiers"] = self.backend.encoder.tokenizer.names(
                query.text, self.tokens(query)
            )
        return found

    def sparse(self, query: Query) -> tuple[list[int], list[float]]:
        """The sparse query vector, once per query: the token counts (:meth:`SparseEncoder.query`) for the ``bm25``
        vector (Qdrant's IDF modifier weighs them), or in a scoped search each count times the scope's idf, for the
        plain vector :data:`~hybrid_memory.backends.qdrant.collection.TF` (tokens the scope does not hold left out;
        :mod:`hybrid_memory.backends.qdrant.scoped`)."""
        vector = query.cache.get("qdrant_sparse")
        if vector is None:
            vector = self.backend.encoder.query(query.text, self.tokens(query))
            scope = query.cache.get("qdrant_scope")
            if scope is not None:
                n, dfs = scope[0], scope[1]
                kept = [(i, c * scope_idf(n, dfs[i])) for i, c in zip(*vector, strict=True) if dfs.get(i, 0) > 0]
                vector = ([i for i, _ in kept], [w for _, w in kept])
            query.cache["qdrant_sparse"] = vector
        return vector

    @property
    def local_dense(self) -> bool:
        """Whether a scoped search recomputes its dense scores (:meth:`exact_scores`): in qdrant-client's local mode,
        which renormalises its stored vectors in place on every dense search, so a scope's cosines moved by a float32
        ulp with the number of dense searches other scopes' writes ran
        (:func:`~hybrid_memory.backends.qdrant.scoped.canonical_unit`); Qdrant Edge and a server keep the vectors as
        written."""
        return bool(getattr(self.backend.collection, "local", False))

    def exact_scores(self, query: Query, scored: Sequence[Any], name: str = "sparse") -> list[Any]:
        """A scoped search's hits (``ScoredId`` tuples) with their scores computed here from the points' stored
        vectors. BM25 (``name`` ``"sparse"``): ``fsum_t q_t * value(t, d)`` (float64, correctly rounded, so
        independent of the order of the terms). Qdrant sums the float32 products in an order of its own choosing,
        which follows the collection's posting lists: measured on Qdrant Edge, a scope's score moved by one float32
        ulp when another scope's chunks were added. Dense (local mode only, :attr:`local_dense`): the correctly
        rounded inner product of the stored vector's :func:`~hybrid_memory.backends.qdrant.scoped.canonical_unit` row
        with the query's, rounded to float32. One ``retrieve`` of the hits'
        vectors (in process on Edge; one more round trip on a server). A point gone meanwhile keeps Qdrant's
        score."""
        if not scored:
            return list(scored)
        exact = {}
        pids = [pid for pid, _, _, _ in scored]
        if name == "sparse":
            weights = dict(zip(*self.sparse(query), strict=True))
            for record in self.backend.collection.retrieve(pids, vectors=[SPARSE], payload=False):
                if record.sparse:
                    exact[record.id] = math.fsum(
                        weights[i] * v for i, v in zip(*record.sparse, strict=True) if i in weights
                    )
        else:
            q = canonical_unit(np.asarray(self.dense_list(query), dtype=np.float32))[0].astype(np.float64)
            records = [
                r for r in self.backend.collection.retrieve(pids, vectors=[DENSE], payload=False) if r.dense is not None
            ]
            if records:
                rows = canonical_unit(np.asarray([r.dense for r in records], dtype=np.float32)).astype(np.float64)
                for record, row in zip(records, rows, strict=True):  # fsum: no BLAS blocking in the last bits
                    exact[record.id] = float(np.float32(math.fsum((row * q).tolist())))
        key = (lambda pid: pid) if not self.backend.uuid_ids else str
        return [(pid, exact.get(key(pid), score), payload, indices) for pid, score, payload, indices in scored]

    def using(self, query: Query) -> str:
        """The sparse vector the query's BM25 legs search: :data:`~hybrid_memory.backends.qdrant.collection.TF` in a
        scoped search (its own idf in the weights), else ``bm25``."""
        return TF if query.cache.get("qdrant_scope") is not None else SPARSE

    def scope(self, query: Query, allowed: QdrantFilter | None) -> tuple[int, dict[int, int], Any] | None:
        """A scoped search's statistics, read once per query from the backend's kept scope (built on first use):
        ``(N_s, {query sparse index: df_s}, the scope's VectorMoments or None)``; None for an unscoped search, or
        a collection without the plain BM25 vector (written before it: collection-wide statistics)."""
        if "qdrant_scope" in query.cache:
            return query.cache["qdrant_scope"]
        population = None if allowed is None else allowed.population
        backend = self.backend
        found = None
        if population is not None and backend.collection.tf and backend.scopes is not None:
            indices = backend.encoder.query(query.text, self.tokens(query))[0]
            found = backend.scopes.snapshot(population[0], population[1], indices)
            query.cache["qdrant_population"] = population[1]
        query.cache["qdrant_scope"] = found
        return found

    def hits(self, name: str, query: Query, k: int, allowed: QdrantFilter | None) -> list[Hit]:
        flt = _flt(allowed)
        scoped = self.scope(query, allowed) is not None
        key = repr(flt)
        cache = query.cache.setdefault("qdrant_hits", {})
        got = cache.get(name)
        if got is not None and got[0] == key and (got[1] >= k or len(got[2]) < got[1]):
            return got[2][:k]
        # a leg held for this filter at depth >= k, or one that returned fewer hits than it asked (it holds
        # every match), is not asked again when the other leg must go deeper (a tie at its cut)
        active = [
            n
            for n in query.cache.get("qdrant_legs", ("sparse", "dense"))
            if n == name
            or not (n in cache and cache[n][0] == key and (cache[n][1] >= k or len(cache[n][2]) < cache[n][1]))
        ]
        legs, names = [], []
        guard = bool(query.cache.get("qdrant_guard", True))
        whole = "sparse" in active and self.whole_test(query)  # a dense-only search tokenizes nothing
        presence = whole and self.backend.collection.terms
        with_tokens = whole and not presence
        for n in active:
            if n == "sparse":
                vector = self.sparse(query)
                if not vector[0]:
                    cache[n] = (key, k, [])
                    continue
                legs.append(Leg(self.using(query), vector, flt, k, (), tokens=with_tokens))
            else:
                dense = self.vector(query)
                if not np.any(dense):  # no direction: nothing, as DenseEngine
                    cache[n] = (key, k, [])
                    continue
                legs.append(Leg(DENSE, self.dense_list(query), flt, k, ()))
            names.append(n)
        identifiers = self.identifiers(query) if guard and "sparse" in names else []
        if legs:
            # the exact-match guard's document frequencies ride along: one-term queries over the collection,
            # cut at the legs' depth (> top_k)
            # and so do the chunks holding every distinct query token, when the collection has the presence
            # vector: one query with the legs' filter, cut at their depth
            backend = self.backend
            population = query.cache.get("qdrant_population") if scoped else None
            extra = [_df_leg(t, k, backend.collection.terms, population) for t in identifiers]
            if presence and "sparse" in names:
                extra.append(_presence_leg(_terms(self.tokens(query)), flt, k))
            found = backend.collection.query_batch(legs + extra)
            if identifiers:
                query.cache["qdrant_df"] = (
                    k,
                    [backend.engine_ids(f) for f in found[len(legs) : len(legs) + len(identifiers)]],
                )
            if len(extra) > len(identifiers):
                query.cache["qdrant_presence"] = (k, backend.engine_ids(found[-1]))
            found = found[: len(legs)]
            backend.learn(found)
            for n, scored in zip(names, found, strict=True):
                if scoped and (n == "sparse" or self.local_dense):
                    scored = self.exact_scores(query, scored, n)
                if backend.uuid_ids:
                    hits = [(engine_id(pid), score) for pid, score, _, _ in scored]
                else:  # format 2: the point id is the engine id
                    hits = [(pid, score) for pid, score, _, _ in scored]
                hits.sort(key=lambda h: (-h[1], h[0]))
                cache[n] = (key, k, hits)
                if n == "sparse" and with_tokens:  # which hits hold the whole query, for the guard
                    self._keep_vectors(query, scored)
        return cache[name][2][:k]

    def cross(self, name: str, query: Query, ids: np.ndarray) -> np.ndarray:
        """float64 (len(ids),): leg ``name``'s exact scores of engine ids. The first call of a query scores, in
        one batched request, each active leg over the candidates the other legs returned and it did not
        (restricted by ``has_id``; its own hits keep the scores it returned); later calls read that. With the
        exact-match guard on, the sparse leg also returns the sparse vectors of those candidates. A known id
        a leg does not return scores 0 for BM25 (no query term) and nan for the dense leg; an id no leg
        returned is asked for on its own."""
        ids = np.asarray(ids, dtype=np.int64)
        cache = query.cache.setdefault("qdrant_cross", {})
        wanted = set(ids.tolist())
        if name not in cache or not wanted <= cache[name][0]:
            self._score_union(name, query, wanted, cache)
        union, scores = cache[name]
        missing = 0.0 if name == "sparse" else np.nan
        return np.array([scores.get(i, missing if i in union else np.nan) for i in ids.tolist()], dtype=np.float64)

    def top_indices(self, query: Query, top: int) -> list[int] | None:
        """The ``bm25`` sparse indices of the sparse leg's top hit ``top`` (an engine id), for the sparse
        surprise; None when the point is gone (deleted meanwhile).

        On Qdrant Edge (in process) one ``retrieve`` of that point's sparse vector: 5-15 us on SciFact, where one
        more leg in the cross-score request cost 60 us (a sparse query restricted to the point: Qdrant looks up
        the idf of every query term). Through qdrant-client (a server: each request a round trip) the read rides
        in the cross-score request, one more leg restricted to the top returning its sparse vector, which is then
        made now instead of in the fusion step (the same request, earlier)."""
        held = query.cache.get("qdrant_top")
        if held is not None and held[0] == top:
            return held[1]
        backend = self.backend
        cache = query.cache.setdefault("qdrant_cross", {})
        if isinstance(backend.collection, EdgeCollection) or ("sparse" in cache and "dense" in cache):
            pids = backend.point_ids([top])
            query.cache["qdrant_top"] = (top, backend.collection.sparse_indices(pids[0]) if pids else None)
        else:
            self._score_union("sparse", query, set(), cache, top)
        return query.cache["qdrant_top"][1]

    def _top_leg(self, query: Query, pids: list[int | str]) -> Leg:
        """The sparse query restricted to the given point, returning its sparse indices (it holds a query token)."""
        return Leg(self.using(query), self.sparse(query), {"must": [{"has_id": pids}]}, 1, (), tokens=True)

    def _score_union(self, name: str, query: Query, wanted: set[int], cache: dict, top: int | None = None) -> None:
        hits = query.cache.get("qdrant_hits", {})
        known = self.backend._ids  # every hit was learned; an id it lacks was deleted (or never written)
        union = {doc for doc in wanted | {doc for entry in hits.values() for doc, _ in entry[2]} if doc in known}
        names = [n for n in query.cache.get("qdrant_legs", ("sparse", "dense")) if n in ("sparse", "dense")]
        if name not in names:
            names.append(name)
        sparse = self.sparse(query)
        with_tokens = self.guard_tokens(query)
        own = {n: dict(hits[n][2]) if n in hits else {} for n in names}
        legs, scored = [], []
        for n in names:
            targets = self.backend.point_ids(sorted(union - own[n].keys()))
            if not targets or (n == "sparse" and not sparse[0]):
                continue
            restrict = {"must": [{"has_id": targets}]}
            legs.append(
                Leg(self.using(query), sparse, restrict, len(targets), (), tokens=with_tokens)
                if n == "sparse"
                else Leg(DENSE, self.dense_list(query), restrict, len(targets), ())
            )
            scored.append(n)
        top_pids = self.backend.point_ids([top]) if top is not None else []
        if top_pids:  # the sparse surprise's read of the top hit's tokens rides along
            legs.append(self._top_leg(query, top_pids))
        found = self.backend.collection.query_batch(legs) if legs else []
        if top is not None:
            got = found.pop() if top_pids else []
            query.cache["qdrant_top"] = (top, got[0][3] if got else None)
        by_name = dict(zip(scored, found, strict=True))
        to_engine = engine_id if self.backend.uuid_ids else None
        for n in names:
            scores = own[n]
            got = by_name.get(n, [])
            if got and query.cache.get("qdrant_scope") is not None and (n == "sparse" or self.local_dense):
                got = self.exact_scores(query, got, n)
            scores.update(((pid if to_engine is None else to_engine(pid)), score) for pid, score, _, _ in got)
            if n == "sparse" and with_tokens:
                self._keep_vectors(query, by_name.get(n, []))
            cache[n] = (union, scores)

    def other_found(self, query: Query, name: str, allowed: QdrantFilter | None) -> bool:
        """Whether leg ``name`` ran for this query's filter and returned hits: when it did not, the fusion has one
        engine to weigh, and the other's surprise is not read (``fuse_adaptive`` calibrates two or more)."""
        got = query.cache.get("qdrant_hits", {}).get(name)
        return got is not None and bool(got[2]) and got[0] == repr(_flt(allowed))

    def allowed_count(self, query: Query, allowed: QdrantFilter | None) -> int:
        """``n`` of the surprises: the points the query may return (its filter's count, once per query and kept
        per filter by :meth:`CorpusStats.count`; every point without a filter)."""
        flt = _flt(allowed)
        held = query.cache.get("qdrant_n")
        key = repr(flt)
        if held is None or held[0] != key:
            held = query.cache["qdrant_n"] = (key, self.backend.calibration().count(flt))
        return held[1]

    def whole_test(self, query: Query) -> bool:
        """Whether this query needs the exact-match guard's whole-query test: the fusion reads the guard and the
        query has enough distinct tokens for its whole-query match."""
        return bool(query.cache.get("qdrant_guard", True)) and len(set(self.tokens(query))) >= MIN_TERMS

    def guard_tokens(self, query: Query) -> bool:
        """Whether this query's sparse hits should carry their sparse vectors for the whole-query test: only in
        a collection without the presence vector (written before it), which answers the test by a query."""
        return self.whole_test(query) and not self.backend.collection.terms

    def _keep_vectors(self, query: Query, scored: Sequence[Any]) -> None:
        """Note which sparse hits hold every distinct query token (their sparse indices are at hand), and which
        ids the note covers (a covered id absent from the holders holds at most some of the tokens)."""
        wanted = _terms(self.tokens(query))
        held, covered = query.cache.setdefault("qdrant_whole", (set(), set()))
        to_engine = engine_id if self.backend.uuid_ids else None
        for pid, _, _, indices in scored:
            doc = pid if to_engine is None else to_engine(pid)
            covered.add(doc)
            if _holds(indices or [], wanted):
                held.add(doc)


class QdrantSparseEngine:
    """BM25 on Qdrant behind the :class:`~hybrid_memory.search.engine.Engine` protocol (``allowed``: a
    :class:`QdrantFilter`)."""

    name = "sparse"
    lower_bound = 0.0

    def __init__(self, legs: _Legs) -> None:
        self.legs = legs
        self.backend = legs.backend

    def search(self, query: Query, k: int, allowed: QdrantFilter | None) -> list[Hit]:
        """See :meth:`Engine.search`; scores are Qdrant's idf-weighted sparse dot products (module docstring)."""
        return self.legs.hits("sparse", query, k, allowed)

    def score(self, query: Query, ids: np.ndarray) -> np.ndarray:
        """Exact BM25 scores of the int64 ``ids``, float64; 0 for a known id without a query term, nan for an
        unknown one. Restricted to the candidates (``has_id``); the collection's idf, or in a scoped search the
        scope's (see ``_Legs.cross`` and :mod:`hybrid_memory.backends.qdrant.scoped`)."""
        return self.legs.cross("sparse", query, ids)

    def exact_matches(
        self, query: Query, ids: np.ndarray, max_df: int, min_share: float = 0.25, min_terms: int = MIN_TERMS
    ) -> np.ndarray:
        """int64 (len(ids),): exact-match strength, the rule of ``BM25Index.exact_matches`` (rare identifiers
        +1 each; the whole query held, in order, by at most ``max_df`` candidates +(1 + identifiers)), with document
        frequencies read from Qdrant (a one-term sparse query, cut at ``max_df + 1``) and the whole-query test
        from the sparse vectors the sparse leg and its cross-scores returned."""
        ids = np.asarray(ids, dtype=np.int64)
        whole = query.cache.get("qdrant_whole")
        held = None
        presence = query.cache.get("qdrant_presence")
        if presence is not None and len(presence[1]) < presence[0]:
            held = presence[1]  # every chunk the filter allows that holds the whole query (fewer than the cut)
        elif whole is not None:
            scored = query.cache.get("qdrant_cross", {}).get("sparse", (set(),))[0]
            if set(ids.tolist()) <= whole[1] | scored:
                held = whole[0]  # a candidate the sparse queries scored but did not return holds no query token
        population = query.cache.get("qdrant_population")
        return self.backend.exact_matches(
            query.text,
            ids,
            max_df,
            min_share,
            min_terms,
            query.cache.get("qdrant_df"),
            held,
            query_tokens=self.legs.tokens(query),
            identifiers=self.legs.identifiers(query),
            population=population,
        )

    def surprise(self, query: Query, hits: Sequence[Hit], allowed: QdrantFilter | None) -> float | None:
        """The surprise of the top hit in nats, as ``BM25Index.surprise``
        (:func:`~hybrid_memory.engines.calibration.term_surprise`)::

            S = -(ln n + sum_t ln(df_t / N))

        over the distinct sparse indices of the query the top hit holds (its ``bm25`` indices:
        :meth:`_Legs.top_indices`); ``df_t`` the points holding index ``t`` and
        ``N`` the points of the collection (exact live counts, :class:`~hybrid_memory.backends.qdrant.calibration.
        CorpusStats`; tokens colliding on one crc32 index count as one, sharing its df); ``n`` the points the filter
        allows (a ``count``, kept per filter), ``N`` without one.

        Returns:
            nats; None without hits, when the top holds no query index (gone meanwhile), or when the dense leg
            returned nothing for this query (one engine to fuse: the fusion reads no surprise then).

        Raises:
            BackendUnavailableError: the collection could not be read (building the statistics, the request).
        """
        if not hits or not self.legs.other_found(query, "dense", allowed):
            return None
        indices = self.legs.top_indices(query, int(hits[0][0]))
        if not indices:
            return None
        # the query's distinct sparse indices the top holds (its indices ascending: a binary search each)
        count = len(indices)
        held = [w for w in self.legs.sparse(query)[0] if (j := bisect_left(indices, w)) < count and indices[j] == w]
        scope = query.cache.get("qdrant_scope")
        if scope is None:
            dfs, total = self.backend.calibration().dfs(held)
        else:  # a scoped search: the scope's own counts (hybrid_memory.backends.qdrant.scoped)
            dfs, total = [scope[1].get(i, 0) for i in held], scope[0]
        n = total if allowed is None else self.legs.allowed_count(query, allowed)
        # the top holds each of its indices: df >= 1 (0 only if another writer changed it since the last check)
        return term_surprise([max(d, 1) for d in dfs], total, n)


class QdrantDenseEngine:
    """Cosine search on Qdrant behind the :class:`~hybrid_memory.search.engine.Engine` protocol."""

    name = "dense"
    lower_bound = -1.0

    def __init__(self, legs: _Legs) -> None:
        self.legs = legs
        self.backend = legs.backend

    def search(self, query: Query, k: int, allowed: QdrantFilter | None) -> list[Hit]:
        """See :meth:`Engine.search`; an all-zero query vector returns nothing (as ``DenseEngine``)."""
        return self.legs.hits("dense", query, k, allowed)

    def score(self, query: Query, ids: np.ndarray) -> np.ndarray:
        """Cosines of the int64 ``ids`` with the query vector, float64 (nan for unknown ids)."""
        return self.legs.cross("dense", query, ids)

    def surprise(self, query: Query, hits: Sequence[Hit], allowed: QdrantFilter | None) -> float | None:
        """The surprise of the top hit in nats, as ``FaissIndex.surprise``
        (:func:`~hybrid_memory.engines.calibration.gaussian_surprise`): the chance cosines are normal with mean ``q .
        mu``
        and variance ``q' Sigma q``, the exact moments of the collection's dense vectors
        (:class:`~hybrid_memory.engines.calibration.VectorMoments`, kept client-side by
        :class:`~hybrid_memory.backends.qdrant.calibration.CorpusStats`: the same sums as the embedded backend's
        for the same vectors), among ``n`` points (the filter's count; the points with a dense vector without
        one). Costs one (dim + 1, dim) float32 matvec (68 us at 384-d on SciFact's machine).

        Returns:
            nats; None without hits, with fewer than two dense vectors, no spread, a dimension above
            :data:`~hybrid_memory.engines.calibration.MOMENTS_MAX_DIM`, or when the sparse leg returned nothing for this
            query (one engine to fuse: the fusion reads no surprise then).

        Raises:
            BackendUnavailableError: the collection could not be read (building the statistics).
        """
        if not hits or query.vector is None or not self.legs.other_found(query, "sparse", allowed):
            return None
        scope = query.cache.get("qdrant_scope")
        # a scoped search: the moments of the scope's own vectors (hybrid_memory.backends.qdrant.scoped)
        moments = self.backend.calibration().moments if scope is None else scope[2]
        if moments is None:
            return None
        chance = moments.chance(query.vector)
        if chance is None:
            return None
        n = moments.count if allowed is None else self.legs.allowed_count(query, allowed)
        return gaussian_surprise(hits[0][1], chance[0], chance[1], n)


_KIND_FIELD = {"keyword": "s", "float": "n", "integer": "i", "bool": "b"}
"""The payload sub-field (``qdrant_filters``' layout) an ``indexed_keys`` kind indexes."""

_DECLARED_KIND = {field: kind for kind, field in _KIND_FIELD.items()} | {"e": "any", "z": "any"}
"""The ``indexed_keys`` kind whose index answers a test on each payload sub-field (any kind indexes the markers
``e`` and ``z``; ``r`` and ``l``, equality with a non-integral number or a list, have none)."""


def _paths(node: Any) -> Iterator[str]:
    """Every payload path a Qdrant REST filter tests (``key`` of its conditions, ``is_empty`` included)."""
    if isinstance(node, Mapping):
        key = node.get("key")
        if isinstance(key, str):
            yield key
        for value in node.values():
            if isinstance(value, (Mapping, list)):
                yield from _paths(value)
    elif isinstance(node, list):
        for item in node:
            yield from _paths(item)


class QdrantBackend:
    """A memory's chunks in one Qdrant collection (see the module docstring).

    Build it with :meth:`edge` (Qdrant Edge shard in a directory) or :meth:`client` (a ``QdrantClient``, a URL,
    or ``":memory:"`` for qdrant-client's local mode), then give it to ``HybridMemory(backend=...)``.

    Args:
        collection: a :class:`~hybrid_memory.backends.qdrant.collection.Collection`.
        k1, b, avgdl: BM25 parameters of :class:`SparseEncoder`.
        indexed_keys: metadata keys to create payload indexes for (``{"service": "keyword", "severity":
            "float"}`` or a list of keys, indexed as keyword); the scope fields are always indexed.
        tokenizer: the tokenizer (default :class:`TechnicalTokenizer`).
        payload_indexes: create the payload indexes on open (default True; False only for throwaway
            collections such as tests, where they add some 0.2 s to opening a new Edge shard, 0.28 s against
            0.06 s, and filters give the same ids).

    Thread-safe: Qdrant serialises writes; the id map is a dict whose entries never change meaning (a point id
    is the uuid5 of its chunk id), so concurrent searches may fill it in any order.

    **The id map.** Searches read only ids and scores from Qdrant; the chunk ids come from a client-side map
    engine id -> chunk id, filled by this process's writes and, for a point it has not seen (written by
    another process, or before a reopen), by one ``retrieve`` of the unknown hits' ``chunk_id`` per search.
    Deletes through this backend drop their entries. So the map holds at most one entry per point this
    process wrote or found in a response, bounded by the points the collection has held (a point another
    process deleted keeps its entry, harmless: Qdrant no longer returns it); about 160 bytes an entry
    (tracemalloc, 20-character chunk ids: 157 bytes), ~160 MB at a million points.
    """

    def __init__(
        self,
        collection: Collection,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        avgdl: float = DEFAULT_AVGDL,
        indexed_keys: Mapping[str, str] | Sequence[str] = (),
        tokenizer: TechnicalTokenizer | None = None,
        payload_indexes: bool = True,
    ) -> None:
        self.collection = collection
        self.payload_indexes = bool(payload_indexes)
        self.encoder = SparseEncoder(tokenizer, k1=k1, b=b, avgdl=avgdl)
        keys = dict(indexed_keys) if isinstance(indexed_keys, Mapping) else dict.fromkeys(indexed_keys, "keyword")
        bad = {k: v for k, v in keys.items() if v not in ("keyword", "float", "integer", "bool")}
        if bad:
            raise InvalidRequestError(f"indexed_keys kinds must be keyword, float, integer or bool, got {bad}")
        self.indexed_keys = keys
        self.name = "qdrant-edge" if isinstance(collection, EdgeCollection) else "qdrant"
        self.dim: int | None = None
        self.exact_ranges: set[tuple[str, str]] | None = set()
        self._ids: dict[int, str] = {}
        self._warned: set[str] = set()
        """Payload paths :meth:`_warn_unindexed` has warned of."""
        self._decode_doc = functools.lru_cache(maxsize=PAYLOAD_CACHE)(_source_and_metadata)
        """``doc`` JSON text -> (source, metadata), for the result rows: keyed by the text itself, so it is never
        stale (a changed chunk has another text); bounded like the Edge payload cache."""
        self.uuid_ids = False
        """Whether the collection holds format-1 points (UUID ids), found by :meth:`open`."""
        self.corpus: CorpusStats | None = None
        self.scopes: ScopeRegistry | None = None
        """The kept scopes' statistics for scoped searches (:mod:`hybrid_memory.backends.qdrant.scoped`), made by
        :meth:`open`."""
        """The collection's corpus statistics for the default fusion's calibration (:meth:`open` makes it, the
        first search that reads it builds it: :mod:`hybrid_memory.backends.qdrant.calibration`)."""
        self.closed = False
        """True after :meth:`close` (until a later :meth:`open` succeeds): export_to_qdrant refuses it."""
        self.index_lock = ReadWriteLock()
        """Searches hold it shared (the protocol's; Qdrant applies writes itself, so no write holds it alone)."""
        self.executor = None
        """Qdrant runs both legs of a query in one batched request: no local thread pool."""

    @classmethod
    def edge(
        cls,
        path: str | Path,
        *,
        payload_cache: int = PAYLOAD_CACHE,
        payload_memory: str | None = "cached",
        search_threads: int | None = SEARCH_THREADS,
        **kwargs: Any,
    ) -> QdrantBackend:
        """A backend over a Qdrant Edge shard in the directory ``path`` (created when absent).

        Args:
            payload_cache, payload_memory, search_threads: the shard's options, see
                :class:`~hybrid_memory.backends.qdrant.collection.EdgeCollection` (``payload_cache``: points
                whose search-result payload this process keeps, 0 for none).
            **kwargs: as the constructor (``k1``, ``b``, ``avgdl``, ``indexed_keys``, ``payload_indexes``). A shard
                written by ``export-qdrant`` holds its export record
                (:mod:`~hybrid_memory.backends.qdrant.edge_info`): ``avgdl``, ``k1`` and ``b`` not given here are the
                record's, so writes are normalised as the copied points were; one given that differs from the
                record is used and logged as a warning (the shard then mixes two normalisations). A record that
                says the copy was interrupted (``complete: false``) is logged as a warning naming the fix
                (export again with ``--replace``, or remove the folder); the shard still opens.

        Raises:
            InvalidRequestError: ``path`` is a file, or is (or lies inside) an embedded memory's folder; a bad
                shard option.
            StoreFormatError: the shard's export record is damaged (the message names the file and the fix).
        """
        collection = EdgeCollection(
            path, payload_cache=payload_cache, payload_memory=payload_memory, search_threads=search_threads
        )
        from .edge_info import partial_export, read_export_info

        info = read_export_info(collection.path) if collection.path.is_dir() else None
        partial = partial_export(collection.path, info)
        if partial:
            logger.warning("%s", partial)
        written = info or {}  # the export record's BM25 parameters: none without a record
        for name in ("avgdl", "k1", "b") if written else ():
            if name not in kwargs:
                kwargs[name] = written[name]
            elif _real(kwargs[name]) and float(kwargs[name]) != written[name]:  # not a number: refused just below
                logger.warning(
                    "Qdrant Edge shard %s was written with %s=%s (its export record); opened with %s=%s, "
                    "so new writes are normalised differently from the copied points",
                    collection.path,
                    name,
                    written[name],
                    name,
                    kwargs[name],
                )
        return cls(collection, **kwargs)

    @property
    def path(self) -> Path | None:
        """The Edge shard's folder; None for a collection reached through qdrant-client."""
        return self.collection.path if isinstance(self.collection, EdgeCollection) else None

    @classmethod
    def client(
        cls,
        client_or_url: Any = ":memory:",
        *,
        collection: str = "hybrid_memory",
        api_key: str | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        write_ordering: str | None = None,
        **kwargs: Any,
    ) -> QdrantBackend:
        """A backend over a collection reached through ``qdrant_client``.

        Args:
            client_or_url: a ``QdrantClient``; a URL (``"http://qdrant:6333"``, with ``api_key``); or
                ``":memory:"`` / a local directory for the client's local mode.
            collection: the collection name.
            shard_number, replication_factor, write_consistency_factor: used when the collection is created.
            write_ordering: ``"weak"``, ``"medium"`` or ``"strong"`` for every write (Qdrant's write ordering).
            **kwargs: as the constructor (``k1``, ``b``, ``avgdl``, ``indexed_keys``).

        Raises:
            MissingDependencyError: qdrant-client is not installed.
            StoreBusyError: a local-mode directory another client holds open.
            InvalidRequestError: a host:port without its scheme, a URL whose scheme is not http or https, a wrong
                client type, a bad write_ordering, or a
                local-mode directory that is a file or lies inside an embedded memory's folder.
        """
        if write_ordering not in (None, "weak", "medium", "strong"):
            raise InvalidRequestError(f"write_ordering must be 'weak', 'medium' or 'strong', got {write_ordering!r}")
        if isinstance(client_or_url, str) and re.fullmatch(r"[\w.-]+:\d+(/.*)?", client_or_url):
            raise InvalidRequestError(
                f"{client_or_url!r} looks like a server address without its scheme: give the URL, "
                f"'http://{client_or_url}' (or a directory path for qdrant-client's local mode)"
            )
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", client_or_url) if isinstance(client_or_url, str) else None
        if scheme and scheme.group(1).lower() not in ("http", "https"):
            raise InvalidRequestError(
                f"{client_or_url!r} has the scheme {scheme.group(1)!r}: a Qdrant server's URL starts with 'http://' or "
                "'https://' (for a local-mode directory give a path without '://')"
            )
        if not isinstance(client_or_url, str) and not hasattr(client_or_url, "collection_exists"):
            raise InvalidRequestError(
                "client_or_url must be a qdrant_client.QdrantClient, a server URL ('http://host:6333'), "
                f"':memory:' or a local-mode directory, got {type(client_or_url).__name__}"
            )
        if isinstance(client_or_url, str):
            try:
                from qdrant_client import QdrantClient
            except ImportError as exc:  # pragma: no cover
                from ..._exceptions import missing_dependency

                raise missing_dependency("qdrant-client", "qdrant") from exc
            if scheme:  # http or https
                # no server version check: its failure is a UserWarning printed before our own clear error,
                # and a version mismatch is not this library's concern (the schema is checked on open)
                client = QdrantClient(url=client_or_url, api_key=api_key, check_compatibility=False)
            elif client_or_url == ":memory:":
                client = QdrantClient(":memory:")
            else:
                folder = check_local_mode_path(client_or_url)
                try:
                    client = QdrantClient(path=str(folder))
                except RuntimeError as exc:  # qdrant-client's portalocker lock: the folder is open elsewhere
                    if "already accessed" not in str(exc):
                        raise
                    raise StoreBusyError(
                        f"qdrant-client local-mode folder {folder} is open elsewhere (in this process or another); "
                        "local mode is opened by one client at a time: close the other memory on it, or use a Qdrant "
                        "server for several processes"
                    ) from exc
        else:
            client = client_or_url
        coll = ClientCollection(
            client,
            collection,
            shard_number=shard_number,
            replication_factor=replication_factor,
            write_consistency_factor=write_consistency_factor,
            ordering=write_ordering,
        )
        return cls(coll, **kwargs)

    # -- setup --------------------------------------------------------------------------------------
    def open(self, dim: int) -> None:
        """Create the collection or check its schema; create the payload indexes.

        Raises:
            StoreFormatError: the collection's schema differs.
            BackendUnavailableError: the server or folder could not be reached or opened (connection refused,
                timeout, HTTP error, an unusable path); the message names the collection and the cause.
        """
        # the validity times' float indexes are always made: as_of's order tests are exact only through them
        indexes = {f"{FIELDS}.{field_name(SYSTEM, f)}.n": "float" for f in TIME_FIELDS}
        if self.payload_indexes:
            indexes.update({f"{FIELDS}.{field_name(SYSTEM, f)}.s": "keyword" for f in SCOPE_FIELDS})
            indexes.update({"content_hash": "keyword", "seq": "integer", "chunk_id": "keyword"})
            for key, kind in self.indexed_keys.items():
                indexes[f"{FIELDS}.{field_name(METADATA, key)}.{_KIND_FIELD[kind]}"] = (
                    "keyword" if kind == "bool" else kind
                )
            # the present / null markers that is_empty reads (scopes, as_of, $exists, null): unindexed, Qdrant reads
            # every point's payload for them (qdrant_filters.marker_paths)
            marked = [(SYSTEM, f) for f in SCOPE_FIELDS + TIME_FIELDS] + [(METADATA, k) for k in self.indexed_keys]
            indexes.update({path: "bool" for namespace, key in marked for path in marker_paths(namespace, key)})
        try:
            self.collection.ensure(int(dim), indexes)
        except HybridMemoryError:
            raise
        except Exception as exc:  # the client's transport errors, or the shard folder's OS errors
            target = str(getattr(self.collection, "target", ""))
            if target.startswith(("http://", "https://")):  # a server: the URL and its fix, no folder clause
                where, fix = f"at {target}", "check that the server is running at that URL (and the API key)"
            else:  # qdrant-client's local mode, or an Edge shard's folder
                where = f"({target or getattr(self.collection, 'path', self.name)})"
                fix = "check that the folder is a directory this process can write"
            raise BackendUnavailableError(
                f"could not open the Qdrant collection {getattr(self.collection, 'name', '')!r} {where}: "
                f"{type(exc).__name__}: {exc}; {fix}"
            ) from exc
        # format 1 (UUID point ids) is read and written as it is: its points keep their ids
        self.uuid_ids = self.collection.holds_uuid_ids()
        if self.uuid_ids:
            logger.info("Qdrant collection %r holds UUID point ids (format 1): kept", self.collection.name)
        exact = {(SYSTEM, f) for f in TIME_FIELDS}
        # the metadata keys with a float index: declared now (created by ensure) or already held by the collection
        # (an earlier open, export-qdrant --index-key), so a key's order tests need not be declared on every open
        for name in getattr(self.collection, "float_indexed", ()):
            found = (
                field_key(name[len(FIELDS) + 1 : -2]) if name.startswith(f"{FIELDS}.") and name.endswith(".n") else None
            )
            if found is not None and found[0] == METADATA:
                exact.add(found)
        self.exact_ranges = None if getattr(self.collection, "local", False) else exact
        self.dim = int(dim)
        self.corpus = CorpusStats(self.collection, self.dim, shared=not isinstance(self.collection, EdgeCollection))
        self.scopes = ScopeRegistry(self.collection, self.dim, shared=not isinstance(self.collection, EdgeCollection))
        if not self.collection.tf and not self.uuid_ids:
            logger.info(
                "Qdrant collection %r has no plain BM25 vector (written before it): its scoped searches use "
                "the collection-wide idf",
                self.collection.name,
            )
        if self.path is not None and getattr(self.collection, "created", False):
            # a shard this open created holds no point: its statistics start exact at once (nothing to scroll) and
            # follow every write, so no later default search pays a scroll of every point (qdrant_calibration)
            self.corpus.current()
        elif self.path is not None:  # an Edge shard: the statistics its last close saved (qdrant_calibration)
            self.corpus.load(self.path)
        self.closed = False

    def calibration(self) -> CorpusStats:
        """The collection's corpus statistics, current (built on first use; on a shared collection rebuilt when
        another writer changed its point count): see :mod:`hybrid_memory.backends.qdrant.calibration`.

        Raises:
            InvalidRequestError: the backend was not opened (``open(dim)`` first).
        """
        if self.corpus is None:
            raise InvalidRequestError("the Qdrant backend is not open: call open(dim) (HybridMemory.qdrant does)")
        return self.corpus.current()

    def engines(self, embedder: Any) -> dict[str, Any]:
        """The sparse and dense engines, sharing one batched request per query."""
        legs = _Legs(self, embedder)
        return {"sparse": QdrantSparseEngine(legs), "dense": QdrantDenseEngine(legs)}

    # -- ids ----------------------------------------------------------------------------------------
    def pid(self, chunk_id: str) -> int | str:
        """The point id of a chunk in this collection: :func:`point_id`, or the UUID string in a format-1
        collection."""
        return str(point_uuid(chunk_id)) if self.uuid_ids else point_id(chunk_id)

    def point_ids(self, docs: Sequence[int]) -> list[int | str]:
        """Point ids of engine ids (in a format-1 collection, of those in the id map; the others are left out)."""
        if not self.uuid_ids:
            return list(docs)
        known = self._ids
        return [str(point_uuid(known[d])) for d in docs if d in known]

    def engine_ids(self, scored: Sequence[Any]) -> set[int]:
        """The engine ids of the points of a query's hits (``ScoredId`` tuples)."""
        if self.uuid_ids:
            return {engine_id(pid) for pid, _, _, _ in scored}
        return {pid for pid, _, _, _ in scored}

    def learn(self, found: Sequence[Sequence[Any]]) -> None:
        """Read the chunk ids of the hits of ``found`` (lists of ``ScoredId``) that the id map lacks, in one
        ``retrieve`` (a point deleted meanwhile stays unknown, and :meth:`keys` leaves it out)."""
        known = self._ids
        if self.uuid_ids:
            unknown = {engine_id(pid): pid for scored in found for pid, _, _, _ in scored}
            unknown = {d: pid for d, pid in unknown.items() if d not in known}
        else:
            unknown = {pid: pid for scored in found for pid, _, _, _ in scored if pid not in known}
        if unknown:
            for record in self.collection.retrieve(list(unknown.values()), payload=["chunk_id"]):
                known[engine_id(record.id)] = record.payload["chunk_id"]

    def keys(self, ids: Sequence[int]) -> dict[int, str]:
        """Engine ids -> chunk ids, for ids this process has written or seen in a response."""
        known = self._ids
        return {int(i): known[int(i)] for i in ids if int(i) in known}

    def exact_matches(
        self,
        text: str,
        ids: np.ndarray,
        max_df: int,
        min_share: float,
        min_terms: int,
        holders: tuple[int, list[set[int]]] | None = None,
        whole: set[int] | None = None,
        *,
        query_tokens: Sequence[str] | None = None,
        identifiers: Sequence[str] | None = None,
        population: Mapping[str, Any] | None = None,
    ) -> np.ndarray:
        """See :meth:`QdrantSparseEngine.exact_matches`.

        ``holders``: (limit, the engine ids of each identifier's one-term query hits over the collection),
        fetched with the legs; ``whole``: the engine ids among ``ids`` holding every distinct query token, read
        from the sparse vectors the sparse queries returned. None fetches what is missing here, in one batched
        request and one ``retrieve`` of the candidates' sparse vectors. ``query_tokens`` and ``identifiers``:
        the text's tokens and identifiers when already computed. ``population``: a scoped search's scope filter
        (the identifiers' document frequencies are the scope's), else None (the collection's).
        """
        tokenizer = self.encoder.tokenizer
        out = np.zeros(len(ids), dtype=np.int64)
        if not len(ids):
            return out
        docs = [int(i) for i in ids]
        order = list(tokenizer.tokenize(text) if query_tokens is None else query_tokens)
        if identifiers is None:
            identifiers = tokenizer.names(text, order)
        if identifiers:
            if holders is None or holders[0] <= max_df or len(holders[1]) != len(identifiers):
                found = self.collection.query_batch(
                    [_df_leg(t, max_df + 1, self.collection.terms, population) for t in identifiers]
                )
                holders = (max_df + 1, [self.engine_ids(f) for f in found])
            rare = 0
            for held in holders[1]:
                if 0 < len(held) <= max_df:
                    rare += 1
                    out += np.fromiter((d in held for d in docs), dtype=np.int64, count=len(docs))
            if rare and rare < min_share * tokenizer.content_runs(text):
                out[:] = 0
        if len(set(order)) >= min_terms:
            if whole is None:
                wanted = _terms(order)
                pids = self.point_ids(docs)
                if not pids:
                    whole = set()
                elif self.collection.terms:  # one presence query over the candidates
                    found = self.collection.query_batch(
                        [_presence_leg(wanted, {"must": [{"has_id": pids}]}, len(pids))]
                    )
                    whole = self.engine_ids(found[0])
                else:
                    records = self.collection.retrieve(pids, vectors=[SPARSE], payload=False)
                    whole = {engine_id(r.id) for r in records if r.sparse and _holds(r.sparse[0], wanted)}
            full = np.fromiter((d in whole for d in docs), dtype=bool, count=len(docs))
            if 0 < int(full.sum()) <= max_df:
                # and in the query's order, gaps allowed (BM25Index.holds_in_order), read from the stored texts
                held_docs = [d for d, f in zip(docs, full.tolist(), strict=True) if f]
                texts = {
                    engine_id(r.id): r.payload.get("text", "")
                    for r in self.collection.retrieve(self.point_ids(held_docs), payload=["text"])
                }
                in_order = {d: _in_order(tokenizer.tokenize(texts.get(d, "")), order) for d in held_docs}
                full = np.fromiter(
                    (f and in_order.get(d, False) for d, f in zip(docs, full.tolist(), strict=True)),
                    dtype=bool,
                    count=len(docs),
                )
                if identifiers or int(full.sum()) == 1:  # as BM25Index.exact_matches: plain words, one holder
                    out = out + full.astype(np.int64) * (1 + len(identifiers))
        return out

    # -- filters ------------------------------------------------------------------------------------
    def resolve(
        self,
        metadata_filter: Mapping[str, Any] | None,
        scope: Mapping[str, str] | None = None,
        as_of: float | None = None,
    ) -> QdrantFilter | None:
        """The Qdrant filter of the metadata filter, the bound scope fields and ``as_of`` (None: all).

        Raises:
            InvalidFilterError: malformed, or not expressible exactly on Qdrant (names the operator).
        """
        node = parse_filter(metadata_filter)
        sys_node = parse_filter(system_filter(scope, as_of), SYSTEM)
        parts = [n for n in (node, sys_node) if n != ("all",)]
        if not parts:
            return None
        flt = translate(parts[0] if len(parts) == 1 else ("and", tuple(parts)), self.exact_ranges)
        if flt is not None and node != ("all",):
            self._warn_unindexed(flt)
        if flt is None:
            return None
        population = None
        if scope:  # a scoped search scores with its scope's statistics (issue 35): the scope's points, all of them
            own = (
                flt
                if node == ("all",) and as_of is None
                else translate(parse_filter(system_filter(scope, None), SYSTEM), self.exact_ranges)
            )
            if own is not None:
                population = (dict(scope), dict(own))
        return QdrantFilter(flt, population)

    def _warn_unindexed(self, flt: Mapping[str, Any]) -> None:
        """Log a warning, once per payload path (a key and a kind of test) and process, for each metadata test of
        ``flt`` that no payload index answers (Qdrant then reads every point's payload: 170-300 ms a search at
        20,000 chunks on Edge), naming the declaration that indexes it. Not in qdrant-client's
        local mode nor with ``payload_indexes=False`` (no indexes either way), nor for the tests no declaration
        can index (equality with a non-integral number or a list)."""
        indexed = getattr(self.collection, "indexed", None)
        if not self.payload_indexes or self.exact_ranges is None or indexed is None:
            return
        prefix = f"{FIELDS}.{METADATA}"
        for path in _paths(flt):
            if not path.startswith(prefix) or path in indexed or path in self._warned:
                continue
            found = field_key(path[len(FIELDS) + 1 :].rsplit(".", 1)[0])
            kind = _DECLARED_KIND.get(path.rsplit(".", 1)[-1])
            if found is None or kind is None:
                continue
            self._warned.add(path)
            key = found[1]
            cost = "Qdrant reads every point's payload to answer it, on every search with this test"
            if kind == "integer" and (METADATA, key) in self.exact_ranges:
                # float-indexed already: an integral equality reaches k.i only for integers of 2**53 or more
                logger.warning(
                    "the filter tests metadata key %r for equality with an integer of magnitude 2**53 or "
                    "more, which its float payload index cannot answer (float64 does not hold such integers "
                    "exactly): %s",
                    key,
                    cost,
                )
                continue
            if kind == "any":
                declare = (
                    f"indexed_keys={{{key!r}: <the kind of its values>}} "
                    "(any kind also indexes its present / null markers)"
                )
            elif kind == "integer":  # a float index answers integral equality too (qdrant_filters._integers)
                declare = (
                    f"indexed_keys={{{key!r}: 'float'}}, which answers its equality and order tests alike (or "
                    f"export-qdrant --index-key {key}=float)"
                )
            else:
                declare = f"indexed_keys={{{key!r}: {kind!r}}} (or export-qdrant --index-key {key}={kind})"
            logger.warning(
                "the filter tests metadata key %r without a payload index: %s; declare the key when opening "
                "the memory: %s",
                key,
                cost,
                declare,
            )

    # -- reads --------------------------------------------------------------------------------------
    @staticmethod
    def _chunk(payload: Mapping[str, Any]) -> StoredChunk:
        """The stored chunk, read from the payload's ``doc`` JSON text (exact: Qdrant re-reads payload floats
        with up to 1 ULP of error, a string is kept as it is)."""
        doc = json.loads(payload["doc"])
        sys = doc["sys"]
        merged = sys.get("merged") or []
        return StoredChunk(
            chunk_id=payload["chunk_id"],
            text=payload["text"],
            source=doc["source"],
            metadata=doc["metadata"],
            **{name: sys.get(name) for name in (*SCOPE_FIELDS, *TIME_FIELDS)},
            content_hash=payload["content_hash"],
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
            superseded_by=sys.get("superseded_by"),
            merged_ids=[m[0] for m in merged],
            merged_sources=[m[1] for m in merged],
        )

    def payloads(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> stored payload (unknown ids left out)."""
        out: dict[str, dict[str, Any]] = {}
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), 1000):
            for record in self.collection.retrieve([self.pid(c) for c in ids[start : start + 1000]], payload=_STORED):
                out[record.payload["chunk_id"]] = record.payload
        return out

    def get(self, chunk_ids: Sequence[str], scope: Mapping[str, str] | None = None) -> dict[str, StoredChunk]:
        """Stored chunks by id (unknown ids, and ids outside the bound ``scope`` fields, left out)."""
        found = {cid: self._chunk(p) for cid, p in self.payloads(chunk_ids).items()}
        bound = as_scope(scope)
        if bound is None:
            return found
        return {cid: c for cid, c in found.items() if bound.contains(system_values(c))}

    def system_of(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """chunk_id -> system fields (scope, validity, superseded_by, merged) of the stored ids."""
        return {cid: system_values(c) for cid, c in self.get(chunk_ids).items()}

    def hit_rows(
        self, chunk_ids: Sequence[str], ids: Sequence[int] | None = None
    ) -> dict[str, tuple[str, str | None, dict[str, Any]]]:
        """chunk_id -> (text, source, metadata) of the stored chunks (unknown ids left out): what a search
        result shows, read in one ``retrieve`` of the ``text`` and ``doc`` payload keys (on Edge, points read
        before come from the payload cache). ``ids``: the chunks' engine ids, when at hand (a search's hits), so
        no point id is hashed. The ``doc`` JSON text is decoded once per distinct text (a bounded memo keyed by
        the text), and each row's metadata is a fresh copy, so a caller changing it changes nothing kept."""
        by_id = dict(zip(ids, chunk_ids, strict=True)) if ids is not None else {point_id(c): c for c in chunk_ids}
        pids = [self.pid(c) for c in by_id.values()] if self.uuid_ids else list(by_id)
        out: dict[str, tuple[str, str | None, dict[str, Any]]] = {}
        decode = self._decode_doc  # each distinct doc text decoded once; every row gets its own metadata copy
        for pid, payload in self.collection.payloads(pids, ("text", "doc")):
            source, metadata = decode(payload["doc"])
            out[by_id[pid if type(pid) is int else engine_id(pid)]] = (payload["text"], source, _json_copy(metadata))
        return out

    def find_hashes(
        self,
        digests: Sequence[str],
        scope_values: Mapping[str, str | None],
        exclude: collections.abc.Collection[str] = (),
    ) -> dict[str, list[tuple[str, float | None, float | None]]]:
        """content_hash -> ``[(chunk_id, valid_from, valid_to), ...]``, oldest (lowest ``seq``) first, of the
        stored chunks with that hash and exactly these scope values (a None field matches chunks without it),
        other than the ``exclude`` ids; the times read from the ``doc`` JSON text (exact)."""
        unique = sorted(set(digests))
        if not unique:
            return {}
        must = [{"key": "content_hash", "match": {"any": unique}}, *self._exact_scope(scope_values, None)]
        skip = set(exclude)
        rows: dict[str, list[tuple[int, str, float | None, float | None]]] = {}
        offset = None
        while True:
            records, offset = self.collection.scroll(
                {"must": must}, 1000, offset, ["content_hash", "chunk_id", "seq", "doc"]
            )
            for r in records:
                chunk_id = r.payload["chunk_id"]
                if chunk_id not in skip:
                    sys = json.loads(r.payload["doc"])["sys"]
                    rows.setdefault(r.payload["content_hash"], []).append(
                        (int(r.payload["seq"]), chunk_id, sys.get("valid_from"), sys.get("valid_to"))
                    )
            if offset is None:
                break
        return {digest: [(cid, start, end) for _, cid, start, end in sorted(found)] for digest, found in rows.items()}

    def nearest(
        self,
        vector: np.ndarray,
        scope_values: Mapping[str, str | None],
        k: int,
        span: tuple[float, float | None] | None = None,
    ) -> list[tuple[str, float, str]]:
        """``[(chunk_id, cosine, text)]`` of the ``k`` stored chunks nearest to the float32 unit ``vector`` among
        those with exactly these scope values (a None field: chunks without it) whose validity covers ``span``
        (None: any), best first."""
        found = self.collection.query_batch(
            [
                Leg(
                    DENSE,
                    np.asarray(vector, dtype=np.float32).tolist(),
                    {"must": self._exact_scope(scope_values, span)},
                    k,
                    ("chunk_id", "text"),
                )
            ]
        )[0]
        return [(p["chunk_id"], score, p["text"]) for _, score, p, _ in found]

    def _exact_scope(
        self, scope_values: Mapping[str, str | None], span: tuple[float, float | None] | None
    ) -> list[dict[str, Any]]:
        must = []
        for name in SCOPE_FIELDS:
            path = f"{FIELDS}.{field_name(SYSTEM, name)}"
            value = scope_values.get(name)
            must.append(
                {"is_empty": {"key": f"{path}.e"}} if value is None else {"key": f"{path}.s", "match": {"value": value}}
            )
        if span is not None:  # the validity covers the span: the system filter of hybrid_memory.dedup
            node = parse_filter(covering_filter(span), SYSTEM)
            covering = translate(node, self.exact_ranges)
            if covering is not None:  # translate gives None for no restriction; a covering filter always has one
                must.append(covering)
        return must

    def count(self, resolved: QdrantFilter | None) -> int:
        """Exact number of points matching the resolved filter."""
        return self.collection.count(_flt(resolved))

    def _order(self, resolved: QdrantFilter | None) -> list[tuple[int, str]]:
        """(seq, chunk_id) of every chunk matching the filter, in first-insertion order."""
        order: list[tuple[int, str]] = []
        offset = None
        while True:
            records, offset = self.collection.scroll(_flt(resolved), 10_000, offset, ["chunk_id", "seq"])
            order.extend((int(r.payload["seq"]), r.payload["chunk_id"]) for r in records)
            if offset is None:
                break
        order.sort()
        return order

    def page_chunks(
        self, resolved: QdrantFilter | None, after: int, limit: int
    ) -> tuple[list[StoredChunk], int | None]:
        """Keyset paging in :meth:`iter_chunks` order: up to ``limit`` chunks whose ``seq`` is above ``after``
        (-1: from the start), and the ``seq`` of the last one when more follow (else None); a chunk deleted
        between the id scroll and the read is left out."""
        rest = [(seq, cid) for seq, cid in self._order(resolved) if seq > after]
        batch = rest[:limit]
        found = self.get([cid for _, cid in batch])
        page = [found[cid] for _, cid in batch if cid in found]
        return page, (batch[-1][0] if len(rest) > limit else None)

    def iter_chunks(self, resolved: QdrantFilter | None, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Chunks matching the filter in order of first insertion (``seq``, then chunk id): the matching ids
        and their order are read first, then the chunks in batches, each version the one stored when its batch
        is read; a chunk deleted meanwhile is skipped."""
        order = self._order(resolved)
        for start in range(0, len(order), batch_size):
            batch = [cid for _, cid in order[start : start + batch_size]]
            found = self.get(batch)
            for cid in batch:
                if cid in found:
                    yield found[cid]

    # -- writes -------------------------------------------------------------------------------------
    def _payload(self, chunk: StoredChunk, seq: int) -> dict[str, Any]:
        system = {name: getattr(chunk, name) for name in (*SCOPE_FIELDS, *TIME_FIELDS)}
        sys = {
            **system,
            "superseded_by": chunk.superseded_by,
            "merged": [[i, s] for i, s in zip(chunk.merged_ids, chunk.merged_sources, strict=True)],
        }
        doc = {
            "source": chunk.source,
            "metadata": chunk.metadata,
            "sys": sys,
            "created_at": chunk.created_at,
            "updated_at": chunk.updated_at,
        }
        return {
            "chunk_id": chunk.chunk_id,
            "text": chunk.text,
            "content_hash": chunk.content_hash,
            "seq": seq,
            "doc": json.dumps(doc, ensure_ascii=False),
            FIELDS: filterable_fields(chunk.metadata, system),
        }

    def write(self, versions: Sequence[ChunkVersion], seqs: Mapping[str, int] | None = None) -> None:
        """Write chunk versions: with a vector, one batched upsert (vectors and payload; an all-zero vector is
        left out, so the point has no dense vector: never returned by the dense leg, nan as a dense cross-score,
        the embedded rule of :mod:`hybrid_memory.engines.dense.index`); without, the payload is replaced and the stored
        vectors are kept. ``seqs``: the first-insertion order of chunks already
        stored (new chunks get the current time in nanoseconds, increasing within the batch)."""
        seqs = dict(seqs or {})
        known = self._ids
        for version in versions:
            cid = version.chunk.chunk_id
            other = known.get(point_id(cid))
            if other is not None and other != cid:
                raise InvalidRequestError(
                    f"chunk ids {cid!r} and {other!r} map to the same Qdrant point id (the top 63 bits of their "
                    "uuid5 collide, about one pair in 10^10 at a million chunks); give one of them another id"
                )
        base = time.time_ns()
        points: list[Point] = []
        for j, version in enumerate(versions):
            chunk = version.chunk
            seq = seqs.get(chunk.chunk_id, base + j)
            payload = self._payload(chunk, seq)
            pid = self.pid(chunk.chunk_id)
            if version.vector is None:
                try:
                    if self.scopes is None:
                        self.collection.set_payload(pid, payload)
                    else:  # a kept scope the point enters or leaves is counted anew
                        self.scopes.set_payload(
                            pid, payload, functools.partial(self.collection.set_payload, pid, payload)
                        )
                finally:  # even when it raised: it may have been applied (a server that timed out after it)
                    if self.corpus is not None:
                        self.corpus.touch()
            else:
                dense = np.asarray(version.vector, dtype=np.float32)
                # an all-zero vector has no direction: written without one, so it is never dense evidence
                points.append(
                    Point(pid, dense.tolist() if np.any(dense) else None, self.encoder.document(chunk.text), payload)
                )
        stats, scopes = self.corpus, self.scopes
        upsert = (
            self.collection.upsert if scopes is None else functools.partial(scopes.upsert, write=self.collection.upsert)
        )
        for start in range(0, len(points), 256):
            if stats is None:
                upsert(points[start : start + 256])
            else:  # the calibration statistics (and the kept scopes') count the old vectors out and the new in
                stats.upsert(points[start : start + 256], upsert)
        known = self._ids
        for version in versions:  # the id map learns every point written (searches then read no payload)
            cid = version.chunk.chunk_id
            known[point_id(cid)] = cid

    def delete(self, chunk_ids: Sequence[str]) -> int:
        """Delete chunks by id (unknown ids are no error: left out). Returns how many were stored (one
        ``retrieve`` of their ``chunk_id`` first)."""
        asked = list(dict.fromkeys(self.pid(c) for c in chunk_ids))
        held = {
            r.payload["chunk_id"]
            for start in range(0, len(asked), 1000)
            for r in self.collection.retrieve(asked[start : start + 1000], payload=["chunk_id"])
        }
        ids = [self.pid(c) for c in chunk_ids if c in held]
        stats, scopes = self.corpus, self.scopes
        delete = (
            self.collection.delete
            if scopes is None
            else functools.partial(scopes.delete, delete=self.collection.delete)
        )
        for start in range(0, len(ids), 1000):
            if stats is None:
                delete(ids[start : start + 1000])
            else:
                stats.delete(ids[start : start + 1000], delete)
        for c in chunk_ids:
            self._ids.pop(point_id(c), None)
        return len(held)

    def vectors(self, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """chunk_id -> stored dense vector, float32 (dim,)."""
        out = {}
        for record in self.collection.retrieve([self.pid(c) for c in chunk_ids], vectors=True):
            if record.dense is not None:
                out[record.payload["chunk_id"]] = np.asarray(record.dense, dtype=np.float32)
        return out

    def stats(self) -> dict[str, Any]:
        """Backend name, collection, points, BM25 configuration (the ``avgdl`` writes use, tokens), indexed keys
        (declared on this open), ``range_filter_keys`` (the metadata keys order filters may use: a float payload index
        declared or already held by the collection; None in qdrant-client's local mode, where every key may);
        for an Edge shard also ``export``: its export record
        (:func:`~hybrid_memory.backends.qdrant.edge_info.read_export_info`:
        source memory, chunks copied, whether the copy completed, avgdl; None when ``export-qdrant`` did not
        write the shard) and ``export_warning``: for an interrupted copy (``complete: false``) the warning that it
        lacks chunks and how to write it again (:func:`~hybrid_memory.backends.qdrant.edge_info.partial_export`), else
        None)."""
        ranges = self.exact_ranges
        out = {
            "backend": self.name,
            "collection": getattr(self.collection, "name", None),
            "points": self.collection.count(None),
            "bm25": self.encoder.config(),
            "indexed_keys": dict(self.indexed_keys),
            # the metadata keys $gt / $gte / $lt / $lte may filter on: a float payload index, declared on this
            # open or held by the collection; None where every key may (qdrant-client's local mode)
            "range_filter_keys": None if ranges is None else sorted(k for ns, k in ranges if ns == METADATA),
        }
        if self.path is not None:
            from .edge_info import partial_export, read_export_info

            export = read_export_info(self.path)
            out["export"] = export
            out["export_warning"] = partial_export(self.path, export)
        return out

    def close(self) -> None:
        """Close the collection (``closed`` becomes True). An Edge shard's calibration statistics, when built, are
        saved beside it first, so its next open reads them instead of scrolling every point
        (:meth:`CorpusStats.save <hybrid_memory.backends.qdrant.calibration.CorpusStats.save>`); a failure to save
        is logged, and the next open builds them."""
        if self.path is not None and self.corpus is not None and not self.closed:
            try:
                self.corpus.save(self.path)
            except OSError as exc:
                logger.warning(
                    "could not save the calibration statistics beside %s (%s): the next open builds them",
                    self.path,
                    exc,
                )
        self.collection.close()
        self.closed = True

    # -- the rest of the Backend protocol -------------------------------------------------------------
    def embedder_for(self, embedder: Embedder | None) -> Embedder:
        """``embedder``, or the offline all-MiniLM-L6-v2 for None (its dimension is checked by :meth:`open`).

        Raises:
            InvalidRequestError: ``embedder`` does not follow the Embedder protocol.
        """
        if embedder is None:
            return OnnxEmbedder()
        check_embedder(embedder)
        return embedder

    def tokenize(self, text: str) -> list[str]:
        """The BM25 tokens of ``text`` (the encoder's tokenizer)."""
        return self.encoder.tokenizer.tokenize(text)

    def catch_up(self) -> bool:
        """Nothing to follow: the collection is the one copy (returns False)."""
        return False

    def prepare_query(self, query: Query, hybrid_params: Any) -> Query:
        """Announce the legs the weights run (``qdrant_legs``: a leg of weight 0 is not requested) and whether the
        fusion reads the exact-match guard (``qdrant_guard``: only the adaptive fusion does, the others need not
        fetch its inputs)."""
        query.cache["qdrant_legs"] = tuple(
            name
            for name, w in (("sparse", hybrid_params.sparse_weight), ("dense", hybrid_params.dense_weight))
            if w > 0
        )
        query.cache["qdrant_guard"] = FUSION_METHODS[hybrid_params.fusion].identifiers
        return query

    def holds_metadata_key(self, name: str, scope: Mapping[str, str] | None, catch_up: bool = False) -> bool:
        """Whether some chunk in ``scope`` has metadata key ``name``: one count of ``{name: {"$exists": True}}``."""
        return self.count(self.resolve({name: {"$exists": True}}, scope, None)) > 0

    def listing(
        self, metadata_filter: Mapping[str, Any] | None, scope: Mapping[str, str] | None, as_of: float | None
    ) -> QdrantFilter | None:
        """As :meth:`resolve`: listings and searches read the same Qdrant filter."""
        return self.resolve(metadata_filter, scope, as_of)

    def chunk_hashes(self, scope: Mapping[str, str] | None) -> dict[str, str]:
        """chunk_id -> content hash of every stored chunk in ``scope``, in :meth:`iter_chunks` order."""
        return {c.chunk_id: c.content_hash for c in self.iter_chunks(self.resolve(None, scope, None))}

    def change_position(self) -> None:
        """None: unknown, read again every time. Qdrant exposes no position that moves on every committed write
        of every client (a write's ``operation_id`` is returned to its own writer only; collection info counts
        points, which an upsert of a new text does not change), and a server collection or shard may be written
        by other clients, so a counter of this process's writes would miss theirs."""
        return None

    def apply_write(
        self,
        chunk_ids: Sequence[str],
        plan: Callable[[Mapping[str, StoredState]], P],
        closes: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> P:
        """Read the stored payloads of ``chunk_ids`` and of the ``closes`` ids, plan the write against them, and
        write the plan's versions in one :meth:`write` (each keeps its first-insertion ``seq`` and
        ``created_at``; an unchanged text keeps its vectors). Two processes writing the same chunk id race (the
        last upsert wins): the caller serialises writes within the process."""
        payloads = self.payloads([*chunk_ids, *(cid for cid, _ in closes)])
        stored = {cid: self._chunk(p) for cid, p in payloads.items()}
        made = plan({cid: (stored[cid].content_hash, system_values(stored[cid])) for cid in chunk_ids if cid in stored})
        items = made.items
        vector_of = dict(zip(made.changed, made.vectors, strict=True))
        now = time.time()
        versions = []
        for i, c in enumerate(items):
            if i in made.dropped:
                continue
            prev = stored.get(c.chunk_id)
            system = made.system(i)
            version = StoredChunk(
                **c.model_dump(),
                content_hash=made.hashes[i],
                created_at=prev.created_at if prev else now,
                updated_at=now,
                superseded_by=system["superseded_by"],
                merged_ids=[m[0] for m in system["merged"]],
                merged_sources=[m[1] for m in system["merged"]],
            )
            versions.append(ChunkVersion(version, vector_of.get(i)))
        targets = made.merge_targets()
        if targets:
            more = self.payloads(list(targets))
            payloads.update(more)
            for cid, payload in more.items():
                target = self._chunk(payload)
                versions.append(
                    ChunkVersion(
                        target.model_copy(
                            update={
                                "merged_ids": [*target.merged_ids, *(r[0] for r in targets[cid])],
                                "merged_sources": [*target.merged_sources, *(r[1] for r in targets[cid])],
                            }
                        ),
                        None,
                    )
                )
        for cid, update in closes:
            versions.append(ChunkVersion(stored[cid].model_copy(update=dict(update)), None))
        seqs = {cid: int(p["seq"]) for cid, p in payloads.items()}
        self.write(versions, seqs)
        logger.debug(
            "stored %d chunks on %s (%d vectors written, %d duplicates dropped)",
            len(items),
            self.name,
            len(made.changed),
            len(made.dropped),
        )
        return made

    def near_search(self, tokenize: Callable[[str], list[str]], cosine_floor: float) -> NearSearch:
        """The 5 nearest stored chunks of exactly the scope whose validity covers the span: the dense leg with
        both as its filter (:meth:`nearest`), as the embedded backend's near-duplicate search."""

        def search(vector: np.ndarray, key: tuple, span: tuple) -> list[tuple[str, float, list[str]]]:
            found = self.nearest(vector, dict(zip(SCOPE_FIELDS, key, strict=True)), 5, span)
            return [(cid, score, tokenize(text)) for cid, score, text in found]

        return search

    @contextlib.contextmanager
    def bulk(self, closed: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Nothing to defer: Qdrant indexes as it stores."""
        yield

    def flush(self) -> None:
        """Nothing runs in the background here."""

    def persist(self) -> None:
        """Nothing to save: Qdrant stored every write when it returned."""

    def bm25_params(self) -> dict[str, float]:
        """The :class:`SparseEncoder`'s ``{"k1", "b", "avgdl"}`` (what sparse vectors are written with)."""
        encoder = self.encoder
        return {"k1": float(encoder.k1), "b": float(encoder.b), "avgdl": float(encoder.avgdl)}

    def reopen_hint(self) -> str:
        """How to open this memory again: on the same Qdrant Edge shard or collection."""
        shard = self.path
        if shard is not None:
            return f"open it again with HybridMemory.qdrant(edge_path={str(shard)!r})"
        collection = getattr(self.collection, "name", "hybrid_memory")
        target = str(getattr(self.collection, "target", ""))
        target = target.removeprefix("local mode ")  # qdrant-client's local mode: its folder, or :memory:
        if target in ("", ":memory:"):
            return "a qdrant-client ':memory:' collection's chunks are gone with it"
        return f"open it again with HybridMemory.qdrant({target!r}, collection={collection!r})"
