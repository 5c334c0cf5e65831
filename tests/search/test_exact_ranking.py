"""Exact ranking at every cut: ties at an engine's candidate cut, one set of BM25 statistics for the main and
delta segments (compared with a full rebuild), exact cross-scores, and an all-zero query vector."""

import json
import math
from pathlib import Path

import bm25s
import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.engines.bm25.index import BM25Index
from hybrid_memory.memory.hybrid import RANK_FLOOR
from hybrid_memory.search.engine import Query
from hybrid_memory.tokenizer import TechnicalTokenizer


@pytest.mark.parametrize("fusion", ["rrf", "adaptive", "zscore", "tm2c2", "dbsf"])
def test_equal_notes_rank_by_chunk_id_at_every_top_k(fusion):
    # four identical notes added in the order d, c, b, a; one more chunk so the engines have a cut to make
    with HybridMemory(embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": c, "text": "worker pool drained after deploy"} for c in "dcba"])
        memory.add([{"chunk_id": "z-other", "text": "certificate rotation schedule"}])
        for top_k in (1, 2, 3, 4):
            results = memory.search("worker pool drained", top_k=top_k, fusion=fusion).results
            assert [r.chunk_id for r in results] == ["a", "b", "c", "d"][:top_k], (fusion, top_k)


EXAMPLE_NOTES = Path(__file__).resolve().parents[2] / "examples" / "incident_memory" / "notes.jsonl"


@pytest.mark.parametrize("fusion", ["adaptive", "rrf"])
def test_every_top_k_up_to_the_floor_returns_the_first_top_k_of_one_list(fusion):
    # the bundled incident notes: with 2 x top_k candidates per engine, each of these queries put a different
    # chunk first (or second, third) at some top_k <= 5 than at top_k 10, under both methods
    rows = [json.loads(line) for line in EXAMPLE_NOTES.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = ["disk full", "HTTP 504 billing", "ERR_CONN_RESET", "kafka consumer lag", "oom killed"]
    with HybridMemory(embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": r["_id"], "text": r["title"] + ". " + r["text"]} for r in rows])
        assert memory.count() == 38
        for query in queries:
            full = [r.chunk_id for r in memory.search(query, top_k=RANK_FLOOR, fusion=fusion).results]
            assert len(full) == RANK_FLOOR
            for top_k in range(1, RANK_FLOOR):
                got = [r.chunk_id for r in memory.search(query, top_k=top_k, fusion=fusion).results]
                assert got == full[:top_k], (query, top_k)


def test_ties_at_the_cut_are_kept_in_the_mixed_main_and_delta_state():
    # two copies in the main segment, two in the delta: they tie to the bit, so the key decides at every cut
    memory = HybridMemory(embedder=HashingEmbedder(64), compact_min=2, compact_ratio=0.0, background_compaction=False)
    with memory:
        memory.add(
            [
                {"chunk_id": "filler-1", "text": "certificate rotation schedule"},
                {"chunk_id": "d", "text": "worker pool drained after deploy"},
                {"chunk_id": "c", "text": "worker pool drained after deploy"},
            ]
        )
        assert memory.stats()["bm25_delta_documents"] == 0  # compacted into the main segment
        memory.add([{"chunk_id": "b", "text": "worker pool drained after deploy"}])
        memory.backend.sparse.compact_min = 10_000  # keep the next one in the delta
        memory.add([{"chunk_id": "a", "text": "worker pool drained after deploy"}])
        assert memory.stats()["bm25_delta_documents"] == 2
        hits = memory.backend.sparse.search("worker pool drained", k=10)
        assert len({score for _, score in hits}) == 1  # main and delta copies score exactly alike
        for fusion in ("rrf", "adaptive"):
            assert [r.chunk_id for r in memory.search("worker pool drained", top_k=1, fusion=fusion).results] == ["a"]
            assert [r.chunk_id for r in memory.search("worker pool drained", top_k=3, fusion=fusion).results] == [
                "a",
                "b",
                "c",
            ]


MAIN = [  # four tokens each once tokenized, so avgdl is 4 in every state below
    "disk quota exceeded tenant",
    "gateway latency budget spent",
    "replica lag alarm fired",
    "tenant E4012 rejected upload",
    "cache eviction storm observed",
    "tenant E4012 quota report",
]
BURST = [  # new chunks sharing the same new error code, also four tokens each
    "upload E4012 rejected again",
    "tenant E4012 rejected upload",
    "E4012 seen during upload",
    "E4012 retry upload failed",
]
QUERIES = ["E4012 upload", "tenant quota", "rejected upload tenant E4012", "replica lag", "nothing here"]


def _full_rebuild(texts, query):
    tok = TechnicalTokenizer()
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index(tok.tokenize_many(texts), show_progress=False)
    return model.get_scores(tok.tokenize(query) or [""])


def test_every_text_has_four_tokens_so_avgdl_never_moves():
    tok = TechnicalTokenizer()
    assert [len(tok.tokenize(t)) for t in MAIN + BURST] == [4] * (len(MAIN) + len(BURST))


@pytest.mark.parametrize("query", QUERIES)
def test_main_plus_delta_scores_equal_a_full_rebuild(query):
    index = BM25Index(compact_min=10_000)
    index.build(list(range(len(MAIN))), MAIN)
    index.add(list(range(100, 100 + len(BURST))), BURST)
    assert index.delta_size == len(BURST)
    texts = MAIN + BURST
    ids = list(range(len(MAIN))) + list(range(100, 100 + len(BURST)))
    expected = {i: float(s) for i, s in zip(ids, _full_rebuild(texts, query), strict=True) if s > 0}
    got = dict(index.search(query, k=20))
    assert got == pytest.approx(expected, rel=1e-6)
    # score() agrees with search() and with the rebuild, for every document
    exact = index.score(query, np.array(ids))
    assert exact == pytest.approx([expected.get(i, 0.0) for i in ids], rel=1e-6)


def test_a_burst_of_new_chunks_scores_like_equal_older_chunks():
    index = BM25Index(compact_min=10_000)
    index.build(list(range(len(MAIN))), MAIN)
    index.add(list(range(100, 100 + len(BURST))), BURST)
    scores = dict(index.search("tenant E4012 rejected upload", k=20))
    # MAIN[3] (old, main segment) and BURST[1] (new, delta) are the same text: the same score, to the bit
    assert scores[3] == scores[101]
    # and the old chunk scores what a full rebuild gives it (before the fix it kept its main-only idf)
    assert scores[3] == pytest.approx(float(_full_rebuild(MAIN + BURST, "tenant E4012 rejected upload")[3]), rel=1e-6)


def test_score_reuses_the_arrays_search_computed(monkeypatch):
    index = BM25Index(compact_min=10_000)
    index.build(list(range(len(MAIN))), MAIN)
    index.add([100], [BURST[0]])
    calls = []
    real = index._score_main
    monkeypatch.setattr(index, "_score_main", lambda tokens, cache=None: calls.append(1) or real(tokens, cache))
    cache: dict = {}
    hits = index.search("E4012 upload", k=2, cache=cache)
    exact = index.score("E4012 upload", np.array([i for i, _ in hits] + [0, 999]), cache=cache)
    assert len(calls) == 1
    assert exact[: len(hits)].tolist() == [s for _, s in hits]
    assert exact[len(hits)] == 0.0 and np.isnan(exact[-1])  # no query term; not in the index
    index.add([101], [BURST[1]])  # a write makes the cached arrays stale
    index.score("E4012 upload", np.array([0]), cache=cache)
    assert len(calls) == 2


def test_cross_scores_are_the_engines_exact_scores():
    with HybridMemory(embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": f"m{i}", "text": t} for i, t in enumerate(MAIN + BURST)])
        searcher = memory._searcher
        query = Query("E4012 upload rejected")
        cand = searcher.candidates(query, top_k=2, depth=3, weights={"sparse": 1.0, "dense": 1.0}, fusion="adaptive")
        union = set(cand.runs["sparse"].keys) | set(cand.runs["dense"].keys)
        ids = np.array([cand.id_of[k] for k in sorted(union)])
        bm25 = memory.backend.sparse.score(query.text, ids)
        vectors = memory.backend.store.vectors(ids, 64)
        cosine = vectors @ query.vector
        for j, key in enumerate(sorted(union)):
            assert cand.input.scores["sparse"][key] == pytest.approx(bm25[j])
            assert cand.input.scores["dense"][key] == pytest.approx(float(cosine[j]), abs=1e-6)
        # every candidate has both engines' scores (BM25 0 without a query term), and each engine's own candidates
        # keep the scores of its run; the aligned columns hold the same numbers in key order
        keys, table, _ = cand.input.columns
        assert keys == sorted(union)
        for name in ("sparse", "dense"):
            assert set(cand.input.scores[name]) == union
            assert all(cand.input.scores[name][k] == s for k, s in cand.runs[name].scores.items())
            assert table[name] == [cand.input.scores[name][k] for k in keys]


def test_aligned_scores_read_the_columns_and_leave_out_nan():
    from hybrid_memory.search.searcher import AlignedScores

    scores = AlignedScores(
        ["a", "b", "c"], {"sparse": [2.5, 0.0, math.nan]}, {"sparse": {"a": 2.5}, "dense": {"b": 0.25}}
    )
    assert scores["sparse"] == {"a": 2.5, "b": 0.0}  # c: nan, an id the engine does not hold
    assert scores["dense"] == {"b": 0.25}  # no column: the engine's own scores
    assert scores["sparse"] is scores["sparse"]  # built once
    assert list(scores) == ["sparse", "dense"] and len(scores) == 2
    assert scores.get("other") is None and "other" not in scores
    assert repr(scores) == "AlignedScores({'sparse': {'a': 2.5, 'b': 0.0}, 'dense': {'b': 0.25}})"


def test_an_all_zero_query_vector_skips_the_dense_engine(monkeypatch):
    with HybridMemory(embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": f"m{i}", "text": t} for i, t in enumerate(MAIN)])
        monkeypatch.setattr(memory.backend.dense, "search", lambda *a, **k: pytest.fail("FAISS searched a zero vector"))
        for fusion in ("rrf", "adaptive"):
            response = memory.search("tenant quota", top_k=3, fusion=fusion, query_vector=np.zeros(64))
            assert [r.chunk_id for r in response.results] == ["m0", "m5", "m3"]
            assert all(r.dense_rank is None and r.dense_score is None for r in response.results)
            assert response.effective_weights["dense"] == 0.0
        # a stop-word-only query embeds to zeros with the hashing embedder: nothing at all, not padding
        assert memory.search("the of and", top_k=3).results == []


def test_exact_matches_count_rare_identifiers_and_whole_query_matches():
    index = BM25Index(compact_min=10_000)
    index.build(list(range(len(MAIN))), MAIN)  # MAIN[3] and MAIN[5] hold E4012
    index.add([100], ["tenant upload rejected twice"])  # the delta is checked too
    ids = np.array([0, 3, 5, 100])
    # a rare identifier plus one word: share 1/2 >= 0.25; df(E4012) = 2 <= 3
    assert index.exact_matches("E4012 tenant", ids, max_df=3, min_terms=3).tolist() == [0, 1, 1, 0]
    assert index.exact_matches("E4012 tenant", ids, max_df=1, min_terms=3).tolist() == [0, 0, 0, 0]  # not rare
    # the identifier is one of five content words: a detail, not the subject (share 0.2 < 0.25)
    assert index.identifier_matches("E4012 tenant cache gateway replica", ids, 3, 0.25).tolist() == [0, 0, 0, 0]
    # whole query: only MAIN[3] ("tenant E4012 rejected upload") holds all of tenant, E4012, rejected, upload,
    # and in this order -> 1 + 1 identifier = 2, plus 1 for E4012
    assert index.holds_all_terms("rejected upload tenant E4012", ids).tolist() == [False, True, False, False]
    assert index.exact_matches("tenant E4012 rejected upload", ids, max_df=3).tolist() == [0, 3, 1, 0]
    # the same words in another order are not the quoted text: the identifier alone counts
    assert index.exact_matches("rejected upload tenant E4012", ids, max_df=3).tolist() == [0, 1, 1, 0]
    # three plain words held by two candidates (a rare conjunction when max_df >= 2), in this order by the
    # delta's "tenant upload rejected twice" only (MAIN[3] has rejected before upload)
    assert index.holds_all_terms("tenant upload rejected", ids).tolist() == [False, True, False, True]
    assert index.holds_in_order("tenant upload rejected", ids).tolist() == [False, False, False, True]
    assert index.exact_matches("tenant upload rejected", ids, max_df=2).tolist() == [0, 0, 0, 1]
    assert index.exact_matches("tenant upload rejected", ids, max_df=1).tolist() == [0, 0, 0, 0]
    assert index.exact_matches("tenant upload", ids, max_df=3).tolist() == [0, 0, 0, 0]  # under 3 terms


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([0, 3, 5, 100], [[0, 1, 1, 0], [0, 3, 1, 0], [0, 0, 0, 1]]),
        ([100, 5, 3, 0], [[0, 1, 1, 0], [0, 1, 3, 0], [1, 0, 0, 0]]),
        # 3 and 100 hold all of "tenant upload rejected" (100 in order): 4 of the 5 candidates hold them all, more
        # than max_df 3, so that conjunction is not rare here and adds nothing
        ([3, 100, 3, 0, 100], [[1, 0, 1, 0, 0], [3, 0, 3, 0, 0], [0, 0, 0, 0, 0]]),
    ],
    ids=["sorted", "reversed", "repeated"],
)
def test_prepared_exact_matches_equal_the_direct_ones(ids, expected):
    """What the search thread prepares (prepare_exact_matches, then set lookups) gives the direct counts, for
    candidates in any order and with repeated ids."""
    index = BM25Index(compact_min=10_000)
    index.build(list(range(len(MAIN))), MAIN)
    index.add([100], ["tenant upload rejected twice"])
    ids = np.array(ids)
    for text, counts in zip(
        ["E4012 tenant", "tenant E4012 rejected upload", "tenant upload rejected"], expected, strict=True
    ):
        cache: dict = {}
        index.prepare_exact_matches(text, 3, 0.25, cache=cache)
        assert cache["bm25_exact"][2] is not None  # the prepared path is the one tested
        assert index.exact_matches(text, ids, max_df=3, cache=cache).tolist() == counts
        assert index.exact_matches(text, ids, max_df=3).tolist() == counts


@pytest.mark.parametrize("count_max", [0, 10**9], ids=["binary-search", "bincount"])
def test_holds_all_terms_is_the_set_containment_on_both_paths(monkeypatch, count_max):
    """Both ways of holds_all_terms (a binary search per term's column, one bincount over the columns) give
    exactly the brute-force answer: a live document whose token set contains the query's, over a main segment
    with removed documents and a delta."""
    import hybrid_memory.engines.bm25.index as sparse_module

    monkeypatch.setattr(sparse_module, "HOLDS_ALL_COUNT_MAX", count_max)
    rng = np.random.default_rng(11)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "E4012", "iota"]
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 7))) for _ in range(120)]
    index = BM25Index(compact_min=10_000)
    index.build(list(range(100)), texts[:100])
    index.add(list(range(100, 120)), texts[100:])
    index.remove([3, 50, 105])
    tokenize = TechnicalTokenizer().tokenize
    ids = np.array([*range(120), 500], dtype=np.int64)  # 500: never added
    for _ in range(40):
        query = " ".join(rng.choice(words, size=rng.integers(1, 4), replace=False))
        wanted = set(tokenize(query))
        expected = [i < 120 and i not in (3, 50, 105) and wanted <= set(tokenize(texts[i])) for i in ids.tolist()]
        assert index.holds_all_terms(query, ids).tolist() == expected, query
    assert index.holds_all_terms("alpha nowhere", ids).tolist() == [False] * len(ids)  # a token no one holds


