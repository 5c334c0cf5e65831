"""The default fusion's calibration on Qdrant: the Qdrant engines' top-hit surprises equal the embedded engines'
for the same texts and vectors (BM25: exact df, N and n; dense: the same exact moments), unfiltered, filtered,
after an upsert and a delete, on Qdrant Edge and on qdrant-client's local mode; so the default search fuses alike
(order and effective weights). Plus the statistics' upkeep: lazy build, writes, drift from another writer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.engines.calibration import QUANTUM, gaussian_surprise

from tests.backends.test_backends import QDRANT, open_memory

CORPUS = [
    ("a", "alpha beta gamma", {"kind": "x"}),
    ("b", "alpha beta", {"kind": "x"}),
    ("c", "alpha delta", {"kind": "x"}),
    ("d", "epsilon zeta", {"kind": "y"}),
    ("e", "alpha epsilon theta", {"kind": "y"}),
]
QUERIES = ["beta gamma", "alpha delta", "epsilon theta zeta", "gamma delta epsilon"]


def _avgdl(rows=CORPUS) -> float:
    """The corpus's mean length in tokens: the embedded index's avgdl before its first merge, given to Qdrant
    so both score BM25 alike (``test_bm25_scores_equal_the_embedded_backend_with_matching_parameters``)."""
    from hybrid_memory.tokenizer import TechnicalTokenizer

    tokenizer = TechnicalTokenizer()
    return sum(len(tokenizer.tokenize(t)) for _, t, _ in rows) / len(rows)


def _chunks(rows=CORPUS):
    return [{"chunk_id": c, "text": t, "metadata": m} for c, t, m in rows]


def _spy(memory):
    """engine name -> the surprises its engine returned, in call order (the searcher's own calls)."""
    seen = {"sparse": [], "dense": []}
    for name, engine in memory._searcher.engines.items():
        real = engine.surprise

        def spy(query, hits, allowed, _real=real, _name=name):
            value = _real(query, hits, allowed)
            seen[_name].append(value)
            return value

        engine.surprise = spy
    return seen


def _search_both(embedded, qdrant, text, **options):
    """The default search on both memories: (surprises embedded, surprises qdrant), after checking that both
    rank alike with the same effective weights."""
    found = []
    for memory in (embedded, qdrant):
        seen = _spy(memory)
        response = memory.search(text, top_k=4, **options)
        # the weights that are a function of the surprises alone: adaptive_v1's. The default's also read the
        # agreement of the two lists (issue 36), and after the delete below the backends' BM25 scores differ
        # ("gamma delta epsilon": sparse lists c, d, b, a embedded and c, b, d, a on Qdrant; the returned top
        # and the surprises the same)
        weights = memory.search(text, top_k=4, fusion="adaptive_v1", **options).effective_weights
        found.append((seen, [r.chunk_id for r in response.results], weights))
    (a, ids_a, w_a), (b, ids_b, w_b) = found
    assert ids_a == ids_b, text
    assert w_b == pytest.approx(w_a, rel=1e-6), text
    return {k: v[-1] for k, v in a.items()}, {k: v[-1] for k, v in b.items()}


def _assert_equal(emb, qd, text):
    assert qd["sparse"] == pytest.approx(emb["sparse"], rel=1e-12, abs=1e-9), text  # exact counts
    assert qd["dense"] == pytest.approx(emb["dense"], rel=1e-5), text  # float32 scores


def _grid(vectors):
    return np.rint(np.asarray(vectors, dtype=np.float64) / QUANTUM) * QUANTUM


def _dense_by_hand(embedder, texts, query, n=None):
    """The dense surprise worked out with numpy from the stored (grid) vectors: mean and population variance of
    the query's products, the top's exact cosine, Gaussian tail."""
    docs = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    q = np.asarray(embedder.embed_query(query), dtype=np.float64)
    q = q / np.linalg.norm(q)
    products = _grid(docs) @ q
    top = float(np.max(docs.astype(np.float64) @ q))
    return gaussian_surprise(top, products.mean(), products.var(), len(texts) if n is None else n)


@pytest.mark.parametrize("engine", QDRANT)
def test_surprises_equal_the_embedded_backend_unfiltered_filtered_after_upsert_and_delete(engine, tmp_path):
    """Sparse surprises equal to 1e-9 (df, N and n counted exactly), dense ones to float32 precision, and the
    default search's order and effective weights alike, through a filter, an upsert that changes a text and a
    delete; the values are checked against hand computations."""
    embedder = HashingEmbedder(64)
    with (
        HybridMemory(embedder=embedder) as embedded,
        open_memory(engine, tmp_path, embedder=embedder, avgdl=_avgdl()) as qdrant,
    ):
        embedded.add(_chunks())
        qdrant.add(_chunks())
        for text in QUERIES:
            _assert_equal(*_search_both(embedded, qdrant, text), text)
        emb, qd = _search_both(embedded, qdrant, "beta gamma")
        # top "a" holds beta (df 2) and gamma (df 1) of N = n = 5: S = 2 ln 5 - ln 5 - ln 2 - ln 1
        assert qd["sparse"] == pytest.approx(math.log(5) - math.log(2), abs=1e-12)
        texts = [t for _, t, _ in CORPUS]
        assert qd["dense"] == pytest.approx(_dense_by_hand(embedder, texts, "beta gamma"), rel=1e-5)
        # a filter: n = 3 chunks of kind x; df and N stay corpus-wide
        emb, qd = _search_both(embedded, qdrant, "beta gamma", metadata_filter={"kind": "x"})
        _assert_equal(emb, qd, "filtered")
        assert qd["sparse"] == pytest.approx(2 * math.log(5) - math.log(3) - math.log(2), abs=1e-12)
        assert qd["dense"] == pytest.approx(_dense_by_hand(embedder, texts, "beta gamma", n=3), rel=1e-5)
        emb, qd = _search_both(embedded, qdrant, "epsilon theta zeta", metadata_filter={"kind": "y"})
        _assert_equal(emb, qd, "filtered y")
        # an upsert that changes a text: "b" now holds gamma, no longer beta (beta df 1, gamma df 2)
        changed = [("b", "alpha gamma gamma", {"kind": "x"}) if c == "b" else (c, t, m) for c, t, m in CORPUS]
        embedded.upsert(_chunks(changed[1:2]))
        qdrant.upsert(_chunks(changed[1:2]))
        for text in QUERIES:
            _assert_equal(*_search_both(embedded, qdrant, text), text)
        emb, qd = _search_both(embedded, qdrant, "beta gamma")
        assert qd["sparse"] == pytest.approx(2 * math.log(5) - math.log(5) - math.log(1) - math.log(2), abs=1e-12)
        # a delete: N = 4
        embedded.delete(["e"])
        qdrant.delete(["e"])
        for text in QUERIES:
            _assert_equal(*_search_both(embedded, qdrant, text), text)
        emb, qd = _search_both(embedded, qdrant, "epsilon theta zeta")
        # top "d" holds epsilon (df 1 now) and zeta (df 1) of N = n = 4: S = 2 ln 4 - ln 4
        assert qd["sparse"] == pytest.approx(math.log(4), abs=1e-12)
        texts = [t for c, t, _ in changed if c != "e"]
        assert qd["dense"] == pytest.approx(_dense_by_hand(embedder, texts, "epsilon theta zeta"), rel=1e-5)
        _assert_equal(*_search_both(embedded, qdrant, "alpha gamma", metadata_filter={"kind": "x"}), "after")


@pytest.mark.parametrize("engine", QDRANT)
def test_statistics_are_built_lazily_and_kept_equal_to_a_rebuild(engine, tmp_path):
    """On a shared collection no statistics until a search reads them (an RRF search does not); a Qdrant Edge
    shard this open created keeps them from its creation (nothing to scroll then). After upserts and deletes
    through the backend the incremental sums, document frequencies and count equal a rebuild's exactly, and the
    moments equal the embedded dense index's bits for the same vectors."""
    embedder = HashingEmbedder(64)
    rows = [(f"n{i}", f"note {i} alpha{i % 3} beta{i % 5} shared", {"kind": "x"}) for i in range(30)]
    with HybridMemory(embedder=embedder) as embedded, open_memory(engine, tmp_path, embedder=embedder) as qdrant:
        embedded.add(_chunks(rows))
        qdrant.add(_chunks(rows))
        corpus = qdrant.backend.corpus
        qdrant.search("alpha1 shared", top_k=3, fusion="rrf")
        assert corpus._built is (engine == "qdrant-edge")
        qdrant.search("alpha1 shared", top_k=3)
        assert corpus._built is True and corpus.points == 30
        assert corpus.dfs([qdrant.backend.encoder.document("shared")[0][0]]) == ([30], 30)
        qdrant.upsert(_chunks([(f"n{i}", f"rewritten {i} gamma", {"kind": "y"}) for i in range(0, 30, 4)]))
        qdrant.delete([f"n{i}" for i in range(1, 30, 7)])
        qdrant.add(_chunks([("new", "a new note with alpha1", {"kind": "x"})]))
        embedded.upsert(_chunks([(f"n{i}", f"rewritten {i} gamma", {"kind": "y"}) for i in range(0, 30, 4)]))
        embedded.delete([f"n{i}" for i in range(1, 30, 7)])
        embedded.add(_chunks([("new", "a new note with alpha1", {"kind": "x"})]))
        kept = (corpus.moments.to_array(), corpus.moments.count, dict(corpus._df), corpus.points)
        corpus.invalidate()
        qdrant.backend.calibration()  # rebuilt from the stored vectors
        assert np.array_equal(kept[0], corpus.moments.to_array())
        assert (
            kept[1:] == (corpus.moments.count, corpus._df, corpus.points) and corpus.points == 26
        )  # 30 - 5 deleted + 1
        assert np.array_equal(kept[0], embedded.backend.dense._moments.to_array())


def test_a_shared_collection_follows_another_writer_after_the_drift_check(tmp_path, monkeypatch):
    """Points another client writes are not in the incremental counts; on a collection reached through
    qdrant-client the point count is compared at most every DRIFT_SECONDS and a difference rebuilds them. A Qdrant
    Edge shard (one process) is never checked."""
    from hybrid_memory.backends.qdrant import calibration as qdrant_calibration
    from hybrid_memory.backends.qdrant.backend import point_id
    from hybrid_memory.backends.qdrant.collection import Point

    with open_memory("qdrant-client-local", tmp_path) as mem:
        mem.add(_chunks())
        corpus = mem.backend.calibration()
        assert corpus.shared is True and corpus.points == 5
        other = mem.backend.encoder.document("alpha beta written elsewhere")
        mem.backend.collection.upsert(
            [Point(point_id("elsewhere"), [1.0] + [0.0] * 63, other, {"chunk_id": "elsewhere"})]
        )
        assert mem.backend.calibration().points == 5  # checked less than DRIFT_SECONDS ago
        monkeypatch.setattr(qdrant_calibration, "DRIFT_SECONDS", 0.0)
        assert mem.backend.calibration().points == 6
        alpha = mem.backend.encoder.document("alpha")[0][0]
        assert corpus.dfs([alpha]) == ([5], 6)  # a, b, c, e and the other writer's point
    with open_memory("qdrant-edge", tmp_path) as mem:
        mem.add(_chunks())
        assert mem.backend.calibration().shared is False


def test_a_dimension_above_the_moments_bound_reports_no_dense_surprise(tmp_path):
    """Above MOMENTS_MAX_DIM no moments are kept, as in the embedded dense index: the dense engine reports None,
    so the default fusion runs uncalibrated, alike on both backends."""
    from hybrid_memory.engines.calibration import MOMENTS_MAX_DIM

    embedder = HashingEmbedder(MOMENTS_MAX_DIM + 8)
    with (
        HybridMemory(embedder=embedder) as embedded,
        open_memory("qdrant-edge", tmp_path, embedder=embedder, avgdl=_avgdl()) as qdrant,
    ):
        embedded.add(_chunks())
        qdrant.add(_chunks())
        emb, qd = _search_both(embedded, qdrant, "beta gamma")
        assert emb["dense"] is None and qd["dense"] is None
        assert qd["sparse"] == pytest.approx(emb["sparse"], abs=1e-12)
        assert qdrant.backend.corpus.moments is None


@pytest.mark.parametrize("engine", QDRANT)
def test_the_top_hits_tokens_are_read_alone_or_with_the_cross_scores(engine, tmp_path):
    """The sparse top's indices, read before the cross-scores (Edge: a retrieve of the point; qdrant-client: a
    leg of the cross-score request, which then needs no second request) or after them (a read of the point),
    are its stored ``bm25`` indices; a write that fails leaves the statistics to be rebuilt."""
    from hybrid_memory.backends.qdrant.backend import point_id
    from hybrid_memory.backends.qdrant.collection import SPARSE
    from hybrid_memory.search.engine import Query

    with open_memory(engine, tmp_path) as mem:
        mem.add(_chunks())
        legs = mem._searcher.engines["sparse"].legs
        stored = mem.backend.collection.retrieve([point_id("a")], vectors=[SPARSE], payload=False)[0].sparse[0]
        for cross_first in (False, True):
            query = Query("beta gamma")
            legs.hits("sparse", query, 4, None)
            legs.hits("dense", query, 4, None)
            top = legs.hits("sparse", query, 4, None)[0][0]
            assert top == point_id("a")
            if cross_first:
                legs.cross("dense", query, np.array([top], dtype=np.int64))
            assert list(legs.top_indices(query, top)) == list(stored)
            # through qdrant-client the read made the cross-scores' request (the fusion's step then makes none)
            made = "sparse" in query.cache["qdrant_cross"] and "dense" in query.cache["qdrant_cross"]
            assert made is (cross_first or engine == "qdrant-client-local")
        corpus = mem.backend.calibration()

        def broken(points):
            raise RuntimeError("lost")

        mem.backend.collection.upsert = broken
        with pytest.raises(RuntimeError):
            mem.upsert(_chunks([("a", "alpha beta gamma rewritten", {"kind": "x"})]))
        assert corpus._built is False


@pytest.mark.parametrize("engine", QDRANT)
def test_a_delete_naming_a_point_twice_counts_it_out_once(engine, tmp_path):
    """``QdrantBackend.delete`` given one chunk id twice deletes one point: the statistics count it out once
    (qdrant-client's retrieve returns a record per id asked, so the vectors read back held it twice)."""
    with open_memory(engine, tmp_path) as mem:
        mem.add(_chunks())
        corpus = mem.backend.calibration()
        mem.backend.delete(["a", "a"])
        alpha, beta = (mem.backend.encoder.document(t)[0][0] for t in ("alpha", "beta"))
        # alpha was in a, b, c, e; beta in a, b: N = 4
        assert corpus.dfs([alpha, beta]) == ([3, 1], 4)
        assert corpus.moments.count == 4
        kept = (corpus.moments.to_array(), dict(corpus._df), corpus.points)
        corpus.invalidate()
        mem.backend.calibration()
        assert np.array_equal(kept[0], corpus.moments.to_array()) and kept[1:] == (corpus._df, corpus.points)


@pytest.mark.parametrize("engine", QDRANT)
def test_a_payload_write_that_raises_still_expires_the_kept_filter_counts(engine, tmp_path):
    """A metadata-only write (a payload overwrite) that raises may have been applied (a server that timed out
    after writing it): the filter counts kept for the surprises' ``n`` are read again, not kept stale."""
    with open_memory(engine, tmp_path) as mem:
        mem.add(_chunks())
        corpus = mem.backend.calibration()
        flt = mem.backend.resolve({"kind": "x"}).filter
        assert corpus.count(flt) == 3  # a, b, c
        collection = mem.backend.collection
        real = collection.set_payload

        def applied_then_lost(point_id, payload):
            real(point_id, payload)
            raise RuntimeError("the answer was lost")

        collection.set_payload = applied_then_lost
        with pytest.raises(RuntimeError):
            mem.upsert(_chunks([("d", "epsilon zeta", {"kind": "x"})]))  # the same text: a payload write only
        del collection.set_payload
        assert collection.count(flt) == 4
        assert corpus.count(flt) == 4


def test_term_surprise_does_not_depend_on_the_order_of_the_document_frequencies():
    """The embedded index lists the top's tokens by text, the Qdrant engine by sparse index (crc32): the same
    document frequencies in another order give the same bits (a plain float sum of the logs differs in its last
    bit for [2, 2, 6] and [2, 6, 2])."""
    from hybrid_memory.engines.calibration import term_surprise

    values = {term_surprise(order, 20, 20) for order in ([2, 2, 6], [2, 6, 2], [6, 2, 2])}
    assert len(values) == 1
    # 3 ln 20 - ln 20 - ln 2 - ln 2 - ln 6 = ln(400 / 24)
    assert values.pop() == pytest.approx(math.log(50 / 3), abs=1e-15)


@pytest.mark.parametrize("engine", QDRANT)
def test_sparse_surprise_and_weights_are_bit_equal_when_token_and_index_orders_differ(engine, tmp_path):
    """The top holds kafka, redi(s) and nginx (df 2, 2, 6 of N = n = 20): by text the embedded index sums their
    logs as [2, 2, 6], by crc32 the Qdrant engine as [2, 6, 2]; the surprises and effective weights are the same
    bits on Edge (the dense side bit-equal too) and the sparse surprise on qdrant-client's local mode."""
    from hybrid_memory.backends.qdrant.backend import token_index

    tokens = ["kafka", "redi", "nginx"]
    assert sorted(tokens) != sorted(tokens, key=token_index)  # the two orders differ
    rows = [("top", "kafka redis nginx", {})]
    for word, df in (("kafka", 2), ("redis", 2), ("nginx", 6)):
        rows += [(f"{word}{j}", f"{word} filler{word}{j}", {}) for j in range(df - 1)]
    rows += [(f"other{j}", f"other filler{j}", {}) for j in range(20 - len(rows))]
    embedder = HashingEmbedder(16)
    with (
        HybridMemory(embedder=embedder) as embedded,
        open_memory(engine, tmp_path, embedder=embedder, avgdl=_avgdl(rows)) as qdrant,
    ):
        embedded.add(_chunks(rows))
        qdrant.add(_chunks(rows))
        found = []
        for memory in (embedded, qdrant):
            seen = _spy(memory)
            response = memory.search("kafka redis nginx", top_k=4)
            found.append((seen["sparse"][-1], response.effective_weights, response.results[0].chunk_id))
        assert found[0][2] == found[1][2] == "top"
        assert found[0][0] == found[1][0] == pytest.approx(math.log(50 / 3), abs=1e-12)
        if engine == "qdrant-edge":
            assert found[0][1] == found[1][1]


def test_above_the_moments_bound_the_statistics_read_no_dense_vector(tmp_path):
    """Above MOMENTS_MAX_DIM no moments are kept, so neither the build's scroll nor a write's read-back asks for
    the dense vectors (at 3,072 dimensions 12 KB a point, for nothing): only the ``bm25`` ones; the counts are
    those of every point."""
    from hybrid_memory.backends.qdrant.collection import SPARSE
    from hybrid_memory.engines.calibration import MOMENTS_MAX_DIM

    with open_memory("qdrant-edge", tmp_path, embedder=HashingEmbedder(MOMENTS_MAX_DIM + 8)) as mem:
        mem.add(_chunks())
        collection = mem.backend.collection
        asked = []
        scroll, retrieve = collection.scroll, collection.retrieve

        def scroll_spy(*args, vectors=False, **kwargs):
            asked.append(("scroll", vectors))
            return scroll(*args, vectors=vectors, **kwargs)

        def retrieve_spy(ids, *, vectors=False, **kwargs):
            asked.append(("retrieve", vectors))
            return retrieve(ids, vectors=vectors, **kwargs)

        collection.scroll, collection.retrieve = scroll_spy, retrieve_spy
        mem.backend.corpus.invalidate()  # kept since the shard's creation: build them again, under the spies
        corpus = mem.backend.calibration()
        mem.upsert(_chunks([("a", "alpha beta rewritten", {"kind": "x"})]))
        mem.delete(["e"])
        assert ("scroll", [SPARSE]) in asked
        assert [v for what, v in asked if v] == [[SPARSE]] * 3  # the build, the upsert's and the delete's reads
        alpha = mem.backend.encoder.document("alpha")[0][0]
        assert corpus.moments is None and corpus.dfs([alpha]) == ([3], 4)  # a, b, c of a, b, c, d


def test_local_mode_serialises_its_calls_so_searches_racing_writes_do_not_fail():
    """qdrant-client's local mode keeps points in numpy arrays a write resizes under a concurrent search
    ("operands could not be broadcast together", 4 of 4 runs of this interleaving before the lock): every call
    holds the collection's lock, proved by a search held inside the client while another thread cannot take it,
    then by three searching threads and one writing, stepped together by a barrier."""
    import threading

    from hybrid_memory import HashingEmbedder, HybridMemory

    memory = HybridMemory.qdrant(":memory:", embedder=HashingEmbedder(16))
    try:
        memory.add(
            [{"chunk_id": f"c{i}", "text": f"alpha w{i % 5} beta{i % 3}", "metadata": {"t": i % 2}} for i in range(40)]
        )
        collection = memory.backend.collection
        assert collection.local and collection._serial is not None
        inner = collection.client.query_batch_points
        entered, release, seen = threading.Event(), threading.Event(), []

        def held(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            entered.set()
            assert release.wait(10)
            return inner(*args, **kwargs)

        collection.client.query_batch_points = held
        search = threading.Thread(target=lambda: memory.search("alpha w1", top_k=3, fusion="rrf"))
        search.start()
        assert entered.wait(10)
        probe = threading.Thread(target=lambda: seen.append(collection._serial.acquire(blocking=False)))
        probe.start()
        probe.join()
        release.set()
        search.join()
        collection.client.query_batch_points = inner
        assert seen == [False]  # the search held the lock inside the client

        errors: list[str] = []
        rounds = 30
        barrier = threading.Barrier(4)

        def writer() -> None:
            try:
                for r in range(rounds):
                    barrier.wait()
                    if r % 3 == 0:
                        memory.upsert(
                            [{"chunk_id": f"c{(r * 7) % 40}", "text": f"gamma r{r} alpha", "metadata": {"t": r % 2}}]
                        )
                    elif r % 3 == 1:
                        memory.delete([f"c{(r * 11) % 40}"])
                    else:
                        memory.add([{"chunk_id": f"n{r}", "text": f"alpha beta{r % 3} new{r}", "metadata": {"t": 1}}])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))
                barrier.abort()

        def reader(k: int) -> None:
            try:
                for r in range(rounds):
                    barrier.wait()
                    text = ["alpha w1", "beta2 gamma", "new3 alpha"][(r + k) % 3]
                    memory.search(text, top_k=5, fusion="rrf", metadata_filter={"t": 1} if k == 0 else None)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))
                barrier.abort()

        threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(k,)) for k in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        # 40 added; 10 deleted (r = 1, 4, ..., 28: c11 c4 c37 c30 c23 c16 c9 c2 c35 c28), c4 upserted again at
        # r = 12; 10 new (n2, n5, ..., n29): 40 - 9 + 10
        assert memory.count() == 41 and memory.backend.calibration().points == 41
    finally:
        memory.close()


