"""LangChain's standard retriever suite, unmodified, against HybridMemoryRetriever."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from langchain_hybrid_memory import HybridMemoryRetriever  # noqa: E402


class TestHybridMemoryRetrieverStandard(RetrieversIntegrationTests):
    """Every test of ``RetrieversIntegrationTests``; the async one needs pytest-asyncio in auto mode."""

    @pytest.fixture(autouse=True)
    def _incident_memory(self, memory):
        # the standard suite builds retrievers from properties, which cannot request fixtures
        self._memory = memory

    @property
    def retriever_constructor(self) -> type[HybridMemoryRetriever]:
        return HybridMemoryRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"memory": self._memory, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "HTTP 504 billing"
