import pytest

pytest.importorskip("networkx")
pytest.importorskip("graspologic_native")

from hybrid_memory import HashingEmbedder, HybridMemory  # noqa: E402

# Five incident notes; the offline extractor finds exactly these entities (see test_extract_offline.py).
NOTES = {
    "n1": "billing-service returned HTTP 504 when db-prod-3 hit ERR_CONN_RESET.",
    "n2": "billing-service retries on db-prod-3 after ERR_CONN_RESET.",
    "n3": "auth-api calls getUserById() on pg_stat_activity.",
    "n4": "auth-api v2.3.1 reads pg_stat_activity.",
    "n5": "search-indexer logs ETIMEDOUT on es-node-1.",
}


class ScriptedLLM:
    """A ``prompt -> str`` model replying from a script, recording every prompt."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.replies:
            raise AssertionError("ScriptedLLM: no reply left")
        reply = self.replies.pop(0)
        return reply(prompt) if callable(reply) else reply


@pytest.fixture
def embedder():
    return HashingEmbedder(dim=64)


@pytest.fixture
def memory(embedder):
    with HybridMemory(None, embedder=embedder) as mem:
        mem.add([{"chunk_id": cid, "text": text} for cid, text in NOTES.items()])
        yield mem


@pytest.fixture
def disk_memory(tmp_path, embedder):
    with HybridMemory(tmp_path / "memory", embedder=embedder) as mem:
        mem.add([{"chunk_id": cid, "text": text} for cid, text in NOTES.items()])
        yield mem
