"""LangChain retriever over a :class:`hybrid_memory.HybridMemory`.

The retriever translates and delegates: the query, ``k``, the filter and the fusion parameters go to
:meth:`HybridMemory.search` (or ``asearch``), and each :class:`~hybrid_memory.SearchResult` comes back as
a ``Document`` with ``id = chunk_id``, in the core's order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, cast

from hybrid_memory import (
    Chunk,
    HybridMemory,
    HybridParams,
    InvalidRequestError,
    Scope,
    ScopedMemory,
    SearchRequest,
    SearchResponse,
    SearchResult,
)
from hybrid_memory._adapter_support import (
    FUSED_SCORE_KEY,
    absolute_score,
    build_owned,
    check_memory_argument,
    check_search_settings,
    check_top_k,
    refuse_memory_argument,
    result_metadata,
    unwrap_validation_error,
    written_back_metadata,
)
from hybrid_memory.models import make_chunk
from hybrid_memory.scopes import as_scope
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import AliasChoices, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .embeddings import as_core_embedder

__all__ = [
    "RETRIEVAL_METADATA_KEYS",
    "HybridMemoryRetriever",
    "content_chunk_id",
    "document_to_chunk",
    "result_to_document",
]

# defaults come from the core models, so the adapters cannot drift from them
_DEFAULT_TOP_K: int = SearchRequest.model_fields["top_k"].default
_DEFAULT_PARAMS = HybridParams()

RETRIEVAL_METADATA_KEYS = (
    "source",
    "score",
    "fused_score",
    "rrf_score",
    "sparse_rank",
    "sparse_score",
    "dense_rank",
    "dense_score",
)
"""Keys added to every returned ``Document``'s metadata, next to the chunk's own metadata; they hold the
retrieval values, and a chunk's own differing values of them are under ``metadata["chunk_metadata"]``."""

# invoke()/ainvoke() keyword -> HybridMemory.search keyword
_CALL_KWARGS = {
    "k": "top_k",
    "filter": "metadata_filter",
    "metadata_filter": "metadata_filter",
    "dense_weight": "dense_weight",
    "sparse_weight": "sparse_weight",
    "rrf_k": "rrf_k_constant",
    "fusion": "fusion",
}
# the retriever's names of the core's search keywords, where they differ (for the error messages)
_FIELD_NAMES = {"top_k": "k", "rrf_k_constant": "rrf_k"}
# keywords LangChain's Runnable machinery forwards to every retriever; they are not search parameters
_RUNNABLE_KWARGS = frozenset({"verbose"})


def content_chunk_id(text: str, source: str, scope: Scope | None = None) -> str:
    """Deterministic id of an id-less document: ``"doc-"`` + the first 32 hex digits of the sha256 of the scope
    key, the source and the text (NUL-separated). The same document added twice gets the same id, so re-running
    ``from_documents`` replaces instead of doubling. Anyone can compute it, and that reveals nothing: a scoped
    retriever writes through a scoped view, which stores every id under its own scope's namespace
    (:mod:`hybrid_memory.isolation`), so writing another scope's derived id writes a chunk of one's own and
    answers exactly as for any fresh id (issue 35). The scope stays part of the hash so ids of memories written
    before are unchanged."""
    key = (scope.key() if scope else "all") + "\x00" + source + "\x00" + text
    return "doc-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def document_to_chunk(document: Document, chunk_id: str | None = None, scope: Scope | None = None) -> Chunk:
    """Turn a LangChain ``Document`` into a core :class:`~hybrid_memory.Chunk`.

    ``chunk_id`` is the argument, else ``document.id``, else :func:`content_chunk_id` of the text, source and
    ``scope`` (deterministic, so the same document is stored once however often it is added); ``text`` is
    ``page_content``; ``metadata`` a copy of ``document.metadata``; ``source`` is ``metadata["source"]``
    (as LangChain document loaders set it) converted to str, else ``""``. A document this retriever returned
    (its metadata holds the retrieval keys ``score``, ``rrf_score``, ``*_rank``, ``*_score``) stores its chunk's
    metadata instead: without the retrieval keys and ``source``, with ``chunk_metadata``'s values put back
    (:func:`hybrid_memory._adapter_support.written_back_metadata`).

    Raises:
        InvalidRequestError (a ValueError): empty text or metadata the core refuses; the message names it.
    """
    source = document.metadata.get("source")
    source = "" if source is None else str(source)
    metadata = written_back_metadata(document.metadata)
    text = document.page_content
    return make_chunk(
        {
            "chunk_id": chunk_id
            or document.id
            or content_chunk_id(text if isinstance(text, str) else "", source, scope),
            "text": text,
            "source": source,
            "metadata": metadata,
        },
        "Document",
    )