@pytest.mark.parametrize("holders_max,df_max", [(1024, 256), (4, 16), (0, 0)], ids=["prepared", "few-holders", "none"])
def test_exact_matches_prepared_in_the_search_thread_equal_the_candidate_path(monkeypatch, holders_max, df_max):
    """prepare_exact_matches (run by the sparse engine's own search) then exact_matches answers exactly as
    exact_matches alone, over main with removed documents and a delta; where it does not apply (more holders
    than HOLDERS_MAX, a rarest token held by more than PREPARE_DF_MAX) it falls back to the per-candidate
    path; a write after the preparation is seen (the generation changes)."""
    import hybrid_memory.engines.bm25.index as sparse_module

    monkeypatch.setattr(sparse_module, "HOLDERS_MAX", holders_max)
    monkeypatch.setattr(sparse_module, "PREPARE_DF_MAX", df_max)
    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "delta", "E4012", "getUserById", "ERR_IO", "iota"]
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 6))) for _ in range(60)]
    index = BM25Index(compact_min=10_000)
    index.build(list(range(50)), texts[:50])
    index.add(list(range(50, 60)), texts[50:])
    index.remove([4, 52])
    ids = np.array([*range(60), 999], dtype=np.int64)
    prepared_used = 0
    for _ in range(60):
        query = " ".join(rng.choice(words, size=rng.integers(1, 5), replace=False))
        expected = index.exact_matches(query, ids, 4, min_share=0.25).tolist()
        cache: dict = {}
        index.prepare_exact_matches(query, 4, 0.25, cache=cache)
        prepared_used += cache["bm25_exact"][2] is not None
        assert index.exact_matches(query, ids, 4, min_share=0.25, cache=cache).tolist() == expected, query
    # all 60 prepared; with HOLDERS_MAX 4, those whose holders or rarest token's documents exceed it fall
    # back (11); with 0, only the queries under 3 tokens or with a token outside the main segment are prepared
    assert prepared_used == {1024: 60, 4: 49, 0: 24}[holders_max]
    # a write between the preparation and the lookup: the fresh answer, not the prepared one (nobody held it:
    # 0). The new chunk holds the rare identifier (1) and every query token in order (the identifier's parts
    # are tokens too, so 3 or more: + 1 + 1 identifier)
    cache = {}
    index.prepare_exact_matches("ERR_NEW42 alpha", 4, 0.25, cache=cache)
    assert index.exact_matches("ERR_NEW42 alpha", np.array([70]), 4, min_share=0.25, cache=cache).tolist() == [0]
    index.add([70], ["ERR_NEW42 alpha"])
    assert index.exact_matches("ERR_NEW42 alpha", np.array([70]), 4, min_share=0.25, cache=cache).tolist() == [3]


