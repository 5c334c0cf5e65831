"""Duplicates on write: exact and near, per scope, with the keep / skip / merge policies."""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError
from hybrid_memory.dedup import DedupPolicy, token_overlap


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    mem.add([{"chunk_id": "orig", "text": "User prefers dark mode in the editor", "source": "chat-1"}])
    yield mem
    mem.close()


def test_default_policy_keeps_exact_duplicates_and_reports_them(memory):
    assert memory.dedup == DedupPolicy("keep", near=False)
    assert memory.add([{"chunk_id": "again", "text": "User prefers dark mode in the editor"}]) == ["again"]
    assert memory.count() == 2
    result = memory.write([{"chunk_id": "third", "text": "User prefers dark mode in the editor"}])
    (decision,) = result.decisions
    assert (decision.action, decision.stored_id, decision.duplicate_of, decision.kind) == (
        "kept",
        "third",
        "orig",
        "exact",
    )


def test_skip_returns_the_stored_id_and_writes_nothing(memory):
    ids = memory.add(
        [
            {"chunk_id": "dup", "text": "User prefers dark mode in the editor"},
            {"chunk_id": "fresh", "text": "User works in Berlin"},
            {"chunk_id": "fresh2", "text": "User works in Berlin"},
        ],
        dedup="skip",
    )
    assert ids == ["orig", "fresh", "fresh"]
    assert sorted(memory.chunk_hashes()) == ["fresh", "orig"]
    assert memory.search("dark mode", top_k=5).total_retrieved == 2


def test_merge_records_ids_and_sources_on_the_kept_chunk(tmp_path):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        memory.add([{"chunk_id": "orig", "text": "User prefers dark mode in the editor", "source": "chat-1"}])
        result = memory.write(
            [
                {"chunk_id": "m1", "text": "User prefers dark mode in the editor", "source": "chat-2"},
                {"chunk_id": "m2", "text": "user prefers DARK mode in the editor!", "source": "chat-3"},
            ],
            dedup="merge",
        )
        assert [(d.action, d.kind, d.stored_id) for d in result.decisions] == [
            ("merged", "exact", "orig"),
            ("merged", "near", "orig"),
        ]
        assert result.decisions[1].overlap == 1.0 and result.decisions[1].cosine == pytest.approx(1.0)
    with HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        kept = memory.get(["orig"])[0]
        assert (kept.merged_ids, kept.merged_sources, kept.source) == (["m1", "m2"], ["chat-2", "chat-3"], "chat-1")
        assert memory.count() == 1


def test_duplicates_are_per_scope(memory):
    same = "User prefers dark mode in the editor"
    assert memory.scoped(user_id="u1").add([{"chunk_id": "u1", "text": same}], dedup="skip") == ["u1"]
    assert memory.scoped(user_id="u2").add([{"chunk_id": "u2", "text": same}], dedup="skip") == ["u2"]
    assert memory.scoped(user_id="u1").add([{"chunk_id": "u1b", "text": same}], dedup="skip") == ["u1"]
    assert memory.count() == 3


def test_near_needs_both_cosine_and_token_overlap(memory):
    same_vector = np.ones((1, 64), dtype=np.float32)
    memory.upsert([{"chunk_id": "orig", "text": "User prefers dark mode in the editor"}], vectors=same_vector)
    # cosine 1.0 (the same vector), but different words: a different fact, written
    result = memory.write(
        [{"chunk_id": "other", "text": "Deploys happen on Fridays at noon"}], vectors=same_vector, dedup="skip"
    )
    assert result.decisions[0].action == "written"
    # same words but far apart in vector space: also written
    far = np.zeros((1, 64), dtype=np.float32)
    far[0, 0] = 1.0
    result = memory.write(
        [{"chunk_id": "o2", "text": "the user prefers dark mode in editor"}], vectors=far, dedup="skip"
    )
    assert result.decisions[0].action == "written"
    assert memory.count() == 3


def test_an_edit_of_a_stored_id_is_never_a_duplicate(memory):
    memory.add([{"chunk_id": "b", "text": "something else"}])
    result = memory.write([{"chunk_id": "b", "text": "User prefers dark mode in the editor"}], dedup="skip")
    assert result.decisions[0].action == "written" and memory.get(["b"])[0].text.startswith("User prefers")


def test_token_overlap_and_policy_validation():
    assert token_overlap(["alice", "move", "project", "apollo"], ["alice", "move", "project", "zeus"]) == 3 / 5
    assert token_overlap([], []) == 1.0
    with pytest.raises(InvalidRequestError, match="dedup action"):
        DedupPolicy("drop")
    with pytest.raises(InvalidRequestError, match="cosine_threshold"):
        DedupPolicy("skip", cosine_threshold=1.5)
    with pytest.raises(InvalidRequestError, match="dedup must be"):
        HybridMemory(embedder=HashingEmbedder(8), dedup=3)


def test_near_duplicates_are_looked_for_in_exactly_the_same_scope(memory):
    near = "user prefers DARK mode in the editor!"  # tokens equal to the unscoped "orig"
    result = memory.scoped(user_id="u1").write([{"chunk_id": "u1", "text": near}], dedup="skip")
    assert result.decisions[0].action == "written"  # orig is unscoped: another scope
    result = memory.scoped(user_id="u1").write([{"chunk_id": "u1b", "text": near + "!"}], dedup="skip")
    assert (result.decisions[0].action, result.decisions[0].duplicate_of) == ("skipped", "u1")
    result = memory.write([{"chunk_id": "top", "text": near}], dedup="skip")
    assert (result.decisions[0].action, result.decisions[0].kind, result.decisions[0].duplicate_of) == (
        "skipped",
        "near",
        "orig",
    )
