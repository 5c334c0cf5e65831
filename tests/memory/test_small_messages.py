"""Smaller messages fresh users met: the empty-interval error (its 'chunk #0:' said twice, Unix seconds only), the
scope-field errors (the four fields not listed), and a cross-kind range comparison (0 results by design)."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.cli.common import parse_scope

FIELDS = "the scope fields are tenant, user_id, agent_id, session_id (metadata keys are filtered with metadata_filter instead)"


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(8))
    yield mem
    mem.close()


def test_an_empty_interval_names_the_chunk_once_and_shows_iso_utc(memory):
    with pytest.raises(InvalidRequestError) as raised:
        memory.add(
            [
                {"chunk_id": "ok", "text": "x"},
                {"chunk_id": "n1", "text": "Dana moved", "valid_from": "2024-06-01", "valid_to": 1704112200.5},
            ]
        )
    assert str(raised.value) == (
        "invalid chunk #1: valid_to must be after valid_from, got valid_from 2024-06-01T00:00:00Z (Unix 1717200000) "
        "and valid_to 2024-01-01T12:30:00.500000Z (Unix 1704112200.5): the interval [valid_from, valid_to) would be "
        "empty; give a later valid_to, or none (the fact still holds)"
    )
    assert memory.count() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.scoped(userid="alice"),
        lambda m: m.scoped({"userid": "alice"}),
        lambda m: m.search("x", scope={"userid": "alice"}),
        lambda m: parse_scope(["userid=alice"]),
    ],
)
def test_an_unknown_scope_field_lists_the_four(memory, call):
    with pytest.raises(InvalidRequestError) as raised:
        call(memory)
    assert str(raised.value) == f"invalid scope: 'userid' is not a scope field (did you mean 'user_id'?); {FIELDS}"


def test_a_field_not_close_to_any_gets_no_guess(memory):
    with pytest.raises(InvalidRequestError) as raised:
        memory.scoped(team="sre")
    assert str(raised.value) == f"invalid scope: 'team' is not a scope field; {FIELDS}"


@pytest.mark.parametrize("call", [lambda m: m.scoped("alice"), lambda m: m.scoped(tenant="acme").scoped("alice")])
def test_a_scope_that_is_not_a_mapping_lists_the_fields(memory, call):
    with pytest.raises(InvalidRequestError) as raised:
        call(memory)
    assert str(raised.value) == "scope must be a Scope or a mapping of tenant, user_id, agent_id, session_id, got str"


def test_a_range_across_kinds_matches_nothing_and_stays_so(memory):
    """Type-strict by design (filters.py, README): a string bound never orders an integer; not an error."""
    memory.add([{"chunk_id": f"c{n}", "text": f"note {n}", "metadata": {"n": n}} for n in range(3)])
    assert memory.search("note", top_k=10, metadata_filter={"n": {"$gt": "abc"}}).total_retrieved == 0
    memory.add([{"chunk_id": "s", "text": "note s", "metadata": {"n": "b"}}])  # a string value: "b" > "abc"
    assert [r.chunk_id for r in memory.search("note", top_k=10, metadata_filter={"n": {"$gt": "abc"}}).results] == ["s"]
    assert memory.count({"n": {"$gt": "abc"}}) == 1 and memory.count({"n": {"$gt": 0}}) == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: m.add([{"chunk_id": "a", "text": "x", "userid": "u"}]),
            "invalid chunk #0: userid: Extra inputs are not permitted (got 'u') (did you mean 'user_id'?); the fields are "
            "chunk_id, text, source, metadata, tenant, user_id, agent_id, session_id, valid_from, valid_to; other keys go in "
            "metadata",
        ),
        (
            lambda m: m.add([{"chunk_id": "a", "text": "x", "service": "billing"}]),
            "invalid chunk #0: service: Extra inputs are not permitted (got 'billing'); the fields are chunk_id, text, source, "
            "metadata, tenant, user_id, agent_id, session_id, valid_from, valid_to; other keys go in metadata",
        ),
        (
            lambda m: m.search({"search_text": "x", "filter": {"a": 1}}),
            "invalid search request: filter: Extra inputs are not permitted (got {'a': 1}) (did you mean 'metadata_filter'?); "
            "the fields are query_id, search_text, top_k, hybrid_params, metadata_filter, as_of",
        ),
        (
            lambda m: m.search({"search_text": "x", "hybrid_params": {"fusin": "rrf"}}),
            "invalid search request: hybrid_params.fusin: Extra inputs are not permitted (got 'rrf') (did you mean "
            "'fusion'?); the fields are dense_weight, sparse_weight, rrf_k_constant, fusion",
        ),
    ],
)
def test_an_unknown_chunk_or_request_field_lists_the_fields(memory, call, message):
    with pytest.raises(InvalidRequestError) as raised:
        call(memory)
    assert str(raised.value) == message
    assert memory.count() == 0
