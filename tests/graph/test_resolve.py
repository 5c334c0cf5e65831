import json

import pytest
from hybrid_memory import HybridMemory, InvalidRequestError
from hybrid_memory.graph import GraphIndex
from hybrid_memory.graph.resolve import AUTO_MERGE_THRESHOLD, alias_candidates

# One person by full name, by surname alone and with a title, in three notes; all three name checkout-service.
CHEN = {
    "n1": "Alice Chen deployed checkout-service at noon.",
    "n2": "Chen rolled back checkout-service an hour later.",
    "n3": "Dr. Chen approved the rollback of checkout-service.",
}


def _memory(embedder, notes):
    mem = HybridMemory(None, embedder=embedder)
    mem.add([{"chunk_id": cid, "text": text} for cid, text in notes.items()])
    return mem


def test_exact_duplicates_across_chunks_are_one_node(embedder):
    notes = {"a": "Café API calls auth-api.", "b": "CAFÉ API calls auth-api again.", "c": '"Café  API" is slow.'}
    with _memory(embedder, notes) as mem:
        index = GraphIndex.build(mem, save=False)
    assert index.graph.nodes["café api".replace("é", "e")]["chunk_ids"] == ["a", "b", "c"]
    assert index.graph.nodes["cafe api"]["aliases"] == ["CAFÉ API", "Café API"]
    assert sorted(index.graph.nodes) == ["auth-api", "cafe api"]


def test_surname_and_title_forms_merge_into_the_full_name_with_evidence(embedder):
    with _memory(embedder, CHEN) as mem:
        index = GraphIndex.build(mem, save=False)
    assert sorted(index.graph.nodes) == ["alice chen", "checkout-service"]
    node = index.graph.nodes["alice chen"]
    assert node["name"] == "Alice Chen"
    assert node["aliases"] == ["Alice Chen", "Chen", "Dr. Chen"]
    assert node["chunk_ids"] == ["n1", "n2", "n3"]
    merges = sorted(index.merges.values(), key=lambda m: m.alias)
    assert [(m.alias, m.canonical, m.source) for m in merges] == [
        ("chen", "alice chen", "auto"),
        ("dr. chen", "alice chen", "auto"),
    ]
    first = merges[0].evidence
    assert (first.kind, first.shared_chunks, first.shared_neighbours) == ("surname", [], ["checkout-service"])
    assert (first.chunk_overlap, first.neighbour_jaccard, first.score) == (0.0, 1.0, 1.0)
    assert merges[1].evidence.kind == "surname"  # once Chen is Alice Chen, Dr. Chen has one candidate left


def test_a_surname_shared_by_two_people_is_reported_not_merged(embedder):
    notes = {**CHEN, "n4": "Bob Chen deployed checkout-service too."}
    with _memory(embedder, notes) as mem:
        index = GraphIndex.build(mem, save=False)
    assert index.merges == {}
    assert sorted(index.graph.nodes) == ["alice chen", "bob chen", "checkout-service", "chen", "dr. chen"]
    got = [(c.alias, c.canonical, c.kind, c.ambiguous, c.auto, c.score) for c in index.alias_candidates()]
    assert got == [
        ("chen", "alice chen", "surname", True, False, 1.0),
        ("chen", "bob chen", "surname", True, False, 1.0),
        ("dr. chen", "alice chen", "surname", True, False, 1.0),
        ("dr. chen", "bob chen", "surname", True, False, 1.0),
        ("dr. chen", "chen", "title", True, False, 1.0),
    ]


def test_without_evidence_a_candidate_waits_for_the_caller_and_a_merge_can_be_undone(embedder):
    notes = {"p": "Anna Smith owns billing-service.", "q": "Smith reviewed ledger-service."}
    with _memory(embedder, notes) as mem:
        index = GraphIndex.build(mem, save=False)
        (candidate,) = index.alias_candidates()
        assert (candidate.alias, candidate.canonical, candidate.score, candidate.auto) == (
            "smith",
            "anna smith",
            0.0,
            False,
        )
        assert "smith" in index.graph
        merge = index.merge_entities("Smith", "Anna Smith")
        assert (merge.alias, merge.canonical, merge.source) == ("smith", "anna smith", "caller")
        assert merge.evidence == candidate
        assert "smith" not in index.graph
        assert index.graph.nodes["anna smith"]["chunk_ids"] == ["p", "q"]
        assert sorted(index.graph.successors("anna smith")) == ["billing-service", "ledger-service"]
        assert sorted(index.stale_communities())  # the merged community needs a new report
        index.refresh(mem, save=False)  # a refresh keeps the merge
        assert "smith" not in index.graph
        undone = index.unmerge_entities(merge.token)
        assert undone == merge and index.merges == {}
        assert index.graph.nodes["smith"]["chunk_ids"] == ["q"]
        assert index.graph.nodes["anna smith"]["chunk_ids"] == ["p"]


