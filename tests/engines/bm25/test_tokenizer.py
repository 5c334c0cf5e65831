"""The technical tokenizer keeps identifiers whole and splits them into parts."""

import pytest
from hybrid_memory.tokenizer import TechnicalTokenizer


@pytest.fixture(scope="module")
def tok():
    return TechnicalTokenizer()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HTTP 504", ["http", "504"]),
        ("ERR_CONN_RESET", ["err_conn_reset", "err", "conn", "reset"]),
        ("pg_stat_activity", ["pg_stat_activity", "pg", "stat", "activ"]),
        ("getUserById", ["getuserbyid", "get", "user", "id"]),
        ("E1243:", ["e1243"]),
        ("v2.3.1", ["v2.3.1", "v2", "3", "1"]),
        ("10.0.0.12", ["10.0.0.12", "10", "0", "0", "12"]),
        ("billing-service", ["billing-service", "bill", "servic"]),
        ("低头思故乡", ["低头", "头思", "思故", "故乡"]),
        ("故乡", ["故乡"]),
        ("ＨＴＴＰ　５０４", ["http", "504"]),
        ("The connections were pooling", ["connect", "were", "pool"]),
    ],
)
def test_tokens(tok, text, expected):
    assert tok.tokenize(text) == expected


def test_query_parts_meet_identifier_parts(tok):
    assert set(tok.tokenize("user id")) <= set(tok.tokenize("call getUserById()"))
    assert "e1243" in tok.tokenize("E1243: disk quota")
    assert tok.tokenize("err_conn_reset")[0] == tok.tokenize("ERR_CONN_RESET")[0]


def test_config_is_json_and_versioned(tok):
    config = tok.config()
    assert config["version"] == 1
    assert config["stemmer_language"] == "english"
