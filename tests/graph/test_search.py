import pytest
from hybrid_memory import InvalidRequestError
from hybrid_memory.graph import NO_DATA_ANSWER, GraphIndex
from hybrid_memory.graph.tokens import count_tokens, tokenizer_name

from .conftest import NOTES, ScriptedLLM


@pytest.fixture
def index(memory):
    return GraphIndex.build(memory, save=False)


def _id_of(index, entity):
    return next(c.community_id for c in index.communities.values() if entity in c.entities)


def test_global_search_ranks_the_matching_community_first(index):
    result = index.global_search("ERR_CONN_RESET on db-prod-3", token_budget=2000)
    assert result.hits[0].community_id == _id_of(index, "db-prod-3")
    assert result.hits[0].chunk_ids == ["n1", "n2"]
    assert result.hits[0].level == 0 and result.hits[0].rank == 1
    assert not result.no_relevant_reports


def test_token_accounting_is_measured(index):
    result = index.global_search("ERR_CONN_RESET on db-prod-3", token_budget=2000)
    tokens = result.tokens
    assert tokens.tokenizer == tokenizer_name()
    assert tokens.report_tokens == sum(count_tokens(h.text) for h in result.hits)
    chunk_ids = sorted({c for h in result.hits for c in h.chunk_ids})
    assert result.chunk_ids == chunk_ids
    assert tokens.source_chunks == len(chunk_ids)
    assert tokens.source_chunk_tokens == sum(count_tokens(NOTES[c]) for c in chunk_ids)
    assert tokens.saving_ratio == pytest.approx(1 - tokens.report_tokens / tokens.source_chunk_tokens)


def test_reports_fit_the_token_budget(index):
    question = "billing-service auth-api search-indexer"
    everything = index.global_search(question, token_budget=10_000, focus=None, evidence=False)
    assert len(everything.hits) == 3
    assert [h.text for h in everything.hits] == [index.reports[h.community_id].text() for h in everything.hits]
    smallest = min(h.tokens for h in everything.hits)
    result = index.global_search(question, token_budget=smallest, focus=None, evidence=False)
    assert [h.tokens for h in result.hits] == [smallest]
    assert result.tokens.report_tokens <= smallest
    for budget in (smallest, 2 * smallest, 10_000):  # the defaults (focused reports, evidence) fit too
        got = index.global_search(question, token_budget=budget)
        assert got.hits and got.tokens.report_tokens == sum(h.tokens for h in got.hits) <= budget


def test_no_relevant_report_is_said_not_invented(index):
    result = index.global_search("zebra migration patterns", token_budget=2000)
    assert result.hits == [] and result.no_relevant_reports
    llm = ScriptedLLM([])
    answer = index.ask("zebra migration patterns", llm=llm)
    assert answer.no_data and answer.answer == NO_DATA_ANSWER and llm.prompts == []


def test_ask_map_reduce_one_call_per_batch_then_one_reduce(index):
    question = "billing-service auth-api search-indexer"
    n_hits = len(index.global_search(question).hits)
    point = '{"points": [{"description": "billing-service retries on ERR_CONN_RESET", "score": 80}]}'
    llm = ScriptedLLM([point] * n_hits + ["Billing retries on resets."])
    answer = index.ask(question, llm=llm, map_context_tokens=1)  # one report per batch
    assert answer.answer == "Billing retries on resets."
    assert answer.tokens.llm_calls == n_hits + 1 == len(llm.prompts)
    assert [p.score for p in answer.points] == [80] * n_hits
    assert "(score 80) billing-service retries on ERR_CONN_RESET" in llm.prompts[-1]
    assert answer.tokens.prompt_tokens == sum(count_tokens(p) for p in llm.prompts)
    assert not answer.no_data and not answer.truncated


def test_ask_says_so_when_every_point_scores_zero(index):
    llm = ScriptedLLM(['{"points": [{"description": "nothing useful", "score": 0}]}'] * 3)
    answer = index.ask("billing-service auth-api search-indexer", llm=llm)
    assert answer.no_data and answer.answer == NO_DATA_ANSWER
    assert answer.tokens.llm_calls == 1  # one batch, no reduce call


def test_ask_respects_the_call_budget_and_retries_broken_map_json(index):
    llm = ScriptedLLM(['{"points": [{"description": "x", "score": 50},', "Answer."])
    answer = index.ask("billing-service auth-api search-indexer", llm=llm, max_calls=2, map_context_tokens=1)
    assert answer.truncated and answer.tokens.llm_calls == 2  # one map call (its reply repaired) + reduce
    assert [p.description for p in answer.points] == ["x"]


