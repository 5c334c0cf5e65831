"""The write rules as a plan, without any storage: which positions get vectors, what is dropped, what closes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hybrid_memory import Chunk, DuplicateChunkError, InvalidRequestError
from hybrid_memory._exceptions import ScopeError
from hybrid_memory.backends.embedded.store import content_hash
from hybrid_memory.dedup import DedupPolicy, covers, dedup_span
from hybrid_memory.memory.write_plan import keep_unstated, plan_supersede, plan_write
from hybrid_memory.scopes import Scope

SYSTEM = {
    "tenant": None,
    "user_id": None,
    "agent_id": None,
    "session_id": None,
    "valid_from": None,
    "valid_to": None,
    "merged": [],
    "superseded_by": None,
}


def embed_rows(texts):
    """One-hot-ish unit vectors: row j = e_(j mod 4), so the plan's vector rows can be checked by position."""
    out = np.zeros((len(texts), 4), np.float32)
    out[np.arange(len(texts)), np.arange(len(texts)) % 4] = 1.0
    return out


def plan(items, stored, **kw):
    args = dict(
        vectors=None,
        replace=True,
        policy=DedupPolicy(),
        scope=None,
        embed=embed_rows,
        find_hashes=lambda digests, scope, excluded: {},
        near_search=lambda: None,
        tokenize=str.split,
    )
    args.update(kw)
    return plan_write(items, stored, **args)


def test_only_new_and_changed_texts_are_embedded():
    items = [
        Chunk(chunk_id="same", text="old text", metadata={"v": 2}),
        Chunk(chunk_id="edit", text="new"),
        Chunk(chunk_id="fresh", text="fresh text"),
    ]
    stored = {"same": (content_hash("old text"), SYSTEM), "edit": (content_hash("before"), SYSTEM)}
    p = plan(items, stored)
    assert p.changed == [1, 2] and p.unchanged == [0] and p.dropped == set()
    assert p.vectors.shape == (2, 4) and p.vectors[0, 0] == 1.0 and p.vectors[1, 1] == 1.0
    assert [d.action for d in p.result().decisions] == ["written", "written", "written"]


def test_exact_duplicate_in_the_same_scope_is_skipped_and_merged():
    items = [Chunk(chunk_id="b", text="disk full on db-1", source="s2")]
    found = lambda digests, scope, excluded: {content_hash("disk full on db-1"): [("a", None, None)]}  # noqa: E731
    skipped = plan(items, {}, policy=DedupPolicy(action="skip"), find_hashes=found)
    assert skipped.changed == [] and skipped.dropped == {0} and skipped.vectors.shape == (0, 4)
    decision = skipped.result().decisions[0]
    assert (decision.chunk_id, decision.action, decision.stored_id, decision.duplicate_of) == ("b", "skipped", "a", "a")
    merged = plan(items, {}, policy=DedupPolicy(action="merge"), find_hashes=found)
    assert merged.merges == {"a": [["b", "s2"]]} and merged.merge_targets() == {"a": [["b", "s2"]]}


def test_a_duplicate_is_a_chunk_whose_validity_covers_the_new_one():
    """One stored look-up per scope, its candidates kept where their validity covers each new chunk's span (its
    interval; no valid_from: from the write's time, 99 here, or, for a fact ended before then, its last
    instant); within the call the same rule. c [12, 18) lies in a [10, 20); d (from 99) in b [30, open);
    e [25, open) runs before b's start and past a's end; f (up to 5) lies in the stored s [0, 8)."""
    calls = []

    def found(digests, scope, excluded):
        calls.append((digests, excluded))
        return {content_hash("x"): [("s", 0.0, 8.0)]}

    items = [
        Chunk(chunk_id="a", text="x", valid_from=10.0, valid_to=20.0),
        Chunk(chunk_id="b", text="x", valid_from=30.0),
        Chunk(chunk_id="c", text="x", valid_from=12.0, valid_to=18.0),
        Chunk(chunk_id="d", text="x"),
        Chunk(chunk_id="e", text="x", valid_from=25.0),
        Chunk(chunk_id="f", text="x", valid_to=5.0),
    ]
    p = plan(items, {}, policy=DedupPolicy(action="skip"), find_hashes=found, now=99.0)
    assert calls == [([content_hash("x")], [])]
    assert [(d.chunk_id, d.action, d.duplicate_of) for d in p.result().decisions] == [
        ("a", "written", None),
        ("b", "written", None),
        ("c", "skipped", "a"),
        ("d", "skipped", "b"),
        ("e", "written", None),
        ("f", "skipped", "s"),
    ]
    assert p.changed == [0, 1, 4] and p.dropped == {2, 3, 5}
    assert dedup_span(None, 5.0, 99.0) == (math.nextafter(5.0, -math.inf), 5.0) and dedup_span(None, 120.0, 99.0) == (
        99.0,
        120.0,
    )
    assert covers((None, 5.0), dedup_span(None, 5.0, 99.0)) and not covers((5.0, None), dedup_span(None, 5.0, 99.0))