@pytest.mark.parametrize("engine", QDRANT)
def test_a_failure_while_counting_a_stored_write_forgets_the_statistics(engine, tmp_path):
    """The write is stored, then counting it in fails part way (here: after counting the old vectors out): the
    statistics are forgotten and rebuilt from the collection by the next search, never left half-updated."""
    from hybrid_memory.backends.qdrant.calibration import CorpusStats

    with open_memory(engine, tmp_path) as mem:
        mem.add(_chunks())
        corpus = mem.backend.calibration()
        assert corpus.points == 5
        real = CorpusStats._count
        calls = []

        def fails_second(records, moments, df, sign):  # noqa: ANN001, ANN202
            calls.append(sign)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(records, moments, df, sign)

        CorpusStats._count = staticmethod(fails_second)
        try:
            with pytest.raises(KeyboardInterrupt):
                mem.upsert(_chunks([("a", "alpha omega", {"kind": "x"})]))  # a new text: vectors replaced
        finally:
            CorpusStats._count = staticmethod(real)
        assert calls == [-1, 1] and not corpus._built  # forgotten, not left with a's old vectors counted out
        assert mem.get(["a"])[0].text == "alpha omega"  # the write is stored
        rebuilt = mem.backend.calibration()
        assert rebuilt.points == 5 and rebuilt.dfs([])[1] == 5
        fresh = CorpusStats(mem.backend.collection, mem.backend.dim, shared=False).current()
        assert rebuilt._df == fresh._df and np.array_equal(rebuilt.moments.to_array(), fresh.moments.to_array())


