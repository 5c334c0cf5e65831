"""The `hybrid-memory mcp` command end to end: a child process served over stdio, and over Streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp")

from hybrid_memory import HashingEmbedder, HybridMemory, __version__  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as memory:
        memory.add(
            [
                {"chunk_id": "a", "text": "ERR_CONN_RESET on db-prod-3", "user_id": "u1"},
                {"chunk_id": "b", "text": "ERR_CONN_RESET on db-prod-4", "user_id": "u2"},
            ]
        )
    return tmp_path / "mem"


def _command(folder, *extra):
    return [
        sys.executable,
        "-m",
        "hybrid_memory.cli.app",
        "mcp",
        "--memory",
        str(folder),
        "--hashing-dim",
        "16",
        *extra,
    ]


async def test_stdio_server_is_scoped_and_read_only(folder):
    command = _command(folder, "--scope", "user_id=u2", "--read-only")
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "add_memory" not in names and "search_memory" in names
        result = await client.call_tool("search_memory", {"request": {"search_text": "ERR_CONN_RESET", "top_k": 5}})
        assert [r["chunk_id"] for r in result.structured_content["results"]] == ["b"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_streamable_http_on_localhost(folder):
    port = _free_port()
    child = subprocess.Popen(
        _command(folder, "--http", "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 60  # start-up (imports) on a loaded machine; readiness, not a speed test
        while True:
            assert child.poll() is None, child.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start listening"
                time.sleep(0.2)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            result = await client.call_tool("get_memory", {"chunk_ids": ["a", "b"]})
            assert [m["chunk_id"] for m in result.structured_content["result"]] == ["a", "b"]
    finally:
        child.terminate()
        child.wait(timeout=30)


def test_a_malformed_stdio_line_gets_no_reply_and_the_server_keeps_serving(folder):
    """What the official SDK does with a stdio line that is not JSON-RPC (README, MCP server): it drops it (no
    -32700 reply; modelcontextprotocol/python-sdk#2751) and answers the next valid request. This test pins that
    behaviour: if an SDK release starts replying, the README must say so."""
    import json
    import queue
    import threading

    child = subprocess.Popen(
        _command(folder),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
        text=True,
        bufsize=1,
    )
    replies: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [replies.put(json.loads(line)) for line in child.stdout], daemon=True)
    reader.start()

    def send(message) -> None:
        child.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        child.stdin.flush()

    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        hello = replies.get(timeout=120)  # start-up on a loaded machine: a deadline, not a speed test
        assert hello["id"] == 1
        # the server names its version in the handshake (a fresh user's finding: the SDK's default is "")
        info = hello["result"]["serverInfo"]
        assert (info["name"], info["version"]) == ("hybrid-memory", __version__) and __version__
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send("{not json")
        send({"id": 2, "method": "tools/list"})  # JSON, but not JSON-RPC (no "jsonrpc")
        send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "get_memory", "arguments": {"chunk_ids": ["a"]}},
            }
        )
        reply = replies.get(timeout=120)
        assert reply["id"] == 3  # nothing came back for the two malformed lines, in between
        assert [m["chunk_id"] for m in reply["result"]["structuredContent"]["result"]] == ["a"]
        assert child.poll() is None  # still serving
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert replies.empty()
