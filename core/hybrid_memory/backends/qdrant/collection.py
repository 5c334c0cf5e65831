"""One Qdrant collection behind one small interface, over either engine that runs here or in production:

* :class:`ClientCollection`: ``qdrant_client.QdrantClient``: a Qdrant server or cluster (URL, API key), or the
  client's local mode (``QdrantClient(":memory:")`` / ``path=...``), which answers the same API in process;
* :class:`EdgeCollection`: ``qdrant_edge.EdgeShard``, Qdrant's Rust shard engine in process (one shard).

The layout is fixed: one named dense vector ``"dense"`` (cosine) and one named sparse vector ``"bm25"`` with
Qdrant's IDF modifier. Filters are Qdrant REST JSON (see :mod:`hybrid_memory.backends.qdrant.filters`); points
are plain tuples, so the backend above never touches either library's classes. Opening checks the schema
(dimension, distance, sparse modifier) and refuses a mismatch with :class:`StoreFormatError`; creating is
idempotent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..._exceptions import (
    BackendUnavailableError,
    InvalidRequestError,
    StoreBusyError,
    StoreFormatError,
    missing_dependency,
)
from ...paths import check_edge_path
from .filters import to_client_filter, to_edge_filter
from .schema import DENSE, SPARSE

__all__ = [
    "PAYLOAD_CACHE",
    "TF",
    "ClientCollection",
    "Collection",
    "EdgeCollection",
    "Leg",
    "Point",
    "Record",
    "ScoredId",
]

logger = logging.getLogger(__name__)

TERMS = "terms"
"""Name of the presence sparse vector: value 1 at each distinct token index of the chunk (no modifier), so a
query with value 1 at each distinct query token scores the number of them a chunk holds, and the chunks holding
every one score exactly that count (float32 sums of small integers are exact). The exact-match guard's
whole-query test reads it (:mod:`hybrid_memory.backends.qdrant.backend`). Collections written before it (no such
vector) are opened without it."""


TF = "bm25_tf"
"""Name of the plain BM25 sparse vector: the ``bm25`` vector's values (each token's Lucene term-frequency part) with
no modifier, so a query scores ``sum_t q_t * value(t, d)`` with the weights ``q_t`` the client sends. A scoped search
sends ``q_t = count(t) * idf_scope(t)``, the idf of the scope's own document frequencies
(:mod:`hybrid_memory.backends.qdrant.scoped`, issue 35): Qdrant's IDF modifier counts the whole collection, every
scope's points, and no request lets a query leave it out. Collections written before it (no such vector) are opened
without it, and their scoped searches keep the collection-wide idf (logged once)."""


PointId = int | str
"""A point id as this library writes it: an unsigned 63-bit integer (collections written since format 2), or
a UUID string (format 1, still read and written; see :mod:`hybrid_memory.backends.qdrant.backend`)."""


@dataclass(frozen=True)
class Point:
    """A point to write: its id (:data:`PointId`), float32 unit vector (dim,) as a list (None: the point has no dense
    vector, for an all-zero one: no direction, no dense evidence, see :mod:`hybrid_memory.engines.dense.index`; the
    dense leg
    never returns it and its dense cross-score is nan), sparse BM25 vector as (indices uint32, values float),
    and the payload."""

    id: PointId
    dense: list[float] | None
    sparse: tuple[list[int], list[float]]
    payload: dict[str, Any]


def _terms_vector(point: Point) -> tuple[list[int], list[float]]:
    """The point's presence vector (:data:`TERMS`): its sparse vector's indices (distinct, ascending), each 1."""
    indices = point.sparse[0] if point.sparse else []
    return list(indices), [1.0] * len(indices)


@dataclass(frozen=True)
class Record:
    """A point read back: id (an int, or a UUID string for a format-1 point), payload, and the vectors when
    asked for."""

    id: PointId
    payload: dict[str, Any]
    dense: list[float] | None = None
    sparse: tuple[list[int], list[float]] | None = None


def _to_record(r: Any, vectors: bool) -> Record:
    """A point as the client or the Edge shard returns it (same shape: ``id``, ``payload``, ``vector`` by
    name, the sparse one with ``indices`` / ``values``) as a :class:`Record`."""
    pid = r.id
    if not isinstance(pid, int):
        pid = str(pid)
    if not vectors:
        return Record(pid, r.payload or {})
    dense = sparse = None
    if r.vector:
        dense = list(r.vector[DENSE]) if r.vector.get(DENSE) is not None else None
        sv = r.vector.get(SPARSE)
        sparse = (list(sv.indices), list(sv.values)) if sv is not None else ([], [])
    return Record(pid, r.payload or {}, dense, sparse)


@dataclass(frozen=True)
class Leg:
    """One leg of a batched query: ``using`` ``"dense"`` (``vector`` a list of floats) or ``"bm25"`` (``vector``
    (indices, values)), the REST JSON filter, the result limit and the payload keys to return (``()``: none,
    ids and scores only; Qdrant Edge then reads no payload at all, measured ~0.4 ms per leg saved on SciFact)."""

    using: str
    vector: Any
    filter: Mapping[str, Any] | None
    limit: int
    payload: Sequence[str] = ("chunk_id",)
    tokens: bool = False
    """Also return each hit's sparse ``bm25`` indices (the 4th element of :data:`ScoredId`)."""
    threshold: float | None = None
    """Qdrant's ``score_threshold``: only hits scoring at least this (None: all)."""