def result_to_document(result: SearchResult) -> Document:
    """Turn a core search result into a ``Document`` (``id = chunk_id``, ``page_content = text``).

    The metadata is the chunk's own metadata plus :data:`RETRIEVAL_METADATA_KEYS`: ``source`` (the chunk's
    source), ``score`` (LangChain retrievers carry their score as ``metadata["score"]``: the query-chunk cosine
    similarity clipped to [0, 1], 0.0 when the dense engine did not score the chunk,
    :func:`hybrid_memory._adapter_support.absolute_score`; its meaning does not depend on the other results of the
    query, so one score threshold cuts every query alike), ``fused_score`` (the score the core ordered the
    results by: ``SearchResult.score``, or ``rrf_score`` when the fusion is RRF; normalised to the query's own
    top, so the first result scores about 1.0 however weak), ``rrf_score``, and each engine's 1-based rank and
    raw score (None when that engine did not return the chunk). The documents come in the core's order, which
    need not be by ``score``.

    These keys always hold the retrieval values. A chunk's own metadata key of the same name is kept, when
    its value differs, under ``metadata["chunk_metadata"]`` (:func:`hybrid_memory._adapter_support.result_metadata`):
    a chunk added with ``metadata={"score": 99}`` comes back with ``metadata["score"]`` the search score and
    ``metadata["chunk_metadata"] == {"score": 99}``.
    """
    metadata = result_metadata(
        result.metadata,
        {
            "source": result.source,
            "score": absolute_score(result),
            FUSED_SCORE_KEY: result.score if result.score is not None else result.rrf_score,
            "rrf_score": result.rrf_score,
            "sparse_rank": result.sparse_rank,
            "sparse_score": result.sparse_score,
            "dense_rank": result.dense_rank,
            "dense_score": result.dense_score,
        },
    )
    return Document(id=result.chunk_id, page_content=result.text, metadata=metadata)


def _documents(response: SearchResponse) -> list[Document]:
    return [result_to_document(result) for result in response.results]