def test_score_through_the_id_lookup_is_nan_for_ids_that_are_not_live_main_documents():
    index = BM25Index(compact_min=10_000)
    index.build([1, 2, 3, 5], ["disk quota exceeded", "disk full alarm", "replica lag", "quota report"])
    index.remove([2])
    assert index._main_pos_of is not None  # rowids 1..5: dense enough for the lookup
    ids = np.array([1, 2, 3, 4, 5, 7, 10**9, -1], dtype=np.int64)  # removed, never added, past the end, negative
    out = index.score("disk quota", ids)
    assert np.isnan(out[[1, 3, 5, 6, 7]]).all()
    assert out[2] == 0.0  # live, no query term
    assert out[0] > out[4] > 0  # "disk quota exceeded" holds both terms, "quota report" one
    assert out[[0, 4]].tolist() == index.score("disk quota", np.array([1, 5], dtype=np.int64)).tolist()
    # the same values through the binary-search path (no lookup)
    lookup, index._main_pos_of = index._main_pos_of, None
    assert np.array_equal(index.score("disk quota", ids), out, equal_nan=True)
    # with a delta: 4 (inside the lookup's range, never a main document) and 9 (past it) are delta documents
    index._main_pos_of = lookup
    index.add([4, 9], ["disk quota disk", "quota"])
    both = np.array([1, 4, 9, 2, 8, 10**9], dtype=np.int64)
    with_lookup = index.score("disk quota", both)
    assert np.isnan(with_lookup[[3, 4, 5]]).all() and (with_lookup[:3] > 0).all()
    index._main_pos_of = None
    assert np.array_equal(index.score("disk quota", both), with_lookup, equal_nan=True)


