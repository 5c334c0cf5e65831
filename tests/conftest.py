import pytest
from hybrid_memory import HashingEmbedder, HybridMemory

NOTES = [
    (
        "prod-504",
        "billing-service returned HTTP 504: PostgreSQL connection pool exhausted on db-prod-3",
        {"environment": "production", "service": "billing-service", "severity": 1},
    ),
    (
        "stage-504",
        "billing-service staging HTTP 504 from PostgreSQL connection pool exhaustion",
        {"environment": "staging", "service": "billing-service", "severity": 3},
    ),
    (
        "auth-user",
        "auth-api: getUserById returned null for deleted accounts",
        {"environment": "production", "service": "auth-api", "severity": 2},
    ),
    (
        "reset",
        "search-indexer logs ERR_CONN_RESET when Elasticsearch restarts",
        {"environment": "production", "service": "search-indexer", "severity": 2, "tags": ["elasticsearch", "network"]},
    ),
    ("poem", "床前明月光，疑是地上霜。举头望明月，低头思故乡。", {"environment": "dev", "language": "zh"}),
    (
        "upgrade",
        "Upgraded payments-gateway to v2.3.1 on 10.0.0.12 after E1243: certificate expired",
        {"environment": "production", "service": "payments-gateway", "severity": 2},
    ),
]


def _note_chunks():
    return [{"chunk_id": cid, "text": text, "source": "notes", "metadata": meta} for cid, text, meta in NOTES]


@pytest.fixture
def embedder():
    return HashingEmbedder(dim=64)


@pytest.fixture
def memory(embedder):
    with HybridMemory(embedder=embedder) as mem:
        mem.add(_note_chunks())
        yield mem


@pytest.fixture
def note_chunks():
    """The six notes as chunk mappings (a fresh list each call)."""
    return _note_chunks