def test_ask_without_llm_returns_the_reports(index):
    answer = index.ask("ERR_CONN_RESET on db-prod-3")
    assert answer.answer.startswith(f"[{_id_of(index, 'db-prod-3')}] ")
    assert answer.tokens.llm_calls == 0


def test_global_search_validates_its_arguments(index):
    with pytest.raises(ValueError, match="token_budget must be an int >= 1 \\(tokens\\), got 0"):
        index.global_search("x", token_budget=0)
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        index.global_search("  ")


class CountingEmbedder:
    def __init__(self, inner):
        self.inner, self.name, self.dim, self.embedded = inner, inner.name, inner.dim, []

    def embed_documents(self, texts):
        self.embedded.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def test_refresh_re_embeds_only_the_new_reports(memory, embedder):
    counting = CountingEmbedder(embedder)
    index = GraphIndex.build(memory, embedder=counting, save=False)
    index.global_search("auth-api")
    assert len(counting.embedded) == 3  # one per report
    counting.embedded.clear()
    memory.upsert([{"chunk_id": "n4", "text": "auth-api v2.4.0 reads pg_stat_activity."}])
    index.refresh(memory, save=False)
    index.global_search("auth-api")
    auth = next(c.community_id for c in index.communities.values() if "auth-api" in c.entities)
    assert counting.embedded == [index.reports[auth].text()]


def test_answers_tell_apart_no_data_small_budget_and_failed_model(memory):
    from hybrid_memory.graph import GraphIndex
    from hybrid_memory.graph.search import MODEL_FAILED_ANSWER

    graph = GraphIndex.build(memory)
    question = next(iter(graph.reports.values())).title
    full = graph.global_search(question, token_budget=100_000, evidence=False)  # focused reports, no evidence
    assert full.hits and not full.no_relevant_reports
    tiny = graph.global_search(question, token_budget=1)
    assert tiny.hits == [] and not tiny.no_relevant_reports
    assert tiny.smallest_relevant_report_tokens == min(h.tokens for h in full.hits)
    answer = graph.ask(question, token_budget=1)
    assert answer.answer.startswith("No answer: relevant community reports exist") and not answer.no_data

    garbage = graph.ask(question, llm=lambda prompt: "not json at all", token_budget=100_000)
    assert garbage.model_failed and not garbage.no_data
    assert garbage.answer.split("(")[0] == MODEL_FAILED_ANSWER.split("(")[0]

    for bad in ({"max_reports": 0}, {"level": "0"}, {"token_budget": True}, {"token_budget": 1.5}):
        with pytest.raises(ValueError):
            graph.global_search(question, **bad)


def test_ask_keeps_the_reduce_prompt_inside_max_llm_tokens(memory):
    import json as _json

    from hybrid_memory.graph import GraphIndex

    graph = GraphIndex.build(memory)
    question = next(iter(graph.reports.values())).title
    points = {"points": [{"description": "a long finding " * 40, "score": 90 - i} for i in range(30)]}

    def model(prompt):
        return _json.dumps(points) if "points" in prompt.lower() and "score" in prompt.lower() else "final"

    answer = graph.ask(question, llm=model, token_budget=100_000, max_llm_tokens=6000)
    assert answer.tokens.llm_calls >= 2  # map step(s) and the reduce step ran
    assert answer.tokens.prompt_tokens <= 6000  # the reduce prompt was packed into what the map step left
    assert answer.truncated and 0 < len(answer.points) < 30


def test_reports_are_ranked_by_the_store_free_searcher(monkeypatch):
    import hybrid_memory
    from hybrid_memory import HashingEmbedder
    from hybrid_memory.graph.models import CommunityReport
    from hybrid_memory.graph.search import ReportRanker

    def no_memory(*args, **kwargs):
        raise AssertionError("the report ranker must not build a HybridMemory")

    monkeypatch.setattr(hybrid_memory.HybridMemory, "__init__", no_memory)
    reports = [
        CommunityReport(
            community_id="c2", level=0, title="Billing", summary="billing-service HTTP 504 pool exhaustion"
        ),
        CommunityReport(community_id="c1", level=1, title="Auth", summary="auth-api getUserById returns null"),
        CommunityReport(community_id="c3", level=0, title="Failed", summary="x", status="failed"),
        CommunityReport(
            community_id="c0", level=0, title="Billing", summary="billing-service HTTP 504 pool exhaustion"
        ),
    ]
    ranker = ReportRanker(reports, HashingEmbedder(64))
    assert ranker.size == 3  # the failed report is not indexed
    ranked = ranker.rank("billing-service 504")
    # the two equal billing reports tie and rank by community id; the auth report matches no term
    assert [r.chunk_id for r in ranked][:2] == ["c0", "c2"]
    assert ranked[0].score == ranked[1].score and ranked[0].sparse_rank == 1 and ranked[1].sparse_rank == 2
    assert [r.chunk_id for r in ranker.rank("billing-service 504", level=1)] == ["c1"]
    assert ranker.rank("billing-service 504", top_k=1)[0].chunk_id == "c0"