def test_the_default_puts_the_chunk_quoting_an_error_message_first():
    notes = [
        (
            "zip-close",
            'def close(self): raise ValueError("Can\'t close the ZIP file while there is an open writing handle")',
        ),
        (
            "zip-open",
            "def open(self, name): open a member of the ZIP archive for writing; one writing handle at a time",
        ),
        ("zip-write", "def write(self, data): write to the open writing handle of the ZIP file"),
    ]
    with HybridMemory(embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": c, "text": t} for c, t in notes])
        query = "ValueError: Can't close the ZIP file while there is an open writing handle"
        hit = memory.search(query, top_k=3)
        assert hit.fusion == "adaptive" and hit.results[0].chunk_id == "zip-close"


def test_whole_query_matches_count_only_in_the_query_order():
    """holds_in_order: every query token, in the query's order, gaps allowed; exact_matches uses it."""
    index = BM25Index()
    index.build(
        [1, 2, 3],
        [
            "upload rejected for tenant E4012 by the gateway",  # rejected .. tenant .. E4012 in order, with gaps
            "tenant E4012 saw the upload rejected",  # same tokens, rejected after tenant
            "rejected rejected tenant",  # no E4012
        ],
    )
    ids = np.array([1, 2, 3], dtype=np.int64)
    assert index.holds_all_terms("rejected tenant E4012", ids).tolist() == [True, True, False]
    assert index.holds_in_order("rejected tenant E4012", ids).tolist() == [True, False, False]
    assert index.holds_in_order("tenant E4012 rejected", ids).tolist() == [False, True, False]
    assert index.holds_in_order("rejected rejected tenant", ids).tolist() == [False, False, True]  # repeats repeat
    assert index.holds_in_order("tenant tenant", ids).tolist() == [False, False, False]
    # E4012 is an identifier held by 2 documents (+1 each); only doc 1 holds the 3-token query in order (+2)
    assert index.exact_matches("rejected tenant E4012", ids, max_df=3).tolist() == [3, 1, 0]
    assert index.holds_in_order("tenant tenant", ids).tolist() == [False, False, False]
    # E4012 is an identifier held by 2 documents (+1 each); only doc 1 holds the 3-token query in order (+2)
    assert index.exact_matches("rejected tenant E4012", ids, max_df=3).tolist() == [3, 1, 0]


def test_in_order_reads_whole_tokens_only():
    from hybrid_memory.engines.bm25.index import _in_order

    def b(*ids):
        return np.array(ids, dtype=np.int32).tobytes()

    # 65536 is bytes 00 00 01 00 and 0 is 00 00 00 00: the bytes of 256 (00 01 00 00) appear at offset 1
    assert not _in_order(b(65536, 0), [b(256)])
    assert _in_order(b(65536, 256), [b(256)])
    assert _in_order(b(7, 3, 9, 3), [b(3), b(3)]) and not _in_order(b(7, 3, 9), [b(3), b(3)])
    assert _in_order(b(1, 2, 3), [b(1), b(3)]) and not _in_order(b(1, 2, 3), [b(3), b(1)])


# -- an all-zero stored vector carries no dense evidence (fresh-user review, session 3) -------------------------
ZERO_NOTES = [  # "quasar" is in z only; a, b, c are equally close to the query vector below (cosine 1/sqrt(3))
    ("a", "apple orchard notes", [1.0, 0.0, 0.0, 0.0]),
    ("b", "banana plantation notes", [0.0, 1.0, 0.0, 0.0]),
    ("c", "cherry blossom notes", [0.0, 0.0, 1.0, 0.0]),
    ("z", "quasar telescope log", [0.0, 0.0, 0.0, 0.0]),  # a placeholder vector from the caller
]
ZERO_QUERY = np.array([1.0, 1.0, 1.0, 0.0], dtype=np.float32) / np.sqrt(3.0)


def _zero_vector_memory(path=None):
    memory = HybridMemory(path, embedder=HashingEmbedder(4))
    memory.add(
        [{"chunk_id": cid, "text": text} for cid, text, _ in ZERO_NOTES],
        vectors=np.array([v for _, _, v in ZERO_NOTES], dtype=np.float32),
    )
    return memory


def _assert_zero_vector_chunk_judged_by_bm25_alone(memory):
    response = memory.search("quasar", top_k=4, query_vector=ZERO_QUERY)  # the default fusion: adaptive
    assert response.fusion == "adaptive"
    # By hand. BM25 (log1p) over the 4 candidates: z = L, a = b = c = 0 -> z-scores +sqrt(3), -1/sqrt(3) each.
    # Dense: z has no score (nan, dropped: the mean, z = 0); a, b, c all 1/sqrt(3): std 0, every z-score 0.
    # Fused: z = alpha_s * sqrt(3) > 0 > a = b = c = -alpha_s / sqrt(3); rescaled to [0, 1]: z 1, the rest 0.
    assert [r.chunk_id for r in response.results] == ["z", "a", "b", "c"]
    assert [r.score for r in response.results] == [1.0, 0.0, 0.0, 0.0]
    top = response.results[0]
    assert (top.sparse_rank, top.dense_rank, top.dense_score) == (1, None, None)
    assert [r.dense_score for r in response.results[1:]] == pytest.approx([1 / np.sqrt(3.0)] * 3, abs=1e-6)
    # the dense list [a, b, c] is flat (top_outlier 0): weight 1; BM25's one-hit list, continued with the
    # other candidates' BM25 score 0 to the dense list's length, is [L, 0, 0]: top_outlier 10 (the cap),
    # weight 11; made convex, 11/12 and 1/12. Not calibrated by surprise: BM25's is 0 here ("quasar", df 1 of 4,
    # among 4), but the dense scores have no spread (variance 0), so dense cannot be judged, and a factor on one
    # engine only would weigh nats against plain confidence
    assert response.effective_weights == pytest.approx({"sparse": 11 / 12, "dense": 1 / 12})
    # rrf: z scores 1/61 from its BM25 rank alone (no dense rank), as a, whose dense rank 1 also gives 1/61
    rrf = memory.search("quasar", top_k=4, query_vector=ZERO_QUERY, fusion="rrf")
    assert {r.chunk_id: r.rrf_score for r in rrf.results} == pytest.approx(
        {"a": 1 / 61, "z": 1 / 61, "b": 1 / 62, "c": 1 / 63}
    )
    assert [r.chunk_id for r in rrf.results] == ["a", "z", "b", "c"]  # the tie at 1/61 by chunk id


def test_a_zero_vector_chunk_that_only_bm25_finds_ranks_first_under_adaptive():
    """It used to rank last: its cosine 0 was standardised far below the dense list (a, b, c at 0.577)."""
    with _zero_vector_memory() as memory:
        _assert_zero_vector_chunk_judged_by_bm25_alone(memory)


def test_the_dense_engine_never_returns_nor_scores_a_zero_vector_row():
    with _zero_vector_memory() as memory:
        rowid = {cid: memory.backend.store.lookup([cid])[cid][0] for cid, _, _ in ZERO_NOTES}
        hits = memory.backend.dense.search(ZERO_QUERY, 10)
        assert sorted(i for i, _ in hits) == sorted(rowid[c] for c in "abc")  # 3 of the 4 rows: z is not eligible
        ids = np.array([rowid[c] for c in "abcz"] + [10_000], dtype=np.int64)
        scores = memory.backend.dense.score(ZERO_QUERY, ids)
        assert scores[:3] == pytest.approx([1 / np.sqrt(3.0)] * 3, abs=1e-6)
        assert np.isnan(scores[3]) and np.isnan(scores[4])  # zero vector, and an id without a vector: alike
        engine = memory._searcher.engines["dense"]
        query = Query("quasar", ZERO_QUERY)
        assert rowid["z"] not in [i for i, _ in engine.search(query, 10, None)]
        assert np.isnan(engine.score(query, np.array([rowid["z"]], dtype=np.int64))[0])
        assert memory.backend.dense.vectors(np.array([rowid["z"]])).tolist() == [[0.0] * 4]  # still held, as stored
        # the dense engine alone: a, b, c (tied, by chunk id), never z
        dense_only = memory.search("quasar", top_k=4, query_vector=ZERO_QUERY, dense_weight=1.0, sparse_weight=0.0)
        assert [r.chunk_id for r in dense_only.results] == ["a", "b", "c"]


def test_the_zero_vector_rule_survives_a_reopen_and_an_older_save(tmp_path):
    import json

    with _zero_vector_memory(tmp_path / "mem"):
        pass
    manifest_path = tmp_path / "mem" / "dense" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(4)) as memory:
        z = memory.backend.store.lookup(["z"])["z"][0]
        assert manifest["zero_ids"] == [z]  # saved, so a reopen reads no vector to find it
        _assert_zero_vector_chunk_judged_by_bm25_alone(memory)
    del manifest["zero_ids"]  # a save from before the rule: found by one pass over the rows on load
    manifest_path.write_text(json.dumps(manifest))
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(4)) as memory:
        assert memory.backend.dense._n_zero == 1
        _assert_zero_vector_chunk_judged_by_bm25_alone(memory)


