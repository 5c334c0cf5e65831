import logging

import pytest

from hybrid_memory.graph import tokens


def test_cl100k_counts_offline():
    if tokens.tokenizer_name() != "cl100k_base":
        pytest.skip("no offline copy of cl100k_base in this environment (fallback tested below)")
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("billing-service returned HTTP 504") == 6
    assert tokens.count_tokens("<|endoftext|>") > 1  # special tokens are plain text, never raise
    assert tokens.truncate_to_tokens("hello world foo", 2) == "hello world"


def test_fallback_is_stated_and_approximate(monkeypatch, caplog):
    tokens._encoding.cache_clear()
    monkeypatch.setattr(tokens, "_tiktoken_cache_file", lambda: tokens.Path("/nonexistent/cache"))
    monkeypatch.setattr(tokens, "_shipped_copies", lambda: [])
    try:
        with caplog.at_level(logging.WARNING, logger="hybrid_memory.graph.tokens"):
            assert tokens.tokenizer_name() == "approx-chars/4"
            assert tokens.count_tokens("abcdefghi") == 3  # ceil(9 / 4)
            assert tokens.count_tokens("") == 0
        assert sum("token counts use approx-chars/4" in r.message for r in caplog.records) == 1  # logged once
    finally:
        tokens._encoding.cache_clear()
