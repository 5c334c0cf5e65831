"""``global_search`` reads the chunk hashes again only when the memory changed (issue: 220-420 ms a call at 100,000
chunks), and still never serves a report citing a deleted or replaced chunk: after a write of this process, of a
second memory object on the same folder, of another scope, and with no change position at all (Qdrant).

The reads are counted on the backend's ``chunk_hashes`` (every path of the memory and of a scoped view goes
through it); the answers are compared by exact community ids and chunk ids."""

from __future__ import annotations

import threading

import pytest
from hybrid_memory import HybridMemory
from hybrid_memory.graph import GraphIndex

from tests.graph.conftest import NOTES

QUESTION = "what happened to billing-service on db-prod-3?"
ALL = ["L0-C1", "L0-C0", "L0-C2"]  # the five notes' communities: C1 cites n1, n2; C0 n3, n4; C2 n5
WITHOUT_N1 = ["L0-C0", "L0-C2"]


def count_hash_reads(monkeypatch, memory) -> list:
    """Count the reads of ``memory``'s chunk hashes: the scope each read asked for, in order."""
    backend = memory.backend
    read = backend.chunk_hashes
    calls: list = []

    def counting(scope):
        calls.append(None if scope is None else dict(scope))
        return read(scope)

    monkeypatch.setattr(backend, "chunk_hashes", counting)
    return calls


def served(index, question=QUESTION, memory=None):
    result = index.global_search(question, token_budget=4000, memory=memory)
    return [h.community_id for h in result.hits], sorted(result.chunk_ids)


def test_two_global_searches_with_no_write_between_read_the_hashes_once(monkeypatch, disk_memory):
    GraphIndex.build(disk_memory)  # saved under <memory>/graph
    index = GraphIndex.open(disk_memory)  # loaded: it has read nothing yet
    calls = count_hash_reads(monkeypatch, disk_memory)
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert index.ask(QUESTION, token_budget=4000).search.chunk_ids == ["n1", "n2", "n3", "n4", "n5"]
    assert calls == [None]  # one read for the three calls

    disk_memory.add([{"chunk_id": "n6", "text": "a note about tomato soup"}])  # cites nothing the graph has
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert calls == [None, None]  # the write moved the position: read once more, then not again

    disk_memory.delete(["n1"])
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
    assert len(calls) == 3


@pytest.mark.parametrize("write", ["add", "upsert_text", "upsert_metadata", "delete", "supersede", "delete_unknown"])
def test_every_committed_write_makes_the_next_global_search_read_again(monkeypatch, disk_memory, write):
    index = GraphIndex.build(disk_memory, save=False)
    calls = count_hash_reads(monkeypatch, disk_memory)
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert calls == []  # the build's own read stands for the position it was made at
    if write == "add":
        disk_memory.add([{"chunk_id": "n6", "text": "a note about tomato soup"}])
    elif write == "upsert_text":
        disk_memory.upsert([{"chunk_id": "n3", "text": "auth-api was retired"}])
    elif write == "upsert_metadata":
        disk_memory.upsert([{"chunk_id": "n3", "text": NOTES["n3"], "metadata": {"team": "identity"}}])
    elif write == "delete":
        disk_memory.delete(["n5"])
    elif write == "supersede":  # n2 stays stored with its text (valid_to closed): its report stays served
        disk_memory.supersede(["n2"], {"chunk_id": "n2b", "text": "billing-service no longer retries"})
    else:  # deleting an id that is not stored commits nothing: the position stays
        assert disk_memory.delete(["no-such-id"]) == 0
    expected = {
        "add": (ALL, ["n1", "n2", "n3", "n4", "n5"]),
        "upsert_text": (["L0-C1", "L0-C2"], ["n1", "n2", "n5"]),
        "upsert_metadata": (ALL, ["n1", "n2", "n3", "n4", "n5"]),
        "delete": (["L0-C1", "L0-C0"], ["n1", "n2", "n3", "n4"]),
        "supersede": (ALL, ["n1", "n2", "n3", "n4", "n5"]),
        "delete_unknown": (ALL, ["n1", "n2", "n3", "n4", "n5"]),
    }[write]
    assert served(index) == expected
    assert served(index) == expected
    assert len(calls) == (0 if write == "delete_unknown" else 1)