class HybridMemoryRetriever(BaseRetriever):
    """LangChain retriever over a hybrid (BM25 + dense, fused by the core's default or a named method) memory.

    Every ranking, filtering and fusion decision is the core's; this class only translates. For the same
    query, filter and parameters it returns the same chunk ids in the same order as
    :meth:`HybridMemory.search` and the LlamaIndex adapter.

    Per-call overrides go through ``invoke``/``ainvoke`` keywords, each replacing the field of the same
    name for that call only: ``k``, ``filter`` (or ``metadata_filter``), ``dense_weight``,
    ``sparse_weight``, ``rrf_k``, ``fusion``::

        retriever.invoke("HTTP 504 billing", k=3, filter={"service": "billing"})

    returns exactly 3 documents, or all the matching ones when fewer match. An unknown keyword raises
    :class:`~hybrid_memory.InvalidRequestError`; invalid values raise it (or its subclass
    :class:`~hybrid_memory.InvalidFilterError`) from the core when the query runs.

    Defaults are the core's (:class:`~hybrid_memory.SearchRequest`, :class:`~hybrid_memory.HybridParams`).
    A bad setting fails at construction with :class:`~hybrid_memory.InvalidRequestError` (a ``ValueError``,
    as pydantic's ``ValidationError`` is, so ``except ValueError`` catches both) naming the field and its
    range (``k must be an integer from 1 to 1000``); a misspelt argument is refused the same way, never
    ignored; a bad filter is the core's :class:`~hybrid_memory.InvalidFilterError`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", populate_by_name=True)

    memory: HybridMemory | ScopedMemory
    """The core memory searched (or a scoped view of it). A memory the retriever opened itself
    (``from_documents``, ``from_texts``, ``from_path``) is closed by :meth:`close` / the ``with`` block; one
    passed in stays the caller's. A path is refused, not opened (an :class:`~hybrid_memory.InvalidRequestError`
    naming ``HybridMemoryRetriever.from_path(path)``, which opens the folder and closes it with the retriever, and
    ``memory=HybridMemory.open(path)``, which the caller closes)."""
    _owns_memory: bool = PrivateAttr(default=False)
    scope: dict[str, str] | None = None
    """Scope the retriever is bound to (``{"user_id": "u1"}``; fields tenant, user_id, agent_id, session_id):
    every search is restricted to it before ranking and every added document is stamped with it; per-call
    keywords cannot change it. None: the memory's own scope (all chunks for an unscoped memory)."""
    k: int = _DEFAULT_TOP_K
    """Number of documents to return (the core's ``top_k``, 1..1000); fewer when fewer chunks match."""
    metadata_filter: dict[str, Any] | None = Field(
        default=None, validation_alias=AliasChoices("metadata_filter", "filter")
    )
    """Filter in the core language (``{"service": "billing", "severity": {"$gte": 3}}``); None matches all.
    ``filter=`` is accepted as well, as in ``invoke``."""
    dense_weight: float = _DEFAULT_PARAMS.dense_weight
    """Weight of the dense run (>= 0; 0 turns the dense engine off; a prior in the adaptive default)."""
    sparse_weight: float = _DEFAULT_PARAMS.sparse_weight
    """Weight of the BM25 run (>= 0; 0 turns BM25 off; a prior in the adaptive default)."""
    rrf_k: float = _DEFAULT_PARAMS.rrf_k_constant
    """RRF smoothing constant (the core's ``rrf_k_constant``, 60 by default); not the number of results."""
    fusion: str = _DEFAULT_PARAMS.fusion
    """The core's ``hybrid_params.fusion``: the query-adaptive default, or ``"rrf"`` for exactly weighted RRF
    (see :mod:`hybrid_memory.fusion` for every method)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Validate the fields (see the class docstring).

        Raises:
            InvalidRequestError: a field out of range, of the wrong type, or unknown; the message names it and
                the accepted values (pydantic's ``ValidationError`` is its cause). ``memory`` that is not a memory
                (a path: the message names ``from_path``; see :attr:`memory`).
            InvalidFilterError: the metadata filter is malformed.
            ScopeError: ``scope`` contradicts the scope of the ``memory`` view.
        """
        if "memory" in kwargs:  # before pydantic: a path is one line naming from_path, not a chained ValidationError
            check_memory_argument(type(self).__name__, kwargs["memory"])
        try:
            super().__init__(*args, **kwargs)
        except ValidationError as exc:
            raise unwrap_validation_error(exc, type(self).__name__) from exc

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_is_a_memory(cls, value: Any) -> HybridMemory | ScopedMemory:
        # before pydantic's is-instance checks, whose two-error wording names neither fix: a path names from_path
        return cast("HybridMemory | ScopedMemory", check_memory_argument(cls.__name__, value))

    @field_validator("k", mode="before")
    @classmethod
    def _k_is_a_number_of_results(cls, value: Any) -> int:
        # before pydantic's coercion: k="5" or k=True is refused as the core refuses top_k="5"
        return check_top_k(cls.__name__, "k", value)

    @model_validator(mode="after")
    def _check_with_the_core(self) -> HybridMemoryRetriever:
        """Bad k, weights, filter or scope fail here, at construction, not at the first query."""
        self.target()
        check_search_settings(type(self).__name__, _FIELD_NAMES, self.search_kwargs())
        return self

    def target(self) -> HybridMemory | ScopedMemory:
        """What the retriever reads and writes: ``memory``, narrowed to ``scope`` when one is set.

        Raises:
            InvalidRequestError: an unknown scope field or a blank value; ScopeError when ``memory`` is a view
                bound to another value of a field.
        """
        if not self.scope:
            return self.memory
        scope = as_scope(self.scope)
        return self.memory.scoped(scope) if scope else self.memory

    # --- construction from LangChain objects --------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        embedding: Any = None,
        *,
        ids: Sequence[str] | None = None,
        path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> HybridMemoryRetriever:
        """Build a memory from LangChain ``Document`` objects, one chunk each, and return a retriever over it.

        Args:
            documents: the documents; each keeps its ``id`` as ``chunk_id`` when it has one.
            embedding: a LangChain ``Embeddings`` (bridged by
                :class:`~langchain_hybrid_memory.embeddings.LangChainEmbedder`), a core ``Embedder``, or
                None: for a new memory the core's default (the offline all-MiniLM-L6-v2); when ``path``
                already holds a memory, the embedder it was built with, as :class:`~hybrid_memory.HybridMemory`
                resolves it (a ``HashingEmbedder`` is rebuilt from the folder's manifest, else the default
                MiniLM is used: a memory built with a LangChain model needs that model passed again).
            ids: chunk ids overriding ``Document.id``, same length as ``documents``.
            path: folder of a persisted memory (created if absent; existing chunks with the same ids are
                replaced); None keeps the memory in RAM.
            **kwargs: retriever fields (``k``, ``metadata_filter``, weights, ``rrf_k``).

        Raises:
            InvalidRequestError: ``ids`` of another length than ``documents``, a document the core
                refuses (empty text, metadata that is not JSON), or ``memory=`` (this builds its own).
            StoreFormatError: ``path`` holds a memory built with another embedder than ``embedding`` (with
                None: one that cannot be rebuilt from the folder); the message names both; nothing stored
                is changed. Pass the embedder the memory was built with.
        """
        refuse_memory_argument(kwargs, "HybridMemoryRetriever.from_documents")
        return build_owned(
            HybridMemory(path, embedder=as_core_embedder(embedding)),
            lambda memory: cls(memory=memory, **kwargs),
            lambda retriever: retriever.add_documents(documents, ids=ids),
        )

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        embedding: Any = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        ids: Sequence[str] | None = None,
        path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> HybridMemoryRetriever:
        """Build a memory from texts (uuid4 ids unless ``ids`` is given); see :meth:`from_documents` (with
        ``embedding=None`` and a ``path`` holding a memory, the embedder that memory was built with is used).

        Raises:
            InvalidRequestError: ``metadatas`` or ``ids`` of another length than ``texts``.
            StoreFormatError: ``path`` holds a memory built with another embedder (see :meth:`from_documents`).
        """
        refuse_memory_argument(kwargs, "HybridMemoryRetriever.from_texts")
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise InvalidRequestError(f"got {len(metadatas)} metadatas for {len(texts)} texts")
        documents = [
            Document(page_content=text, metadata=dict(metadatas[i]) if metadatas is not None else {})
            for i, text in enumerate(texts)
        ]
        return cls.from_documents(documents, embedding, ids=ids, path=path, **kwargs)

    @classmethod
    def from_path(cls, path: str | PathLike[str], embedding: Any = None, **kwargs: Any) -> HybridMemoryRetriever:
        """Open the memory folder at ``path`` (built by any adapter or the core) and wrap it.

        ``embedding`` must be the embedder the memory was built with (same ``name`` and ``dim``); None
        rebuilds it from the folder when it is a ``HashingEmbedder`` or the default MiniLM (see
        :meth:`from_documents`).

        Raises:
            StoreFormatError: the folder was built with another embedder or format version.
        """
        refuse_memory_argument(kwargs, "HybridMemoryRetriever.from_path")
        return build_owned(
            HybridMemory.open(path, embedder=as_core_embedder(embedding)), lambda memory: cls(memory=memory, **kwargs)
        )

    def close(self) -> None:
        """Close the memory if this retriever opened it (``from_documents``, ``from_texts``, ``from_path``):
        its indexes are saved and the store released. A memory passed in is left to its owner. Idempotent."""
        if self._owns_memory and isinstance(self.memory, HybridMemory):  # an owned memory is never a scoped view
            self.memory.close()

    def __enter__(self) -> HybridMemoryRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add_documents(self, documents: Iterable[Document], *, ids: Sequence[str] | None = None) -> list[str]:
        """Upsert documents into the memory; returns their chunk ids in input order.

        A document whose id is already stored replaces the stored chunk; a document without an id gets a
        deterministic id from its text, source and scope (:func:`content_chunk_id`), so adding the same
        id-less document twice stores it once. Documents are stamped with the retriever's scope.

        Raises:
            InvalidRequestError: ``ids`` of another length than ``documents``.
        """
        documents = list(documents)
        if ids is not None and len(ids) != len(documents):
            raise InvalidRequestError(f"got {len(ids)} ids for {len(documents)} documents")
        target = self.target()
        scope = target.scope if isinstance(target, ScopedMemory) else None
        chunks = [
            document_to_chunk(document, ids[i] if ids is not None else None, scope)
            for i, document in enumerate(documents)
        ]
        if not chunks:
            return []
        seen: set[str] = set()
        unique: list[Chunk] = []
        for i, (chunk, document) in enumerate(zip(chunks, documents, strict=True)):
            explicit = (ids is not None and ids[i]) or document.id
            if not explicit and chunk.chunk_id in seen:
                continue  # the same id-less document twice in one call is stored once
            seen.add(chunk.chunk_id)
            unique.append(chunk)
        target.upsert(unique)
        return [c.chunk_id for c in chunks]

    # --- retrieval ----------------------------------------------------------------------------------

    def search_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments passed to :meth:`HybridMemory.search` besides the query.

        Args:
            **overrides: the per-call keywords ``k``, ``filter`` / ``metadata_filter``, ``dense_weight``,
                ``sparse_weight``, ``rrf_k``; each replaces the field for this call.

        Raises:
            InvalidRequestError: an unknown keyword, both ``filter`` and ``metadata_filter``, or a value out
                of range (the message names the keyword and the range).
            InvalidFilterError: the filter is malformed.
        """
        unknown = sorted(set(overrides) - set(_CALL_KWARGS) - _RUNNABLE_KWARGS)
        if unknown:
            raise InvalidRequestError(
                f"unknown retriever argument(s) {', '.join(unknown)}; accepted: {', '.join(_CALL_KWARGS)}"
            )
        if "filter" in overrides and "metadata_filter" in overrides:
            raise InvalidRequestError("give either filter or metadata_filter, not both (they are the same)")
        params: dict[str, Any] = {
            "top_k": self.k,
            "metadata_filter": self.metadata_filter,
            "dense_weight": self.dense_weight,
            "sparse_weight": self.sparse_weight,
            "rrf_k_constant": self.rrf_k,
            "fusion": self.fusion,
        }
        for name, value in overrides.items():
            if name in _CALL_KWARGS:
                params[_CALL_KWARGS[name]] = value
        if overrides.keys() & {"k", "dense_weight", "sparse_weight", "rrf_k", "fusion"}:
            # named as the caller gave them (invoke(k=-1) says k, not the core's top_k)
            check_search_settings(type(self).__name__, _FIELD_NAMES, params)
        return params

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return _documents(self.target().search(query, **self.search_kwargs(**kwargs)))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return _documents(await self.target().asearch(query, **self.search_kwargs(**kwargs)))
