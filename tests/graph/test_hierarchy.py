import json

import pytest
from hybrid_memory import HybridMemory
from hybrid_memory.graph import GraphIndex, LLMSummarizer

N = 12  # a ring of 12 triangles of services: Leiden pairs triangles at level 0, splits them at level 1


def _ring_chunks(version=""):
    return [
        {
            "chunk_id": f"r{i:02d}",
            "text": f"s{i}a-service, s{i}b-service and s{i}c-service share a pool{version}. "
            f"s{i}c-service calls s{(i + 1) % N}a-service.",
        }
        for i in range(N)
    ]


class TitledReports:
    """Scripted model: report n is titled "T<n>", and remembers which prompts it saw."""

    def __init__(self):
        self.prompts = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return json.dumps({"title": f"T{len(self.prompts)}", "summary": "s", "rating": 5, "findings": []})


@pytest.fixture
def ring_memory(embedder):
    with HybridMemory(None, embedder=embedder) as mem:
        mem.add(_ring_chunks())
        yield mem


def _triangles(community):
    """The ring triangles (s<i>) a community holds; asserts it holds whole triangles only."""
    by_triangle = {}
    for entity in community.entities:
        by_triangle.setdefault(entity[1 : -len("a-service")], set()).add(entity)
    assert all(len(members) == 3 for members in by_triangle.values()), community.entities
    return set(by_triangle)


def test_parents_are_written_from_their_children_reports(ring_memory):
    """Structure, not Leiden's exact partition (which may change with the backend version):
    every community holds whole triangles, level 0 covers the ring once, parents larger than
    max_cluster_size are split into children that partition them, and each parent's prompt holds its
    children's reports, written before it."""
    llm = TitledReports()
    index = GraphIndex.build(
        ring_memory, summarizer=LLMSummarizer(llm, max_context_tokens=100), max_cluster_size=4, save=False
    )
    communities = index.communities
    levels = index.stats()["communities_per_level"]
    assert len(llm.prompts) == sum(levels.values()) == len(communities)  # one call per community
    level0 = [c for c in communities.values() if c.level == 0]
    covered = [t for c in level0 for t in sorted(_triangles(c))]
    assert sorted(covered) == sorted(str(i) for i in range(N))  # every triangle in exactly one community
    parents = [c for c in level0 if c.children]
    assert parents and all(len(c.entities) > 4 for c in parents)
    assert all(not c.children for c in level0 if len(c.entities) <= 4)
    for parent in parents:
        assert sorted(e for cid in parent.children for e in communities[cid].entities) == sorted(parent.entities)
        prompt = llm.prompts[int(index.reports[parent.community_id].title[1:]) - 1]
        assert "-Sub-community reports-" in prompt
        for child in parent.children:  # children were summarised first and their reports are in the prompt
            assert communities[child].parent == parent.community_id
            assert index.reports[child].title in prompt
            assert int(index.reports[child].title[1:]) < int(index.reports[parent.community_id].title[1:])


def test_refresh_calls_the_summariser_once_per_stale_community(ring_memory):
    llm = TitledReports()
    index = GraphIndex.build(
        ring_memory, summarizer=LLMSummarizer(llm, max_context_tokens=100), max_cluster_size=4, save=False
    )
    llm.prompts.clear()
    ring_memory.upsert([_ring_chunks(version=" (resized)")[5]])
    stats = index.refresh(ring_memory, save=False)
    assert stats.changed == ["r05"]
    # r05 mentions the s5 triangle and s6a-service: exactly the communities holding one of them are stale
    touched = {"s5a-service", "s5b-service", "s5c-service", "s6a-service"}
    expected = sorted(cid for cid, c in index.communities.items() if touched & set(c.entities))
    assert stats.stale == expected and len(expected) < len(index.communities)
    assert stats.summarised == len(expected) == len(llm.prompts)
