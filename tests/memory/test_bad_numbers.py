"""Bad numbers given to a write or to a Qdrant backend (a fresh user's findings): strings, complex numbers, ragged
rows and non-number BM25 parameters get the library's error naming the value's type and the fix, never numpy's
or Python's raw error, and nothing is stored."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hybrid_memory import DimensionMismatchError, HashingEmbedder, HybridMemory, InvalidRequestError

FIX = (
    "nothing was stored: give real numbers, float32 rows of the memory's dimension, or leave vectors= out to "
    "embed the texts with the memory's embedder"
)


@pytest.fixture
def mem(tmp_path):
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(8)) as memory:
        memory.add([{"chunk_id": "kept", "text": "the note already stored"}])
        yield memory


def _refused(mem, vectors, error=InvalidRequestError):
    chunks = [{"chunk_id": f"n{i}", "text": f"new note {i}"} for i in range(len(vectors))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's ComplexWarning would fail the test
        with pytest.raises(error) as info:
            mem.add(chunks, vectors=vectors)
    assert type(info.value) is error
    assert (mem.count(), [c.chunk_id for c in mem.iter_chunks()]) == (1, ["kept"])  # nothing stored
    return str(info.value)


def test_string_vectors_name_their_type_and_the_fix(mem):
    assert _refused(mem, [["a"] * 8]) == (
        f"vectors must be real numbers, got list holding str 'a' at row 0 (chunk 'n0'), column 0 (dtype <U1); {FIX}"
    )
    assert _refused(mem, np.array([[b"x"] * 8])) == (
        f"vectors must be real numbers, got ndarray holding bytes b'x' at row 0 (chunk 'n0'), column 0 (dtype |S1); {FIX}"
    )
    mixed = [[0.5] * 7 + ["0.1"]]  # numpy reads the whole row as text; the message names the element given
    assert _refused(mem, mixed) == (
        f"vectors must be real numbers, got list holding str '0.1' at row 0 (chunk 'n0'), column 7 (dtype <U32); {FIX}"
    )
    objects = np.array([[0.5] * 7 + [{"x": 1}]], dtype=object)
    assert _refused(mem, objects) == (
        f"vectors must be real numbers, got ndarray holding dict {{'x': 1}} at row 0 (chunk 'n0'), column 7 (dtype object); "
        f"{FIX}"
    )
    assert _refused(mem, [[True] * 8]) == (
        f"vectors must be real numbers, got list holding bool True at row 0 (chunk 'n0'), column 0 (dtype bool); {FIX}"
    )


def test_a_bool_among_floats_is_refused_by_row_column_and_value(mem):
    """A fresh user's finding: vectors=[[True, 2.0, ...]] was stored, numpy having read True as 1.0 (dtype float64),
    while a row of bools alone was refused."""
    assert _refused(mem, [[True] + [2.0] * 7]) == (
        f"vectors must be real numbers, got list holding bool True at row 0 (chunk 'n0'), column 0 (dtype float64); "
        f"{FIX}"
    )
    rows = [[0.1] * 8, (0.2,) * 5 + (np.False_, 0.4, 0.5)]  # a tuple row and numpy's bool too
    assert _refused(mem, rows) == (
        f"vectors must be real numbers, got list holding bool False at row 1 (chunk 'n1'), column 5 (dtype float64); "
        f"{FIX}"
    )


def test_complex_vectors_are_refused_as_query_vector_refuses_them(mem):
    expected = (
        "vectors hold complex numbers (dtype complex128); an embedding is real: pass their real part if that "
        f"is what you mean (vectors.real); {FIX}"
    )
    assert _refused(mem, np.full((1, 8), 1 + 2j)) == expected  # was accepted with a ComplexWarning
    assert _refused(mem, [[1j] * 8]) == expected  # was a raw TypeError
    assert _refused(mem, np.full((1, 8), 1j, dtype=np.complex64)) == expected.replace("complex128", "complex64")


def test_ragged_rows_are_a_dimension_error_naming_the_shape_wanted(mem):
    assert _refused(mem, [[0.1] * 8, [0.1] * 7], DimensionMismatchError) == (
        f"vectors must have shape (2, 8) (one row per chunk, the memory's dimension), got rows of unequal lengths "
        f"(list); {FIX}"
    )


def test_real_numbers_of_every_kind_are_still_accepted(mem):
    ints = [[1, 0, 0, 0, 0, 0, 0, 0]]
    mem.add([{"chunk_id": "i", "text": "int row"}], vectors=ints)
    mem.add([{"chunk_id": "o", "text": "object row"}], vectors=np.array([[0.0, 2.0] + [0.0] * 6], dtype=object))
    mem.add([{"chunk_id": "f", "text": "float64 row"}], vectors=np.eye(8)[2:3])
    assert mem.count() == 4
    hits = mem.search({"search_text": "zzz", "top_k": 1}, query_vector=[0, 1, 0, 0, 0, 0, 0, 0]).results
    assert [h.chunk_id for h in hits] == ["o"]
    # None in a row still reads as NaN, reported with its row and chunk as before
    with pytest.raises(InvalidRequestError) as info:
        mem.add([{"chunk_id": "z", "text": "none row"}], vectors=[[0.5] * 7 + [None]])
    assert str(info.value).startswith("vectors row 0 (chunk 'z') holds NaN or infinite values as float32 (1 of 1 ")
    assert mem.count() == 4


def test_qdrant_bm25_parameters_that_are_not_numbers_name_their_type_and_the_fix(tmp_path):
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")
    from hybrid_memory.backends.qdrant.backend import QdrantBackend, SparseEncoder

    cases = [
        ({"k1": "x"}, "k1 must be a finite number >= 0, got str 'x'; pass a float: k1=1.5 (bm25s' default)"),
        ({"b": None}, "b must be a number in [0, 1], got NoneType None; pass a float: b=0.75 (bm25s' default)"),
        (
            {"avgdl": "12"},
            (
                "avgdl must be a finite number of tokens > 0, got str '12'; pass a float: avgdl= the "
                "memory's average chunk length (export-qdrant prints it)"
            ),
        ),
        ({"k1": True}, "k1 must be a finite number >= 0, got bool True; pass a float: k1=1.5 (bm25s' default)"),
        # out of range: the same message with the fix (it was 'k1 must be a finite number >= 0, got -1', no fix)
        ({"k1": -1}, "k1 must be a finite number >= 0, got int -1; pass a float: k1=1.5 (bm25s' default)"),
        ({"k1": float("inf")}, "k1 must be a finite number >= 0, got float inf; pass a float: k1=1.5 (bm25s' default)"),
        ({"b": 2}, "b must be a number in [0, 1], got int 2; pass a float: b=0.75 (bm25s' default)"),
        ({"b": float("nan")}, "b must be a number in [0, 1], got float nan; pass a float: b=0.75 (bm25s' default)"),
        (
            {"avgdl": 0},
            (
                "avgdl must be a finite number of tokens > 0, got int 0; pass a float: avgdl= the memory's "
                "average chunk length (export-qdrant prints it)"
            ),
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidRequestError) as info:
            QdrantBackend.edge(tmp_path / "shard", payload_indexes=False, **kwargs)
        assert str(info.value) == message
        with pytest.raises(InvalidRequestError) as info:
            SparseEncoder(**kwargs)
        assert str(info.value) == message
    assert not (tmp_path / "shard").exists() or not any((tmp_path / "shard").iterdir())  # nothing written
    # numpy numbers and ints are numbers
    encoder = SparseEncoder(k1=np.float32(1.25), b=1, avgdl=np.int64(40))
    assert (encoder.k1, encoder.b, encoder.avgdl) == (1.25, 1.0, 40.0)
    # a shard with an export record: a non-number is refused the same way (not float()'s raw ValueError)
    (tmp_path / "rec").mkdir()
    from hybrid_memory.backends.qdrant.edge_info import write_export_info

    write_export_info(
        tmp_path / "rec",
        avgdl=9.5,
        k1=1.5,
        b=0.75,
        memory=None,
        chunks=0,
        complete=True,
        embedder={"name": "hashing-8", "dim": 8},
        indexed_keys={},
    )
    with pytest.raises(InvalidRequestError) as info:
        QdrantBackend.edge(tmp_path / "rec", payload_indexes=False, k1="x")
    assert str(info.value) == cases[0][1]
    with pytest.raises(InvalidRequestError) as info:
        HybridMemory.qdrant(edge_path=tmp_path / "rec", embedder=HashingEmbedder(8), avgdl="12")
    assert str(info.value) == cases[2][1]


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("k1", "x", "k1 must be a finite number >= 0, got str 'x'; pass a float such as k1=1.5 (bm25s' default)"),
        ("k1", True, "k1 must be a finite number >= 0, got bool True; pass a float such as k1=1.5 (bm25s' default)"),
        ("k1", -1, "k1 must be a finite number >= 0, got int -1; pass a float such as k1=1.5 (bm25s' default)"),
        ("b", "x", "b must be a number in [0, 1], got str 'x'; pass a float such as b=0.75 (bm25s' default)"),
        ("b", None, "b must be a number in [0, 1], got NoneType None; pass a float such as b=0.75 (bm25s' default)"),
        ("b", 2, "b must be a number in [0, 1], got int 2; pass a float such as b=0.75 (bm25s' default)"),
        (
            "compact_min",
            "x",
            "compact_min must be an int >= 0 (documents), got str 'x'; pass an int such as "
            "compact_min=500 (the default)",
        ),
        (
            "compact_min",
            2.5,
            "compact_min must be an int >= 0 (documents), got float 2.5; pass an int such as "
            "compact_min=500 (the default)",
        ),
        (
            "compact_ratio",
            -0.5,
            "compact_ratio must be a number in [0, 1] (a fraction of the main BM25 segment; 0 leaves "
            "compact_min alone to decide), got float -0.5; pass a float such as compact_ratio=0.1 "
            "(the default)",
        ),
        (
            "compact_ratio",
            5,
            "compact_ratio must be a number in [0, 1] (a fraction of the main BM25 segment; 0 leaves "
            "compact_min alone to decide), got int 5; pass a float such as compact_ratio=0.1 (the "
            "default)",
        ),
        (
            "show_progress",
            "yes",
            "show_progress must be a bool, got str 'yes'; pass show_progress=True for progress bars, "
            "or False (the default)",
        ),
        (
            "show_progress",
            1,
            "show_progress must be a bool, got int 1; pass show_progress=True for progress bars, or "
            "False (the default)",
        ),
        (
            "background_compaction",
            "no",
            "background_compaction must be a bool, got str 'no'; pass "
            "background_compaction=True (the default) or False to merge in the writing call",
        ),
        (
            "candidate_multiplier",
            True,
            "candidate_multiplier must be an int >= 1, got bool True; pass an int such as "
            "candidate_multiplier=2 (the default)",
        ),
        (
            "faiss_threads",
            0,
            "faiss_threads must be an int >= 1 or None, got int 0; pass faiss_threads=1 (the default) "
            "or None to leave FAISS's own thread count",
        ),
        (
            "faiss_threads",
            "x",
            "faiss_threads must be an int >= 1 or None, got str 'x'; pass faiss_threads=1 (the "
            "default) or None to leave FAISS's own thread count",
        ),
        (
            "busy_timeout",
            "x",
            "busy_timeout must be a finite number of seconds >= 0, got str 'x'; pass a float such as "
            "busy_timeout=30.0 (the default)",
        ),
    ],
)
def test_a_bad_numeric_constructor_option_is_refused_before_the_folder_is_created(tmp_path, option, value, message):
    """A fresh user's finding: HybridMemory(path, k1="x") created the folder and raised a raw TypeError from inside
    the BM25 index ('>=' not supported between instances of 'str' and 'int'); compact_min=-1, faiss_threads=0 and
    k1=True were taken."""
    with pytest.raises(InvalidRequestError) as info:
        HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(8), **{option: value})
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []  # no folder left behind


def test_compact_ratio_bounds_are_taken_and_show_progress_is_refused_on_a_backend_memory(tmp_path):
    """compact_ratio=0 (compact_min alone decides, as tests of compaction use it) and 1 are in range; the Qdrant
    memory checks show_progress before it opens its backend."""
    for ratio in (0, 1):
        with HybridMemory(embedder=HashingEmbedder(8), compact_ratio=ratio) as memory:
            assert memory.backend.sparse.compact_ratio == ratio
    pytest.importorskip("qdrant_edge")
    with pytest.raises(InvalidRequestError) as info:
        HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(8), show_progress="yes")
    assert str(info.value) == (
        "show_progress must be a bool, got str 'yes'; pass show_progress=True for progress bars, or False (the default)"
    )
    assert list(tmp_path.iterdir()) == []  # no shard folder left behind


def test_numpy_numbers_are_numbers_for_the_constructor_options(tmp_path):
    with HybridMemory(
        tmp_path / "mem",
        embedder=HashingEmbedder(8),
        k1=np.float32(1.25),
        b=np.float64(0.5),
        compact_min=np.int64(3),
        compact_ratio=np.float32(0.5),
        candidate_multiplier=np.int64(3),
        faiss_threads=np.int64(1),
        busy_timeout=np.int64(5),
    ) as memory:
        memory.add([{"chunk_id": "a", "text": "kafka broker lag"}, {"chunk_id": "b", "text": "postgres vacuum"}])
        assert (memory.backend.sparse.k1, memory.backend.sparse.b, memory.backend._faiss_threads) == (1.25, 0.5, 1)
        assert [r.chunk_id for r in memory.search("kafka lag", top_k=1).results] == ["a"]


def test_a_mixed_row_names_its_first_bad_element_by_row_column_and_value(mem):
    """A fresh user's finding: a row of floats holding one string quoted the first float ('0.5'), which numpy had
    turned into text, not the string given."""
    vectors = [[0.1] * 8, [0.2] * 5 + ["0.3", 0.4, "x"], [0.5] * 8]
    assert _refused(mem, vectors) == (
        f"vectors must be real numbers, got list holding str '0.3' at row 1 (chunk 'n1'), column 5 (dtype <U32); {FIX}"
    )
    with_none = [[0.1] * 8, [0.2] * 3 + [None] + [0.2] * 3 + [b"b"], [0.5] * 8]  # None casts to NaN: not the first
    assert _refused(mem, with_none) == (
        f"vectors must be real numbers, got list holding bytes b'b' at row 1 (chunk 'n1'), column 7 (dtype object); "
        f"{FIX}"
    )


def test_all_zero_rows_are_stored_with_a_warning_naming_their_chunks(mem, caplog):
    """A fresh user's finding: an all-zero row was taken silently; it stays accepted (dense.py: never returned by
    dense search, a placeholder on purpose) and is now logged, naming the chunks, the count and the fix."""
    chunks = [{"chunk_id": f"z{i}", "text": f"zero note {i}"} for i in range(7)] + [{"chunk_id": "ok", "text": "kept"}]
    vectors = np.vstack([np.zeros((7, 8)), np.ones((1, 8))])
    with caplog.at_level("WARNING", logger="hybrid_memory.memory.write_plan"):
        assert mem.add(chunks, vectors=vectors) == [c["chunk_id"] for c in chunks]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "hybrid_memory.memory.write_plan",
            "WARNING",
            "vectors= holds all-zero rows for 7 of 8 chunks ('z0', 'z1', 'z2', 'z3', 'z4', ...): an all-zero vector has no "
            "direction, so dense search never returns those chunks and they are found by BM25 only; pass the embedder's "
            "vectors for them, or leave vectors= out to embed the texts with the memory's embedder",
        )
    ]
    assert mem.count() == 9
    caplog.clear()
    with caplog.at_level("WARNING", logger="hybrid_memory.memory.write_plan"):
        mem.upsert(
            [{"chunk_id": "z0", "text": "zero note 0"}, {"chunk_id": "one", "text": "one"}],
            vectors=np.vstack([np.zeros((1, 8)), np.ones((1, 8))]),
        )
    assert [r.getMessage() for r in caplog.records] == [
        "vectors= holds all-zero rows for 1 of 2 chunks ('z0'): an all-zero vector has no direction, so dense search "
        "never returns those chunks and they are found by BM25 only; pass the embedder's vectors for them, or leave "
        "vectors= out to embed the texts with the memory's embedder"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="hybrid_memory.memory.write_plan"):
        mem.upsert([{"chunk_id": "one", "text": "one"}], vectors=np.ones((1, 8)))
    assert caplog.records == []


@pytest.mark.parametrize(
    ("embedder", "message"),
    [
        (
            "BAAI/bge-small-en-v1.5",  # a model name, as other libraries take it (a fresh user's finding)
            "embedder must be an Embedder object, not a model name ('BAAI/bge-small-en-v1.5'); leave it out for the "
            "packaged all-MiniLM-L6-v2 (OnnxEmbedder()), or pass SentenceTransformerEmbedder(model_path=...) from the "
            "[torch] extra for another sentence-transformers model",
        ),
        (
            object,
            "embedder the class object lacks 'name'; it must follow the Embedder protocol (name, dim, embed_documents, "
            "embed_query): pass an instance such as OnnxEmbedder() (the packaged all-MiniLM-L6-v2) or "
            "HashingEmbedder(384), or leave embedder out for the default",
        ),
    ],
)
def test_an_embedder_that_is_not_one_is_refused_before_the_folder_is_created(tmp_path, embedder, message):
    from hybrid_memory import HybridMemory, InvalidRequestError

    with pytest.raises(InvalidRequestError) as raised:
        HybridMemory(tmp_path / "mem", embedder=embedder)
    assert str(raised.value) == message
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.parametrize(
    ("dim", "given"),
    [
        (0, "int 0"),
        (-3, "int -3"),
        (2.5, "float 2.5"),
        (True, "bool True"),
        ("8", "str '8'"),
        (None, "NoneType None"),
    ],
)
def test_a_hashing_embedder_dim_that_is_not_an_int_from_1_is_the_librarys_error(dim, given):
    """A fresh user's finding: HashingEmbedder(dim=0) raised a plain ValueError, dim=True and dim=2.5 were taken
    (a 1-wide or float dimension), and dim='8' gave a raw TypeError from the comparison."""
    with pytest.raises(InvalidRequestError) as raised:
        HashingEmbedder(dim=dim)
    assert str(raised.value) == (
        f"HashingEmbedder dim must be an int >= 1 (the vector dimension), got {given}; pass an int such as "
        "HashingEmbedder(dim=64) (the default)"
    )


@pytest.mark.parametrize("dim", [65_537, 10**8])
def test_a_hashing_embedder_dim_past_max_hashing_dim_is_refused(dim):
    """A fresh user's finding: --hashing-dim 100000000 was an out-of-memory kill (a vector is dim x 4 bytes)."""
    with pytest.raises(InvalidRequestError) as raised:
        HashingEmbedder(dim=dim)
    assert str(raised.value) == (
        f"HashingEmbedder dim must be from 1 to MAX_HASHING_DIM (65,536), got {dim:,}: a chunk's vector is dim x 4 "
        "bytes; pass a smaller dim such as HashingEmbedder(dim=64) (the default)"
    )


def test_a_numpy_int_dim_is_an_int():
    embedder = HashingEmbedder(dim=np.int64(4))
    assert (embedder.dim, type(embedder.dim), embedder.name) == (4, int, "hashing-4")
