"""Issue 35, class 6 on every backend: the filter limits (``$in`` / ``$nin`` values, depth, field tests), the
chunk text size, ``top_k`` and the paging bounds are checked by the same validation on the Qdrant backends as on
the embedded one (before any request reaches Qdrant), on every read path: search, count, page_chunks,
iter_chunks, and through a scoped view."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, InvalidFilterError, InvalidRequestError, limits

from tests.backends.test_backends import ENGINES, open_memory

IN_MESSAGE = (
    "metadata filter has more than MAX_IN_VALUES (10,000, hybrid_memory.limits) values in its $in/$nin "
    "lists together; tag the chunks with a shared metadata value and filter on it, split the search, or "
    "raise hybrid_memory.limits.MAX_IN_VALUES"
)


@pytest.fixture(params=ENGINES)
def memory(request, tmp_path):
    mem = open_memory(request.param, tmp_path, embedder=HashingEmbedder(16))
    mem.add(
        [
            {"chunk_id": "a", "text": "alpha note", "metadata": {"k": 3}},
            {"chunk_id": "b", "text": "beta note", "metadata": {"k": 4}},
        ]
    )
    yield mem
    mem.close()


def _paths(mem):
    view = mem.scoped(user_id="u1")
    return {
        "search": lambda f: mem.search("note", metadata_filter=f),
        "count": lambda f: mem.count(f),
        "page_chunks": lambda f: mem.page_chunks(f),
        "iter_chunks": lambda f: list(mem.iter_chunks(f)),
        "scoped search": lambda f: view.search("note", metadata_filter=f),
        "scoped count": lambda f: view.count(f),
    }


def test_the_in_cap_applies_on_every_read_path_and_can_be_raised(memory, monkeypatch):
    at_limit = {"k": {"$in": [3, *range(10, 10_009)]}}  # 10,000 values: accepted
    assert [r.chunk_id for r in memory.search("note", metadata_filter=at_limit).results] == ["a"]
    assert memory.count(at_limit) == 1
    over = {"k": {"$in": list(range(10_001))}}
    together = {"$or": [{"k": {"$in": list(range(5_001))}}, {"j": {"$nin": list(range(5_001))}}]}
    for name, call in _paths(memory).items():
        for flt in (over, together):
            with pytest.raises(InvalidFilterError) as err:
                call(flt)
            assert str(err.value) == IN_MESSAGE, name
    monkeypatch.setattr(limits, "MAX_IN_VALUES", 20_000)
    assert memory.count({"k": {"$in": list(range(20_000))}}) == 2
    assert [r.chunk_id for r in memory.search("alpha", metadata_filter=over).results][0] == "a"


def test_depth_and_field_test_limits_apply_on_every_read_path(memory):
    deep = {"k": 3}
    for _ in range(33):
        deep = {"$not": deep}
    wide = {"$or": [{"k": i} for i in range(257)]}
    for call in _paths(memory).values():
        with pytest.raises(InvalidFilterError, match="deeper than 32 levels"):
            call(deep)
        with pytest.raises(InvalidFilterError, match="more than 256 field tests"):
            call(wide)
    assert memory.count({"$or": [{"k": i} for i in range(256)]}) == 2  # at the limit: accepted, answered


def test_text_top_k_and_page_limits_apply(memory, monkeypatch):
    monkeypatch.setattr(limits, "MAX_CHUNK_TEXT_CHARS", 10)
    for write in (memory.add, memory.upsert):
        with pytest.raises(InvalidRequestError, match=r"text has 11 characters, more than MAX_CHUNK_TEXT_CHARS \(10"):
            write([{"chunk_id": "c", "text": "x" * 11}])
    assert memory.count() == 2  # nothing written
    with pytest.raises(InvalidRequestError, match="top_k"):
        memory.search("note", top_k=limits.MAX_TOP_K + 1)
    with pytest.raises(InvalidRequestError, match="MAX_PAGE_POSITION"):
        memory.page_chunks(after=2**63)
    with pytest.raises(InvalidRequestError, match="MAX_PAGE_SIZE"):
        memory.page_chunks(limit=limits.MAX_PAGE_SIZE + 1)