ScoredId = tuple[Any, float, dict[str, Any], "list[int] | None"]
"""``(point id, score, payload, sparse indices or None)`` of a query hit; the id as the engine returns it (an
int; a format-1 point's UUID: a :class:`uuid.UUID` from Qdrant Edge, a string from the client), the payload
``{}`` when the leg asked for none."""


class Collection(Protocol):
    """What :class:`~hybrid_memory.backends.qdrant.backend.QdrantBackend` needs from a collection."""

    name: str
    terms: bool
    tf: bool

    def ensure(self, dim: int, indexes: Mapping[str, str]) -> None: ...
    def holds_uuid_ids(self) -> bool: ...
    def upsert(self, points: Sequence[Point]) -> None: ...
    def set_payload(self, point_id: PointId, payload: dict[str, Any]) -> None: ...
    def delete(self, ids: Sequence[PointId]) -> None: ...
    def retrieve(
        self, ids: Sequence[PointId], *, vectors: bool | Sequence[str] = False, payload: bool | Sequence[str] = True
    ) -> list[Record]: ...
    def payloads(self, ids: Sequence[PointId], keys: Sequence[str]) -> list[tuple[Any, dict[str, Any]]]: ...
    def sparse_indices(self, point_id: PointId) -> list[int] | None: ...
    def scroll(
        self,
        flt: Mapping[str, Any] | None,
        limit: int,
        offset: Any,
        payload: Any,
        vectors: bool | Sequence[str] = False,
    ) -> tuple[list[Record], Any]: ...
    def count(self, flt: Mapping[str, Any] | None) -> int: ...
    def query_batch(self, legs: Sequence[Leg]) -> list[list[ScoredId]]: ...
    def close(self) -> None: ...


def _indices(vector: Any) -> list[int]:
    """The ``bm25`` sparse indices of a returned vector (both libraries build a fresh list: not copied again)."""
    sparse = (vector or {}).get(SPARSE)
    return sparse.indices if sparse is not None else []


def _names(value: bool | Sequence[str]) -> bool | list[str]:
    return value if isinstance(value, bool) else list(value)


def _mismatch(what: str, found: Any, wanted: Any, where: str) -> StoreFormatError:
    return StoreFormatError(
        f"Qdrant collection {where} has {what} {found!r}, this memory needs {wanted!r}; open it with the embedder "
        "it was built with, or give another collection name"
    )


# -- qdrant-client ----------------------------------------------------------------------------------
_UNAVAILABLE_HTTP = frozenset({502, 503, 504})
"""HTTP statuses that mean the server (or the proxy in front of it) cannot serve now: Bad Gateway, Service
Unavailable, Gateway Timeout (RFC 9110, section 15.6)."""


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a ``qdrant_client`` call, means the server could not be reached.

    qdrant-client 1.x wraps every transport failure of its REST client (``httpx.ConnectError``,
    ``ReadTimeout``, ``RemoteProtocolError``, ...) in ``qdrant_client.http.exceptions.ResponseHandlingException``
    (``ApiClient.send_inner``) and raises ``UnexpectedResponse`` for an HTTP error status; its gRPC client raises
    ``grpc.RpcError`` with status ``UNAVAILABLE`` (connection refused or lost) or ``DEADLINE_EXCEEDED`` (timeout).
    A ResponseHandlingException around a response it could not parse is not a connection loss.
    """
    try:
        import httpx
        from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
    except ImportError:  # pragma: no cover - qdrant-client depends on httpx
        return False
    if isinstance(exc, ResponseHandlingException):
        return isinstance(exc.source, httpx.TransportError | OSError)
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code in _UNAVAILABLE_HTTP
    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError):
        return True
    try:
        import grpc
    except ImportError:  # pragma: no cover - REST-only installations
        return False
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    return False


def _collection_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's answer that the collection does not exist: HTTP 404 (Qdrant answers
    ``Not found: Collection ... doesn't exist!``) or gRPC ``NOT_FOUND``."""
    try:
        from qdrant_client.http.exceptions import UnexpectedResponse
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    try:
        import grpc
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and exc.code() == grpc.StatusCode.NOT_FOUND


def _refusal(exc: BaseException) -> str | None:
    """How the server refused a request it received: ``"invalid"`` (HTTP 400 / 422, gRPC ``INVALID_ARGUMENT``:
    Qdrant's ``Wrong input``, e.g. a filter on a key that strict mode wants indexed, or a schema changed by
    another client), ``"auth"`` (HTTP 401 / 403, gRPC ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``), ``"other"``
    (any other HTTP error status, e.g. 500); None when ``exc`` is not an answer of the server."""
    try:
        from qdrant_client.http.exceptions import UnexpectedResponse
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, UnexpectedResponse):
        return {400: "invalid", 422: "invalid", 401: "auth", 403: "auth"}.get(exc.status_code or 0, "other")
    try:
        import grpc
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return {
            grpc.StatusCode.INVALID_ARGUMENT: "invalid",
            grpc.StatusCode.UNAUTHENTICATED: "auth",
            grpc.StatusCode.PERMISSION_DENIED: "auth",
        }.get(exc.code())
    return None


