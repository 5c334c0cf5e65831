"""A caller's precomputed query vector (``search(..., query_vector=...)``): what is accepted, and the exact message
of each refusal (fresh users' findings: NaN was reported as 'got shape (4,)', the shape asked for; a (1, dim) array
was flattened silently; a complex vector passed with numpy's ComplexWarning only). One checker,
``hybrid_memory.embedders.query_vector``, serves the embedded and the Qdrant backends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.embedders import query_vector

FIX = "pass 4 finite floats (this memory's embedding size), or None to embed search_text"
ROW_FIX = "pass it as one row, vector.reshape(-1) (4,), or None to embed search_text"


def _refusal(vector) -> str:
    with HybridMemory(embedder=HashingEmbedder(4)) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka lag"}])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no ComplexWarning or overflow RuntimeWarning on the way
            with pytest.raises(InvalidRequestError) as raised:
                mem.search("kafka", query_vector=vector)
        assert mem.count() == 1
    return str(raised.value)


@pytest.mark.parametrize(
    "vector, message",
    [
        (np.full(4, np.nan, dtype=np.float32), f"query_vector holds NaN at index 0 (4 values are not finite); {FIX}"),
        ([0.5, 0.5, float("inf"), 0.5], f"query_vector holds inf at index 2; {FIX}"),
        (np.array([0.1, -np.inf, np.nan, 0.1]), f"query_vector holds -inf at index 1 (2 values are not finite); {FIX}"),
        (np.array([0.1, 0.2, 1e39, 0.1]), f"query_vector holds 1e+39 (beyond float32's range) at index 2; {FIX}"),
    ],
)
def test_a_non_finite_vector_says_what_and_where(vector, message):
    assert _refusal(vector) == message


@pytest.mark.parametrize(
    "shape, message",
    [
        ((1, 4), f"query_vector must be one-dimensional (4,), got shape (1, 4); {ROW_FIX}"),
        ((4, 1), f"query_vector must be one-dimensional (4,), got shape (4, 1); {ROW_FIX}"),
        (
            (2, 4),
            "query_vector must be one-dimensional (4,), got shape (2, 4); search one query at a time, each a 1-D "
            "vector of 4 floats, or None to embed search_text",
        ),
        ((2, 2), f"query_vector must be one-dimensional (4,), got shape (2, 2); {FIX}"),
        ((1, 1, 4), f"query_vector must be one-dimensional (4,), got shape (1, 1, 4); {FIX}"),
    ],
)
def test_a_vector_of_more_than_one_dimension_is_refused_with_its_shape(shape, message):
    assert _refusal(np.ones(shape, dtype=np.float32)) == message


def test_a_wrong_length_shows_the_length():
    assert _refusal([0.1, 0.2, 0.3]) == f"query_vector must be 4 finite floats, got shape (3,); {FIX}"


def test_a_complex_vector_is_refused_without_a_complex_warning():
    assert _refusal(np.array([1, 0, 0, 0], dtype=np.complex64) + 1j) == (
        "query_vector holds complex numbers (dtype complex64); an embedding is real: pass its real part if that is "
        f"what you mean (vector.real); {FIX}"
    )


@pytest.mark.parametrize(
    "vector, got",
    [
        ([True, False, True, False], "got list [True, False, True, False]"),
        (["1", "0", "0", "0"], "got list ['1', '0', '0', '0']"),
        ([1.0, None, 0.0, 0.0], "got list [1.0, None, 0.0, 0.0]"),
    ],
)
def test_booleans_digit_strings_and_none_are_not_numbers(vector, got):
    assert _refusal(vector) == f"query_vector must be numbers, {got}; {FIX}"


@pytest.mark.parametrize(
    "vector, got",
    [
        ([True, 0.5, 0.0, 0.0], "got list holding bool True at index 0"),
        ((0.5, 0.0, np.False_, 1.0), "got tuple holding bool False at index 2"),
    ],
)
def test_a_bool_among_floats_is_not_a_number(vector, got):
    """numpy reads [True, 0.5, ...] as floats (dtype float64), so the dtype alone let it through as 1.0."""
    assert _refusal(vector) == f"query_vector must be numbers, {got}; {FIX}"


def test_what_langchain_and_llamaindex_pass_is_accepted():
    """A list of floats (LangChain's embed_query, LlamaIndex's QueryBundle.embedding), a float64 or int array:
    float32 (4,), unit L2 norm; the search ranks by it (dense only: the chunk the vector points at comes first)."""
    for given in ([3.0, 4.0, 0.0, 0.0], np.array([3.0, 4.0, 0.0, 0.0]), np.array([3, 4, 0, 0])):
        out = query_vector(given, 4)
        assert out.dtype == np.float32 and out.shape == (4,)
        assert out.tolist() == [np.float32(0.6), np.float32(0.8), 0.0, 0.0]
    with HybridMemory(embedder=HashingEmbedder(4)) as mem:
        mem.add(
            [{"chunk_id": "x", "text": "alpha"}, {"chunk_id": "y", "text": "beta"}],
            vectors=np.array([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32),
        )
        hits = mem.search("zzz", query_vector=[0.0, 2.0, 0.0, 0.0], sparse_weight=0.0, top_k=2).results
        assert [(h.chunk_id, h.dense_score) for h in hits] == [("y", 1.0), ("x", 0.0)]


def test_the_qdrant_backend_uses_the_same_checker(tmp_path):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')")
    with HybridMemory.qdrant(":memory:", collection="t", embedder=HashingEmbedder(4), payload_indexes=False) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka lag"}])
        for vector, message in (
            (np.ones((1, 4)), f"query_vector must be one-dimensional (4,), got shape (1, 4); {ROW_FIX}"),
            ([0.1, float("nan"), 0.1, 0.1], f"query_vector holds NaN at index 1; {FIX}"),
        ):
            with pytest.raises(InvalidRequestError) as raised:
                mem.search("kafka", query_vector=vector)
            assert str(raised.value) == message


def test_float32_fast_path_equals_the_general_path_to_the_bit() -> None:
    given = np.array([3.0, 0.0, -4.0, 0.0], dtype=np.float32)
    kept = given.copy()
    fast = query_vector(given, 4)  # an embedder's own float32 (dim,) output: the one-check path
    np.testing.assert_array_equal(given, kept)  # the caller's array is not normalised in place
    for other in ([3.0, 0.0, -4.0, 0.0], given.astype(np.float64), given.astype(np.float16)):
        general = query_vector(other, 4)
        assert general.dtype == np.float32 and general.tobytes() == fast.tobytes()
    assert fast.tolist() == [0.6000000238418579, 0.0, -0.800000011920929, 0.0]
    assert query_vector(np.zeros(4, dtype=np.float32), 4).tolist() == [0.0, 0.0, 0.0, 0.0]
    bad = np.array([1.0, np.nan, 0.0, np.inf], dtype=np.float32)  # float32 and (dim,), but not finite
    with pytest.raises(InvalidRequestError) as raised:
        query_vector(bad, 4)
    assert str(raised.value) == f"query_vector holds NaN at index 1 (2 values are not finite); {FIX}"


def test_a_torch_tensor_that_requires_grad_is_read_by_value() -> None:
    torch = pytest.importorskip("torch", reason="torch comes with the default embedder's extra")
    given = torch.tensor([3.0, 0.0, -4.0, 0.0], requires_grad=True)  # numpy() on it raised torch's RuntimeError
    assert query_vector(given, 4).tolist() == [0.6000000238418579, 0.0, -0.800000011920929, 0.0]
    assert given.requires_grad and given.tolist() == [3.0, 0.0, -4.0, 0.0]  # the caller's tensor is untouched


@pytest.mark.parametrize("scale", [1e19, 1e-30, 3e38])
def test_a_query_vector_of_huge_or_tiny_entries_is_scaled_like_any_other(scale):
    """A fresh user's finding: np.full(64, 1e19) overflowed the float32 norm (a numpy RuntimeWarning) and 1e-30
    underflowed it to 0, and either way the dense engine was dropped without a word."""
    from hybrid_memory.embedders import l2_normalize

    with HybridMemory(embedder=HashingEmbedder(8)) as memory:
        memory.add(
            [{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(["postgres pool", "redis cache", "kafka lag"])]
        )
        direction = np.full(8, 1.0, dtype=np.float32)
        expected = memory.search("postgres pool", top_k=3, query_vector=direction)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = memory.search("postgres pool", top_k=3, query_vector=direction * np.float32(scale))
        assert [(r.chunk_id, r.dense_rank, r.dense_score) for r in got.results] == [
            (r.chunk_id, r.dense_rank, r.dense_score) for r in expected.results
        ]
        assert got.effective_weights == expected.effective_weights and got.effective_weights["dense"] > 0
    assert l2_normalize(np.array([[scale, 0.0]], dtype=np.float32)).tolist() == [[1.0, 0.0]]
