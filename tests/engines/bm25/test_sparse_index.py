"""The BM25 delta segment scores exactly as a full bm25s rebuild would; compaction keeps results."""

import bm25s
import numpy as np
import pytest
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.tokenizer import TechnicalTokenizer

DOCS = [
    "postgres connection pool exhausted on db-prod-3",
    "HTTP 504 gateway timeout from billing-service",
    "billing-service retries the postgres connection",
    "auth-api getUserById returns null",
    "connection reset ERR_CONN_RESET during deploy",
    "pool size raised to 40 connections",
]
QUERIES = ["postgres connection pool", "billing-service 504", "connection", "getUserById null", "nothing matches"]


def full_bm25s_scores(query):
    tok = TechnicalTokenizer()
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index(tok.tokenize_many(DOCS), show_progress=False)
    return model.get_scores(tok.tokenize(query) or [""])


@pytest.mark.parametrize("query", QUERIES)
def test_delta_only_index_equals_a_full_bm25s_build(query):
    index = BM25Index(compact_min=10_000)
    index.add(list(range(len(DOCS))), DOCS)
    assert index.delta_size == len(DOCS)
    got = dict(index.search(query, k=len(DOCS)))
    expected = full_bm25s_scores(query)
    for doc_id, score in enumerate(expected):
        if score > 0:
            assert got[doc_id] == pytest.approx(float(score), rel=1e-5)
        else:
            assert doc_id not in got


def test_main_plus_delta_after_compaction_equals_full_build():
    index = BM25Index(compact_min=10_000)
    index.build([0, 1, 2], DOCS[:3])
    index.add([3, 4, 5], DOCS[3:])
    index.compact(lambda ids: [DOCS[i] for i in ids])
    assert index.delta_size == 0
    for query in QUERIES:
        got = dict(index.search(query, k=10))
        expected = {i: float(s) for i, s in enumerate(full_bm25s_scores(query)) if s > 0}
        assert got == pytest.approx(expected, rel=1e-5)


def test_removed_documents_are_masked_and_allowed_ids_filter():
    index = BM25Index(compact_min=10_000)
    index.build([10, 11, 12], DOCS[:3])
    index.add([13], [DOCS[4]])
    assert [i for i, _ in index.search("connection", k=10)] == sorted(
        [i for i, _ in index.search("connection", k=10)], key=lambda i: -dict(index.search("connection", k=10))[i]
    )
    index.remove([10, 13])
    assert {i for i, _ in index.search("connection", k=10)} == {12}
    assert index.search("connection", k=10, allowed=np.array([11], dtype=np.int64)) == []
    assert [i for i, _ in index.search("billing-service", k=10, allowed=np.array([11, 12]))] in ([11, 12], [12, 11])


def test_compaction_triggers_at_the_threshold():
    index = BM25Index(compact_min=3, compact_ratio=0.0)
    index.build([0], DOCS[:1])
    index.add([1, 2], DOCS[1:3])
    assert not index.needs_compaction()
    index.add([3], DOCS[3:4])
    assert index.needs_compaction()


def test_ties_are_broken_by_id_and_zero_scores_dropped():
    index = BM25Index(compact_min=10_000)
    index.build([5, 3, 9], ["alpha beta", "alpha beta", "gamma"])
    hits = index.search("alpha", k=3)
    assert [i for i, _ in hits] == [3, 5]
    assert hits[0][1] == hits[1][1] > 0


def test_compaction_after_reload_tokenizes_only_what_it_lacks(tmp_path, monkeypatch):
    index = BM25Index(compact_min=10_000)
    index.build([0, 1, 2, 3], DOCS[:4])
    index.remove([1])
    index.save(tmp_path / "bm25")

    reloaded = BM25Index(compact_min=10_000)
    assert reloaded.load(tmp_path / "bm25")
    reloaded.add([4, 5], DOCS[4:])
    asked = []

    def load_texts(ids):
        asked.extend(int(i) for i in ids)
        return [DOCS[int(i)] for i in ids]

    reloaded.compact(load_texts)
    assert asked == []  # the token cache was saved: the main segment's texts are not tokenized again
    tok = TechnicalTokenizer()
    live = [0, 2, 3, 4, 5]
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index(tok.tokenize_many([DOCS[i] for i in live]), show_progress=False)
    for query in QUERIES:
        expected = {live[j]: float(s) for j, s in enumerate(model.get_scores(tok.tokenize(query) or [""])) if s > 0}
        assert dict(reloaded.search(query, k=10)) == pytest.approx(expected, rel=1e-5)


