"""LlamaIndex retriever over a :class:`hybrid_memory.HybridMemory`.

The retriever translates and delegates: the query, ``similarity_top_k``, the filters and the fusion
parameters go to :meth:`HybridMemory.search` (or ``asearch``), and each :class:`~hybrid_memory.SearchResult`
comes back as ``NodeWithScore(TextNode(id_=chunk_id, ...), score=rrf_score)`` in the core's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

from hybrid_memory import (
    Chunk,
    HybridMemory,
    HybridParams,
    InvalidRequestError,
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
    refuse_memory_argument,
    result_metadata,
    written_back_metadata,
)
from hybrid_memory.dedup import DedupPolicy
from hybrid_memory.models import make_chunk
from hybrid_memory.scopes import as_scope
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from .embeddings import as_core_embedder
from .filters import to_core_filter

__all__ = ["RETRIEVAL_METADATA_KEYS", "HybridMemoryRetriever", "node_to_chunk", "result_to_node"]

# defaults come from the core models, so the adapters cannot drift from them
_DEFAULT_TOP_K: int = SearchRequest.model_fields["top_k"].default
_DEFAULT_PARAMS = HybridParams()

INSERT_DEDUP = DedupPolicy("skip", near=False)
"""What :meth:`HybridMemoryRetriever.insert_nodes` does with a node whose text is already stored in the same
scope under another id: skip it (LlamaIndex gives every ``Document`` a random uuid4 id, so this is what keeps a
second ``from_documents`` over the same documents from doubling the memory)."""

RETRIEVAL_METADATA_KEYS = (
    "score",
    "fused_score",
    "rrf_score",
    "sparse_rank",
    "sparse_score",
    "dense_rank",
    "dense_score",
)
"""Keys added to every returned node's metadata, hidden from the LLM and embedding text of the node: the
absolute score (also ``NodeWithScore.score``: :func:`hybrid_memory._adapter_support.absolute_score`), the score
the results are ordered by (``fused_score``), the weighted RRF score, and each engine's
1-based rank and raw score (the same keys as the LangChain adapter's, besides ``source``). They hold the
retrieval values; a chunk's own differing values of them (and of ``source``) are under
``metadata["chunk_metadata"]``, visible to the LLM like the rest of the chunk's metadata."""


def node_to_chunk(node: BaseNode | NodeWithScore) -> Chunk:
    """Turn a LlamaIndex node or ``Document`` (or a retrieved ``NodeWithScore``: its node) into a core
    :class:`~hybrid_memory.Chunk`.

    ``chunk_id`` is ``node.node_id``, ``text`` the node's content without metadata, ``metadata`` a copy
    of ``node.metadata``, and ``source`` is ``metadata["source"]`` when present, else the node's
    ``ref_doc_id`` (the document a parsed node came from), else ``""``. A node this retriever returned (its
    metadata holds the retrieval keys ``score``, ``rrf_score``, ``*_rank``, ``*_score``) stores its chunk's
    metadata instead: without the retrieval keys and ``source``, with ``chunk_metadata``'s values put back
    (:func:`hybrid_memory._adapter_support.written_back_metadata`).

    Raises:
        InvalidRequestError: empty text or id (the core validates; the message names the field), or an object
            that is not a node.
    """
    if isinstance(node, NodeWithScore):
        node = node.node
    if not isinstance(node, BaseNode):
        raise InvalidRequestError(
            f"insert_nodes takes LlamaIndex nodes, Documents or NodeWithScore, got {type(node).__name__}"
        )
    source = node.metadata.get("source", node.ref_doc_id or "")
    metadata = written_back_metadata(node.metadata)
    return make_chunk(
        {
            "chunk_id": node.node_id,
            "text": node.get_content(metadata_mode=MetadataMode.NONE),
            "source": str(source) if source is not None else "",
            "metadata": metadata,
        },
        "node",
    )


def result_to_node(result: SearchResult) -> NodeWithScore:
    """Turn a core search result into ``NodeWithScore(TextNode(id_=chunk_id, text, metadata), score)``.

    ``score`` is the query-chunk cosine similarity, clipped to [0, 1] (0.0 when the dense engine did not score
    the chunk): :func:`hybrid_memory._adapter_support.absolute_score`. Its meaning does not depend on the other
    results of the query, so ``SimilarityPostprocessor(similarity_cutoff=...)`` cuts every query alike (the
    fused score is normalised to each query's top: its first result scored 1.0 however weak). The nodes come in
    the core's order, which need not be by this score; the score they are ordered by is
    ``metadata["fused_score"]`` (``SearchResult.score``, or ``rrf_score`` when the fusion is RRF). The node's
    metadata is the chunk's metadata plus ``source``, ``score``, ``fused_score``, ``rrf_score`` and the engines'
    1-based ranks and raw scores (:data:`RETRIEVAL_METADATA_KEYS`, None when an engine did not return the
    chunk). The added retrieval keys, and ``source`` when it is empty, are excluded from the text the LLM and
    embedders see. The added keys always hold the retrieval values; a chunk's own metadata key of the same name
    is kept, when its value differs, under ``metadata["chunk_metadata"]``
    (:func:`hybrid_memory._adapter_support.result_metadata`), so a chunk added with ``metadata={"score": 99}``
    comes back with ``metadata["score"] == NodeWithScore.score`` and ``metadata["chunk_metadata"] ==
    {"score": 99}``.
    """
    score = absolute_score(result)
    metadata = result_metadata(
        result.metadata,
        {
            "source": result.source,
            "score": score,
            FUSED_SCORE_KEY: result.score if result.score is not None else result.rrf_score,
            "rrf_score": result.rrf_score,
            "sparse_rank": result.sparse_rank,
            "sparse_score": result.sparse_score,
            "dense_rank": result.dense_rank,
            "dense_score": result.dense_score,
        },
    )
    hidden = [*RETRIEVAL_METADATA_KEYS, *(() if result.source else ("source",))]
    node = TextNode(
        id_=result.chunk_id,
        text=result.text,
        metadata=metadata,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=list(hidden),
    )
    return NodeWithScore(node=node, score=score)


class HybridMemoryRetriever(BaseRetriever):
    """LlamaIndex retriever over a hybrid (BM25 + dense, fused by the core's default or a named method) memory.

    Every ranking, filtering and fusion decision is the core's; this class only translates. For the same
    query, filter and parameters it returns the same chunk ids in the same order as
    :meth:`HybridMemory.search` and the LangChain adapter.

    Args:
        memory: the core memory to search, or a scoped view of it (the retriever does not close it). A path is
            refused, not opened: an :class:`~hybrid_memory.InvalidRequestError` naming
            ``HybridMemoryRetriever.from_path(path)`` (the retriever opens the folder and closes it) and
            ``memory=HybridMemory.open(path)`` (the caller closes it).
        scope: scope the retriever is bound to (``{"user_id": "u1"}``): searches are restricted to it before
            ranking and inserted nodes are stamped with it. None: the memory's own scope.
        similarity_top_k: number of nodes to return (the core's ``top_k``, 1..1000); fewer when fewer
            chunks match the filter.
        filters: a LlamaIndex ``MetadataFilters`` (or one ``MetadataFilter``), translated by
            :func:`llamaindex_hybrid_memory.filters.to_core_filter`; or a dict already in the core filter
            language; None matches every chunk.
        dense_weight: weight of the dense run (>= 0; 0 turns it off; a prior in the adaptive default).
        sparse_weight: weight of the BM25 run (>= 0; 0 turns it off; a prior in the adaptive default).
        rrf_k: RRF smoothing constant (the core's ``rrf_k_constant``, 60 by default); not the number of
            results.
        fusion: the core's ``hybrid_params.fusion``: the query-adaptive default, or ``"rrf"`` for exactly
            weighted RRF (see :mod:`hybrid_memory.fusion`).
        callback_manager, object_map, verbose: as for any LlamaIndex ``BaseRetriever``.

    Defaults are the core's (:class:`~hybrid_memory.SearchRequest`, :class:`~hybrid_memory.HybridParams`).
    Invalid values (a ``memory`` that is not a memory included) raise
    :class:`~hybrid_memory.InvalidRequestError` at construction, naming the parameter
    and its range (``similarity_top_k must be an integer from 1 to 1000``); a filter operator with no meaning
    in the core raises its subclass :class:`~hybrid_memory.InvalidFilterError` here already.

    Example::

        retriever = HybridMemoryRetriever.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))
        nodes = retriever.retrieve("HTTP 504 billing")
    """

    def __init__(
        self,
        memory: HybridMemory | ScopedMemory,
        *,
        scope: Mapping[str, str] | None = None,
        similarity_top_k: int = _DEFAULT_TOP_K,
        filters: MetadataFilters | MetadataFilter | Mapping[str, Any] | None = None,
        dense_weight: float = _DEFAULT_PARAMS.dense_weight,
        sparse_weight: float = _DEFAULT_PARAMS.sparse_weight,
        rrf_k: float = _DEFAULT_PARAMS.rrf_k_constant,
        fusion: str = _DEFAULT_PARAMS.fusion,
        callback_manager: CallbackManager | None = None,
        object_map: dict | None = None,
        verbose: bool = False,
    ) -> None:
        check_memory_argument(type(self).__name__, memory)  # a path names from_path
        self.memory = memory
        self._owns_memory = False  # True when from_documents / from_nodes / from_path opened it
        self.scope = dict(scope) if scope else None
        bound = as_scope(self.scope)
        self._target = memory.scoped(bound) if bound else memory
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.dense_weight = dense_weight
        self.sparse_weight = sparse_weight
        self.rrf_k = rrf_k
        self.fusion = fusion
        # unsupported operators and bad values fail at construction, not at the first query, named as here
        check_search_settings(
            type(self).__name__, {"top_k": "similarity_top_k", "rrf_k_constant": "rrf_k"}, self.search_kwargs()
        )
        super().__init__(callback_manager=callback_manager, object_map=object_map, verbose=verbose)

    # --- construction from LlamaIndex objects -------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[BaseNode],
        embed_model: Any = None,
        *,
        path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> HybridMemoryRetriever:
        """Build a memory from LlamaIndex ``Document`` objects (one chunk each, ``chunk_id = doc.id_``).

        Args:
            documents: ``Document`` objects or any nodes; split them beforehand (for example with a node parser)
                when a document is longer than a chunk should be.
            embed_model: a LlamaIndex ``BaseEmbedding`` (bridged by
                :class:`~llamaindex_hybrid_memory.embeddings.LlamaIndexEmbedder`), a core ``Embedder``,
                or None: for a new memory the core's default (the offline all-MiniLM-L6-v2); when ``path``
                already holds a memory, the embedder it was built with, as :class:`~hybrid_memory.HybridMemory`
                resolves it (a ``HashingEmbedder`` is rebuilt from the folder's manifest, else the default
                MiniLM is used: a memory built with a LlamaIndex model needs that model passed again).
            path: folder of a persisted memory (created if absent; existing chunks with the same ids are
                replaced); None keeps the memory in RAM.
            **kwargs: retriever parameters (``similarity_top_k``, ``filters``, weights, ``rrf_k``).

        Raises:
            StoreFormatError: ``path`` holds a memory built with another embedder than ``embed_model`` (with
                None: one that cannot be rebuilt from the folder); the message names both; nothing stored
                is changed. Pass the embedder the memory was built with.
            InvalidRequestError: a document with empty text, metadata that is not JSON, or ``memory=``
                (this builds its own memory).
        """
        return cls.from_nodes(documents, embed_model, path=path, **kwargs)

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[BaseNode],
        embed_model: Any = None,
        *,
        path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> HybridMemoryRetriever:
        """Build a memory from LlamaIndex nodes (``chunk_id = node.node_id``); see :meth:`from_documents`."""
        refuse_memory_argument(kwargs, "HybridMemoryRetriever.from_nodes")
        return build_owned(
            HybridMemory(path, embedder=as_core_embedder(embed_model)),
            lambda memory: cls(memory, **kwargs),
            lambda retriever: retriever.insert_nodes(nodes),
        )

    @classmethod
    def from_path(cls, path: str | PathLike[str], embed_model: Any = None, **kwargs: Any) -> HybridMemoryRetriever:
        """Open the memory folder at ``path`` (built by any adapter or the core) and wrap it.

        ``embed_model`` must be the embedder the memory was built with (same ``name`` and ``dim``); None
        rebuilds it from the folder when it is a ``HashingEmbedder`` or the default MiniLM (see
        :meth:`from_documents`).

        Raises:
            StoreFormatError: the folder was built with another embedder or format version.
        """
        refuse_memory_argument(kwargs, "HybridMemoryRetriever.from_path")
        return build_owned(
            HybridMemory.open(path, embedder=as_core_embedder(embed_model)), lambda memory: cls(memory, **kwargs)
        )

    def close(self) -> None:
        """Close the memory if this retriever opened it (``from_documents``, ``from_nodes``, ``from_path``):
        its indexes are saved and the store released. A memory passed in is left to its owner. Idempotent."""
        if self._owns_memory and isinstance(self.memory, HybridMemory):  # an owned memory is never a scoped view
            self.memory.close()

    def __enter__(self) -> HybridMemoryRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def insert_nodes(self, nodes: Iterable[BaseNode | NodeWithScore]) -> list[str]:
        """Upsert nodes (or ``Document``s, or the ``NodeWithScore`` a retrieval returned) into the memory; returns
        their chunk ids in input order.

        A node whose id is already stored replaces the stored chunk. A node with a new id whose text is
        already stored in the same scope is skipped (:data:`INSERT_DEDUP`); its place in the returned list holds
        the stored chunk's id. Nodes are stamped with the retriever's scope. A retrieved node stores its chunk's
        metadata, not the retrieval keys (:func:`node_to_chunk`).

        Raises:
            InvalidRequestError: an object that is not a node, or a node the core refuses.
        """
        chunks = [node_to_chunk(node) for node in nodes]
        if not chunks:
            return []
        return self._target.upsert(chunks, dedup=INSERT_DEDUP)

    # --- retrieval ----------------------------------------------------------------------------------

    def search_kwargs(self) -> dict[str, Any]:
        """Keyword arguments this retriever passes to :meth:`HybridMemory.search` besides the query."""
        filters = self.filters
        metadata_filter = dict(filters) if isinstance(filters, Mapping) else to_core_filter(filters)
        return {
            "top_k": self.similarity_top_k,
            "metadata_filter": metadata_filter,
            "dense_weight": self.dense_weight,
            "sparse_weight": self.sparse_weight,
            "rrf_k_constant": self.rrf_k,
            "fusion": self.fusion,
        }

    @staticmethod
    def _to_nodes(response: SearchResponse) -> list[NodeWithScore]:
        return [result_to_node(result) for result in response.results]

    def _call_kwargs(self, query_bundle: QueryBundle) -> dict[str, Any]:
        # a query engine that already embedded the query passes QueryBundle.embedding: use it, do not embed again
        kwargs = self.search_kwargs()
        if query_bundle.embedding:
            kwargs["query_vector"] = query_bundle.embedding
        return kwargs

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._to_nodes(self._target.search(query_bundle.query_str, **self._call_kwargs(query_bundle)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = await self._target.asearch(query_bundle.query_str, **self._call_kwargs(query_bundle))
        return self._to_nodes(response)
