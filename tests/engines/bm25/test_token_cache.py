"""TokenCache: a dict of token arrays over a saved base, exported back with numpy passes."""

import numpy as np
import pytest
from hybrid_memory.engines.bm25.token_cache import TokenCache


def base():
    # doc 7: [1, 2], doc 3: [], doc 5: [4, 4, 9]  (saved order 7, 3, 5)
    return TokenCache(np.array([7, 3, 5]), np.array([2, 0, 3]), np.array([1, 2, 4, 4, 9], dtype=np.int32))


def test_lookups_are_views_of_the_base_in_saved_order():
    cache = base()
    assert len(cache) == 3 and list(cache) == [7, 3, 5]
    assert cache[7].tolist() == [1, 2] and cache[3].tolist() == [] and cache[5].tolist() == [4, 4, 9]
    assert 5 in cache and np.int64(3) in cache and 4 not in cache and "x" not in cache
    with pytest.raises(KeyError):
        cache[4]


def test_writes_replace_remove_and_add_and_export_gives_the_same_mapping():
    cache = base()
    cache[5] = np.array([8], dtype=np.int32)  # replaces a base document
    del cache[7]
    cache[11] = np.array([6, 6], dtype=np.int32)
    assert cache.pop(3).tolist() == [] and cache.pop(3, None) is None
    assert len(cache) == 2 and list(cache) == [5, 11] and cache[5].tolist() == [8]
    ids, lengths, data = cache.export()
    assert ids.tolist() == [5, 11] and lengths.tolist() == [1, 2] and data.tolist() == [8, 6, 6]
    again = TokenCache(ids, lengths, data)
    assert {d: again[d].tolist() for d in again} == {5: [8], 11: [6, 6]}


def test_export_keeps_the_base_documents_left_after_removals():
    cache = base()
    del cache[3]
    del cache[7]
    ids, lengths, data = cache.export()
    assert ids.tolist() == [5] and lengths.tolist() == [3] and data.tolist() == [4, 4, 9]
    cache = base()
    del cache[5]
    assert [a.tolist() for a in cache.export()] == [[7, 3], [2, 0], [1, 2]]


def test_inconsistent_arrays_are_refused():
    with pytest.raises(ValueError, match="lengths"):
        TokenCache(np.array([1, 2]), np.array([1]), np.array([0], dtype=np.int32))
    with pytest.raises(ValueError, match="distinct"):
        TokenCache(np.array([1, 1]), np.array([1, 0]), np.array([0], dtype=np.int32))
