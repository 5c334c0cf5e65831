"""LangChain retriever for global questions over a :class:`hybrid_memory.graph.GraphIndex`.

Translates and delegates: the question and the token budget go to :meth:`GraphIndex.global_search`, and each
chosen community report comes back as a ``Document`` (``id = community id``, ``page_content`` = report text),
in the core's order. Needs the ``graph`` and ``langchain`` extras.
"""

from __future__ import annotations

from typing import Any

from hybrid_memory.graph import GraphIndex, ReportHit
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

__all__ = ["GlobalGraphRetriever", "hit_to_document"]


def hit_to_document(hit: ReportHit) -> Document:
    """A chosen report as a ``Document``: ``id`` = community id, ``page_content`` = title, summary, findings;
    metadata: community_id, level, rating, score, title, tokens, chunk_ids (the chunks it stands for)."""
    return Document(
        id=hit.community_id,
        page_content=hit.text,
        metadata={
            "community_id": hit.community_id,
            "level": hit.level,
            "rating": hit.rating,
            "score": hit.score,
            "title": hit.title,
            "tokens": hit.tokens,
            "chunk_ids": list(hit.chunk_ids),
        },
    )


class GlobalGraphRetriever(BaseRetriever):
    """Community reports for questions about the whole memory, best first, within ``token_budget`` tokens.

    An empty list means no report is relevant: say so rather than invent. Per-call overrides through
    ``invoke`` keywords: ``token_budget``, ``level``, ``max_reports``::

        retriever = GlobalGraphRetriever(graph=GraphIndex.open(memory))
        docs = retriever.invoke("how do services handle database timeouts?", token_budget=1500)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    graph: GraphIndex
    """The GraphRAG index searched (built or opened by the caller)."""
    token_budget: int = 2000
    """Tokens the returned reports may take in total (>= 1)."""
    level: int | None = None
    """Only reports of this community level; None for all levels."""
    max_reports: int | None = None
    """At most this many reports; None for as many as fit."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        kwargs.pop("verbose", None)
        unknown = set(kwargs) - {"token_budget", "level", "max_reports"}
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)}; use token_budget, level or max_reports")
        result = self.graph.global_search(
            query,
            token_budget=kwargs.get("token_budget", self.token_budget),
            level=kwargs.get("level", self.level),
            max_reports=kwargs.get("max_reports", self.max_reports),
        )
        return [hit_to_document(hit) for hit in result.hits]
