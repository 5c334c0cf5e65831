"""iter_chunks under concurrent upserts, and a search racing an upsert (events, no sleeps)."""

from __future__ import annotations

import threading

from hybrid_memory import HashingEmbedder, HybridMemory


def _chunks(n: int, version: str = "v1") -> list[dict]:
    return [{"chunk_id": f"c{i:04d}", "text": f"chunk {i} {version}"} for i in range(n)]


def test_iter_chunks_yields_each_chunk_once_in_first_insertion_order_while_chunks_are_upserted(tmp_path):
    with HybridMemory(tmp_path, embedder=HashingEmbedder(16)) as memory:
        memory.add(_chunks(2500))
        iterator = memory.iter_chunks()
        seen = [next(iterator)]  # the first batch of 1,000 is read
        memory.upsert([{"chunk_id": "c0000", "text": "chunk 0 v2"}, {"chunk_id": "c1500", "text": "chunk 1500 v2"}])
        seen += list(iterator)
        ids = [c.chunk_id for c in seen]
        assert len(ids) == 2500 and len(set(ids)) == 2500  # was 2,501: c0000 came again at the end
        assert ids == [f"c{i:04d}" for i in range(2500)]
        assert seen[1500].text == "chunk 1500 v2"  # read after the upsert: the new version
        # order after upserts is still first insertion; a chunk deleted and added again goes last
        memory.delete(["c0001"])
        memory.add([{"chunk_id": "c0001", "text": "back again"}])
        order = [c.chunk_id for c in memory.iter_chunks()]
        assert order[:2] == ["c0000", "c0002"] and order[-1] == "c0001"


def test_iter_chunks_while_another_thread_upserts_every_chunk():
    memory = HybridMemory(embedder=HashingEmbedder(16))
    memory.add(_chunks(2500))
    started = threading.Event()

    def rewrite() -> None:
        started.wait(timeout=30)
        for start in range(0, 2500, 100):
            memory.upsert(_chunks(2500, "v2")[start : start + 100])

    thread = threading.Thread(target=rewrite)
    thread.start()
    ids = []
    for chunk in memory.iter_chunks():
        ids.append(chunk.chunk_id)
        started.set()
    thread.join()
    assert ids == [f"c{i:04d}" for i in range(2500)]
    memory.close()


def test_a_search_and_an_upsert_of_the_scored_chunk_do_not_interleave():
    """The upsert waits until the running search has loaded the version it scored: the search neither
    misses the chunk nor returns text newer than what was scored; the next search sees the new version."""
    memory = HybridMemory(embedder=HashingEmbedder(16))
    memory.add([{"chunk_id": "a", "text": "zebra old text"}, {"chunk_id": "b", "text": "other words"}])
    sparse = memory._searcher.engines["sparse"]
    original_search = sparse.search
    scored, writer_waiting = threading.Event(), threading.Event()

    def search_then_wait(query, k, allowed):  # noqa: ANN001
        hits = original_search(query, k, allowed)
        scored.set()
        assert writer_waiting.wait(timeout=30)
        return hits

    original_acquire = memory.backend.index_lock.acquire_write

    def acquire_write() -> None:
        writer_waiting.set()
        original_acquire()

    sparse.search = search_then_wait
    memory.backend.index_lock.acquire_write = acquire_write
    responses = []
    searcher = threading.Thread(target=lambda: responses.append(memory.search("zebra", top_k=1, dense_weight=0.0)))
    searcher.start()
    assert scored.wait(timeout=30)
    writer = threading.Thread(target=memory.upsert, args=([{"chunk_id": "a", "text": "zebra new text"}],))
    writer.start()
    searcher.join(timeout=30)
    writer.join(timeout=30)
    assert [(r.chunk_id, r.text) for r in responses[0].results] == [("a", "zebra old text")]
    sparse.search = original_search
    assert [(r.chunk_id, r.text) for r in memory.search("zebra", top_k=1, dense_weight=0.0).results] == [
        ("a", "zebra new text")
    ]
    memory.close()