def test_ids_the_call_rewrites_are_compared_as_the_call_writes_them():
    """A fresh user's finding: editing a from "Apollo" to "Zeus" while adding b "Apollo" skipped b as a's
    duplicate, so the Apollo fact was gone. The stored lookup leaves the rewritten ids out; their new versions
    are the call's chunks: c "Zeus" duplicates a's new text."""
    excluded_seen = []

    def found(digests, scope, excluded):
        excluded_seen.append(list(excluded))
        return {content_hash("Apollo"): [("a", None, None)]} if "a" not in excluded else {}

    stored = {"a": (content_hash("Apollo"), SYSTEM)}
    items = [Chunk(chunk_id="a", text="Zeus"), Chunk(chunk_id="b", text="Apollo"), Chunk(chunk_id="c", text="Zeus")]
    p = plan(items, stored, policy=DedupPolicy(action="skip"), find_hashes=found, now=99.0)
    assert excluded_seen == [["a"]]  # one look-up per scope
    assert [(d.chunk_id, d.action, d.duplicate_of) for d in p.result().decisions] == [
        ("a", "written", None),
        ("b", "written", None),
        ("c", "skipped", "a"),
    ]


def test_add_refuses_stored_ids_and_a_scope_refuses_foreign_ones():
    stored = {"x": (content_hash("t"), {**SYSTEM, "tenant": "acme"})}
    with pytest.raises(DuplicateChunkError, match=r"chunk ids already stored: \['x'\]"):
        plan([Chunk(chunk_id="x", text="t")], stored, replace=False)
    with pytest.raises(ScopeError, match=r"chunk ids \['x'\] are not available in this scope"):
        plan([Chunk(chunk_id="x", text="t", tenant="globex")], stored, scope=Scope(tenant="globex"))


def test_unstated_scope_and_validity_are_kept_stated_ones_win():
    stored = {**SYSTEM, "tenant": "acme", "valid_to": 50.0}
    kept = keep_unstated(Chunk(chunk_id="x", text="t"), stored)
    assert kept.tenant == "acme" and kept.valid_to == 50.0
    explicit = keep_unstated(Chunk(chunk_id="x", text="t", tenant=None, valid_to=None), stored)
    assert explicit.tenant is None and explicit.valid_to is None


def test_supersede_closes_each_old_fact_at_the_new_start():
    old = {
        "a": {**SYSTEM, "tenant": "acme", "valid_from": 10.0},
        "b": {**SYSTEM, "tenant": "acme", "valid_from": 20.0, "valid_to": 25.0},
    }
    chunk, closes = plan_supersede(["a", "b"], Chunk(chunk_id="c", text="new", valid_from=30.0), old, now=99.0)
    assert chunk.valid_from == 30.0 and chunk.tenant == "acme"  # inherits the one shared scope
    assert closes == [("a", {"valid_to": 30.0, "superseded_by": "c"}), ("b", {"valid_to": 25.0, "superseded_by": "c"})]
    chunk, _ = plan_supersede(["a"], Chunk(chunk_id="c", text="new"), old, now=99.0)
    assert chunk.valid_from == 99.0


def test_supersede_refusals():
    old = {"a": {**SYSTEM, "valid_from": 40.0}, "z": {**SYSTEM, "superseded_by": "y"}}
    with pytest.raises(InvalidRequestError, match=r"unknown chunk ids \['q'\]"):
        plan_supersede(["q"], Chunk(chunk_id="c", text="n"), old, now=1.0)
    with pytest.raises(InvalidRequestError, match="already superseded by 'y'; supersede 'y' instead"):
        plan_supersede(["z"], Chunk(chunk_id="c", text="n"), old, now=1.0)
    with pytest.raises(
        InvalidRequestError,
        match=r"valid from 1970-01-01T00:00:40Z, not before the new fact's "
        r"valid_from 1970-01-01T00:00:30Z; give the new chunk a later",
    ):
        plan_supersede(["a"], Chunk(chunk_id="c", text="n", valid_from=30.0), old, now=1.0)


def test_the_covering_test_is_bounded_per_text_the_open_one_always_tested():
    """CLOSED_SCAN_MAX closed copies of one text are tested, the open-ended one starting first always: a text
    repeated with intervals of its own (log lines) no longer makes every copy test every earlier one."""
    from hybrid_memory.dedup import CLOSED_SCAN_MAX, find_exact

    digest = content_hash("x")
    rows = [(f"s{i}", float(10 * i), float(10 * i + 5)) for i in range(CLOSED_SCAN_MAX + 1)] + [("o", 5000.0, None)]
    stored = lambda digests, scope: {digest: rows}  # noqa: E731
    last = CLOSED_SCAN_MAX * 10.0
    new = [
        (0, "n0", digest, (), (1.0, 2.0), (1.0, 2.0)),
        (1, "n1", digest, (), (last + 1, last + 2), (last + 1, last + 2)),
        (2, "n2", digest, (), (6000.0, None), (6000.0, None)),
    ]
    found = find_exact(new, stored)
    assert {p: m.duplicate_of for p, m in found.items()} == {0: "s0", 2: "o"}  # n1's cover is past the bound: stored
