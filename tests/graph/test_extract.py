import pytest
from hybrid_memory.graph import GraphIndex, LLMExtractor, OfflineExtractor
from hybrid_memory.graph.patterns import split_sentences

from .conftest import NOTES, ScriptedLLM


def test_offline_extractor_technical_entities():
    entities, _ = OfflineExtractor().extract(
        "At 02:14 billing-service returned HTTP 504 after db-prod-3 (10.0.0.12) hit ERR_CONN_RESET. "
        "The auth-api v2.3.1 kept calling getUserById() on pg_stat_activity. "
        "Gateway returned 503 Service Unavailable with TimeoutError, then E1243 and ETIMEDOUT."
    )
    assert [(e.name, e.type) for e in entities] == [
        ("billing-service", "SERVICE"),
        ("HTTP 504", "HTTP_STATUS"),
        ("db-prod-3", "HOST"),
        ("10.0.0.12", "HOST"),
        ("ERR_CONN_RESET", "ERROR_CODE"),
        ("auth-api", "SERVICE"),
        ("v2.3.1", "VERSION"),
        ("getUserById()", "FUNCTION"),
        ("pg_stat_activity", "TABLE"),
        ("HTTP 503", "HTTP_STATUS"),
        ("TimeoutError", "ERROR_CODE"),
        ("E1243", "ERROR_CODE"),
        ("ETIMEDOUT", "ERROR_CODE"),
    ]


def test_offline_extractor_proper_nouns():
    entities, _ = OfflineExtractor().extract(
        "Scott Derrickson directed Doctor Strange. In 1994 Ed Wood was played by Johnny Depp; the demon Gallu appears."
    )
    assert [e.name for e in entities] == [
        "Scott Derrickson",
        "Doctor Strange",
        "Ed Wood",
        "Johnny Depp",
        "Gallu",
    ]
    technical_only, _ = OfflineExtractor(proper_nouns=False).extract("Scott Derrickson directed Doctor Strange.")
    assert technical_only == []


def test_offline_relations_carry_the_verb_phrase_else_co_occurrence():
    _, relations = OfflineExtractor().extract(
        "billing-service hit ERR_CONN_RESET. billing-service hit ERR_CONN_RESET on db-prod-3."
    )
    assert [(r.source, r.target, r.description, r.strength) for r in relations] == [
        ("billing-service", "db-prod-3", "co-occurs with", 1.0),
        ("billing-service", "ERR_CONN_RESET", "hit", 2.0),
        ("db-prod-3", "ERR_CONN_RESET", "co-occurs with", 1.0),  # " on " holds no verb
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("search-api was rolled back by Marco Rossi.", [("search-api", "Marco Rossi", "was rolled back by")]),
        ("GitHub Actions blocked the release of auth-api.", [("GitHub Actions", "auth-api", "blocked the release of")]),
        (
            "storage-service stores objects in the media-prod bucket.",
            [("storage-service", "media-prod", "stores objects in")],
        ),
        ("The auth-api kept calling getUserById() now.", [("auth-api", "getUserById()", "kept calling")]),
        ("Stripe webhooks failed with HTTP 401.", [("Stripe", "HTTP 401", "failed with")]),  # noun before verb
        (
            "s1a-service and s1b-service call s2a-service.",
            [("s1a-service", "s2a-service", "call"), ("s1b-service", "s2a-service", "call")],
        ),  # coordinated subjects
        ("Chen paged the team when db-prod-3 ran out of disk.", []),  # the object is in another clause
        ("Restart search-indexer on es-node-1.", []),  # imperative: no subject, no verb between them
    ],
    ids=[
        "passive",
        "reverb-v-w-p",
        "determiner-before-object",
        "kept-calling",
        "plural-noun-subject",
        "coordination",
        "clause-break",
        "imperative",
    ],
)
def test_relation_phrases(text, expected):
    _, relations = OfflineExtractor().extract(text)
    assert [(r.source, r.target, r.description) for r in relations if r.description != "co-occurs with"] == expected


def test_sentence_initial_names_are_kept_and_openers_dropped():
    entities, _ = OfflineExtractor().extract(
        "FEMA issued a warning. Kowalski restarted payments-worker. Restart Kafka on kafka-prod-2. "
        "Check the dashboard. Yesterday Alice Chen paged Dr. Okafor. Customers reported errors."
    )
    assert [(e.name, e.type) for e in entities] == [
        ("FEMA", "PROPER_NOUN"),
        ("Kowalski", "PROPER_NOUN"),
        ("payments-worker", "SERVICE"),
        ("Kafka", "PROPER_NOUN"),
        ("kafka-prod-2", "HOST"),
        ("Alice Chen", "PROPER_NOUN"),
        ("Dr. Okafor", "PROPER_NOUN"),
    ]


def test_a_word_the_chunk_also_writes_in_lower_case_is_no_name():
    entities, _ = OfflineExtractor().extract("Rollback started at noon. The rollback of auth-api finished.")
    assert [e.name for e in entities] == ["auth-api"]


def test_protocol_time_and_log_words_are_stop_entities():
    from hybrid_memory.graph.patterns import STOP_ENTITIES

    entities, _ = OfflineExtractor().extract(
        "At 02:14 UTC the SQL layer logged FATAL and DNS lookups failed; Ops saw POST /v1/charges fail with HTTP 503 "
        "on the TLS terminator of NGINX."
    )
    assert [(e.name, e.type) for e in entities] == [
        ("Ops", "PROPER_NOUN"),
        ("POST /v1/charges", "ENDPOINT"),
        ("HTTP 503", "HTTP_STATUS"),
        ("NGINX", "PROPER_NOUN"),
    ]
    assert {STOP_ENTITIES[w] for w in ("UTC", "FATAL", "POST", "SQL")} == {
        "time zone or time word",
        "log level",
        "HTTP method",
        "protocol, format or generic acronym",
    }


