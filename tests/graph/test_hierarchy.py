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


def test_parents_are_written_from_their_children_reports(ring_memory):
    llm = TitledReports()
    index = GraphIndex.build(ring_memory, summarizer=LLMSummarizer(llm, max_context_tokens=100),
                             max_cluster_size=4, save=False)
    levels = index.stats()["communities_per_level"]
    assert levels == {0: 7, 1: 10}
    assert len(llm.prompts) == 17  # one call per community
    parent = index.communities["L0-C0"]
    assert parent.children == ["L1-C0", "L1-C1"]
    prompt = llm.prompts[int(index.reports["L0-C0"].title[1:]) - 1]
    assert "-Sub-community reports-" in prompt
    for child in parent.children:  # children were summarised first and their reports are in the prompt
        assert index.reports[child].title in prompt
        assert int(index.reports[child].title[1:]) < int(index.reports["L0-C0"].title[1:])


def test_refresh_calls_the_summariser_once_per_stale_community(ring_memory):
    llm = TitledReports()
    index = GraphIndex.build(ring_memory, summarizer=LLMSummarizer(llm, max_context_tokens=100),
                             max_cluster_size=4, save=False)
    llm.prompts.clear()
    ring_memory.upsert([_ring_chunks(version=" (resized)")[5]])
    stats = index.refresh(ring_memory, save=False)
    assert stats.changed == ["r05"]
    # r05 mentions the s5 triangle and s6a-service: their communities and parents, 4 of 17, are stale
    assert stats.stale == ["L0-C2", "L0-C3", "L1-C5", "L1-C6"]
    assert stats.summarised == 4 == len(llm.prompts)