def _edge_memory_with_statistics(tmp_path, embedder):
    rows = [(f"n{i}", f"note {i} alpha{i % 3} beta{i % 5} shared", {"kind": "x"}) for i in range(30)]
    memory = open_memory("qdrant-edge", tmp_path, embedder=embedder)
    memory.add(_chunks(rows))
    memory.search("alpha1 shared", top_k=3)  # the default fusion builds the statistics
    return memory


def test_an_edge_shards_statistics_are_saved_on_close_and_read_back_on_open_not_rebuilt(tmp_path, monkeypatch):
    from hybrid_memory.backends.qdrant.calibration import SAVED, CorpusStats

    embedder = HashingEmbedder(64)
    memory = _edge_memory_with_statistics(tmp_path, embedder)
    before = memory.search("beta2 shared note", top_k=5)
    corpus = memory.backend.corpus
    kept = (corpus.moments.to_array(), corpus.moments.count, dict(corpus._df), corpus.points)
    memory.close()
    saved = tmp_path / "shard" / SAVED
    assert saved.is_file()
    monkeypatch.setattr(CorpusStats, "_build", lambda self: pytest.fail("built anew instead of read back"))
    with open_memory("qdrant-edge", tmp_path, embedder=embedder) as reopened:
        assert not saved.exists()  # read and removed on open: a session that dies now leaves none behind
        corpus = reopened.backend.corpus
        assert corpus._built is True
        assert np.array_equal(corpus.moments.to_array(), kept[0])
        assert (corpus.moments.count, corpus._df, corpus.points) == kept[1:]
        after = reopened.search("beta2 shared note", top_k=5)
        assert [r.chunk_id for r in after.results] == [r.chunk_id for r in before.results]
        assert after.effective_weights == before.effective_weights
        reopened.delete(["n0"])  # kept in step from the loaded sums, saved again on close
    monkeypatch.undo()
    with open_memory("qdrant-edge", tmp_path, embedder=embedder) as again:
        assert again.backend.corpus.points == 29
        loaded = again.backend.corpus.moments.to_array()
        again.backend.corpus.invalidate()
        again.backend.calibration()  # a rebuild from the stored vectors agrees exactly
        assert np.array_equal(again.backend.corpus.moments.to_array(), loaded) and again.backend.corpus.points == 29