def test_refresh_reads_once_and_leaves_global_search_nothing_to_read(monkeypatch, disk_memory):
    index = GraphIndex.build(disk_memory, save=False)
    calls = count_hash_reads(monkeypatch, disk_memory)
    disk_memory.delete(["n1"])
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
    index.refresh(disk_memory, save=False)  # rewrites C1 from n2 alone
    assert len(calls) == 2
    assert served(index) == (["L0-C1", "L0-C0", "L0-C2"], ["n2", "n3", "n4", "n5"])
    assert len(calls) == 2  # the index changed, but the refresh's read stands for the current position
    assert index.reports["L0-C1"].chunk_ids == ["n2"]


def test_a_reload_of_the_index_reads_again(monkeypatch, disk_memory):
    index = GraphIndex.build(disk_memory)
    calls = count_hash_reads(monkeypatch, disk_memory)
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    index.restore(GraphIndex.open(disk_memory).to_state())  # the index's state replaced: nothing kept is trusted
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert calls == [None]


def test_a_merge_changes_the_reports_and_serves_them_without_reading_again(monkeypatch, disk_memory):
    index = GraphIndex.build(disk_memory, save=False)
    disk_memory.delete(["n5"])
    calls = count_hash_reads(monkeypatch, disk_memory)
    assert served(index) == (["L0-C1", "L0-C0"], ["n1", "n2", "n3", "n4"])
    index.merge_entities("es-node-1", "search-indexer")  # re-clusters: reports change, extractions do not
    index.summarize_stale(disk_memory)
    assert "n5" in {c for r in index.reports.values() for c in r.chunk_ids}  # the merged community still cites n5
    ids, chunks = served(index)
    assert "n5" not in chunks and chunks == ["n1", "n2", "n3", "n4"]
    assert calls == [None]  # the kept "gone" set was reused for the new reports


def test_a_delete_by_a_second_memory_on_the_same_folder_is_seen_by_the_next_global_search(
    monkeypatch, tmp_path, embedder
):
    folder = tmp_path / "m"
    with HybridMemory(folder, embedder=embedder) as first:
        first.add([{"chunk_id": cid, "text": text} for cid, text in NOTES.items()])
        index = GraphIndex.build(first)
        calls = count_hash_reads(monkeypatch, first)
        assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
        with HybridMemory.open(folder, embedder=embedder) as second:  # another process's view of the folder
            second.delete(["n1"])
            assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
            second.upsert([{"chunk_id": "n4", "text": "auth-api v3 no longer reads pg_stat_activity"}])
            assert served(index) == (["L0-C2"], ["n5"])
            assert served(index) == (["L0-C2"], ["n5"])
        assert len(calls) == 2


def test_a_write_between_the_position_and_the_hashes_is_read_at_the_next_call(monkeypatch, tmp_path, embedder):
    """The position is read before the hashes: a write landing between them leaves the kept answer one position
    behind, so the next call reads again rather than trusting hashes older than its position."""
    folder = tmp_path / "m"
    with HybridMemory(folder, embedder=embedder) as first, HybridMemory.open(folder, embedder=embedder) as second:
        first.add([{"chunk_id": cid, "text": text} for cid, text in NOTES.items()])
        GraphIndex.build(first)
        index = GraphIndex.open(first)
        read = first.backend.chunk_hashes
        calls = []

        def read_then_another_writes(scope):
            hashes = read(scope)
            if not calls:
                second.delete(["n1"])  # committed after the hashes were read, before global_search returns
            calls.append(scope)
            return hashes

        monkeypatch.setattr(first.backend, "chunk_hashes", read_then_another_writes)
        assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])  # read before the delete
        assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
        assert len(calls) == 2


