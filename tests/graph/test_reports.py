import pytest
from hybrid_memory.graph import ExtractiveSummarizer, GraphIndex, LLMSummarizer
from hybrid_memory.graph.reports import CommunityContext, pack_community_context
from hybrid_memory.graph.tokens import count_tokens

from .conftest import ScriptedLLM


class CountingSummarizer(ExtractiveSummarizer):
    def __init__(self):
        super().__init__()
        self.seen = []

    def summarize(self, context):
        self.seen.append(context.community.community_id)
        return super().summarize(context)


def test_extractive_report_content(memory):
    index = GraphIndex.build(memory, save=False)
    community = next(c for c in index.communities.values() if "billing-service" in c.entities)
    report = index.reports[community.community_id]
    assert report.method == "extractive" and report.status == "ok"
    assert report.chunk_ids == ["n1", "n2"]
    assert report.title.startswith("billing-service") or report.title.startswith("db-prod-3")
    lines = report.text().splitlines()
    assert lines[2:] == [  # stated relations first, then sentences covering both chunks
        "- billing-service retries on db-prod-3 (weight 1 from 1 chunk(s))",
        "- billing-service returned HTTP 504 (weight 1 from 1 chunk(s))",
        "- billing-service retries on db-prod-3 after ERR_CONN_RESET. (source n2)",
        "- billing-service returned HTTP 504 when db-prod-3 hit ERR_CONN_RESET. (source n1)",
    ]
    assert report.quoted_chunk_ids == ["n1", "n2"]
    assert [(f.summary, f.explanation) for f in report.sources] == [
        ("billing-service returned HTTP 504 when db-prod-3 hit ERR_CONN_RESET.", "source n1"),
        ("billing-service retries on db-prod-3 after ERR_CONN_RESET.", "source n2"),
    ]
    assert report.tokens == count_tokens(report.text()) <= 300
    assert report.fingerprint == community.fingerprint


def test_extractive_sentences_cover_the_chunks_before_repeating_the_hub(embedder):
    """Six chunks name the hub db-prod-3; chunk c0 also holds two more sentences about it. Under a budget for
    three sentences, greedy budgeted coverage takes one sentence from each of three chunks, not c0's three."""
    from hybrid_memory import HybridMemory

    chunks = [
        {
            "chunk_id": "c0",
            "text": "db-prod-3 hit ERR_DISK_FULL. db-prod-3 hit ERR_DISK_FULL again. "
            "db-prod-3 hit ERR_DISK_FULL once more.",
        }
    ]
    chunks += [{"chunk_id": f"c{i}", "text": f"s{i}-service reads db-prod-3."} for i in range(1, 6)]
    with HybridMemory(None, embedder=embedder) as mem:
        mem.add(chunks)
        summarizer = ExtractiveSummarizer(max_report_tokens=110, top_relations=0)
        index = GraphIndex.build(mem, summarizer=summarizer, save=False)
    (report,) = index.reports.values()
    quoted = [f.explanation for f in report.findings]
    assert len(quoted) == len(set(quoted)) == 3  # every sentence from a different chunk
    assert report.quoted_chunk_ids == sorted(q[len("source ") :] for q in quoted)
    assert [f.explanation for f in report.sources] == [f"source c{i}" for i in range(6)]
    assert report.tokens <= 110


def test_extractive_report_respects_the_token_budget(memory):
    index = GraphIndex.build(memory, summarizer=ExtractiveSummarizer(max_report_tokens=40), save=False)
    assert all(r.tokens <= 40 for r in index.reports.values())