def test_zero_vector_rows_are_dropped_from_the_ivf_path_and_forgotten_on_remove():
    from hybrid_memory.engines.dense.index import FaissIndex

    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(5000, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[::500] = 0.0  # 10 placeholder rows: ids 0, 500, ..., 4500
    index = FaissIndex(8, kind="ivf", nprobe=128)  # 5,000 vectors: 128 lists (39 training points each), all probed
    index.add(np.arange(5000), vectors)
    index.maintain()
    assert index.approximate  # the IVF serves unfiltered searches
    query = vectors[1]
    hits = index.search(query, 5000)  # every row the IVF proposes, exactly re-scored
    returned = {i for i, _ in hits}
    assert returned.isdisjoint(range(0, 5000, 500))
    assert len(returned) == 4990  # every other row is eligible
    assert np.isnan(index.score(query, np.array([0, 500]))).all()
    index.remove([500])
    index.add([500], vectors[1:2])  # the id now holds a real vector: eligible and scored again
    assert [i for i, _ in index.search(query, 2)] == [1, 500]  # the same vector twice: tie broken by id
    assert index.score(query, np.array([500]))[0] == pytest.approx(1.0)
    assert index._n_zero == 9


def test_a_word_typed_alone_is_looked_up_as_a_name():
    """A one-token query (a plain word or a CJK pair) names that token: when few chunks hold it (at most
    max(top_k, 10)), they rank above a chunk the dense engine prefers. BM25's calibrated surprise for one token is
    -ln(n df / N) <= 0, so without the guard the default followed the dense engine (a fresh user's "故乡" ranked
    below an unrelated chunk). A common word alone is no name: the guard stays off."""
    rng = np.random.default_rng(7)
    texts = {f"n{i}": f"note {i} about the nightly deploy of service {i % 4}" for i in range(30)}
    texts["holder"] = "the kerberos ticket of svc-batch expired overnight"
    texts["poem"] = "床前明月光，疑是地上霜。举头望明月，低头思故乡。"
    texts["decoy"] = "rotating credentials for the batch jobs"
    texts["decoy-zh"] = "数据库连接失败"
    query_vectors = {
        "kerberos": rng.standard_normal(16),
        "故乡": rng.standard_normal(16),
        "deploy": rng.standard_normal(16),
    }
    vectors = {cid: rng.standard_normal(16) for cid in texts}
    vectors["decoy"] = query_vectors["kerberos"]  # the dense engine's clear top
    vectors["decoy-zh"] = query_vectors["故乡"]
    by_text = {text: vectors[cid] for cid, text in texts.items()}
    from hybrid_memory import CallableEmbedder

    embedder = CallableEmbedder(
        lambda batch: [by_text[t].tolist() for t in batch],
        lambda text: query_vectors.get(text, np.ones(16)).tolist(),
        name="fixed-16",
        dim=16,
    )
    with HybridMemory(embedder=embedder) as memory:
        memory.add([{"chunk_id": cid, "text": text} for cid, text in texts.items()])
        for query, holder, decoy in (("kerberos", "holder", "decoy"), ("故乡", "poem", "decoy-zh")):
            response = memory.search(query, top_k=3)
            assert response.fusion == "adaptive" and response.calibrated is True
            assert [r.chunk_id for r in response.results][:2] == [holder, decoy], query
            assert response.results[0].dense_rank != 1 and response.results[1].dense_rank == 1
            q = Query(query)
            guard = memory._searcher.candidates(q, top_k=3, depth=20, weights={}, fusion="adaptive").input
            assert guard.identifier_matches == {holder: 1}, query
        # "deploy" alone is held by 30 chunks (more than max(top_k, 10)): no name, no guard
        q = Query("deploy")
        assert (
            memory._searcher.candidates(q, top_k=3, depth=20, weights={}, fusion="adaptive").input.identifier_matches
            == {}
        )
    tokenizer = TechnicalTokenizer()
    assert tokenizer.names("kerberos") == ["kerbero"] and tokenizer.names("the kerberos") == ["kerbero"]
    assert tokenizer.names("故乡") == ["故乡"] and tokenizer.names("低头思故乡") == []  # four CJK pairs: no lone token
    assert tokenizer.names("getUserById") == ["getuserbyid"]  # identifiers as before
    assert tokenizer.names("kerberos ticket") == [] and tokenizer.names("the of") == []
