"""Shared fixture of the adapter tests: a small incident memory with a deterministic offline embedder.

The rest of the suite uses tests/conftest.py's notes memory; this ``memory`` overrides it below tests/adapters/
(test_adapters_agree.py and a few others define their own).
"""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory

INCIDENTS = [
    {
        "chunk_id": "inc-1",
        "text": "HTTP 504 Gateway Timeout from billing-service during invoice export",
        "source": "pagerduty",
        "metadata": {"service": "billing", "severity": 4, "tags": ["timeout", "http"]},
    },
    {
        "chunk_id": "inc-2",
        "text": "billing-service returns HTTP 500 when the Stripe webhook retries",
        "source": "pagerduty",
        "metadata": {"service": "billing", "severity": 3, "tags": ["http"]},
    },
    {
        "chunk_id": "inc-3",
        "text": "Postgres connection pool exhausted on billing database, HTTP 504 upstream",
        "source": "postmortem",
        "metadata": {"service": "billing", "severity": 5, "tags": ["postgres", "timeout"]},
    },
    {
        "chunk_id": "inc-4",
        "text": "search-service latency spike after Elasticsearch reindex, HTTP 504 at the edge",
        "source": "slack",
        "metadata": {"service": "search", "severity": 2, "tags": ["timeout"]},
    },
    {
        "chunk_id": "inc-5",
        "text": "auth-service rejects tokens after key rotation ERR_JWT_EXPIRED",
        "source": "slack",
        "metadata": {"service": "auth", "severity": 3, "tags": ["jwt"]},
    },
    {
        "chunk_id": "inc-6",
        "text": "Kafka consumer lag on billing events topic delays invoices by an hour",
        "source": "postmortem",
        "metadata": {"service": "billing", "severity": 2, "tags": ["kafka"]},
    },
    {
        "chunk_id": "inc-7",
        "text": "CDN cache purge failed with HTTP 503 for static assets",
        "source": "slack",
        "metadata": {"service": "frontend", "severity": 1, "tags": ["http", "cdn"]},
    },
]


def make_memory(path=None) -> HybridMemory:
    """An incident memory (HashingEmbedder dim 64, offline and deterministic)."""
    memory = HybridMemory(path, embedder=HashingEmbedder(dim=64))
    memory.add(INCIDENTS)
    return memory


@pytest.fixture
def memory():
    mem = make_memory()
    yield mem
    mem.close()