def test_global_search_adds_the_best_source_sentences_the_budget_allows(embedder):
    """A hub community whose report quotes 3 of its 6 chunks: with room for exactly one evidence line, the
    unquoted source sentence naming the question's service is added, and nothing else."""
    from hybrid_memory import HybridMemory
    from hybrid_memory.graph import ExtractiveSummarizer
    from hybrid_memory.graph.tokens import count_tokens

    chunks = [{"chunk_id": "c0", "text": "db-prod-3 hit ERR_DISK_FULL. db-prod-3 hit ERR_DISK_FULL again."}]
    chunks += [{"chunk_id": f"c{i}", "text": f"s{i}-service reads db-prod-3."} for i in range(1, 6)]
    with HybridMemory(None, embedder=embedder) as mem:
        mem.add(chunks)
        index = GraphIndex.build(
            mem, summarizer=ExtractiveSummarizer(max_report_tokens=110, top_relations=0), save=False
        )
    (report,) = index.reports.values()
    unquoted = [f for f in report.sources if f.explanation[len("source ") :] not in report.quoted_chunk_ids]
    assert unquoted  # the report could not quote every chunk
    target = unquoted[-1]
    service = target.summary.split()[0]
    line = f"- {target.summary} ({target.explanation})"
    budget = report.tokens + count_tokens("Evidence:") + 1 + count_tokens(line) + 1
    result = index.global_search(f"what does {service} read?", token_budget=budget, focus=None, evidence_share=0.0)
    (hit,) = result.hits
    assert [(f.summary, f.explanation) for f in hit.evidence] == [(target.summary, target.explanation)]
    assert hit.text == report.text() + "\nEvidence:\n" + line
    assert hit.tokens == count_tokens(hit.text) <= budget
    assert result.quoted_chunk_ids == sorted(report.quoted_chunk_ids + [target.explanation[len("source ") :]])
    assert result.tokens.report_tokens == hit.tokens
    plain = index.global_search(f"what does {service} read?", token_budget=budget, evidence=False, focus=None)
    assert plain.hits[0].evidence == [] and plain.hits[0].text == report.text()
    # a question sharing no term with the unquoted sentences adds none
    assert index.global_search("ERR_DISK_FULL", token_budget=4000).hits[0].evidence == []
    # focused (the default): the title and the 2 findings sharing most question terms, then evidence
    focused = index.global_search(f"what does {service} read?", token_budget=4000)
    (hit,) = focused.hits
    assert hit.text.splitlines()[0] == report.title
    assert hit.tokens == count_tokens(hit.text) < report.tokens + 60
    assert [f.summary for f in hit.evidence][0] == target.summary
    with pytest.raises(InvalidRequestError, match="evidence_share must be a number in"):
        index.global_search("x", evidence_share=1.0)
    with pytest.raises(InvalidRequestError, match="focus must be an int >= 1"):
        index.global_search("x", focus=0)


def test_focus_report_keeps_the_title_and_the_findings_matching_the_question():
    from hybrid_memory.graph.models import CommunityReport, Finding
    from hybrid_memory.graph.search import focus_report

    report = CommunityReport(
        community_id="L0-C0",
        level=0,
        title="db-prod-3, billing-service",
        summary="3 entities.",
        findings=[
            Finding(summary="billing-service retries on db-prod-3", explanation="weight 2 from 2 chunk(s)"),
            Finding(summary="auth-api reads pg_stat_activity.", explanation="source n4"),
            Finding(summary="ledger-service writes invoices.", explanation="source n7"),
            Finding(summary="auth-api calls getUserById().", explanation="source n3"),
        ],
        quoted_chunk_ids=["n3", "n4", "n7"],
    )
    text, quoted = focus_report(report, "what does auth-api call and read?")
    assert text == (
        "db-prod-3, billing-service\n- auth-api reads pg_stat_activity. (source n4)\n"
        "- auth-api calls getUserById(). (source n3)"
    )  # report order kept
    assert quoted == ["n3", "n4"]
    text, quoted = focus_report(report, "unrelated words only", max_findings=2)
    assert text == "db-prod-3, billing-service\n- billing-service retries on db-prod-3 (weight 2 from 2 chunk(s))"
    assert quoted == []
    llm = report.model_copy(update={"method": "llm"})
    assert focus_report(llm, "auth-api") == (llm.text(), ["n3", "n4", "n7"])