def test_saved_statistics_for_another_point_count_or_damaged_are_not_used(tmp_path, caplog):
    from hybrid_memory.backends.qdrant.calibration import SAVED

    embedder = HashingEmbedder(64)
    _edge_memory_with_statistics(tmp_path, embedder).close()
    saved = tmp_path / "shard" / SAVED
    with np.load(saved) as held:
        arrays = dict(held)
    arrays["header"][2] += 1  # counts one point more than the shard holds
    with open(saved, "wb") as fh:
        np.savez(fh, **arrays)
    with open_memory("qdrant-edge", tmp_path, embedder=embedder) as reopened:
        assert reopened.backend.corpus._built is False and not saved.exists()
        reopened.search("alpha1 shared", top_k=3)
        assert reopened.backend.corpus.points == 30  # built anew on first use
    saved.write_bytes(b"not an npz file")
    with caplog.at_level("WARNING"), open_memory("qdrant-edge", tmp_path, embedder=embedder) as reopened:
        assert reopened.backend.corpus._built is False and not saved.exists()
    assert any("not a readable calibration file of this library" in r.getMessage() for r in caplog.records)


def test_a_damaged_calibration_file_of_any_kind_never_stops_the_shard_from_opening(tmp_path, caplog):
    # each of these raised from numpy or zipfile (EOFError, BadZipFile) and left the file to fail every later open
    from hybrid_memory.backends.qdrant.calibration import SAVED

    embedder = HashingEmbedder(64)
    _edge_memory_with_statistics(tmp_path, embedder).close()
    saved = tmp_path / "shard" / SAVED
    whole = saved.read_bytes()
    for damaged in (b"", whole[: len(whole) // 2], b"PK\x03\x04" + bytes(range(256)) * 4, b"\x93NUMPY"):
        saved.write_bytes(damaged)
        caplog.clear()
        with caplog.at_level("WARNING"), open_memory("qdrant-edge", tmp_path, embedder=embedder) as reopened:
            assert reopened.backend.corpus._built is False and not saved.exists()
            assert [r.chunk_id for r in reopened.search("alpha1 shared", top_k=2).results]  # built anew, searches
        assert saved.is_file()  # saved again on close
        assert any("not a readable calibration file" in r.getMessage() for r in caplog.records), damaged[:8]


def test_a_failed_save_leaves_no_temporary_file_and_the_shard_closes(tmp_path, caplog):
    from hybrid_memory.backends.qdrant.calibration import SAVED

    memory = _edge_memory_with_statistics(tmp_path, HashingEmbedder(64))
    (tmp_path / "shard" / SAVED).mkdir()  # a folder where the file goes: the rename fails
    with caplog.at_level("WARNING"):
        memory.close()
    assert memory.backend.closed is True
    assert not (tmp_path / "shard" / (SAVED + ".tmp")).exists()
    assert any("could not save the calibration statistics" in r.getMessage() for r in caplog.records)


def test_a_new_shard_keeps_its_statistics_from_creation_and_an_old_one_builds_them_only_for_the_default(
    tmp_path, monkeypatch
):
    """A shard this open creates starts with exact empty statistics and keeps them through every write, so its first
    default search scrolls nothing (0.6 s at 5,183 points, 1.2 s at 20,000, about 2 minutes at a million);
    they are saved on close. A shard opened without a saved file (as after a crash) builds them only when a default
    search reads them: closed after RRF searches alone, it saves nothing."""
    from hybrid_memory.backends.qdrant.calibration import SAVED, CorpusStats

    with open_memory("qdrant-edge", tmp_path) as memory:
        corpus = memory.backend.corpus
        assert corpus._built is True and corpus.points == 0
        memory.add(_chunks())
        monkeypatch.setattr(CorpusStats, "_build", lambda self: pytest.fail("scrolled every point"))
        assert [r.chunk_id for r in memory.search("alpha", top_k=2).results]
        monkeypatch.undo()
        assert corpus.points == len(_chunks())
    assert (tmp_path / "shard" / SAVED).is_file()
    (tmp_path / "shard" / SAVED).unlink()
    with open_memory("qdrant-edge", tmp_path) as memory:
        assert memory.backend.corpus._built is False
        memory.search("alpha", top_k=2, fusion="rrf")  # RRF reads no statistics
        assert memory.backend.corpus._built is False
    assert not (tmp_path / "shard" / SAVED).exists()
