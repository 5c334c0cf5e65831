"""Typed records for what crosses the JSON edge: chunks in, search requests in, search responses out.

Field names of :class:`SearchRequest` and :class:`SearchResponse` are the wire format agents use::

    {"query_id": "mem_req_99214", "search_text": "HTTP 504 ...", "top_k": 5,
     "hybrid_params": {"dense_weight": 0.6, "sparse_weight": 0.4, "rrf_k_constant": 60},
     "metadata_filter": {"environment": "production"}}

``hybrid_params.fusion`` (optional) names the fusion method; the default, ``"adaptive"``, ranks by a
query-adaptive convex combination of normalised scores with an exact-match guard, and ``"rrf"`` is
plain weighted Reciprocal Rank Fusion. Every result carries ``rrf_score`` whatever the method, and ``score``,
the value the list is ordered by, when the method is not RRF; the response names the method that ran
(``fusion``) and the per-engine weights it used (``effective_weights``, convex: summing to 1 for every method).
"""

from __future__ import annotations

import difflib
import math
import reprlib
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import limits
from ._exceptions import InvalidRequestError
from .fusion import DEFAULT_FUSION, DEFAULT_RRF_K, FUSION_METHODS
from .limits import MAX_SEARCH_TEXT_CHARS, MAX_TOP_K  # re-exported: they were first defined here
from .temporal import iso_utc, to_timestamp

__all__ = [
    "MAX_SEARCH_TEXT_CHARS",
    "MAX_TOP_K",
    "MAX_WEIGHT",
    "SCOPE_FIELDS",
    "TIME_FIELDS",
    "Chunk",
    "HybridParams",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "StoredChunk",
]

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 80, 80, 4


def validation_message(exc: ValidationError, what: str) -> str:
    """One line naming each invalid field of a pydantic error: ``invalid chunk: text: ... (got '')``.

    The offending input is shown shortened (``reprlib``: 80 characters, 4 levels), so a 200,000-character
    or 5,000-level-deep value gives a readable message instead of a huge one or a RecursionError."""
    parts = []
    for error in exc.errors()[:10]:
        field = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")  # pydantic's prefix for our validators' messages
        if "got " not in message:  # the library's own messages already show the value
            message = f"{message} (got {_SHORT.repr(error.get('input'))})"
        if error["type"] == "extra_forbidden" and error["loc"]:
            message += _unknown_field_hint(exc.title, error["loc"])
        # a whole-model check (no field) is named by ``what`` already, in the prefix: not twice
        parts.append(f"{field}: {message}" if field else message)
    return f"invalid {what}: " + "; ".join(parts)


def _unknown_field_hint(title: str, loc: tuple) -> str:
    """For a misspelt or misplaced field: the closest field name and the model's fields (``did you mean
    'user_id'? the fields are ...``); a chunk's message adds that other keys go in its metadata. Empty when the
    model is not one of this module's."""
    model = globals().get(title)
    for part in loc[:-1]:  # down to the nested model holding the field (hybrid_params.fusin -> HybridParams)
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        model = field.annotation if field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return ""
    fields, name = list(model.model_fields), str(loc[-1])
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.7)
    if not close:  # filter -> metadata_filter, top -> top_k: one field that ends or starts with the name
        close = [f for f in fields if f.endswith("_" + name) or f.startswith(name + "_")][:2]
    hint = f" (did you mean {close[0]!r}?)" if len(close) == 1 else ""
    where = "; other keys go in metadata" if model is Chunk else ""
    return f"{hint}; the fields are {', '.join(fields)}{where}"


def make_chunk(data: Chunk | Mapping[str, Any], what: str = "chunk") -> Chunk:
    """Validate a chunk. Raises InvalidRequestError naming the bad field (never a raw pydantic error)."""
    if isinstance(data, Chunk):
        return data
    try:
        return Chunk.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequestError(validation_message(exc, what)) from exc


MAX_WEIGHT = 1e6
"""Largest ``dense_weight`` / ``sparse_weight``. Only the ratio of the two weights matters to the ranking;
the bound keeps the fused score finite (two weights of 1e308 with ``rrf_k_constant`` 0 summed to inf)."""