def _cause(exc: BaseException) -> str:
    """One line naming the transport error (the httpx error inside qdrant-client's wrapper, a gRPC status)."""
    source = getattr(exc, "source", None)
    if source is not None:
        exc = source
    code = getattr(exc, "code", None)
    if callable(code) and hasattr(exc, "details"):  # grpc.RpcError
        return f"gRPC {code().name}: {exc.details()}"
    status = getattr(exc, "status_code", None)
    if status is not None and hasattr(exc, "content"):  # UnexpectedResponse: the status and Qdrant's error text
        try:
            detail = json.loads(exc.content)["status"]["error"]
        except Exception:  # noqa: BLE001 - a proxy's page, not Qdrant's JSON
            detail = exc.content[:200].decode("utf-8", "replace")
        return f"HTTP {status} {getattr(exc, 'reason_phrase', '')}: {' '.join(str(detail).split())}".rstrip(": ")
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}"


def _float_indexed(schema: Mapping[str, Any], declared: Mapping[str, str]) -> set[str]:
    """Payload keys with a float index: those the collection already holds (its ``payload_schema``, a server's
    ``PayloadSchemaType.FLOAT`` or Edge's ``PayloadSchemaType.Float``) and those just declared."""
    held = {
        key
        for key, info in (schema or {}).items()
        if str(getattr(info, "data_type", "")).lower().rsplit(".", 1)[-1] == "float"
    }
    return held | {key for key, kind in declared.items() if kind == "float"}