def test_an_undone_automatic_merge_is_not_redone(embedder):
    with _memory(embedder, CHEN) as mem:
        index = GraphIndex.build(mem, save=False)
        token = next(t for t, m in index.merges.items() if m.alias == "dr. chen")
        index.unmerge_entities(token)
        assert ("dr. chen", "alice chen") in index.rejected_merges
        mem.upsert([{"chunk_id": "n5", "text": "Dr. Chen paged checkout-service owners."}])
        index.refresh(mem, save=False)
        assert "dr. chen" in index.graph
        assert [m.alias for m in index.merges.values()] == ["chen"]


def test_acronym_to_its_expansion(embedder):
    notes = {
        "x": "FEMA issued a warning to coastal-api.",
        "y": "The Federal Emergency Management Agency coordinates coastal-api.",
    }
    with _memory(embedder, notes) as mem:
        index = GraphIndex.build(mem, save=False)
    assert [(m.alias, m.canonical, m.evidence.kind) for m in index.merges.values()] == [
        ("fema", "federal emergency management agency", "acronym")
    ]
    assert index.graph.nodes["federal emergency management agency"]["aliases"] == [
        "FEMA",
        "Federal Emergency Management Agency",
    ]


def test_merges_are_saved_and_reopened(tmp_path, embedder):
    with HybridMemory(tmp_path / "m", embedder=embedder) as mem:
        mem.add([{"chunk_id": cid, "text": text} for cid, text in CHEN.items()])
        built = GraphIndex.build(mem)
        saved = json.loads((tmp_path / "m" / "graph" / "merges.json").read_text())
        assert sorted(m["alias"] for m in saved["merges"]) == ["chen", "dr. chen"]
        reopened = GraphIndex.open(mem)
        assert reopened.merges == built.merges
        assert sorted(reopened.graph.nodes) == ["alice chen", "checkout-service"]


def test_threshold_none_merges_nothing_and_bad_requests_are_refused(embedder):
    with _memory(embedder, CHEN) as mem:
        index = GraphIndex.build(mem, save=False, auto_merge_threshold=None)
        assert index.merges == {} and "chen" in index.graph
        assert all(not c.auto for c in index.alias_candidates())
        with pytest.raises(InvalidRequestError, match="is not an entity of this graph"):
            index.merge_entities("Nobody", "Alice Chen")
        with pytest.raises(InvalidRequestError, match="same entity"):
            index.merge_entities("Alice Chen", "alice chen")
        with pytest.raises(InvalidRequestError, match="no merge 'm-0' in force"):
            index.unmerge_entities("m-0")
    with pytest.raises(ValueError, match="auto_merge_threshold must be a number in"):
        GraphIndex(auto_merge_threshold=1.5)
    assert AUTO_MERGE_THRESHOLD == 0.5


def test_alias_candidates_is_a_pure_function_of_the_graph():
    import networkx as nx

    graph = nx.MultiDiGraph()
    for key, name in (
        ("fema", "FEMA"),
        ("federal emergency management agency", "Federal Emergency Management Agency"),
        ("billing-service", "billing-service"),
    ):
        graph.add_node(
            key, name=name, types=["SERVICE"] if key == "billing-service" else ["PROPER_NOUN"], chunk_ids=["c1"]
        )
    graph.add_edge("fema", "billing-service", key="calls", weight=1.0, chunk_ids=["c1"])
    (candidate,) = alias_candidates(graph)
    assert (candidate.alias, candidate.kind, candidate.shared_chunks, candidate.chunk_overlap) == (
        "fema",
        "acronym",
        ["c1"],
        1.0,
    )
    assert candidate.neighbour_jaccard == 0.0 and candidate.auto