def _encodable(value: str, field: str) -> str:
    """Refuse strings that cannot be stored whole: lone surrogates such as '\\ud800' (not UTF-8) and NUL
    characters ('\\x00': SQLite's text functions and its command-line shell stop at the first NUL, so the text
    would not come back whole from every reader of the store). Refused, not stripped: nothing is changed
    silently; the message names the position and the fix."""
    position = value.find("\x00")
    if position >= 0:
        raise ValueError(
            f"{field} contains a NUL character ('\\x00') at position {position}; remove it "
            f"(e.g. {field}.replace('\\x00', '')): SQLite's text functions stop at NUL"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{field} is not valid Unicode text ({exc.reason} at position {exc.start}: a lone surrogate "
            f"{value[exc.start]!r}, which UTF-8 cannot encode); remove it, or decode the original bytes as UTF-8 "
            "(bytes.decode('utf-8', errors='replace') turns bad bytes into U+FFFD)"
        ) from exc
    return value


SCOPE_FIELDS = ("tenant", "user_id", "agent_id", "session_id")
"""The scope fields of a chunk: who the memory belongs to (see :mod:`hybrid_memory.scopes`)."""
TIME_FIELDS = ("valid_from", "valid_to")
"""The event-time fields of a chunk (see :mod:`hybrid_memory.temporal`)."""


def _scope_value(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    if not value:
        raise ValueError(f"{field} must not be empty; leave it out (None) for no {field}")
    if not value.strip():
        raise ValueError(
            f"{field} must not be blank (white space only), got {value!r}; leave it out (None) for no {field}"
        )
    if "\x00" in value:
        raise ValueError(
            f"{field} holds a NUL character at position {value.index(chr(0))}; remove it, or leave it out "
            f"(None) for no {field}"
        )
    return _encodable(value, field)


def _when(seconds: float) -> str:
    """An instant for messages: ISO 8601 UTC and the Unix seconds, ``2024-06-01T00:00:00Z (Unix 1717200000)``."""
    exact = f"{seconds:.0f}" if float(seconds).is_integer() else repr(seconds)
    shown = iso_utc(seconds)
    return shown if shown.endswith("(Unix seconds)") else f"{shown} (Unix {exact})"


class Chunk(BaseModel):
    """A unit of memory as it goes in.

    Besides text, source and metadata, a chunk carries optional *scope* fields (``tenant``, ``user_id``,
    ``agent_id``, ``session_id``: stored in indexed columns and enforced by :meth:`HybridMemory.scoped`) and
    optional *event time* (``valid_from`` / ``valid_to``: when the fact was true, Unix seconds, the
    half-open interval ``[valid_from, valid_to)``; None is unbounded). Ingestion time is separate
    (``created_at`` / ``updated_at`` of :class:`StoredChunk`).
    """

    model_config = ConfigDict(extra="forbid")

    chunk_id: str = Field(min_length=1)
    """Unique id chosen by the caller; identity everywhere (fusion, upsert, delete). Not blank, no NUL."""
    text: str
    """The text both engines index; must contain something other than white space; no NUL character; at most
    :data:`~hybrid_memory.limits.MAX_CHUNK_TEXT_CHARS` (1,000,000) characters."""
    source: str = ""
    """Where the text came from (file path, URL, conversation id); no NUL character."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """JSON values (str, int, float, bool, None, lists) that metadata filters match against."""
    tenant: str | None = None
    """Tenant (organisation, workspace) the chunk belongs to; None: no tenant."""
    user_id: str | None = None
    """End user the chunk belongs to; None: not user-specific."""
    agent_id: str | None = None
    """Agent that owns the chunk; None: any agent."""
    session_id: str | None = None
    """Conversation or run the chunk came from; None: not session-specific."""
    valid_from: float | None = None
    """Event time from which the fact holds, Unix seconds (a datetime or ISO 8601 string is converted;
    naive datetimes are read as UTC); None: since always."""
    valid_to: float | None = None
    """Event time from which the fact no longer holds (exclusive), Unix seconds; None: still holds."""

    @field_validator("tenant", "user_id", "agent_id", "session_id")
    @classmethod
    def _scope_usable(cls, value: str | None, info: Any) -> str | None:
        return _scope_value(value, info.field_name)

    @field_validator("valid_from", "valid_to", mode="before")
    @classmethod
    def _time_as_seconds(cls, value: Any, info: Any) -> float | None:
        return to_timestamp(value, info.field_name)

    @model_validator(mode="after")
    def _interval_not_empty(self) -> Chunk:
        if self.valid_from is not None and self.valid_to is not None and self.valid_to <= self.valid_from:
            raise ValueError(
                f"valid_to must be after valid_from, got valid_from {_when(self.valid_from)} and valid_to "
                f"{_when(self.valid_to)}: the interval [valid_from, valid_to) would be empty; give a later valid_to, "
                "or none (the fact still holds)"
            )
        return self

    def scope_values(self) -> dict[str, str | None]:
        """The four scope fields, ``{"tenant": ..., "user_id": ..., "agent_id": ..., "session_id": ...}``."""
        return {name: getattr(self, name) for name in SCOPE_FIELDS}

    @field_validator("chunk_id")
    @classmethod
    def _id_usable(cls, value: str) -> str:
        if not value.strip() or "\x00" in value:
            raise ValueError("chunk_id must not be blank or contain NUL characters")
        return _encodable(value, "chunk_id")

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be empty or white space only")
        if len(value) > limits.MAX_CHUNK_TEXT_CHARS:
            raise ValueError(
                f"text has {len(value):,} characters, more than MAX_CHUNK_TEXT_CHARS ({limits.MAX_CHUNK_TEXT_CHARS:,}, "
                "hybrid_memory.limits); split it into chunks (ingest's folders are cut into --chunk-size characters), "
                "or raise hybrid_memory.limits.MAX_CHUNK_TEXT_CHARS"
            )
        return _encodable(value, "text")

    @field_validator("source")
    @classmethod
    def _source_encodable(cls, value: str) -> str:
        return _encodable(value, "source")


class StoredChunk(Chunk):
    """A chunk as the store returns it."""

    content_hash: str
    """sha256 hex digest of the text (UTF-8)."""
    created_at: float
    """When the chunk_id was first stored, Unix time in seconds."""
    updated_at: float
    """When the chunk was last added or upserted, Unix time in seconds."""
    superseded_by: str | None = None
    """Id of the chunk that superseded this one (:meth:`HybridMemory.supersede`), else None."""
    merged_ids: list[str] = Field(default_factory=list)
    """Ids of near or exact duplicates merged into this chunk on write (dedup policy ``merge``)."""
    merged_sources: list[str] = Field(default_factory=list)
    """Their sources, one per merged id."""


class HybridParams(BaseModel):
    """How the two engines' candidates are fused: the fusion method, the engine weights and the RRF constant.

    With ``fusion="rrf"`` the weights are those of weighted Reciprocal Rank Fusion (Cormack et al. 2009)::

        rrf_score(d) = sparse_weight / (rrf_k_constant + sparse_rank(d))
                     + dense_weight / (rrf_k_constant + dense_rank(d))

    With the default ``fusion="adaptive"`` they are *priors*: an engine's weight for a query is its prior
    times its confidence on that query, so a larger weight still favours that engine, equal weights trust
    both alike, and only the ratio of the two matters. Whatever the method, a weight of 0 skips that engine.
    """

    model_config = ConfigDict(extra="forbid")

    dense_weight: float = Field(default=1.0, strict=True)
    """Weight of the dense (FAISS) engine, in [0, MAX_WEIGHT (1e6)]; 0 turns the dense engine off. An RRF run
    weight for ``fusion="rrf"``, a prior for the score-based methods (see the class docstring)."""
    sparse_weight: float = Field(default=1.0, strict=True)
    """Weight of the sparse (BM25) engine, in [0, MAX_WEIGHT (1e6)]; 0 turns the sparse engine off."""
    rrf_k_constant: float = Field(default=DEFAULT_RRF_K, strict=True)
    """RRF smoothing constant, >= 0 (60 in the paper). Not the number of results: that is top_k. Used for
    ``rrf_score`` (every result has one) and for ordering when ``fusion="rrf"``."""
    fusion: str = DEFAULT_FUSION
    """Fusion method, one of ``hybrid_memory.fusion.FUSION_METHODS``: ``"adaptive"`` (default),
    ``"rrf"`` (exactly weighted RRF: 1-based ranks, ties by chunk_id), ``"rrf_guard"``, ``"dbsf"``,
    ``"tm2c2"``, ``"zscore"``, ``"confidence"``, ``"zscore_guard"``."""

    @field_validator("fusion")
    @classmethod
    def _known_fusion(cls, value: str) -> str:
        if value not in FUSION_METHODS:
            raise ValueError(f"unknown fusion method {value!r}; choose one of {sorted(FUSION_METHODS)}")
        return value

    @field_validator("dense_weight", "sparse_weight")
    @classmethod
    def _finite_non_negative(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0 or value > MAX_WEIGHT:
            raise ValueError(
                f"must be a number in [0, {MAX_WEIGHT:g}] (only the ratio of the weights matters), got {value}"
            )
        return value

    @field_validator("rrf_k_constant")
    @classmethod
    def _rrf_k_valid(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"must be a finite number >= 0 (60 is the usual value), got {value}")
        return value

    @model_validator(mode="after")
    def _one_engine_on(self) -> HybridParams:
        if self.dense_weight == 0 and self.sparse_weight == 0:
            raise ValueError("dense_weight and sparse_weight are both 0: set at least one above 0")
        return self


class SearchRequest(BaseModel):
    """What an agent sends to search the memory."""

    model_config = ConfigDict(extra="forbid")

    query_id: str = Field(default_factory=lambda: f"q_{uuid.uuid4().hex[:12]}")
    """Caller's id for the request, echoed in the response; generated when absent; valid Unicode, no NUL."""
    search_text: str = Field(max_length=MAX_SEARCH_TEXT_CHARS)
    """The query: something other than white space, at most MAX_SEARCH_TEXT_CHARS (10,000) characters, no NUL
    character (refused like a NUL in stored text, so a query never holds what no chunk can)."""
    top_k: int = Field(default=5, ge=1, le=MAX_TOP_K, strict=True)
    """Number of fused results to return, 1..MAX_TOP_K (1000)."""
    hybrid_params: HybridParams = Field(default_factory=HybridParams)
    """Fusion method, engine weights and RRF constant."""
    metadata_filter: dict[str, Any] | None = None
    """Filter applied inside both engines before fusion (see hybrid_memory.filters); None matches all."""
    as_of: float | None = None
    """Event time, Unix seconds (or a datetime / ISO 8601 string): only chunks valid at that instant
    (``valid_from <= as_of < valid_to``, a missing bound is open) are candidates, filtered before fusion like
    the metadata filter. None: no time filter (superseded facts are found too)."""

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of_seconds(cls, value: Any) -> float | None:
        try:
            return to_timestamp(value, "as_of")
        except OverflowError as exc:  # an integer beyond float range, e.g. 10**400
            raise ValueError(f"as_of is out of range ({exc}); give Unix seconds or an ISO 8601 date") from exc

    @field_validator("query_id", "search_text", mode="before")
    @classmethod
    def _encodable_before_parsing(cls, value: Any, info: Any) -> Any:
        # pydantic's own str parsing refuses some lone surrogates with "unable to parse raw data as a unicode
        # string": no position, no fix. Checked first, with the chunk text's message.
        return _encodable(value, info.field_name) if isinstance(value, str) else value

    @field_validator("query_id")
    @classmethod
    def _query_id_encodable(cls, value: str) -> str:
        return _encodable(value, "query_id")

    @field_validator("search_text")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("search_text must not be empty or white space only")
        return _encodable(value, "search_text")


class SearchResult(BaseModel):
    """One fused result."""

    chunk_id: str
    """Id of the chunk."""
    rrf_score: float
    """Weighted RRF score Σ weight / (rrf_k_constant + rank) with the request's weights, whatever the fusion
    method (0 for a chunk an engine of weight 0 alone returned)."""
    text: str
    """The chunk's text."""
    source: str
    """The chunk's source."""
    score: float | None = None
    """The fused score the results are ordered by, when the method is not ``"rrf"`` (for RRF the order is
    ``rrf_score``'s and this is None). Comparable within one response only."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The chunk's metadata."""
    sparse_rank: int | None = None
    """1-based rank in the BM25 candidate list; None when BM25 did not return the chunk."""
    sparse_score: float | None = None
    """Raw BM25 score (bm25s, Lucene variant); for debugging, fusion ignores it."""
    dense_rank: int | None = None
    """1-based rank in the dense candidate list; None when the dense engine did not return the chunk."""
    dense_score: float | None = None
    """Raw inner product (cosine, vectors are L2-normalised); for debugging, fusion ignores it."""


class SearchResponse(BaseModel):
    """What the memory answers."""

    query_id: str
    """The request's query_id."""
    total_retrieved: int
    """Number of results; always equal to len(results)."""
    results: list[SearchResult]
    """Results best first: by ``score`` descending (``rrf_score`` for ``fusion="rrf"``), ties by chunk_id."""
    fusion: str = DEFAULT_FUSION
    """The fusion method that ranked the results."""
    effective_weights: dict[str, float] = Field(default_factory=dict)
    """Weight each engine had in this query's fusion, ``{"dense": ..., "sparse": ...}`` (dense first), convex
    (>= 0, summing to 1) for every method: for the rank-based and DBSF methods the request weights divided by
    their sum (``dense_weight=3, sparse_weight=1`` -> 0.75 / 0.25; RRF's arithmetic itself uses the request
    weights as given, ``w / (rrf_k + rank)``), for the score-based ones the convex weights after per-query
    adaptation; 0 for an engine that was not run. All 0 when no engine ran."""
    calibrated: bool | None = None
    """For the default fusion with both engines run: True when the weights were calibrated against chance (each
    engine's top hit judged by its surprise, in nats), False when they fell back to uncalibrated confidence
    weights (no corpus statistics: vectors above 1024 dimensions, a corpus of identical chunks). None for the
    other methods, for a single engine, and when no engine ran."""

    @model_validator(mode="after")
    def _count_matches(self) -> SearchResponse:
        if self.total_retrieved != len(self.results):
            raise ValueError(
                f"total_retrieved ({self.total_retrieved}) must equal the number of results ({len(self.results)})"
            )
        return self


def build_response(
    req: SearchRequest, result: Any, row_of: Callable[[Any], tuple[str, str | None, dict[str, Any]] | None]
) -> SearchResponse:
    """The response to ``req`` from a searcher's ``HybridResult``: one :class:`SearchResult` per hit for which
    ``row_of(hit)`` gives ``(text, source, metadata)`` (None: the chunk was deleted during the search, left
    out). Both memories build their responses here. Built without re-validation: every value comes from a
    store or from the searcher, already typed."""
    results = []
    for hit in result.hits:
        row = row_of(hit)
        if row is None:
            continue
        text, source, metadata = row
        results.append(
            SearchResult.model_construct(
                chunk_id=hit.key,
                rrf_score=hit.rrf_score,
                text=text,
                source=source,
                metadata=metadata,
                score=None if result.method == "rrf" and hit.score == hit.rrf_score else hit.score,
                sparse_rank=hit.ranks.get("sparse"),
                sparse_score=hit.raw_scores.get("sparse"),
                dense_rank=hit.ranks.get("dense"),
                dense_score=hit.raw_scores.get("dense"),
            )
        )
    return SearchResponse.model_construct(
        query_id=req.query_id,
        total_retrieved=len(results),
        results=results,
        fusion=result.method,
        effective_weights=convex_weights(result.weights),
        calibrated=getattr(result, "calibrated", None),
    )


def convex_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """The engines' weights as the response reports them: divided by their sum, so every fusion method reports
    the same unit (convex weights, summing to 1); weights already summing to exactly 1.0 are returned as they
    are (bit for bit), all-zero weights stay 0. Keys: ``dense`` first, then ``sparse``, then any other engine
    by name (the README's order)."""
    order = sorted(weights, key=lambda name: (name != "dense", name != "sparse", name))
    total = math.fsum(weights.values())
    if total in (0.0, 1.0) or not math.isfinite(total):
        return {name: float(weights[name]) for name in order}
    return {name: float(weights[name]) / total for name in order}