class ClientCollection:
    """A collection through ``qdrant_client`` (server, cluster, or local mode).

    Args:
        client: a ``QdrantClient``.
        name: the collection name.
        shard_number, replication_factor, write_consistency_factor: cluster settings used when the collection
            is created (None: the server's defaults); see Qdrant's distributed deployment guide.
        ordering: write ordering of every update (``"weak"``, ``"medium"``, ``"strong"``; None: the server's
            default, weak), Qdrant's ``WriteOrdering``.
    """

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        ordering: str | None = None,
    ) -> None:
        try:
            from qdrant_client import models
        except ImportError as exc:  # pragma: no cover - the extra is installed in CI
            raise missing_dependency("qdrant-client", "qdrant") from exc
        self._m = models
        self.client = client
        self.name = name
        self._cluster = {
            "shard_number": shard_number,
            "replication_factor": replication_factor,
            "write_consistency_factor": write_consistency_factor,
        }
        self._ordering = None if ordering is None else models.WriteOrdering(ordering)
        # local mode evaluates filters in Python on the payload as written (no float re-reading)
        self.local = type(getattr(client, "_client", None)).__name__ == "QdrantLocal"
        self._serial = threading.RLock() if self.local else contextlib.nullcontext()
        """Local mode is not thread-safe (qdrant-client's ``QdrantLocal`` keeps its points in numpy arrays that a
        write resizes under a concurrent search: ``ValueError: operands could not be broadcast together``, seen
        with three searching threads and one writing): every call into it holds this lock. A server needs none
        (a context that does nothing)."""
        self.target = _target(client)
        self.created = False
        self.terms = False
        self.tf = False
        """Whether the collection holds the plain BM25 vector :data:`TF` (scoped searches' own idf)."""
        self.float_indexed: set[str] = set()
        """Payload keys with a float index, read by :meth:`ensure` (held before, or declared)."""
        self.indexed: set[str] = set()
        """Payload keys with a payload index of any kind, read by :meth:`ensure` (held before, or declared)."""

    @contextlib.contextmanager
    def _reached(self, what: str, *, write: bool = False) -> Iterator[None]:
        """Turn the client's errors inside the block into the library's, naming the server, the collection
        and what to do: a lost connection (:func:`_connection_lost`) into :class:`BackendUnavailableError`, a
        deleted collection into :class:`StoreFormatError`, a request the server refused (:func:`_refusal`) as
        invalid into :class:`InvalidRequestError`, for the API key or for any other reason into
        :class:`BackendUnavailableError`; other errors pass. In local mode the block holds :attr:`_serial`."""
        try:
            with self._serial:
                yield
        except Exception as exc:
            if _collection_gone(exc):
                raise StoreFormatError(
                    f"the Qdrant collection {self.name!r} at {self.target} no longer exists ({what}: {_cause(exc)}); "
                    "it was deleted after this memory opened: open the memory again to create it empty, or restore "
                    "it from a Qdrant snapshot"
                ) from exc
            after = (
                "this write may be partly stored (earlier batches of it): writes are upserts by chunk id, so "
                "run the same call again once the server answers"
                if write
                else "nothing was changed; run the call again once the server answers"
            )
            if not _connection_lost(exc):
                refusal = _refusal(exc)
                if refusal is None:
                    raise
                where = f"the Qdrant server at {self.target} refused the request ({what}, collection {self.name!r}): "
                changed = "this write may be partly stored (earlier batches of it)" if write else "nothing was changed"
                if refusal == "invalid":
                    raise InvalidRequestError(
                        f"{where}{_cause(exc)}; {changed}. The request does not fit the collection as the server "
                        "has it: check the metadata filter's keys and values (a server in strict mode needs a "
                        "payload index on each filtered key: give it in indexed_keys=, or --index-key) and that no "
                        "other client changed the collection's schema"
                    ) from exc
                if refusal == "auth":
                    raise BackendUnavailableError(
                        f"{where}{_cause(exc)}; {changed}. Give the server's API key (api_key=, or --api-key / "
                        "QDRANT_API_KEY), with write access for writes"
                    ) from exc
                raise BackendUnavailableError(
                    f"{where}{_cause(exc)}; the server could not serve it (see its log); {after}"
                ) from exc
            raise BackendUnavailableError(
                f"the Qdrant server at {self.target} could not be reached ({what}, collection {self.name!r}): "
                f"{_cause(exc)}; check that it is running and reachable at that URL (and the API key); {after}"
            ) from exc

    def ensure(self, dim: int, indexes: Mapping[str, str]) -> None:
        """:meth:`_ensure`, holding :attr:`_serial` in local mode."""
        with self._serial:
            self._ensure(dim, indexes)

    def _ensure(self, dim: int, indexes: Mapping[str, str]) -> None:
        """Create the collection unless it exists, else check its schema; create the payload indexes
        (``{payload key: "keyword" | "float" | "bool"}``) that are missing. Raises StoreFormatError."""
        m = self._m
        self.created = not self.client.collection_exists(self.name)
        if self.created:
            self.client.create_collection(
                self.name,
                vectors_config={DENSE: m.VectorParams(size=dim, distance=m.Distance.COSINE)},
                sparse_vectors_config={
                    SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF),
                    TERMS: m.SparseVectorParams(),
                    TF: m.SparseVectorParams(),
                },
                **{k: v for k, v in self._cluster.items() if v is not None},
            )
        params = self.client.get_collection(self.name).config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        dense = vectors.get(DENSE)
        if dense is None:
            raise _mismatch("dense vectors", sorted(vectors), [DENSE], repr(self.name))
        if dense.size != dim:
            raise _mismatch("dimension", dense.size, dim, repr(self.name))
        if dense.distance != m.Distance.COSINE:
            raise _mismatch("distance", str(dense.distance), "Cosine", repr(self.name))
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        if sparse is None or sparse.modifier != m.Modifier.IDF:
            raise _mismatch(
                "sparse vector", None if sparse is None else str(sparse.modifier), "bm25 with IDF", repr(self.name)
            )
        terms = (params.sparse_vectors or {}).get(TERMS)
        self.terms = terms is not None and terms.modifier in (None, m.Modifier.NONE)
        tf = (params.sparse_vectors or {}).get(TF)
        self.tf = tf is not None and tf.modifier in (None, m.Modifier.NONE)
        schema = self.client.get_collection(self.name).payload_schema or {}
        self.float_indexed = _float_indexed(schema, indexes)
        self.indexed = set(schema or {}) | set(indexes)
        kinds = {
            "keyword": m.PayloadSchemaType.KEYWORD,
            "float": m.PayloadSchemaType.FLOAT,
            "bool": m.PayloadSchemaType.BOOL,
            "integer": m.PayloadSchemaType.INTEGER,
        }
        with warnings.catch_warnings():  # local mode warns that payload indexes have no effect there
            warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
            for key, kind in indexes.items():
                if key not in schema:
                    self.client.create_payload_index(self.name, key, field_schema=kinds[kind], wait=True)

    def holds_uuid_ids(self) -> bool:
        """Whether the collection's points have UUID ids (format 1): the id of its first point (False when
        :meth:`ensure` created it)."""
        if self.created:
            return False
        with self._reached("scroll points"):
            records, _ = self.client.scroll(self.name, limit=1, with_payload=False, with_vectors=False)
        return bool(records) and not isinstance(records[0].id, int)

    def _vectors(self, point: Point) -> dict[str, Any]:
        indices, values = point.sparse
        vectors: dict[str, Any] = {SPARSE: self._m.SparseVector(indices=indices, values=values)}
        if self.terms:
            presence = _terms_vector(point)
            vectors[TERMS] = self._m.SparseVector(indices=presence[0], values=presence[1])
        if self.tf:
            vectors[TF] = self._m.SparseVector(indices=indices, values=values)
        if point.dense is not None:
            vectors[DENSE] = point.dense
        return vectors

    def upsert(self, points: Sequence[Point]) -> None:
        """Write points (vectors and payload) in one batch; waits until applied."""
        if points:
            structs = [self._m.PointStruct(id=p.id, vector=self._vectors(p), payload=p.payload) for p in points]
            with self._reached("upsert points", write=True):
                self.client.upsert(self.name, structs, wait=True, ordering=self._ordering)

    def set_payload(self, point_id: PointId, payload: dict[str, Any]) -> None:
        """Replace a point's whole payload, keeping its vectors (a metadata-only change)."""
        with self._reached("overwrite a payload", write=True):
            self.client.overwrite_payload(self.name, payload, points=[point_id], wait=True, ordering=self._ordering)

    def delete(self, ids: Sequence[PointId]) -> None:
        """Delete points by id (unknown ids are no error)."""
        if ids:
            with self._reached("delete points", write=True):
                self.client.delete(
                    self.name, self._m.PointIdsList(points=list(ids)), wait=True, ordering=self._ordering
                )

    def retrieve(
        self, ids: Sequence[PointId], *, vectors: bool | Sequence[str] = False, payload: bool | Sequence[str] = True
    ) -> list[Record]:
        """Points by id (unknown ids left out; any order); ``vectors`` / ``payload``: all, none, or these names."""
        if not ids:
            return []
        with self._reached("retrieve points"):
            found = self.client.retrieve(
                self.name, list(ids), with_payload=_names(payload), with_vectors=_names(vectors)
            )
        return [_to_record(r, bool(vectors)) for r in found]

    def sparse_indices(self, point_id: PointId) -> list[int] | None:
        """The ``bm25`` sparse indices of one point (None: no such point)."""
        with self._reached("retrieve points"):
            found = self.client.retrieve(self.name, [point_id], with_payload=False, with_vectors=[SPARSE])
        return _indices(found[0].vector) if found else None

    def payloads(self, ids: Sequence[PointId], keys: Sequence[str]) -> list[tuple[Any, dict[str, Any]]]:
        """``(point id as returned, payload)`` of the points by id with these payload keys (unknown ids left
        out; any order): :meth:`retrieve` without building records."""
        if not ids:
            return []
        with self._reached("retrieve points"):
            found = self.client.retrieve(self.name, list(ids), with_payload=list(keys), with_vectors=False)
        return [(r.id, r.payload or {}) for r in found]

    def scroll(
        self,
        flt: Mapping[str, Any] | None,
        limit: int,
        offset: Any,
        payload: Any = True,
        vectors: bool | Sequence[str] = False,
    ) -> tuple[list[Record], Any]:
        """A page of points matching the filter in id order, and the offset of the next page (None: last);
        ``vectors``: all, none, or these names."""
        with self._reached("scroll points"):
            records, nxt = self.client.scroll(
                self.name,
                scroll_filter=to_client_filter(flt),
                limit=limit,
                offset=offset,
                with_payload=payload,
                with_vectors=_names(vectors),
            )
        return [_to_record(r, bool(vectors)) for r in records], nxt

    def count(self, flt: Mapping[str, Any] | None) -> int:
        """Exact number of points matching the filter."""
        with self._reached("count points"):
            return int(self.client.count(self.name, count_filter=to_client_filter(flt), exact=True).count)

    def query_batch(self, legs: Sequence[Leg]) -> list[list[ScoredId]]:
        """Every leg in one ``query_batch_points`` request; hits per leg, best first."""
        m = self._m
        requests = []
        for leg in legs:
            query = leg.vector if leg.using == DENSE else m.SparseVector(indices=leg.vector[0], values=leg.vector[1])
            requests.append(
                m.QueryRequest(
                    query=query,
                    using=leg.using,
                    filter=to_client_filter(leg.filter),
                    limit=leg.limit,
                    score_threshold=leg.threshold,
                    with_payload=list(leg.payload) or False,
                    with_vector=[SPARSE] if leg.tokens else False,
                )
            )
        with self._reached("query"):
            responses = self.client.query_batch_points(self.name, requests=requests)
        return [
            [
                (p.id, float(p.score), dict(p.payload or {}), _indices(p.vector) if leg.tokens else None)
                for p in r.points
            ]
            for leg, r in zip(legs, responses, strict=True)
        ]

    def close(self) -> None:
        """Close the client."""
        with self._serial:
            self.client.close()


