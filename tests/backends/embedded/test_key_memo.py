"""The store's rowid -> chunk_id memo and the light result rows the search response reads."""

import numpy as np
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.backends.embedded import store as store_module


def _memory(tmp_path):
    memory = HybridMemory(tmp_path / "m", embedder=HashingEmbedder(dim=64))
    memory.add(
        [
            {"chunk_id": "a", "text": "alpha ERR_TIMEOUT", "source": "s1", "metadata": {"k": 1}},
            {"chunk_id": "b", "text": "beta", "source": "s2", "metadata": {"k": [1, 2]}},
        ]
    )
    return memory


def test_memo_answers_like_the_store_including_rows_deleted_or_replaced(tmp_path):
    memory = _memory(tmp_path)
    store = memory.backend.store
    rowids = store.rowids().tolist()
    assert store.chunk_ids_by_rowid(rowids) == dict(zip(rowids, ["a", "b"], strict=True))
    assert store._key_memo == dict(zip(rowids, ["a", "b"], strict=True))
    memory.upsert([{"chunk_id": "a", "text": "alpha v2"}])  # a new rowid for a; the old one is removed
    memory.delete(["b"])
    new = store.rowids().tolist()
    assert len(new) == 1 and new[0] not in rowids
    # removed rowids still name their chunk (from the memo, as from the change log without it)
    fresh = store._chunk_ids_from_store([*rowids, new[0]])
    assert store.chunk_ids_by_rowid([*rowids, new[0], 10**9]) == fresh == {rowids[0]: "a", rowids[1]: "b", new[0]: "a"}
    memory.close()


def test_memo_starts_again_beyond_its_cap(tmp_path, monkeypatch):
    memory = _memory(tmp_path)
    store = memory.backend.store
    monkeypatch.setattr(store_module, "KEY_MEMO_MAX", 1)
    first, second = store.rowids().tolist()
    assert store.chunk_ids_by_rowid([first]) == {first: "a"}
    assert store.chunk_ids_by_rowid([second]) == {second: "b"}
    assert store._key_memo == {second: "b"}  # 1 + 1 > cap: emptied, then filled with the new answer
    memory.close()


def test_hit_rows_reads_text_source_and_metadata_of_live_rowids(tmp_path):
    memory = _memory(tmp_path)
    first, second = memory.backend.store.rowids().tolist()
    rows = memory.backend.store.hit_rows(np.array([second, first, 10**9]))
    assert rows == {first: ("alpha ERR_TIMEOUT", "s1", {"k": 1}), second: ("beta", "s2", {"k": [1, 2]})}
    response = memory.search("ERR_TIMEOUT", top_k=1)
    hit = response.results[0]
    assert (hit.chunk_id, hit.text, hit.source, hit.metadata) == ("a", "alpha ERR_TIMEOUT", "s1", {"k": 1})
    assert response.model_dump()["results"][0]["metadata"] == {"k": 1}  # built without validation, still dumps
    memory.close()


def test_opening_a_saved_memory_memoizes_every_key(tmp_path, monkeypatch):
    memory = _memory(tmp_path)
    memory.add([{"chunk_id": "c\x1fd", "text": "gamma"}])  # the separator of the fast read: the fallback runs
    memory.close()
    reopened = HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(dim=64))
    store = reopened.backend.store
    assert store._key_memo == dict(zip(store.rowids().tolist(), ["a", "b", "c\x1fd"], strict=True))

    def no_sql(rowids):  # a search must not read keys from SQLite now
        raise AssertionError(f"read {rowids} from the store")

    monkeypatch.setattr(store, "_chunk_ids_from_store", no_sql)
    assert [hit.chunk_id for hit in reopened.search("alpha ERR_TIMEOUT beta gamma", top_k=3).results] == [
        "a",
        "b",
        "c\x1fd",
    ]
    reopened.close()


def test_keys_are_read_by_the_fast_path_and_not_beyond_the_cap(tmp_path, monkeypatch):
    memory = _memory(tmp_path)
    memory.close()
    reopened = HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(dim=64))
    assert sorted(reopened.backend.store._key_memo.values()) == ["a", "b"]
    reopened.close()
    monkeypatch.setattr(store_module, "KEY_MEMO_MAX", 1)  # 2 chunks > 1: nothing read at open
    capped = HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(dim=64))
    assert capped.backend.store._key_memo == {}
    assert capped.backend.store.memoize_keys() == 0
    capped.close()


def test_no_keys_are_read_at_open_beyond_the_byte_bound(tmp_path, monkeypatch):
    memory = _memory(tmp_path)
    memory.close()
    monkeypatch.setattr(store_module, "KEY_PREFILL_BYTES", 1)  # "a" + "b": 2 bytes > 1
    reopened = HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(dim=64))
    assert reopened.backend.store._key_memo == {}
    assert [hit.chunk_id for hit in reopened.search("alpha", top_k=1).results] == ["a"]  # read on demand
    assert list(reopened.backend.store._key_memo.values()).count("a") == 1
    reopened.close()
