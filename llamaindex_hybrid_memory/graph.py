"""LlamaIndex retriever for global questions over a :class:`hybrid_memory.graph.GraphIndex`.

Translates and delegates: the question and the token budget go to :meth:`GraphIndex.global_search`, and each
chosen community report comes back as ``NodeWithScore(TextNode(id_=community id, text=report), score)``, in the
core's order. Needs the ``graph`` and ``llamaindex`` extras.
"""

from __future__ import annotations

from hybrid_memory.graph import GraphIndex, ReportHit
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

__all__ = ["GlobalGraphRetriever", "hit_to_node"]

_HIDDEN = ["score", "tokens", "chunk_ids"]


def hit_to_node(hit: ReportHit) -> NodeWithScore:
    """A chosen report as ``NodeWithScore(TextNode(id_=community id, text=report text), score=fused score)``;
    metadata: community_id, level, rating, title, score, tokens, chunk_ids (the last three hidden from the LLM
    and embedders)."""
    node = TextNode(
        id_=hit.community_id,
        text=hit.text,
        metadata={
            "community_id": hit.community_id,
            "level": hit.level,
            "rating": hit.rating,
            "title": hit.title,
            "score": hit.score,
            "tokens": hit.tokens,
            "chunk_ids": list(hit.chunk_ids),
        },
        excluded_llm_metadata_keys=list(_HIDDEN),
        excluded_embed_metadata_keys=list(_HIDDEN),
    )
    return NodeWithScore(node=node, score=hit.score)


class GlobalGraphRetriever(BaseRetriever):
    """Community reports for questions about the whole memory, best first, within ``token_budget`` tokens.

    An empty list means no report is relevant: say so rather than invent.

    Args:
        graph: the GraphRAG index searched.
        token_budget: tokens the returned reports may take in total (>= 1, default 2000).
        level: only reports of this community level; None for all.
        max_reports: at most this many reports; None for as many as fit.
        callback_manager, verbose: as for any LlamaIndex ``BaseRetriever``.
    """

    def __init__(
        self,
        graph: GraphIndex,
        *,
        token_budget: int = 2000,
        level: int | None = None,
        max_reports: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.graph = graph
        self.token_budget = token_budget
        self.level = level
        self.max_reports = max_reports
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self.graph.global_search(
            query_bundle.query_str, token_budget=self.token_budget, level=self.level, max_reports=self.max_reports
        )
        return [hit_to_node(hit) for hit in result.hits]
