"""Event time: validity intervals, as_of pre-filter, supersede, and the bounded additive recency prior."""

from __future__ import annotations

import time

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, HybridMemoryError, InvalidRequestError
from hybrid_memory.temporal import RecencyPrior, to_timestamp

DAY = 86400.0
JAN, JUN = to_timestamp("2024-01-01"), to_timestamp("2024-06-01")


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    yield mem
    mem.close()


def test_timestamps_from_numbers_datetimes_and_iso_strings():
    assert to_timestamp("2024-01-01") == 1704067200.0
    assert to_timestamp("2024-01-01T01:00:00+01:00") == 1704067200.0
    assert to_timestamp("2024-01-01T00:00:00Z") == 1704067200.0
    assert to_timestamp(5) == 5.0 and to_timestamp(None) is None
    with pytest.raises(ValueError, match="ISO 8601"):
        to_timestamp("next tuesday", "valid_from")
    with pytest.raises(ValueError, match="bool"):
        to_timestamp(True)


def test_chunk_intervals_are_validated(memory):
    with pytest.raises(InvalidRequestError, match="valid_to must be after valid_from"):
        memory.add([{"chunk_id": "x", "text": "t", "valid_from": JUN, "valid_to": JAN}])
    with pytest.raises(InvalidRequestError, match="valid_from"):
        memory.add([{"chunk_id": "x", "text": "t", "valid_from": "soon"}])
    with pytest.raises(InvalidRequestError, match="as_of"):
        memory.search("t", as_of="whenever")