def test_split_sentences_keeps_dotted_tokens():
    assert split_sentences("Upgraded to v2.3.1 on 10.0.0.12. Then getUser() failed!\n\nNext") == [
        "Upgraded to v2.3.1 on 10.0.0.12.",
        "Then getUser() failed!",
        "Next",
    ]


def test_offline_graph_of_the_notes(memory):
    index = GraphIndex.build(memory, save=False)
    assert sorted(index.graph.nodes) == [
        "auth-api",
        "billing-service",
        "db-prod-3",
        "err_conn_reset",
        "es-node-1",
        "etimedout",
        "getuserbyid()",
        "http 504",
        "pg_stat_activity",
        "search-indexer",
        "v2.3.1",
    ]
    # n1: 4 entities -> 6 pairs ("returned", "hit", 4 co-occurrences); n2: 3 pairs ("retries on" and 2
    # co-occurrences, one of them n1's billing-service / ERR_CONN_RESET); n3, n4, n5: 3 pairs each
    assert index.graph.number_of_edges() == 6 + 2 + 3 + 3 + 3
    edge = index.graph.edges["billing-service", "err_conn_reset", "co-occurs with"]
    assert edge["weight"] == 2.0 and edge["chunk_ids"] == ["n1", "n2"]
    assert index.graph.edges["billing-service", "http 504", "returned"]["chunk_ids"] == ["n1"]
    assert index.graph.edges["billing-service", "db-prod-3", "retries on"]["chunk_ids"] == ["n2"]
    assert index.graph.edges["v2.3.1", "pg_stat_activity", "reads"]["chunk_ids"] == ["n4"]
    assert index.graph.nodes["auth-api"]["chunk_ids"] == ["n3", "n4"]


GOOD = (
    '```json\n{"entities": [{"name": "billing-service", "type": "SERVICE", "description": "bills"},'
    ' {"name": "db-prod-3", "type": "HOST", "description": "primary db"}],'
    ' "relations": [{"source": "billing-service", "target": "db-prod-3", "description": "reads from",'
    ' "strength": 8},]}\n```'
)


def _llm_memory(memory_cls, embedder, n=1):
    mem = memory_cls(None, embedder=embedder)
    mem.add([{"chunk_id": f"c{i}", "text": f"billing-service reads db-prod-3 ({i})"} for i in range(1, n + 1)])
    return mem


def test_llm_extractor_parses_fenced_json_with_trailing_commas(embedder):
    from hybrid_memory import HybridMemory

    llm = ScriptedLLM([GOOD])
    with _llm_memory(HybridMemory, embedder) as mem:
        index = GraphIndex.build(mem, extractor=LLMExtractor(llm), save=False)
    assert index.graph.nodes["db-prod-3"]["description"] == "primary db"
    assert index.graph.edges["billing-service", "db-prod-3", "reads from"]["weight"] == 8.0
    assert len(llm.prompts) == 1 and "billing-service reads db-prod-3 (1)" in llm.prompts[0]


def test_llm_extraction_failure_is_recorded_then_retried(embedder):
    from hybrid_memory import HybridMemory

    llm = ScriptedLLM(["Sorry, I can't.", "still no json", GOOD])
    extractor = LLMExtractor(llm)
    with _llm_memory(HybridMemory, embedder) as mem:
        index = GraphIndex.build(mem, extractor=extractor, save=False)
        assert sorted(index.failures) == ["c1"]
        failure = index.failures["c1"]
        assert failure.attempts == 2 and failure.error.startswith("LLMOutputError: model reply unusable after 2")
        assert index.graph.number_of_nodes() == 0 and index.stats()["failed_extractions"] == 1
        stats = index.retry_failed(mem)
    assert stats.retried == ["c1"] and stats.failed == []
    assert index.failures == {}
    assert sorted(index.graph.nodes) == ["billing-service", "db-prod-3"]
    assert extractor.calls == 3


def test_llm_extractor_through_langchain_fake_chat_model(embedder):
    from hybrid_memory import HybridMemory

    fake_models = pytest.importorskip("langchain_core.language_models")
    fake = fake_models.FakeListChatModel(responses=['{"entities": [{"name": "x", "type": "T"}, {"name": "y'])
    with _llm_memory(HybridMemory, embedder) as mem:
        index = GraphIndex.build(mem, extractor=LLMExtractor(fake), save=False)
    assert sorted(index.graph.nodes) == ["x"]  # the reply was cut short inside "y"'s object: that entity is dropped


def test_llm_extractor_through_llamaindex_llm(embedder):
    from hybrid_memory import HybridMemory

    llms = pytest.importorskip("llama_index.core.llms")
    from llama_index.core.llms.callbacks import llm_completion_callback

    class Scripted(llms.CustomLLM):
        replies: list = []

        @property
        def metadata(self):
            return llms.LLMMetadata()

        @llm_completion_callback()
        def complete(self, prompt, formatted=False, **kwargs):
            return llms.CompletionResponse(text=self.replies.pop(0))

        @llm_completion_callback()
        def stream_complete(self, prompt, formatted=False, **kwargs):
            raise NotImplementedError

    with _llm_memory(HybridMemory, embedder) as mem:
        index = GraphIndex.build(mem, extractor=LLMExtractor(Scripted(replies=[GOOD])), save=False)
    assert sorted(index.graph.nodes) == ["billing-service", "db-prod-3"]


def test_notes_fixture_is_what_the_tests_assume():
    assert len(NOTES) == 5