def _target(client: Any) -> str:
    """Where a ``QdrantClient`` sends its requests, for messages: the REST URL (and the gRPC port when gRPC is
    preferred), ``local mode at PATH``, or the client's repr."""
    inner = getattr(client, "_client", None)
    uri = getattr(inner, "rest_uri", None)
    if uri:
        return (
            f"{uri} (gRPC port {getattr(inner, '_grpc_port', None)})"
            if getattr(inner, "_prefer_grpc", False)
            else str(uri)
        )
    location = getattr(inner, "location", None)
    if type(inner).__name__ == "QdrantLocal":
        return f"local mode {location}"
    return repr(client)


# -- qdrant-edge ------------------------------------------------------------------------------------
SEARCH_THREADS = 1
"""Threads of the shard's search pool. Qdrant Edge's default is four per CPU core, to overlap per-segment reads
waiting on disk (Qdrant Edge quickstart, "Tune the search thread pool"); here vectors, sparse index and payload
are in RAM and a shard this library writes holds one appendable segment, so each read is one task: on SciFact
(5,183 points, 2 cores) one thread cut the CPU time of a search by 0.5-1.5 ms (the idle pool threads' wake-ups),
with the same results."""


PAYLOAD_CACHE = 4096
"""Points whose payload reads :meth:`EdgeCollection.payloads` keeps (least recently read first out): a
search's top_k rows (``text`` and ``doc``), about 2 kB a point on SciFact (8 MB for the default)."""