def test_the_delta_is_saved_and_reloaded_without_tokenizing(tmp_path, monkeypatch):
    index = BM25Index(compact_min=10_000)
    index.build([0, 1, 2], DOCS[:3])
    index.add([7, 8], DOCS[3:5])  # the delta, with tokens the main segment's vocabulary lacks
    index.remove([1, 8])
    expected = {query: index.search(query, k=10) for query in QUERIES}
    index.save(tmp_path / "bm25")

    reloaded = BM25Index(compact_min=10_000)
    monkeypatch.setattr(reloaded.tokenizer, "tokenize_many", lambda texts: pytest.fail("re-tokenized on load"))
    assert reloaded.load(tmp_path / "bm25")
    assert reloaded.delta_size == 1 and reloaded.ids().tolist() == [0, 2, 7]
    assert {query: reloaded.search(query, k=10) for query in QUERIES} == expected
    assert sorted(reloaded._tokens) == [0, 2, 7]
    assert np.array_equal(reloaded._tokens[7], index._tokens[7])


def test_a_save_links_an_unchanged_main_segment_and_writes_a_merged_one(tmp_path):
    index = BM25Index(compact_min=10_000)
    index.build([0, 1, 2, 3], DOCS[:4])
    index.save(tmp_path / "s1")
    data = "bm25s/data.csc.index.npy"
    index.remove([1])  # a removal is alive.npy's business, the main segment stays
    index.add([7], DOCS[4:5])
    expected = {query: index.search(query, k=10) for query in QUERIES}
    index.save(tmp_path / "s2", previous=tmp_path / "s1")
    assert (tmp_path / "s2" / data).stat().st_ino == (tmp_path / "s1" / data).stat().st_ino
    assert sorted(p.name for p in (tmp_path / "s2" / "bm25s").iterdir()) == sorted(
        p.name for p in (tmp_path / "s1" / "bm25s").iterdir()
    )
    reloaded = BM25Index(compact_min=10_000)
    assert reloaded.load(tmp_path / "s2")
    assert {query: reloaded.search(query, k=10) for query in QUERIES} == expected
    reloaded.save(tmp_path / "s3", previous=tmp_path / "s2")  # still the same segment after a reload
    assert (tmp_path / "s3" / data).stat().st_ino == (tmp_path / "s1" / data).stat().st_ino
    reloaded.compact(lambda ids: [DOCS[int(i)] for i in ids])  # a merge: a new main segment
    merged = {query: reloaded.search(query, k=10) for query in QUERIES}
    reloaded.save(tmp_path / "s4", previous=tmp_path / "s3")
    assert (tmp_path / "s4" / data).stat().st_ino != (tmp_path / "s1" / data).stat().st_ino
    assert (tmp_path / "s4" / data).stat().st_nlink == 1
    final = BM25Index(compact_min=10_000)
    assert final.load(tmp_path / "s4") and final.delta_size == 0
    assert {query: final.search(query, k=10) for query in QUERIES} == merged
    assert final.ids().tolist() == [0, 2, 3, 7]


def test_a_damaged_save_is_reported_as_not_loaded(tmp_path):
    index = BM25Index()
    index.build([0, 1], DOCS[:2])
    index.save(tmp_path / "bm25")
    (tmp_path / "bm25" / "alive.npy").write_bytes(b"junk")
    fresh = BM25Index()
    assert fresh.load(tmp_path / "bm25") is False
    assert len(fresh) == 0
    assert BM25Index(k1=1.2).load(tmp_path / "missing") is False


def test_background_compaction_keeps_changes_made_during_the_build():
    import threading

    index = BM25Index(compact_min=10_000)
    index.build([0, 1], DOCS[:2])
    index.add([2, 3], DOCS[2:4])
    started, release = threading.Event(), threading.Event()
    real_make = index._make_segment

    def slow_make(*args):
        started.set()
        release.wait(5)
        return real_make(*args)

    index._make_segment = slow_make
    assert index.compact(lambda ids: [DOCS[i] for i in ids], background=True)
    assert started.wait(5)
    assert not index.compact(lambda ids: [DOCS[i] for i in ids], background=True)  # one at a time
    # not a daemon: an interpreter exiting with a merge running waits for it instead of aborting under it
    assert index._thread.name == "bm25-compaction" and index._thread.daemon is False
    # while the new segment is being built: searches are served, writes go on
    assert {i for i, _ in index.search("connection", k=10)} == {0, 2}
    index.remove([0, 3])  # one from the old main, one from the delta, both in the snapshot
    index.add([4, 5], DOCS[4:6])  # after the snapshot
    release.set()
    index.wait()
    assert index.delta_size == 2  # 4 and 5 stay in the delta
    assert sorted(index.ids().tolist()) == [1, 2, 4, 5]
    got = {i for i, _ in index.search("connection pool reset postgres billing getUserById", k=10)}
    assert got == {1, 2, 4, 5}
    assert 0 not in got and 3 not in got