def test_a_scoped_graph_serves_its_scope_and_a_write_in_another_scope_breaks_nothing(monkeypatch, tmp_path, embedder):
    u1 = {
        "u1-a": "billing-service returned HTTP 504 when db-prod-3 hit ERR_CONN_RESET.",
        "u1-b": "billing-service retries on db-prod-3 after ERR_CONN_RESET.",
        "u1-c": "auth-api calls getUserById() on pg_stat_activity.",
        "u1-d": "auth-api v2.3.1 reads pg_stat_activity.",
    }
    u2 = {
        "u2-a": "billing-service calls ledger-service for every invoice.",
        "u2-b": "Priya Raman restarted billing-service on db-prod-3.",
    }
    question = "what does billing-service do on db-prod-3?"
    with HybridMemory(tmp_path / "m", embedder=embedder) as memory:
        memory.scoped(user_id="u1").add([{"chunk_id": c, "text": t} for c, t in u1.items()])
        memory.scoped(user_id="u2").add([{"chunk_id": c, "text": t} for c, t in u2.items()])
        index = GraphIndex.build(memory.scoped(user_id="u1"))
        calls = count_hash_reads(monkeypatch, memory)
        everything = (["L0-C1", "L0-C0"], ["u1-a", "u1-b", "u1-c", "u1-d"])
        assert served(index, question) == everything
        assert calls == []

        other = memory.scoped(user_id="u2")  # another scope writes: the u1 graph answers exactly as before
        other.add([{"chunk_id": "u2-c", "text": "billing-service on db-prod-3 ran out of disk"}])
        other.delete(["u2-a"])
        other.upsert([{"chunk_id": "u2-b", "text": "Priya Raman rebooted db-prod-3."}])
        assert served(index, question) == everything
        assert calls == [{"user_id": "u1"}]  # the read stays the scope's own
        assert served(index, question, memory=memory.scoped(user_id="u1")) == everything  # a new view, same scope
        assert calls == [{"user_id": "u1"}]

        memory.scoped(user_id="u1").delete(["u1-a"])
        assert served(index, question) == (["L0-C0"], ["u1-c", "u1-d"])
        assert calls == [{"user_id": "u1"}] * 2
        texts = " ".join(h.text for h in index.global_search(question, token_budget=4000).hits)
        assert "ledger-service" not in texts and "Priya" not in texts and "disk" not in texts


def test_without_a_change_position_every_global_search_reads(monkeypatch, disk_memory):
    index = GraphIndex.build(disk_memory, save=False)
    monkeypatch.setattr(disk_memory.backend, "change_position", lambda: None)  # as a Qdrant backend answers
    calls = count_hash_reads(monkeypatch, disk_memory)
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
    disk_memory.delete(["n1"])
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
    assert len(calls) == 3


def test_on_qdrant_edge_the_position_is_unknown_and_every_global_search_reads(monkeypatch, tmp_path, embedder):
    pytest.importorskip("qdrant_edge")
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=embedder, payload_indexes=False) as memory:
        memory.add([{"chunk_id": cid, "text": text} for cid, text in NOTES.items()])
        assert memory.backend.change_position() is None and memory._change_position() is None
        index = GraphIndex.build(memory, path=tmp_path / "graph")
        calls = count_hash_reads(monkeypatch, memory)
        assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])
        memory.delete(["n1"])
        assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
        assert len(calls) == 2


def test_a_closed_memory_serves_the_reports_as_saved(disk_memory):
    index = GraphIndex.build(disk_memory, save=False)
    disk_memory.delete(["n1"])
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
    disk_memory.close()
    assert served(index) == (ALL, ["n1", "n2", "n3", "n4", "n5"])  # as before this change: no memory to check


def test_threads_searching_while_another_deletes_end_on_the_current_answer(disk_memory):
    index = GraphIndex.build(disk_memory, save=False)
    results: list = []
    failures: list = []

    def search() -> None:
        try:
            for _ in range(5):
                results.append(served(index))
        except Exception as exc:  # any failure of a thread is reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    disk_memory.delete(["n1"])
    for t in threads:
        t.join()
    assert failures == []
    assert {tuple(map(tuple, r)) for r in results} <= {
        (tuple(ALL), ("n1", "n2", "n3", "n4", "n5")),
        (tuple(WITHOUT_N1), ("n3", "n4", "n5")),
    }
    assert served(index) == (WITHOUT_N1, ["n3", "n4", "n5"])
