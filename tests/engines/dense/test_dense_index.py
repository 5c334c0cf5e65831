"""The dense index: exact and IVF paths, recall against exact search, tombstones, persistence, threads."""

from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import faiss
import hybrid_memory.engines.dense.index as dense_module
import numpy as np
import pytest
from hybrid_memory import HybridMemory
from hybrid_memory._exceptions import InvalidRequestError
from hybrid_memory.embedders import HashingEmbedder
from hybrid_memory.engines.dense.index import FaissIndex, _ivf_ids, default_nlist
from hybrid_memory.engines.rowset import RowSet

DIM = 32
N = 6000  # default_nlist(6000) = 128 lists: enough points (39 per list) for FAISS to train


def clustered(n: int, seed: int, centers: np.ndarray) -> np.ndarray:
    """Unit vectors from a Gaussian mixture around ``centers`` (so nearest neighbours are meaningful)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(centers), size=n)
    x = centers[labels] + rng.standard_normal((n, DIM)).astype(np.float32) * 0.25
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((40, DIM)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors = clustered(N, 1, centers)
    queries = clustered(40, 2, centers)
    ids = np.arange(1, N + 1, dtype=np.int64) * 3  # ids need not be dense or start at 0
    return ids, vectors, queries


def exact_top(ids, vectors, query, k, allowed=None):
    scores = vectors @ query
    keep = np.ones(len(ids), bool) if allowed is None else np.isin(ids, allowed)
    order = np.lexsort((ids[keep], -scores[keep]))[:k]
    return ids[keep][order].tolist()


def ivf_index(ids, vectors, **kwargs):
    index = FaissIndex(DIM, kind="ivf", **kwargs)
    index.add(ids, vectors)
    assert index.maintain() is True
    assert index.approximate and index.info()["nlist"] == default_nlist(N) == 128
    return index


def test_flat_search_is_exact_and_scores_are_inner_products(data):
    ids, vectors, queries = data
    index = FaissIndex(DIM, kind="flat")
    index.add(ids, vectors)
    assert index.maintain() is False and not index.approximate
    for q in queries[:5]:
        hits = index.search(q, 10)
        assert [i for i, _ in hits] == exact_top(ids, vectors, q, 10)
        expected = vectors[np.searchsorted(ids, [i for i, _ in hits])] @ q
        assert np.allclose([s for _, s in hits], expected, atol=1e-6)
    scores = index.score(queries[0], np.array([ids[0], 5, ids[10]]))
    assert scores[0] == pytest.approx(float(vectors[0] @ queries[0]), abs=1e-6)
    assert np.isnan(scores[1])
    assert scores[2] == pytest.approx(float(vectors[10] @ queries[0]), abs=1e-6)


def test_score_after_an_exact_search_reads_its_scan_and_a_write_makes_it_stale(data, monkeypatch):
    ids, vectors, queries = data
    index = FaissIndex(DIM, kind="flat")
    index.add(ids[:100], vectors[:100])
    cache: dict = {}
    hits = index.search(queries[0], 5, cache=cache)
    assert cache["dense_scan"][0] is index and len(cache["dense_scan"][2]) == 100
    asked = np.array([ids[7], ids[3], ids[99]])
    computed = []
    real = index._vectors.dot
    monkeypatch.setattr(index._vectors, "dot", lambda slots, q: computed.append(1) or real(slots, q))
    scores = index.score(queries[0], asked, cache=cache)
    assert computed == []  # a gather from the scan, no inner product computed
    assert scores.tolist() == pytest.approx((vectors[[7, 3, 99]] @ queries[0]).tolist(), abs=1e-6)
    own = dict(hits)
    assert index.score(queries[0], np.array(list(own)), cache=cache).tolist() == list(own.values())
    assert np.isnan(index.score(queries[0], np.array([ids[7], 5]), cache=cache)[1])  # 5 is no id: computed
    computed.clear()
    index.remove([int(ids[7])])  # a write: the scan is stale
    after = index.score(queries[0], asked, cache=cache)
    assert computed == [1]  # the scan was not read: the products are computed again
    assert np.isnan(after[0]) and after[1] == pytest.approx(float(vectors[3] @ queries[0]), abs=1e-6)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.1, 0.01])
def test_ivf_recall_at_10_against_exact(data, fraction):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors, exact_max=0)  # exact_max=0: every filtered search takes the IVF path
    rng = np.random.default_rng(3)
    allowed = None if fraction == 1.0 else np.sort(rng.choice(ids, size=int(N * fraction), replace=False))
    recall = []
    for q in queries:
        got = [i for i, _ in index.search(q, 10, None if allowed is None else RowSet(allowed))]
        truth = exact_top(ids, vectors, q, 10, allowed)
        if allowed is not None:
            assert set(got) <= set(allowed.tolist())
        recall.append(len(set(got) & set(truth)) / len(truth))
    assert np.mean(recall) >= 0.95


def test_small_filters_take_the_exact_path_and_match_brute_force(data):
    ids, vectors, queries = data
    exact = ivf_index(ids, vectors, exact_max=N)  # every filter small enough: exact scan of the allowed rows
    allowed = ids[::10]
    for q in queries[:10]:
        hits = exact.search(q, 10, RowSet(allowed))
        assert [i for i, _ in hits] == exact_top(ids, vectors, q, 10, allowed)


def test_tombstones_are_skipped_at_once_and_compacted_later(data):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors, compact_min=10**9)
    q = queries[0]
    top = [i for i, _ in index.search(q, 10)]
    index.remove(top[:5] + [999_999])  # an unknown id is ignored
    assert len(index) == N - 5
    assert index.info()["tombstones"] == 5
    assert int(index._ivf.ntotal) == N  # still in the lists: removal did not scan them
    after = [i for i, _ in index.search(q, 10)]
    assert not set(after) & set(top[:5])
    assert after[:5] == top[5:]
    assert np.isnan(index.score(q, np.array(top[:5]))).all()
    index.compact_min = 5
    assert not index.needs_maintenance()  # 5 tombstones: under 5% of the lists' entries, not worth a pass
    others = [i for i in ids.tolist() if i not in set(top) | set(after)][:295]
    index.remove(others)
    assert index.needs_maintenance() and index.maintain() is True
    assert int(index._ivf.ntotal) == N - 300 and index.info()["tombstones"] == 0
    assert [i for i, _ in index.search(q, 10)] == after
    # a freed slot is reused by the next add, and the new id is searchable at once
    index.add(np.array([10**6]), q.reshape(1, -1))
    assert index._n_slots == N and len(index) == N - 299
    assert index.search(q, 1) == [(10**6, pytest.approx(1.0, abs=1e-6))]


def test_adds_and_removals_during_background_training_reach_the_new_index(data, monkeypatch):
    ids, vectors, queries = data
    started, go = threading.Event(), threading.Event()

    class BlockingIVF(faiss.IndexIVFScalarQuantizer):
        def train(self, x):  # noqa: ANN001
            started.set()
            assert go.wait(30)
            super().train(x)

    monkeypatch.setattr(faiss, "IndexIVFScalarQuantizer", BlockingIVF)
    index = FaissIndex(DIM, kind="ivf")
    index.add(ids, vectors)
    assert index.maintain(background=True) is True
    assert started.wait(30)
    assert index._thread.daemon is False  # the interpreter waits for it at exit
    index.remove(ids[:3])
    index.add(np.array([7]), queries[1].reshape(1, -1))
    assert not index.approximate
    assert index.search(queries[1], 1)[0][0] == 7  # exact scan serves meanwhile
    go.set()
    index.wait()
    assert index.approximate and int(index._ivf.ntotal) == N - 3 + 1
    assert index.search(queries[1], 1)[0][0] == 7
    assert not set(i for i, _ in index.search(vectors[0], 10)) & set(ids[:3].tolist())


def test_saved_index_reopens_without_retraining(data, tmp_path, monkeypatch):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors)
    index.remove(ids[:2])
    expected = [index.search(q, 10) for q in queries[:5]]
    index.save(tmp_path / "dense")
    monkeypatch.setattr(FaissIndex, "_train", lambda self: pytest.fail("retrained on load"))
    again = FaissIndex(DIM, kind="ivf")
    assert again.load(tmp_path / "dense") is True
    assert again.approximate and len(again) == N - 2 and not again.needs_maintenance()
    assert [again.search(q, 10) for q in queries[:5]] == expected
    nlist = index._ivf.nlist
    assert np.array_equal(again._ivf.quantizer.reconstruct_n(0, nlist), index._ivf.quantizer.reconstruct_n(0, nlist))
    manifest = json.loads((tmp_path / "dense" / "manifest.json").read_text())
    for name in (manifest["vectors"], "slot_ids.npy", "delta_slots.npy", "delta_vectors.npy"):
        np.load(tmp_path / "dense" / name, allow_pickle=False)


def saved_again(index, previous, folder):
    """One save into a fresh folder linking from ``previous``, as HybridMemory does; the new manifest."""
    index.save(folder, previous=previous)
    return json.loads((folder / "manifest.json").read_text())


def test_a_save_after_a_few_writes_links_the_big_files_and_writes_only_the_delta(data, tmp_path):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors)
    first = saved_again(index, None, tmp_path / "s1")
    base, ivf = tmp_path / "s1" / first["vectors"], tmp_path / "s1" / first["ivf"]
    assert first["base_rows"] == N and first["delta_rows"] == 0
    # an upsert: id 3 removed (its slot freed) and a new id added, which reuses that slot
    index.remove([3])
    new_vector = -vectors[:1]
    index.add([99_999], new_vector)
    second = saved_again(index, tmp_path / "s1", tmp_path / "s2")
    assert (second["vectors"], second["ivf"]) == (first["vectors"], first["ivf"])
    for name in (first["vectors"], first["ivf"]):  # the same files (one inode, two links), not copies
        assert (tmp_path / "s2" / name).stat().st_ino == (tmp_path / "s1" / name).stat().st_ino
        assert (tmp_path / "s2" / name).stat().st_nlink == 2
    assert np.load(tmp_path / "s2" / "delta_slots.npy").tolist() == [0]  # the reused slot only
    assert np.array_equal(np.load(tmp_path / "s2" / "delta_vectors.npy"), new_vector)
    assert base.stat().st_size == 128 + N * DIM * 4 and ivf.exists()
    expected = [index.search(q, 10) for q in [*queries[:5], new_vector[0]]]
    assert expected[-1][0] == (99_999, pytest.approx(1.0, abs=1e-5))
    again = FaissIndex(DIM, kind="ivf")
    assert again.load(tmp_path / "s2") is True
    assert [again.search(q, 10) for q in [*queries[:5], new_vector[0]]] == expected
    # the loaded IVF replayed the change: id 3 is gone from its lists, 99999 is in them
    held = set(_ivf_ids(again._ivf).tolist())
    assert 3 not in held and 99_999 in held and len(held) == N
    # a third save from the reopened index still links, and keeps the delta relative to the same base
    third = saved_again(again, tmp_path / "s2", tmp_path / "s3")
    assert third["vectors"] == first["vectors"] and third["delta_rows"] == 1


def test_a_large_delta_or_a_missing_previous_folder_writes_new_base_files(data, tmp_path):
    ids, vectors, _ = data
    index = ivf_index(ids, vectors)
    first = saved_again(index, None, tmp_path / "s1")
    many = N // 8 + 1  # beyond DELTA_FRACTION of the rows
    index.remove(ids[:many])
    index.add(np.arange(10**6, 10**6 + many), vectors[:many])
    second = saved_again(index, tmp_path / "s1", tmp_path / "s2")
    assert second["vectors"] != first["vectors"] and second["delta_rows"] == 0
    assert second["ivf"] != first["ivf"]  # 2 x 751 adds and removals > IVF_REWRITE_MIN
    assert (tmp_path / "s2" / second["vectors"]).stat().st_nlink == 1
    third = saved_again(index, tmp_path / "gone", tmp_path / "s3")
    assert third["vectors"] != second["vectors"] and third["ivf"] != second["ivf"]
    again = FaissIndex(DIM, kind="ivf")
    assert again.load(tmp_path / "s3") is True and len(again) == N
    assert again.search(vectors[0], 1)[0][0] == 10**6


def test_damaged_save_is_refused(data, tmp_path):
    ids, vectors, _ = data
    index = ivf_index(ids, vectors)
    index.save(tmp_path / "dense")
    np.save(tmp_path / "dense" / "slot_ids.npy", np.arange(5, dtype=np.int64))
    again = FaissIndex(DIM)
    assert again.load(tmp_path / "dense") is False
    assert len(again) == 0


def test_a_truncated_base_or_a_delta_of_another_save_is_refused(data, tmp_path):
    ids, vectors, _ = data
    index = ivf_index(ids, vectors)
    manifest = saved_again(index, None, tmp_path / "a")
    index.add([10**6], vectors[:1])
    saved_again(index, tmp_path / "a", tmp_path / "b")
    shutil.copy(tmp_path / "a" / "delta_slots.npy", tmp_path / "b" / "delta_slots.npy")  # 0 rows, manifest says 1
    assert FaissIndex(DIM).load(tmp_path / "b") is False
    base = tmp_path / "a" / manifest["vectors"]
    base.write_bytes(base.read_bytes()[:-4])
    assert FaissIndex(DIM).load(tmp_path / "a") is False


def test_search_sets_faiss_threads_in_the_searching_thread(data):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors, omp_threads=1)

    def search_in_worker():
        faiss.omp_set_num_threads(3)  # whatever this worker thread had before
        index.search(queries[0], 5)
        return faiss.omp_get_max_threads()

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(search_in_worker).result() == 1


def test_memory_upsert_replaces_the_vector_in_the_ivf_index():
    embedder = HashingEmbedder(DIM)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((6000, DIM)).astype(np.float32)
    with HybridMemory(embedder=embedder, dense_index="ivf", background_compaction=False) as mem:
        mem.add([{"chunk_id": f"c{i}", "text": f"note {i}"} for i in range(6000)], vectors=vectors)
        assert mem.stats()["dense"]["approximate"] is True
        probe = vectors[5] / np.linalg.norm(vectors[5])
        assert mem.search("note", query_vector=probe, top_k=1, sparse_weight=0.0).results[0].chunk_id == "c5"
        mem.upsert([{"chunk_id": "c5", "text": "note 5 again"}], vectors=-vectors[5:6])
        top = mem.search("zzz", query_vector=probe, top_k=3, sparse_weight=0.0).results
        assert "c5" not in [r.chunk_id for r in top]
        assert mem.search("zzz", query_vector=-probe, top_k=1, sparse_weight=0.0).results[0].chunk_id == "c5"


def test_unknown_dense_index_kind_is_refused():
    with pytest.raises(InvalidRequestError, match="dense_index must be one of"):
        HybridMemory(embedder=HashingEmbedder(DIM), dense_index="hnsw")


def test_the_cost_model_picks_exact_for_narrow_filters_and_the_ivf_for_broad_ones(data, monkeypatch):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors)  # 6000 vectors, 128 lists, base nprobe max(32, 128 // 16) = 32
    # 4096 eligible vectors wanted at 46.875 a list: more lists than there are, so every list
    assert (index._nprobe(0.25), index._nprobe(0.5), index._nprobe(1.0)) == (128, 128, 32)
    monkeypatch.setattr(dense_module, "FILTER_MIN_CANDIDATES", 0)  # the square-root rule alone
    assert (index._nprobe(0.25), index._nprobe(0.5)) == (64, 46)  # ceil(32 / sqrt(f))
    # 25%: exact 1500 rows x 19 x 32/384 = 2375 < IVF 6000 x 64/128 = 3000 tested + 750 eligible x 19 x 32/384
    assert index._exact_is_cheaper(1500, 64) is True
    # 50%: exact 3000 x 19/12 = 4750 > IVF 6000 x 46/128 = 2156.25 tested + 1078.1 eligible x 19/12 = 3863.3
    assert index._exact_is_cheaper(3000, 46) is False
    exact_calls = []
    original = FaissIndex._search_exact
    monkeypatch.setattr(
        FaissIndex, "_search_exact", lambda self, *a: exact_calls.append(len(a[2])) or original(self, *a)
    )
    rng = np.random.default_rng(5)
    for share, path in ((0.25, "exact"), (0.5, "ivf")):
        allowed = np.sort(rng.choice(ids, size=int(N * share), replace=False))
        exact_calls.clear()
        got = index.search(queries[0], 10, RowSet(allowed))
        assert exact_calls == ([len(allowed)] if path == "exact" else [])
        assert len(set(i for i, _ in got) & set(exact_top(ids, vectors, queries[0], 10, allowed))) >= 9


def test_a_reopened_index_maps_its_base_file_and_never_writes_to_it(data, tmp_path):
    ids, vectors, queries = data
    index = ivf_index(ids, vectors)
    manifest = saved_again(index, None, tmp_path / "a")
    base = tmp_path / "a" / manifest["vectors"]
    before = base.read_bytes()
    again = FaissIndex(DIM, kind="ivf")
    assert again.load(tmp_path / "a") is True
    head = again._vectors.head
    assert (
        type(head) is np.ndarray and isinstance(head.base, np.memmap) and again._vectors.split == N
    )  # a view of the map
    again.remove(ids[:1])
    again.add([10**6], -vectors[:1])  # reuses slot 0, inside the mapped base: a private copy of that page
    again.add([10**6 + 1, 10**6 + 2], vectors[1:3])  # beyond the base: the in-memory tail
    assert base.read_bytes() == before
    assert again.search(-vectors[0], 1)[0] == (10**6, pytest.approx(1.0, abs=1e-5))
    assert np.array_equal(
        again.vectors(np.array([10**6, ids[5], 10**6 + 2])), np.stack([-vectors[0], vectors[5], vectors[2]])
    )
    assert again.score(queries[0], np.array([10**6 + 1, ids[1], 7]))[:2].tolist() == pytest.approx(
        [float(vectors[1] @ queries[0])] * 2, abs=1e-5
    )
    third = saved_again(again, tmp_path / "a", tmp_path / "b")
    assert third["vectors"] == manifest["vectors"] and third["delta_rows"] == 3  # slot 0 and the two new rows
    final = FaissIndex(DIM, kind="ivf")
    assert final.load(tmp_path / "b") is True
    assert [final.search(q, 10) for q in queries[:5]] == [again.search(q, 10) for q in queries[:5]]


def test_saved_zero_ids_stay_bounded_by_the_live_zero_rows(tmp_path):
    """The manifest's zero_ids (ids whose stored vector is all zeros) drop every id deleted or replaced, by this
    process or by another one (caught up through the change log), so it never grows beyond the live zero rows."""
    folder = tmp_path / "mem"
    zeros = np.zeros((4, 8), np.float32)
    unit = np.full((1, 8), 1 / np.sqrt(8), np.float32)

    def saved_zero_ids():
        return json.loads((folder / "dense" / "manifest.json").read_text())["zero_ids"]

    with HybridMemory(folder, embedder=HashingEmbedder(8)) as memory:
        memory.add([{"chunk_id": f"z{i}", "text": f"placeholder {i}"} for i in range(4)], vectors=zeros)
        memory.add([{"chunk_id": "n", "text": "a real vector"}])
        rowid = {c: r for c, (r, *_) in memory.backend.store.lookup(["z0", "z1", "z2", "z3", "n"]).items()}
    assert saved_zero_ids() == sorted(rowid[c] for c in ("z0", "z1", "z2", "z3"))
    with HybridMemory.open(folder, embedder=HashingEmbedder(8)) as memory:
        memory.delete(["z0"])
        memory.upsert([{"chunk_id": "z1", "text": "now with a vector"}], vectors=unit)  # a new row, not zero
        memory.upsert([{"chunk_id": "z2", "text": "still a placeholder"}], vectors=zeros[:1])  # zero again
        z2 = memory.backend.store.lookup(["z2"])["z2"][0]
        with HybridMemory.open(folder, embedder=HashingEmbedder(8)) as other:  # another writer of the folder
            other.delete(["z3"])
        memory.search("placeholder")  # a search first applies what other writers committed
        assert memory.backend.dense._n_zero == 1 and memory.backend.dense.vectors(np.array([z2])).tolist() == [
            [0.0] * 8
        ]
    assert saved_zero_ids() == [z2]
    with HybridMemory.open(folder, embedder=HashingEmbedder(8)) as memory:
        memory.delete(["z2"])
    assert saved_zero_ids() == []
    with HybridMemory.open(folder, embedder=HashingEmbedder(8)) as memory:
        assert sorted(c.chunk_id for c in memory.iter_chunks()) == ["n", "z1"] and memory.backend.dense._n_zero == 0


def test_faiss_threads_are_set_once_per_thread(monkeypatch, data):
    """Each FAISS call releases and retakes the GIL (a wait while another thread runs Python), so the count is
    set only when the thread's count as last set by this library differs; a new thread sets it once."""
    import hybrid_memory.engines.dense.index as dense_module

    ids, vectors, queries = data
    index = ivf_index(ids, vectors, omp_threads=1)
    calls = []
    real = faiss.omp_set_num_threads
    monkeypatch.setattr(faiss, "omp_set_num_threads", lambda n: (calls.append(n), real(n))[1])

    def searches():
        for query in queries[:3]:
            index.search(query, 5)
        dense_module.set_omp_threads(2)
        index.search(queries[0], 5)
        return faiss.omp_get_max_threads()

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(searches).result() == 1
    assert calls == [1, 2, 1]  # first search, the explicit change, the search after it