def test_refresh_summarises_only_the_stale_communities(memory):
    summarizer = CountingSummarizer()
    index = GraphIndex.build(memory, summarizer=summarizer, save=False)
    assert len(summarizer.seen) == len(index.communities) == 3
    auth = next(c.community_id for c in index.communities.values() if "auth-api" in c.entities)
    summarizer.seen.clear()

    memory.upsert([{"chunk_id": "n4", "text": "auth-api v2.4.0 reads pg_stat_activity."}])
    stats = index.sync(memory)
    assert stats.stale == [auth]  # only the auth-api community's content changed
    calls, failed = index.summarize_stale(memory)
    assert (calls, failed, summarizer.seen) == (1, [], [auth])
    assert index.stale_communities() == []

    summarizer.seen.clear()
    memory.delete(["n5"])
    stats = index.refresh(memory, save=False)
    assert stats.stale == [] and stats.summarised == 0 and summarizer.seen == []  # a community vanished
    assert len(index.communities) == 2


REPORT = (
    'Here is the report:\n```json\n{"title": "Billing and db-prod-3", "summary": "billing-service depends on '
    'db-prod-3.", "rating": 7.5, "rating_explanation": "outage risk", "findings": [{"summary": "Resets", '
    '"explanation": "ERR_CONN_RESET from db-prod-3"},],}\n```'
)


def test_llm_summarizer_repairs_and_retries(memory):
    # one community per call; the second community's first reply is broken, its retry is good
    llm = ScriptedLLM([REPORT, "{'title': oops", REPORT, REPORT])
    index = GraphIndex.build(memory, summarizer=LLMSummarizer(llm), save=False)
    assert len(llm.prompts) == 4
    assert "Your previous reply could not be used" in llm.prompts[2]
    assert {r.status for r in index.reports.values()} == {"ok"}
    report = next(iter(index.reports.values()))
    assert (report.title, report.rating, report.method) == ("Billing and db-prod-3", 7.5, "llm")
    assert report.findings[0].explanation == "ERR_CONN_RESET from db-prod-3"


def test_llm_report_failure_is_marked_and_retried_on_refresh(memory):
    llm = ScriptedLLM([REPORT, "no", "still no", REPORT])
    index = GraphIndex.build(memory, summarizer=LLMSummarizer(llm), save=False)
    failed = [r for r in index.reports.values() if r.status == "failed"]
    assert len(failed) == 1 and failed[0].error.startswith("LLMOutputError")
    assert index.stale_communities() == [failed[0].community_id]
    llm.replies = [REPORT]
    stats = index.refresh(memory, save=False)
    assert stats.summarised == 1 and stats.failed_reports == []
    assert {r.status for r in index.reports.values()} == {"ok"}


def test_pack_uses_child_reports_when_the_community_does_not_fit(memory):
    index = GraphIndex.build(memory, save=False)
    community = next(c for c in index.communities.values() if "billing-service" in c.entities)
    child = next(r for r in index.reports.values() if r.community_id != community.community_id)
    context = CommunityContext(
        community=community,
        graph=index.graph.subgraph(community.entities),
        chunks={"n1": "x"},
        child_reports=[child],
    )
    text, used_children = pack_community_context(context, max_tokens=30)
    assert used_children and text.startswith("-Sub-community reports-\n" + child.title)
    assert count_tokens(text) <= 30
    text, used_children = pack_community_context(context, max_tokens=2000)
    assert not used_children and "-Sources-\n[n1] x" in text


def test_summarizer_arguments_are_validated():
    with pytest.raises(ValueError, match="max_report_tokens must be >= 20"):
        ExtractiveSummarizer(max_report_tokens=5)


def test_llm_report_is_cut_to_max_report_tokens(memory):
    import json as _json

    from hybrid_memory.graph import GraphIndex, LLMSummarizer

    reply = _json.dumps(
        {
            "title": "T",
            "summary": "word " * 5000,
            "rating": 5,
            "findings": [{"summary": "finding " * 50} for _ in range(10)],
        }
    )
    summarizer = LLMSummarizer(lambda prompt: reply, max_report_tokens=200)
    graph = GraphIndex.build(memory, summarizer=summarizer)
    assert graph.reports and all(r.tokens <= 200 for r in graph.reports.values())
    assert all(r.findings == [] for r in graph.reports.values())
    with pytest.raises(ValueError, match="retries"):
        LLMSummarizer(lambda p: reply, retries=-1)
