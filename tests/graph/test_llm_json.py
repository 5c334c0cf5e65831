import pytest
from hybrid_memory.graph.errors import LLMOutputError
from hybrid_memory.graph.extract import validate_extraction
from hybrid_memory.graph.llm import as_llm_callable, call_json, parse_llm_json

from .conftest import ScriptedLLM


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ("```\n[1, 2]\n```\nDone.", [1, 2]),
        ('Sure! Here is the JSON you asked for:\n{"a": [1, 2]}\nHope this helps.', {"a": [1, 2]}),
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        ('{"s": "a \\" } b", "t": "x\\\\",}', {"s": 'a " } b', "t": "x\\"}),
        ('{"s": "keep , ] these"}', {"s": "keep , ] these"}),
        # repaired by json-repair
        ("{'a': 1}", {"a": 1}),
        ('{"a": 1 "b": [1 2]}', {"a": 1, "b": [1, 2]}),
        ('{entities: [{name: "a", "type": "S"}]}', {"entities": [{"name": "a", "type": "S"}]}),
        ('{"x": [1, 2] // a comment\n}', {"x": [1, 2]}),
        ('{"ok": True, "none": None}', {"ok": True, "none": None}),
        ('{"a": }', {"a": ""}),
    ],
    ids=[
        "plain",
        "fence",
        "fence-array",
        "preamble",
        "trailing-commas",
        "escapes",
        "brackets-in-string",
        "single-quotes",
        "missing-commas",
        "unquoted-keys",
        "comment",
        "python-literals",
        "missing-value",
    ],
)
def test_parse_llm_json_repairs(reply, expected):
    assert parse_llm_json(reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"entities": [{"name": "a", "type": "S"}, {"name": "Bil', {"entities": [{"name": "a", "type": "S"}]}),
        (
            '{"entities": [{"name": "a", "type": "S"}, {"name": "b", "ty',
            {"entities": [{"name": "a", "type": "S"}, {"name": "b"}]},
        ),
        ('{"entities": [{"name": "a", "type": "S"}', {"entities": [{"name": "a", "type": "S"}]}),
        ('{"entities": [', {"entities": []}),
        ('```json\n{"entities": [{"name": "a"},', {"entities": [{"name": "a"}]}),
    ],
    ids=["mid-value", "mid-key", "after-element", "after-bracket", "fence-unclosed"],
)
def test_parse_llm_json_closes_a_reply_cut_short(reply, expected):
    assert parse_llm_json(reply) == expected


@pytest.mark.parametrize("reply", ["no json here", "", "just a number: 42", 'a string "x"'])
def test_parse_llm_json_raises_with_reason(reply):
    with pytest.raises(LLMOutputError, match="JSON"):
        parse_llm_json(reply)


def test_call_json_retries_once_with_the_error():
    llm = ScriptedLLM(["I cannot comply", '{"entities": [{"name": "x"}]}'])
    result = call_json(llm, "PROMPT", validate_extraction)
    assert result.attempts == 2
    assert [e.name for e in result.value[0]] == ["x"]
    assert llm.prompts[0] == "PROMPT"
    assert llm.prompts[1].startswith("PROMPT\n\nYour previous reply could not be used: no JSON object or array")
    assert "I cannot comply" in llm.prompts[1]


def test_call_json_raises_after_the_retry():
    llm = ScriptedLLM(["nope", '{"other": 1}'])
    with pytest.raises(LLMOutputError, match="after 2 attempts: the JSON object has neither") as info:
        call_json(llm, "PROMPT", validate_extraction)
    assert info.value.attempts == 2
    assert info.value.prompt_tokens > 0


def test_as_llm_callable_plain_callable_and_errors():
    assert as_llm_callable(lambda p: p.upper())("abc") == "ABC"
    with pytest.raises(TypeError, match="expected a callable"):
        as_llm_callable(42)


def test_as_llm_callable_langchain_fake_chat_model():
    fake = pytest.importorskip("langchain_core.language_models").FakeListChatModel(responses=["one", "two"])
    llm = as_llm_callable(fake)
    assert [llm("q"), llm("q")] == ["one", "two"]


def test_as_llm_callable_llamaindex_mock_llm():
    llms = pytest.importorskip("llama_index.core.llms")
    assert as_llm_callable(llms.MockLLM())("echo me") == "echo me"  # MockLLM echoes the prompt


@pytest.mark.parametrize(
    "reply",
    [
        'Entities found in {text}: {"entities": [{"name": "a"}]}',
        'Result [1]: {"entities": [{"name": "a"}]}',
        '```\nnot json {x}\n```\nthen:\n```json\n{"entities": [{"name": "a"},]}\n```',
    ],
    ids=["braces-in-preamble", "array-in-preamble", "second-fence"],
)
def test_parse_llm_json_finds_the_real_object(reply):
    assert parse_llm_json(reply) == {"entities": [{"name": "a"}]}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("{'entities': 'none'}", "'entities' and 'relations' must be JSON arrays"),
        ("{'other': [1 2]}", "the JSON object has neither 'entities' nor 'relations'"),
        ("[{'name': 'a'}]", "expected a JSON object"),
    ],
    ids=["wrong-type", "wrong-keys", "array-not-object"],
)
def test_repaired_json_is_still_checked_by_the_validator(reply, message):
    """json-repair turns these into JSON, but the validator is the guard: the reply is refused and retried."""
    llm = ScriptedLLM([reply, reply])
    with pytest.raises(LLMOutputError, match=message) as info:
        call_json(llm, "PROMPT", validate_extraction)
    assert info.value.attempts == 2