@pytest.mark.parametrize(("dim", "slack"), [(3072, 86), (384, 683), (32, 8192)])
def test_a_small_memory_reserves_one_mebibyte_of_rows_not_65536(dim, slack, tmp_path):
    """numpy zero-fills the rows a resize adds, so reserved rows are resident memory: 10 vectors reserve
    ceil(2^20 / (4 dim)) more rows (86 at 3,072 dimensions, 12 KiB each), where a fixed 65,536 held 805 MB."""
    index = FaissIndex(dim)
    vectors = np.eye(10, dim, dtype=np.float32)
    index.add(list(range(10)), vectors)
    assert index._vectors.capacity == 10 + slack
    assert len(index._slot_ids) == 10 + slack
    # reopened: the head is the saved file, the tail holds no slack until a write needs room
    index.save(tmp_path)
    reopened = FaissIndex(dim)
    assert reopened.load(tmp_path)
    assert reopened._vectors.capacity == 10
    reopened.add([10], np.eye(1, dim, 5, dtype=np.float32))
    assert reopened._vectors.capacity == 11 + slack
    assert reopened.search(np.eye(1, dim, 5, dtype=np.float32)[0], 2) == [(5, 1.0), (10, 1.0)]


def test_a_large_tail_grows_by_an_eighth():
    """Once an eighth of the rows exceeds 1 MiB (4,096 rows at 64 dimensions), the slack is needed // 8."""
    index = FaissIndex(64)
    index.add(list(range(100_000)), np.tile(np.eye(1, 64, dtype=np.float32), (100_000, 1)))
    assert index._vectors.capacity == 100_000 + 12_500