class EdgeCollection:
    """A collection as one ``qdrant_edge.EdgeShard`` in a directory (created when absent).

    Args:
        path: the shard's directory.
        payload_memory: placement of the payload storage of new segments, a ``qdrant_edge.Memory`` name:
            ``"cached"`` (default: the payload file is kept in the page cache; on SciFact the retrieve of the
            top 10's text after a search took 0.39 ms, against 1.1 ms from a reopened shard with ``"cold"``,
            Qdrant Edge's default), ``"cold"`` (read from disk when needed: less RAM for large payloads), or
            None (the shard's stored setting). A shard keeps the placement its segments were written with.
        search_threads: threads of the shard's search pool (default :data:`SEARCH_THREADS`; None: Qdrant
            Edge's default, four per CPU core).
        payload_cache: points whose :meth:`payloads` reads are kept in this process (default
            :data:`PAYLOAD_CACHE`; 0: none), least recently read evicted first.

    **The payload cache.** An Edge shard is opened by one process at a time (its write-ahead log is locked:
    a second open, in this process or another, is refused with :class:`StoreBusyError`), and every write to it
    goes through this object, so a cache that each write of this object invalidates is exact: every
    :meth:`upsert`, :meth:`set_payload` and :meth:`delete` drops its points' entries once the shard has
    applied it, and a read that began before a write finished keeps nothing (a generation count, checked
    under the cache's lock), so no read returns a payload older than the last write that returned. The
    reads a search's response makes (the top_k's ``text`` and ``doc``: 0.1-0.3 ms from the shard on SciFact)
    then cost a dictionary lookup for points read before. A Qdrant server is shared by processes, so
    :class:`ClientCollection` keeps no such cache.

    Raises:
        InvalidRequestError: ``path`` is a file (or below one), or is (or lies inside) an embedded memory's
            folder (:func:`hybrid_memory.paths.check_edge_path`); checked before anything is written; a bad
            ``payload_memory`` or ``search_threads``.
        MissingDependencyError: qdrant-edge-py is not installed.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        payload_memory: str | None = "cached",
        search_threads: int | None = SEARCH_THREADS,
        payload_cache: int = PAYLOAD_CACHE,
    ) -> None:
        if not isinstance(payload_cache, int) or isinstance(payload_cache, bool) or payload_cache < 0:
            raise InvalidRequestError(f"payload_cache must be an int >= 0 (points; 0: no cache), got {payload_cache!r}")
        if payload_memory not in (None, "cached", "cold"):
            raise InvalidRequestError(f"payload_memory must be 'cached', 'cold' or None, got {payload_memory!r}")
        if search_threads is not None and (
            not isinstance(search_threads, int) or isinstance(search_threads, bool) or search_threads < 1
        ):
            raise InvalidRequestError(f"search_threads must be an int >= 1 or None, got {search_threads!r}")
        path = check_edge_path(path)
        try:
            import qdrant_edge
        except ImportError as exc:  # pragma: no cover - the extra is installed in CI
            raise missing_dependency("qdrant-edge-py", "qdrant") from exc
        self._qe = qdrant_edge
        self.path = Path(path)
        self.name = str(self.path)
        self.shard: Any = None
        self.created = False
        self.terms = False
        self.tf = False
        """Whether the collection holds the plain BM25 vector :data:`TF` (scoped searches' own idf)."""
        self.float_indexed: set[str] = set()
        """Payload keys with a float index, read by :meth:`ensure` (held before, or declared)."""
        self.indexed: set[str] = set()
        """Payload keys with a payload index of any kind, read by :meth:`ensure` (held before, or declared)."""
        self.payload_memory = payload_memory
        self.search_threads = search_threads
        self.payload_cache = payload_cache
        self._rows: OrderedDict[PointId, dict[tuple[str, ...], dict[str, Any]]] = OrderedDict()
        """point id (an int, or a format-1 UUID string) -> payload keys read -> the payload read."""
        self._rows_lock = threading.Lock()
        self._generation = 0
        """Writes applied so far (a read keeps its payloads only if no write ended while it ran)."""
        self.cache_hits = 0
        """Points :meth:`payloads` found in the payload cache (counted since open)."""
        self.cache_misses = 0
        """Points :meth:`payloads` read from the shard while the cache is on."""
        self._config: Any = None
        """``terms -> EdgeConfig`` of this open (:meth:`ensure`), to reload the shard for :meth:`close`'s vacuum."""
        self._forgotten = False
        """Whether this open deleted or rewrote points (a delete, an upsert, a payload overwrite): then
        :meth:`close` vacuums the segments that hold their old payloads."""

    def _changed(self, ids: Sequence[PointId]) -> None:
        """Forget the cached payloads of ``ids`` (written or deleted: the shard has applied the write)."""
        with self._rows_lock:
            self._generation += 1
            rows = self._rows
            for pid in ids:
                rows.pop(pid, None)

    def ensure(self, dim: int, indexes: Mapping[str, str]) -> None:
        """Create or load the shard with the dense (cosine, ``dim``) and IDF sparse vectors; create missing
        payload indexes. Raises StoreFormatError when the stored shard's vectors differ."""
        qe = self._qe

        def config(terms: bool, tf: bool = False, optimizers: Any = None) -> Any:
            sparse = {SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
            if terms:
                sparse[TERMS] = qe.EdgeSparseVectorParams()
            if tf:
                sparse[TF] = qe.EdgeSparseVectorParams()
            return qe.EdgeConfig(
                vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
                sparse_vectors=sparse,
                payload_memory=None
                if self.payload_memory is None
                else getattr(qe.Memory, self.payload_memory.capitalize()),
                max_search_threads=self.search_threads,
                optimizers=optimizers,
            )

        self._config = config

        exists = self.path.exists() and any(self.path.iterdir())
        self.created = not exists
        try:
            if not exists:
                self.shard, self.terms, self.tf = qe.EdgeShard.create(str(self.path), config(True, True)), True, True
            else:  # a shard written before the plain BM25 vector (TF), or also before the presence vector: without
                for terms, tf in ((True, True), (True, False), (False, False)):
                    try:
                        self.shard, self.terms, self.tf = (
                            qe.EdgeShard.load(str(self.path), config(terms, tf)),
                            terms,
                            tf,
                        )
                        break
                    except Exception as exc:
                        if "incompatible" not in str(exc) or not (TF in str(exc) or TERMS in str(exc)) or not terms:
                            raise
        except Exception as exc:  # the binding raises plain Exception with the engine's message
            if "WouldBlock" in str(exc):  # the shard's write-ahead log is locked by another open of it
                raise StoreBusyError(
                    f"Qdrant Edge shard at {self.path} is open elsewhere (in this process or another: {exc}); an "
                    "Edge shard is opened by one process at a time: close the other memory on it, or use a Qdrant "
                    "server for several processes"
                ) from exc
            from .edge_info import embedder_fix, shard_dim

            held = shard_dim(self.path)
            if held is not None and held != int(dim):  # the embedder's dimension: say which one fits
                raise StoreFormatError(
                    f"Qdrant Edge shard at {self.path} holds vectors of dimension {held}, this memory's embedder "
                    f"gives {int(dim)}: open it with the embedder it was written with{embedder_fix(self.path, held)}"
                ) from exc
            raise StoreFormatError(
                f"Qdrant Edge shard at {self.path} does not fit this memory ({exc}); open it with the embedder it "
                "was built with, or give another directory"
            ) from exc
        schema = self.shard.info().payload_schema
        self.float_indexed = _float_indexed(schema, indexes)
        self.indexed = set(schema or {}) | set(indexes)
        kinds = {
            "keyword": qe.PayloadSchemaType.Keyword,
            "float": qe.PayloadSchemaType.Float,
            "bool": qe.PayloadSchemaType.Bool,
            "integer": qe.PayloadSchemaType.Integer,
        }
        for key, kind in indexes.items():
            if key not in schema:
                self.shard.update(qe.UpdateOperation.create_field_index(key, kinds[kind]))

    def holds_uuid_ids(self) -> bool:
        """Whether the shard's points have UUID ids (format 1): the id of its first point (False when
        :meth:`ensure` created it)."""
        if self.created:
            return False
        records, _ = self.shard.scroll(self._qe.ScrollRequest(limit=1, with_payload=False, with_vector=False))
        return bool(records) and not isinstance(records[0].id, int)

    def upsert(self, points: Sequence[Point]) -> None:
        """Write points (vectors and payload) in one update operation."""
        qe = self._qe
        if points:
            out = []
            for p in points:
                vectors = {SPARSE: qe.SparseVector(*p.sparse)}
                if self.terms:
                    vectors[TERMS] = qe.SparseVector(*_terms_vector(p))
                if self.tf:
                    vectors[TF] = qe.SparseVector(*p.sparse)
                if p.dense is not None:
                    vectors[DENSE] = p.dense
                out.append(qe.Point(p.id, vectors, p.payload))
            try:
                self.shard.update(qe.UpdateOperation.upsert_points(out))
            finally:
                self._forgotten = True  # a replaced point's old payload stays in its segment until a vacuum
                self._changed([p.id for p in points])

    def set_payload(self, point_id: PointId, payload: dict[str, Any]) -> None:
        """Replace a point's whole payload, keeping its vectors."""
        try:
            self.shard.update(self._qe.UpdateOperation.overwrite_payload([point_id], payload))
        finally:
            self._forgotten = True
            self._changed([point_id])

    def delete(self, ids: Sequence[PointId]) -> None:
        """Delete points by id."""
        if ids:
            try:
                self.shard.update(self._qe.UpdateOperation.delete_points(list(ids)))
            finally:
                self._forgotten = True
                self._changed(ids)

    def retrieve(
        self, ids: Sequence[PointId], *, vectors: bool | Sequence[str] = False, payload: bool | Sequence[str] = True
    ) -> list[Record]:
        """Points by id (unknown ids left out); ``vectors`` / ``payload``: all, none, or these names."""
        if not ids:
            return []
        found = self.shard.retrieve(list(ids), with_payload=_names(payload), with_vector=_names(vectors))
        return [_to_record(r, bool(vectors)) for r in found]

    def sparse_indices(self, point_id: PointId) -> list[int] | None:
        """The ``bm25`` sparse indices of one point (None: no such point), read without building a record
        (5 against 14 us on SciFact)."""
        found = self.shard.retrieve([point_id], with_payload=False, with_vector=[SPARSE])
        return _indices(found[0].vector) if found else None

    def payloads(self, ids: Sequence[PointId], keys: Sequence[str]) -> list[tuple[Any, dict[str, Any]]]:
        """``(point id, payload)`` of the points by id with these payload keys (unknown ids left out; any
        order): :meth:`retrieve` without building records (a search's top_k, read for its text). Points read
        before come from the payload cache (class docstring), the others from the shard in one ``retrieve``;
        each payload is a new dict (its values are shared with the cache: strings, for the keys a search
        reads). A point id is an int, or for a format-1 point its UUID (a string from the cache, a
        :class:`uuid.UUID` from the shard)."""
        if not ids:
            return []
        if not self.payload_cache:
            return [(r.id, r.payload) for r in self.shard.retrieve(ids, with_payload=list(keys), with_vector=False)]
        names = tuple(keys)
        out: list[tuple[Any, dict[str, Any]]] = []
        missing = []
        rows = self._rows
        with self._rows_lock:
            for pid in ids:
                held = rows.get(pid)
                payload = None if held is None else held.get(names)
                if payload is None:
                    missing.append(pid)
                else:
                    rows.move_to_end(pid)
                    out.append((pid, dict(payload)))
            generation = self._generation
            self.cache_hits += len(out)
            self.cache_misses += len(missing)
        if missing:
            found = [
                (r.id, r.payload) for r in self.shard.retrieve(missing, with_payload=list(names), with_vector=False)
            ]
            with self._rows_lock:
                if self._generation == generation:  # no write ended meanwhile: what was read is current
                    for pid, payload in found:
                        key = pid if type(pid) is int else str(pid)
                        held = rows.get(key)
                        if held is None:
                            held = rows[key] = {}
                        else:
                            rows.move_to_end(key)
                        held[names] = dict(payload)
                    while len(rows) > self.payload_cache:
                        rows.popitem(last=False)
            out.extend(found)
        return out

    def scroll(
        self,
        flt: Mapping[str, Any] | None,
        limit: int,
        offset: Any,
        payload: Any = True,
        vectors: bool | Sequence[str] = False,
    ) -> tuple[list[Record], Any]:
        """A page of points matching the filter in id order, and the next offset (None: last page); ``vectors``:
        all, none, or these names."""
        records, nxt = self.shard.scroll(
            self._qe.ScrollRequest(
                offset=offset,
                limit=limit,
                filter=to_edge_filter(flt),
                with_payload=payload,
                with_vector=_names(vectors),
            )
        )
        return [_to_record(r, bool(vectors)) for r in records], nxt

    def count(self, flt: Mapping[str, Any] | None) -> int:
        """Exact number of points matching the filter."""
        return int(self.shard.count(self._qe.CountRequest(filter=to_edge_filter(flt), exact=True)))

    def query_batch(self, legs: Sequence[Leg]) -> list[list[ScoredId]]:
        """Every leg in one ``query_batch`` call of the shard; hits per leg, best first."""
        qe = self._qe
        requests = []
        converted: dict[int, Any] = {}  # legs sharing one filter object convert it once
        for leg in legs:
            vector = leg.vector if leg.using == DENSE else qe.SparseVector(*leg.vector)
            key = id(leg.filter)
            if key not in converted:
                converted[key] = to_edge_filter(leg.filter)
            requests.append(
                qe.QueryRequest(
                    limit=leg.limit,
                    query=qe.Query.Nearest(vector, using=leg.using),
                    filter=converted[key],
                    with_payload=list(leg.payload) or False,
                    with_vector=[SPARSE] if leg.tokens else False,
                    score_threshold=leg.threshold,
                )
            )
        responses = self.shard.query_batch(qe.QueryBatchRequest(requests))
        out = []
        for leg, r in zip(legs, responses, strict=True):
            if leg.payload:
                out.append(
                    [(p.id, p.score, dict(p.payload or {}), _indices(p.vector) if leg.tokens else None) for p in r]
                )
            elif leg.tokens:
                out.append([(p.id, p.score, {}, _indices(p.vector)) for p in r])
            else:  # ids and scores only: the common case, kept lean (Edge returns int ids and float scores)
                out.append([(p.id, p.score, {}, None) for p in r])
        return out

    def close(self) -> None:
        """Flush and close the shard; when this open deleted or rewrote points, vacuum it first (:meth:`vacuum`)."""
        with self._rows_lock:
            self._rows.clear()
        if self.shard is not None:
            self.shard.flush()
            self.shard.close()
            self.shard = None
            if self._forgotten:
                self.vacuum()

    def vacuum(self) -> bool:
        """Rewrite, without their dead points, the shard's segments that hold a deleted or replaced point, so
        that no segment file keeps a deleted or replaced chunk's text (issue 35); called by :meth:`close` after
        an open that deleted, upserted or overwrote points, on the closed shard. True if a segment was rewritten.

        Qdrant only marks a deleted (or replaced) point as deleted: its payload stays in the segment's
        ``payload_storage/page_*.dat`` until the vacuum optimizer rewrites the segment, which by default runs
        only on segments of 1,000 vectors or more with 20 % of them deleted (``deleted_threshold`` 0.2,
        ``vacuum_min_vector_number`` 1,000; Qdrant's optimizer configuration), and Qdrant Edge runs optimizers
        only when asked (``EdgeShard.optimize``). So the shard is loaded again with ``deleted_threshold`` 0 and
        ``vacuum_min_vector_number`` 1 and optimized, with ``indexing_threshold`` 0 so that the optimizer
        builds no HNSW index (this library searches the shard's plain segments exactly; with the default
        threshold, a 10,000-point shard of 384 dims got an HNSW graph, 1.3 s, and approximate search). These
        settings are saved in the shard's ``edge_config.json``. Cost measured on a 10,000-point, 384-dim shard
        with one point deleted: 0.08 s to load, 0.11 s to rewrite its segment (about linear in the rewritten
        segments' size).

        **What stays:** a text replaced in place (an upsert or payload overwrite of a point in the shard's
        appendable segment: Qdrant rewrites it there without marking a point deleted) stays in that segment's
        freed payload pages until the segment is rewritten (a later vacuum after a delete of one of its
        points, or Qdrant's merge); it is never served. And the shard's write-ahead log (``wal/open-N``,
        32 MiB a log segment, Qdrant's default ``wal_capacity_mb``, which Qdrant Edge does not expose) keeps
        every write's operation, text included, after it is applied; Qdrant drops a log segment only when it
        is full and every operation in it is applied. So a deleted text stays in the log's bytes until about
        32 MiB of later writes have filled its log segment. Writing the live chunks into a new shard folder
        leaves neither copy. A failure here is logged as a warning and leaves the shard as :meth:`close`
        flushed it (nothing is lost; the next close after a delete tries again).
        """
        if self._config is None:
            return False
        qe = self._qe
        vacuum = qe.EdgeOptimizersConfig(deleted_threshold=0.0, vacuum_min_vector_number=1, indexing_threshold=0)
        shard = None
        try:
            shard = qe.EdgeShard.load(str(self.path), self._config(self.terms, self.tf, vacuum))
            rewritten = bool(shard.optimize())
            shard.flush()
            self._forgotten = False
            return rewritten
        except Exception as exc:  # the binding raises plain Exception with the engine's message
            logger.warning(
                "Qdrant Edge shard %s: the vacuum of deleted points failed (%s); their payloads stay in "
                "the segment files until a later close vacuums them",
                self.path,
                exc,
            )
            return False
        finally:
            if shard is not None:
                shard.close()