def test_person_moves_project(memory):
    """The issue's example: at as_of now the later fact, between the two notes the earlier one."""
    memory.add([{"chunk_id": "n1", "text": "Dana works on project Apollo", "valid_from": JAN}])
    memory.add([{"chunk_id": "other", "text": "Erik works on the billing project"}])
    new_id = memory.supersede(["n1"], {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": JUN})
    assert new_id == "n2"
    old = memory.get(["n1"])[0]
    assert (old.valid_from, old.valid_to, old.superseded_by) == (JAN, JUN, "n2")
    query = "which project does Dana work on"
    now = [r.chunk_id for r in memory.search(query, as_of=time.time(), top_k=3).results]
    assert now[0] == "n2" and "n1" not in now
    between = [r.chunk_id for r in memory.search(query, as_of="2024-03-01", top_k=3).results]
    assert between[0] == "n1" and "n2" not in between
    before = [r.chunk_id for r in memory.search(query, as_of="2023-06-01", top_k=3).results]
    assert before == ["other"]  # no Dana fact held yet; the unbounded fact always holds
    # the interval is half-open: at the instant of the move only the new fact holds
    assert [r.chunk_id for r in memory.search("Dana project", as_of=JUN, top_k=3).results][0] == "n2"
    assert memory.count(as_of=JUN) == 2 and memory.count(as_of=JUN - 1) == 2 and memory.count() == 3
    assert [c.chunk_id for c in memory.iter_chunks(as_of="2024-03-01")] == ["n1", "other"]
    # history is kept: without as_of both facts are found
    assert {"n1", "n2"} <= {r.chunk_id for r in memory.search(query, top_k=3).results}


def test_supersede_defaults_to_now_and_refuses_bad_input(memory):
    memory.add([{"chunk_id": "a", "text": "pager rotation is weekly"}])
    before = time.time()
    memory.supersede("a", {"chunk_id": "b", "text": "pager rotation is daily"})
    after = time.time()
    a, b = memory.get(["a", "b"])
    assert before <= b.valid_from <= after and a.valid_to == b.valid_from and a.superseded_by == "b"
    with pytest.raises(InvalidRequestError, match="unknown chunk ids \\['nope'\\]"):
        memory.supersede(["nope"], {"chunk_id": "c", "text": "x"})
    with pytest.raises(InvalidRequestError, match="cannot supersede itself"):
        memory.supersede(["b"], {"chunk_id": "b", "text": "x"})
    with pytest.raises(InvalidRequestError, match="later valid_from"):
        memory.supersede(["b"], {"chunk_id": "c", "text": "x", "valid_from": JAN})
    assert memory.get(["c"]) == [] and memory.count() == 2


def test_supersede_persists(tmp_path):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": "n1", "text": "Dana works on project Apollo", "valid_from": JAN}])
        memory.supersede(["n1"], {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": JUN})
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(32)) as memory:
        assert memory.get(["n1"])[0].superseded_by == "n2"
        assert [r.chunk_id for r in memory.search("Dana project", as_of="2024-02-01").results] == ["n1"]


def test_recency_prior_is_off_by_default_and_reorders_only_near_ties(memory):
    as_of = JUN
    memory.add(
        [
            {"chunk_id": "a", "text": "kafka consumer lag alert", "valid_from": as_of - 365 * DAY},
            {"chunk_id": "b", "text": "kafka consumer lag alert", "valid_from": as_of},
        ]
    )
    plain = memory.search("kafka lag", as_of=as_of, sparse_weight=1.0, dense_weight=0.0)
    assert [r.chunk_id for r in plain.results] == ["a", "b"]  # equal BM25 scores: ties by chunk_id
    prior = memory.search("kafka lag", as_of=as_of, dense_weight=0.0, recency=RecencyPrior(weight=0.1))
    # b: 1/62 + 0.1 * (1/61) * 2^0 = 0.017768 > a: 1/61 + 0.1 * (1/61) * 2^(-365/30) = 0.016393
    assert [r.chunk_id for r in prior.results] == ["b", "a"]
    assert [r.rrf_score for r in prior.results] == pytest.approx([1 / 62, 1 / 61])  # the fusion's own score


def test_recency_prior_never_moves_a_fact_past_one_better_by_more_than_its_bound(memory):
    """The guarantee: if fused(x) - fused(y) > weight * top, x stays above y, whatever their ages."""
    as_of = JUN
    memory.add([{"chunk_id": "old", "text": "ERR_CONN_RESET on db-prod-3 postgres", "valid_from": as_of - 900 * DAY}])
    memory.add(
        [{"chunk_id": f"new{i}", "text": f"postgres note {i} db " * (i + 1), "valid_from": as_of} for i in range(9)]
    )
    query, prior = "ERR_CONN_RESET postgres db-prod-3", RecencyPrior(weight=0.05)
    # RRF, whose fused scores are rrf_score (the adaptive default's fused score is SearchResult.score)
    plain = memory.search(query, as_of=as_of, top_k=10, fusion="rrf").results
    fused = {r.chunk_id: r.rrf_score for r in plain}
    top = max(fused.values())
    ranked = [r.chunk_id for r in memory.search(query, as_of=as_of, top_k=10, recency=prior, fusion="rrf").results]
    assert plain[0].chunk_id == "old" and sorted(ranked) == sorted(fused)
    checked = 0
    for x in fused:
        for y in fused:
            if fused[x] - fused[y] > prior.weight * top:
                assert ranked.index(x) < ranked.index(y)
                checked += 1
    assert checked > 0
    assert ranked[0] != "old"  # but near-ties (RRF's top ranks are within 5 % of each other) do move


def test_recency_prior_arguments_are_checked(memory):
    # the library's error (a fresh user's finding: a plain ValueError, outside HybridMemoryError), still a ValueError
    for bad, field in (
        (dict(weight=2.0), "weight"),
        (dict(weight=float("nan")), "weight"),
        (dict(weight=-1), "weight"),
        (dict(half_life_days=0), "half_life_days"),
        (dict(half_life_days=float("nan")), "half_life_days"),
    ):
        with pytest.raises(InvalidRequestError, match=f"RecencyPrior.{field} must be") as raised:
            RecencyPrior(**bad)
        assert isinstance(raised.value, HybridMemoryError) and isinstance(raised.value, ValueError)
    with pytest.raises(InvalidRequestError, match="recency"):
        memory.search("x", recency="yes")
    assert RecencyPrior().bonus(0.5, 30 * DAY) == pytest.approx(0.05 * 0.5 * 0.5)


def test_recency_prior_with_negative_fused_scores_uses_the_spread():
    """z-score fusions give negative scores: the scale is the list's spread, so the bonus stays >= 0."""
    from dataclasses import dataclass

    from hybrid_memory.temporal import apply_recency_prior

    @dataclass(frozen=True)
    class Hit:
        key: str
        score: float

    hits = [Hit("old", -0.5), Hit("new", -0.56), Hit("other", -2.0)]
    now = 100 * DAY
    out = apply_recency_prior(hits, {"old": now - 90 * DAY, "new": now}, RecencyPrior(weight=0.05), now=now, top_k=3)
    # scale = -0.5 - (-2.0) = 1.5; new: -0.56 + 0.05 * 1.5 = -0.485; old: -0.5 + 0.075 * 2^-3 = -0.490625
    assert [h.key for h in out] == ["new", "old", "other"]
    assert out[0].score == pytest.approx(-0.485)
    assert out[1].score == pytest.approx(-0.490625)
    assert out[2].score == -2.0


def test_a_superseded_fact_is_not_superseded_again_and_history_stays(memory):
    memory.add([{"chunk_id": "n1", "text": "Dana works on project Apollo", "valid_from": JAN}])
    memory.supersede(["n1"], {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": JUN})
    with pytest.raises(InvalidRequestError, match="already superseded by 'n2'; supersede 'n2' instead"):
        memory.supersede(["n1"], {"chunk_id": "n3", "text": "Dana moved to project Hera", "valid_from": JUN + DAY})
    assert memory.get(["n3"]) == []
    n1 = memory.get(["n1"])[0]
    assert (n1.valid_to, n1.superseded_by) == (JUN, "n2")
    memory.upsert([{"chunk_id": "n1", "text": "Dana works on project Apollo (typo fixed)"}])  # an edit of history
    n1 = memory.get(["n1"])[0]
    assert (n1.valid_from, n1.valid_to, n1.superseded_by) == (JAN, JUN, "n2")  # the closed fact stays closed


def test_the_superseding_fact_inherits_the_owner_of_the_facts_it_replaces(memory):
    memory.add([{"chunk_id": "a2", "text": "alice lives in Lyon", "valid_from": JAN, "user_id": "alice"}])
    memory.supersede(["a2"], {"chunk_id": "a3", "text": "alice moved to Porto", "valid_from": JUN})
    assert [c.user_id for c in memory.get(["a3"])] == ["alice"]
    now = memory.scoped(user_id="alice").search("alice moved", top_k=1, as_of=JUN + DAY)
    assert [r.chunk_id for r in now.results] == ["a3"]
