"""The MCP server, tested in-process with the SDK's client over its in-memory transport (JSON-RPC framing)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError  # noqa: E402
from hybrid_memory.cli.app import main  # noqa: E402
from hybrid_memory.cli.common import parse_scope  # noqa: E402
from hybrid_memory.mcp_server import build_server  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client._memory import InMemoryTransport  # noqa: E402

WRITE_TOOLS = {"add_memory", "update_memory", "delete_memory", "supersede_memory"}
READ_TOOLS = {"search_memory", "get_memory", "list_memories", "global_search"}


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    mem.add(
        [
            {"chunk_id": "u1-a", "text": "Dana prefers PostgreSQL for the billing-service", "user_id": "u1"},
            {"chunk_id": "u2-a", "text": "Erik's vault passphrase is zebra-quartz-lantern", "user_id": "u2"},
        ]
    )
    yield mem
    mem.close()


def client(server):
    return Client(InMemoryTransport(server))


async def call(c, tool, arguments):
    result = await c.call_tool(tool, arguments)
    return result


async def test_tools_and_their_schemas_come_from_the_models(memory):
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert set(tools) == READ_TOOLS | WRITE_TOOLS
        search = tools["search_memory"].input_schema
        request = search["$defs"]["SearchRequest"]["properties"]
        assert {"search_text", "top_k", "hybrid_params", "metadata_filter", "as_of"} <= set(request)
        assert request["top_k"]["maximum"] == 1000 and search["required"] == ["request"]
        added = tools["add_memory"].input_schema["$defs"]["MemoryInput"]
        assert "user_id" not in added["properties"] and added["additionalProperties"] is False
    async with client(build_server(memory, read_only=True)) as c:
        assert {t.name for t in (await c.list_tools()).tools} == READ_TOOLS


async def test_add_memory_of_a_stored_text_with_new_metadata_says_it_was_a_duplicate_and_how_to_change_it(memory):
    """A fresh user's finding: the same text with new metadata was skipped as a duplicate with no word that the
    metadata was not applied."""
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        again = (
            await call(
                c,
                "add_memory",
                {
                    "memory": {
                        "text": "Dana prefers PostgreSQL for the billing-service",
                        "metadata": {"team": "billing"},
                    }
                },
            )
        ).structured_content
        assert again == {
            "chunk_id": again["chunk_id"],
            "action": "skipped",
            "stored_id": "u1-a",
            "duplicate_of": "u1-a",
            "kind": "exact",
            "closed": [],
            "note": "not stored: an exact duplicate of memory 'u1-a', which was left as it was (the source, metadata "
            "and validity given here were not applied to it); to change its metadata, call update_memory "
            "with chunk_id 'u1-a'",
        }
        near = (
            await call(
                c,
                "add_memory",
                {
                    "memory": {
                        "text": "Dana prefers PostgreSQL for the billing-service!",
                        "metadata": {"team": "billing"},
                    }
                },
            )
        ).structured_content
        assert (near["action"], near["kind"], near["note"]) == (
            "skipped",
            "near",
            "not stored: a near duplicate of memory 'u1-a', which was left as it was (the source, "
            "metadata and validity given here were not applied to it); to change its metadata, call update_memory "
            "with chunk_id 'u1-a'",
        )
    assert [(c.chunk_id, c.metadata) for c in memory.get(["u1-a", again["chunk_id"]])] == [("u1-a", {})]
    assert memory.count() == 2


async def test_every_tool_round_trip(memory):
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        added = (
            await call(
                c,
                "add_memory",
                {"memory": {"chunk_id": "n1", "text": "Dana works on project Apollo", "valid_from": "2024-01-01"}},
            )
        ).structured_content
        assert added == {
            "chunk_id": "n1",
            "action": "written",
            "stored_id": "n1",
            "duplicate_of": None,
            "kind": None,
            "closed": [],
            "note": None,
        }
        again = (await call(c, "add_memory", {"memory": {"text": "Dana works on project Apollo"}})).structured_content
        assert (again["action"], again["stored_id"], again["kind"]) == ("skipped", "n1", "exact")
        found = await call(c, "search_memory", {"request": {"search_text": "Dana project Apollo", "top_k": 2}})
        assert [r["chunk_id"] for r in found.structured_content["results"]] == ["n1", "u1-a"]
        superseded = (
            await call(
                c,
                "supersede_memory",
                {
                    "old_ids": ["n1"],
                    "memory": {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": "2024-06-01"},
                },
            )
        ).structured_content
        assert (superseded["action"], superseded["closed"]) == ("superseded", ["n1"])
        between = await call(
            c, "search_memory", {"request": {"search_text": "Dana project", "as_of": "2024-03-01", "top_k": 1}}
        )
        assert [r["chunk_id"] for r in between.structured_content["results"]] == ["n1"]
        updated = await call(c, "update_memory", {"update": {"chunk_id": "u1-a", "text": "Dana prefers SQLite now"}})
        assert updated.structured_content["action"] == "updated"
        got = (await call(c, "get_memory", {"chunk_ids": ["u1-a", "n1", "missing"]})).structured_content["result"]
        assert [(m["chunk_id"], m["text"], m["valid_to"]) for m in got] == [
            ("u1-a", "Dana prefers SQLite now", None),
            ("n1", "Dana works on project Apollo", 1717200000.0),
        ]
        page = (await call(c, "list_memories", {"page_size": 2})).structured_content
        # order of first insertion: the update of u1-a keeps its place (iter_chunks' documented order)
        assert [m["chunk_id"] for m in page["memories"]] == ["u1-a", "n1"] and page["next_cursor"] is not None
        last = (await call(c, "list_memories", {"page_size": 2, "cursor": page["next_cursor"]})).structured_content
        assert [m["chunk_id"] for m in last["memories"]] == ["n2"] and last["next_cursor"] is None
        deleted = await call(c, "delete_memory", {"chunk_ids": ["n2", "missing"]})
        assert deleted.structured_content == {"deleted": 1}
    assert memory.count() == 3  # u1-a, u2-a and the superseded n1 (history is kept)


async def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(memory):
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        cases = [
            ("search_memory", {"request": {"search_text": "x", "top_k": 0}}, "top_k"),
            ("search_memory", {"request": {"search_text": "  "}}, "search_text"),
            (
                "search_memory",
                {"request": {"search_text": "x", "metadata_filter": {"a": {"$near": 1}}}},
                "unknown operator '$near'",
            ),
            ("search_memory", {"request": {"search_text": "x", "as_of": "yesterday"}}, "ISO 8601"),
            ("add_memory", {"memory": {"text": "x", "user_id": "u2"}}, "user_id"),
            ("add_memory", {"memory": {"text": ""}}, "text"),
            ("update_memory", {"update": {"chunk_id": "u2-a", "text": "mine now"}}, "no memory with id 'u2-a'"),
            ("supersede_memory", {"old_ids": ["u2-a"], "memory": {"text": "x"}}, "unknown chunk ids"),
            ("list_memories", {"cursor": "abc"}, "cursor"),
            ("list_memories", {"cursor": "2"}, "is not one this server gave"),  # an offset cursor of earlier versions
            ("list_memories", {"cursor": "k²"}, "is not one this server gave"),
            ("list_memories", {"page_size": 1000}, "page_size"),
            ("get_memory", {"chunk_ids": "u1-a"}, "chunk_ids"),
            ("global_search", {"question": "what does Dana prefer?"}, "no community reports for this scope"),
        ]
        for tool, arguments, message in cases:
            result = await call(c, tool, arguments)
            assert result.is_error, (tool, arguments)
            assert message in result.content[0].text, (tool, result.content[0].text)
        ok = await call(c, "search_memory", {"request": {"search_text": "PostgreSQL billing"}})
        assert not ok.is_error and ok.structured_content["results"][0]["chunk_id"] == "u1-a"
    assert memory.get(["u2-a"])[0].text == "Erik's vault passphrase is zebra-quartz-lantern"


async def test_a_scoped_server_cannot_see_other_scopes(memory):
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        secret = await call(
            c, "search_memory", {"request": {"search_text": "Erik vault passphrase zebra-quartz-lantern", "top_k": 10}}
        )
        assert [r["chunk_id"] for r in secret.structured_content["results"]] == ["u1-a"]
        other = await call(c, "get_memory", {"chunk_ids": ["u2-a"]})  # reads as an unknown id: tells nothing of u2
        assert other.is_error and other.content[0].text == (
            "no memory with id 'u2-a'; find ids with search_memory (each result's chunk_id) or list_memories"
        )
        listed = (await call(c, "list_memories", {})).structured_content["memories"]
        assert [m["chunk_id"] for m in listed] == ["u1-a"]
        assert (await call(c, "delete_memory", {"chunk_ids": ["u2-a"]})).structured_content == {"deleted": 0}
        # an id another scope holds is a fresh id in this one (issue 35: no existence oracle): written, in u1's
        # namespace, and u2's chunk is untouched
        clash = await call(c, "add_memory", {"memory": {"chunk_id": "u2-a", "text": "overwrite"}})
        assert not clash.is_error and clash.structured_content["chunk_id"] == "u2-a"
        assert [
            m["text"] for m in (await call(c, "get_memory", {"chunk_ids": ["u2-a"]})).structured_content["result"]
        ] == ["overwrite"]
    assert memory.count() == 3
    assert "zebra" in memory.get(["u2-a"])[0].text


async def test_global_search_serves_the_graph_of_the_scope(tmp_path):
    pytest.importorskip("networkx")
    from hybrid_memory.graph import GraphIndex

    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(64)) as memory:
        notes = [
            "Kafka lag on billing-service delays invoices from db-prod-3",
            "billing-service retries Kafka consumers when db-prod-3 is slow",
            "Kafka and billing-service alerts page the SRE team",
        ]
        memory.add([{"chunk_id": f"u1-{i}", "text": t, "user_id": "u1"} for i, t in enumerate(notes)])
        memory.add([{"chunk_id": "u2-0", "text": "Kafka lag on search-service from es-prod-1", "user_id": "u2"}])
        GraphIndex.build(memory.scoped(user_id="u1"))
        async with client(build_server(memory, scope={"user_id": "u1"})) as c:
            result = await call(c, "global_search", {"question": "how is Kafka lag on billing-service handled?"})
            assert not result.is_error, result.content[0].text
            hits = result.structured_content["hits"]
            assert hits and all(cid.startswith("u1-") for h in hits for cid in h["chunk_ids"])
        async with client(build_server(memory, scope={"user_id": "u2"})) as c:
            result = await call(c, "global_search", {"question": "Kafka lag"})
            assert result.is_error and "--scope user_id=u2" in result.content[0].text


def test_cli_mcp_refuses_a_missing_memory_and_bad_scopes(tmp_path, capsys):
    assert main(["mcp", "--memory", str(tmp_path / "none")]) == 2
    assert "no memory at" in capsys.readouterr().err
    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    assert main(["mcp", "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--scope", "owner=x"]) == 2
    assert "scope" in capsys.readouterr().err
    assert parse_scope(["user_id=u1", "tenant=acme"]).bound() == {"tenant": "acme", "user_id": "u1"}
    assert parse_scope([]) is None
    assert parse_scope(["tenant=acme", "tenant=acme"]).bound() == {"tenant": "acme"}  # the same value twice is one
    # a fresh user's finding: the last of two values won, so a server silently served the other tenant
    with pytest.raises(InvalidRequestError) as err:
        parse_scope(["tenant=acme", "tenant=nobody"])
    assert str(err.value) == "--scope tenant=acme and --scope tenant=nobody disagree; give tenant once"
    # white space around a value: the message of every other entry point (scoped(), --tenant), not one of its own
    with pytest.raises(InvalidRequestError) as err:
        parse_scope(["tenant= acme"])
    assert str(err.value) == (
        "invalid scope: tenant: tenant must not have white space at its start or end, got "
        "' acme'; a scope value is an id: give tenant='acme' (value.strip()), or leave tenant "
        "out (None) for no tenant"
    )
    with pytest.raises(InvalidRequestError) as err:  # checked as read: before the two values are compared
        parse_scope(["tenant=acme", "tenant=acme "])
    assert str(err.value).startswith(
        "invalid scope: tenant: tenant must not have white space at its start or end, got 'acme '; "
    )
    with pytest.raises(InvalidRequestError) as err:
        parse_scope(["user_id=u1", "tenant =acme "])
    assert str(err.value) == (
        "--scope 'tenant =acme ' has white space around its field 'tenant '; give --scope tenant=acme"
    )
    assert (
        main(
            [
                "mcp",
                "--memory",
                str(tmp_path / "m"),
                "--hashing-dim",
                "8",
                "--read-only",
                "--scope",
                "tenant=acme",
                "--scope",
                "tenant=nobody",
            ]
        )
        == 2
    )
    assert "disagree; give tenant once" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("99999", "must be 1-65535, got 99999; choose another --port"),
        ("-5", "must be 1-65535, got -5"),
        ("http", "must be an integer 1-65535"),
    ],
)
def test_cli_mcp_port_out_of_range_is_an_argument_error(tmp_path, capsys, port, message):
    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    with pytest.raises(SystemExit) as exit_info:
        main(["mcp", "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--http", "--port", port])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_mcp_http_on_a_port_in_use_says_so_with_exit_2(tmp_path, capsys):
    """A fresh user's finding: a second server on the same port was uvicorn's raw bind error, exit 3."""
    import socket

    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["mcp", "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--http", "--port", str(port)]) == 2
    assert capsys.readouterr().err == f"hybrid-memory: error: port {port} is in use; choose another --port\n"


async def test_add_memory_with_a_stored_id_names_the_tools_that_change_it(memory):
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        result = await call(c, "add_memory", {"memory": {"chunk_id": "u1-a", "text": "Dana now prefers SQLite"}})
        assert result.is_error
        assert result.content[0].text == (
            "a memory with id 'u1-a' is already stored; change it with the update_memory tool, supersede it with "
            "supersede_memory, or leave chunk_id out to store a new memory"
        )
    assert memory.get(["u1-a"])[0].text == "Dana prefers PostgreSQL for the billing-service"  # nothing changed


async def test_list_memories_pages_by_keyset_so_deletes_between_pages_skip_nothing(memory):
    memory.upsert([{"chunk_id": f"p{i:02d}", "text": f"page note {i}", "user_id": "u9"} for i in range(25)])
    async with client(build_server(memory, scope={"user_id": "u9"})) as c:
        first = (await call(c, "list_memories", {"page_size": 10})).structured_content
        assert [m["chunk_id"] for m in first["memories"]] == [f"p{i:02d}" for i in range(10)]
        memory.delete(["p00", "p01", "p02", "p12"])  # three on the page already read, one ahead
        memory.upsert(
            [
                {"chunk_id": "p05", "text": "edited, keeps its place", "user_id": "u9"},
                {"chunk_id": "p99", "text": "added after the others", "user_id": "u9"},
            ]
        )
        second = (await call(c, "list_memories", {"page_size": 10, "cursor": first["next_cursor"]})).structured_content
        # an offset cursor would have skipped p10-p12 here (three rows before it were deleted)
        assert [m["chunk_id"] for m in second["memories"]] == ["p10", "p11", *[f"p{i}" for i in range(13, 21)]]
        third = (await call(c, "list_memories", {"page_size": 10, "cursor": second["next_cursor"]})).structured_content
        assert [m["chunk_id"] for m in third["memories"]] == ["p21", "p22", "p23", "p24", "p99"]
        assert third["next_cursor"] is None
        filtered = (
            await call(c, "list_memories", {"page_size": 3, "metadata_filter": {"none": None}})
        ).structured_content
        assert [m["chunk_id"] for m in filtered["memories"]] == ["p03", "p04", "p05"]


def test_page_chunks_checks_its_arguments(memory):
    from hybrid_memory import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="after must be a position a previous page returned"):
        memory.page_chunks(after="k3")
    with pytest.raises(InvalidRequestError, match="limit must be an int in 1..10000"):
        memory.page_chunks(limit=0)
    page, nxt = memory.page_chunks(limit=1)
    assert nxt is not None
    rest, end = memory.page_chunks(after=nxt, limit=10_000)
    assert [c.chunk_id for c in page + rest] == [c.chunk_id for c in memory.iter_chunks()] == ["u1-a", "u2-a"]
    assert end is None


async def test_bad_arguments_read_as_one_line_per_field(memory):
    async with client(build_server(memory)) as c:
        bad_top_k = await call(c, "search_memory", {"request": {"search_text": "Dana", "top_k": 0}})
        assert bad_top_k.is_error
        assert bad_top_k.content[0].text == (
            "invalid arguments for search_memory; fix and call again: "
            "request.top_k: Input should be greater than or equal to 1 (got 0)"
        )
        missing = await call(c, "search_memory", {})
        assert (
            missing.content[0].text
            == "invalid arguments for search_memory; fix and call again: request: Field required"
        )
        page = await call(c, "list_memories", {"page_size": 0, "cursor": 5})
        assert page.content[0].text == (
            "invalid arguments for list_memories; fix and call again: "
            "cursor: Input should be a valid string (got 5); "
            "page_size: Input should be greater than or equal to 1 (got 0)"
        )
        scoped = await call(c, "add_memory", {"memory": {"text": "Dana moved", "user_id": "u2"}})
        assert scoped.content[0].text == (
            "invalid arguments for add_memory; fix and call again: memory.user_id: Extra inputs are not permitted "
            "(got 'u2'); the scope of what a tool reads and writes is the server's (hybrid-memory mcp --scope)"
        )
        # the library's own errors keep their text
        unknown = await call(c, "search_memory", {"request": {"search_text": "Dana", "hybrid_params": {"fusion": "x"}}})
        assert "unknown fusion method 'x'; choose one of" in unknown.content[0].text


async def test_tool_errors_carry_one_prefix(memory):
    """The SDK's 'Error executing tool <name>: ' came before the library's message, and a write's 'invalid chunk
    #0: ' after it (a fresh user's finding): the library's message alone, a write's position read as the memory."""
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        cases = [
            (
                "search_memory",
                {"request": {"search_text": "x", "metadata_filter": {"a": {"$near": 1}}}},
                "unknown operator '$near' on 'a'; supported: $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists, $contains",
            ),
            (
                "list_memories",
                {"metadata_filter": {"a": {"$near": 1}}},
                "unknown operator '$near' on 'a'; supported: $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists, $contains",
            ),
            (
                "add_memory",
                {"memory": {"text": ""}},
                "invalid memory: text: text must not be empty or white space only (got '')",
            ),
            (
                "add_memory",
                {"memory": {"chunk_id": "m1", "text": "x", "metadata": {"$x": 1}}},
                "memory 'm1': metadata key '$x' cannot be filtered on: a key may not start with '$' (reserved for operators); "
                "rename it",
            ),
            (
                "add_memory",
                {"memory": {"text": "x", "valid_from": "2024-06-01", "valid_to": "2024-01-01"}},
                "invalid memory: valid_to must be after valid_from, got valid_from 2024-06-01T00:00:00Z (Unix 1717200000) and "
                "valid_to 2024-01-01T00:00:00Z (Unix 1704067200): the interval [valid_from, valid_to) would be empty; give a "
                "later valid_to, or none (the fact still holds)",
            ),
            (
                "update_memory",
                {"update": {"chunk_id": "u1-a", "text": " "}},
                "invalid memory: text: text must not be empty or white space only (got ' ')",
            ),
            (
                "update_memory",
                {"update": {"chunk_id": "zz", "text": "x"}},
                "no memory with id 'zz'; add_memory creates one",
            ),
            (
                "supersede_memory",
                {"old_ids": ["nope"], "memory": {"text": "x"}},
                "cannot supersede unknown chunk ids ['nope']; nothing was written",
            ),
        ]
        for tool, arguments, message in cases:
            result = await call(c, tool, arguments)
            assert result.is_error and result.content[0].text == message, (tool, result.content[0].text)
    assert [c.chunk_id for c in memory.iter_chunks()] == ["u1-a", "u2-a"]
    assert memory.get(["u1-a"])[0].text == "Dana prefers PostgreSQL for the billing-service"


async def test_a_write_tool_on_a_read_only_server_says_the_server_is_read_only(memory):
    async with client(build_server(memory, scope={"user_id": "u1"}, read_only=True, graph=None)) as c:
        for tool, arguments in [
            ("add_memory", {"memory": {"text": "x"}}),
            ("update_memory", {"update": {"chunk_id": "u1-a"}}),
            ("delete_memory", {"chunk_ids": ["u1-a"]}),
            ("supersede_memory", {"old_ids": ["u1-a"], "memory": {"text": "x"}}),
        ]:
            result = await call(c, tool, arguments)
            assert result.is_error and result.content[0].text == (
                f"{tool} is a write tool, and this server is read-only: it serves search_memory, get_memory, "
                "list_memories. To write, start it without --read-only (hybrid-memory mcp --memory DIR; in Python, "
                "build_server(memory, read_only=False))"
            )
        unknown = await call(c, "forget_everything", {})
        assert unknown.content[0].text == "Unknown tool: forget_everything"  # a name no server has stays the SDK's
    assert memory.count() == 2


async def test_a_scope_argument_is_refused_at_the_top_level_and_inside(memory):
    """What the README says: never reaches the memory either way (at the top level the SDK dropped it unread; it
    is refused now, as every unknown argument)."""
    async with client(build_server(memory, scope={"user_id": "u1"})) as c:
        top = await call(
            c, "search_memory", {"request": {"search_text": "Erik vault passphrase", "top_k": 5}, "user_id": "u2"}
        )
        assert top.is_error and top.content[0].text == (
            "invalid arguments for search_memory; fix and call again: user_id: unknown argument (got 'u2'); the scope "
            "of what a tool reads and writes is the server's (hybrid-memory mcp --scope); search_memory accepts only "
            "request"
        )
        added = await call(c, "add_memory", {"memory": {"chunk_id": "n0", "text": "Dana likes tea"}, "user_id": "u2"})
        assert added.is_error and "user_id: unknown argument (got 'u2'); the scope" in added.content[0].text
        assert memory.get(["n0"]) == []
        added = await call(c, "add_memory", {"memory": {"chunk_id": "n1", "text": "Dana likes tea"}})
        assert added.structured_content["action"] == "written"
        inside = await call(c, "search_memory", {"request": {"search_text": "Erik", "user_id": "u2"}})
        assert inside.content[0].text == (
            "invalid arguments for search_memory; fix and call again: request.user_id: Extra inputs are not permitted "
            "(got 'u2'); the scope of what a tool reads and writes is the server's (hybrid-memory mcp --scope)"
        )
        filtered = await call(
            c, "search_memory", {"request": {"search_text": "Erik", "metadata_filter": {"user_id": "u2"}}}
        )
        assert filtered.content[0].text.startswith(
            "metadata_filter key 'user_id' is a scope field, not metadata: no chunk in this scope has 'user_id' in its "
            "metadata"
        )
    assert (memory.scoped(user_id="u1").get(["n1"])[0].user_id, memory.count(scope={"user_id": "u2"})) == ("u1", 1)


async def test_get_memory_of_unknown_ids_is_a_tool_error_naming_them_and_where_ids_come_from(memory):
    """A fresh user's finding: an unknown id answered with no content at all. None found: a tool error naming the
    ids and the tools that give ids; some found: those, in order (the unknown ones left out, as documented)."""
    async with client(build_server(memory)) as c:
        one = await call(c, "get_memory", {"chunk_ids": ["nope"]})
        assert one.is_error and one.content[0].text == (
            "no memory with id 'nope'; find ids with search_memory (each result's chunk_id) or list_memories"
        )
        many = await call(c, "get_memory", {"chunk_ids": [f"x{i}" for i in range(7)]})
        assert many.is_error and many.content[0].text == (
            "no memory with ids 'x0', 'x1', 'x2', 'x3', 'x4' and 2 more; find ids with search_memory (each result's "
            "chunk_id) or list_memories"
        )
        empty = await call(c, "get_memory", {"chunk_ids": []})
        assert empty.is_error and empty.content[0].text == (
            "chunk_ids is empty; give the ids of the memories to get (search_memory and list_memories give each "
            "memory's chunk_id)"
        )
        mixed = await call(c, "get_memory", {"chunk_ids": ["nope", "u2-a", "u1-a"]})
        assert not mixed.is_error
        assert [m["chunk_id"] for m in mixed.structured_content["result"]] == ["u2-a", "u1-a"]


async def test_unknown_arguments_are_refused_naming_the_accepted_ones(memory):
    """A fresh user's finding: list_memories(limit=1) answered a full page, the SDK having dropped 'limit' unread.
    Every tool refuses an argument it does not declare (nothing runs), and its schema says so."""
    async with client(build_server(memory, graph=None)) as c:
        limited = await call(c, "list_memories", {"limit": 1})
        assert limited.is_error and limited.content[0].text == (
            "invalid arguments for list_memories; fix and call again: limit: unknown argument (got 1); list_memories "
            "accepts only cursor, page_size, metadata_filter"
        )
        two = await call(c, "delete_memory", {"chunk_ids": ["u1-a"], "ids": ["u2-a"], "force": True})
        assert two.is_error and two.content[0].text == (
            "invalid arguments for delete_memory; fix and call again: ids: unknown argument (got ['u2-a']); force: "
            "unknown argument (got True); delete_memory accepts only chunk_ids"
        )
        assert memory.count() == 2  # the refused delete deleted nothing
        page = await call(c, "list_memories", {"page_size": 1})
        assert [m["chunk_id"] for m in page.structured_content["memories"]] == ["u1-a"]
        schemas = {t.name: t.input_schema for t in (await c.list_tools()).tools}
        assert {name: schema["additionalProperties"] for name, schema in schemas.items()} == dict.fromkeys(
            [
                "search_memory",
                "get_memory",
                "list_memories",
                "add_memory",
                "update_memory",
                "delete_memory",
                "supersede_memory",
            ],
            False,
        )


async def test_a_bad_memory_without_chunk_id_is_not_named_by_the_generated_id(memory):
    """A fresh user's finding: add_memory with a bad metadata key read "memory 'a67a9941…': metadata key …", an id the
    caller never gave and that was never stored; it reads "invalid memory: metadata key '$x' …". A given id is still
    named."""
    async with client(build_server(memory)) as c:
        for tool, arguments in [
            ("add_memory", {"memory": {"text": "x", "metadata": {"$x": 1}}}),
            ("supersede_memory", {"old_ids": ["u1-a"], "memory": {"text": "x", "metadata": {"$x": 1}}}),
        ]:
            result = await call(c, tool, arguments)
            assert result.is_error and result.content[0].text == (
                "invalid memory: metadata key '$x' cannot be filtered on: a key may not start with '$' (reserved for "
                "operators); rename it"
            ), tool
        empty = await call(c, "add_memory", {"memory": {"text": "x", "metadata": {"": 1}}})
        assert (
            empty.content[0].text
            == "invalid memory: metadata key '' cannot be filtered on: the key is empty; rename it"
        )
        named = await call(c, "add_memory", {"memory": {"chunk_id": "m1", "text": "x", "metadata": {"$x": 1}}})
        assert named.content[0].text.startswith("memory 'm1': metadata key '$x' cannot be filtered on")
    assert [c.chunk_id for c in memory.iter_chunks()] == ["u1-a", "u2-a"] and memory.get(["u1-a"])[0].valid_to is None


def test_settle_loads_the_model_once_and_freezes_the_start_up_heap():
    """The mcp command settles its process before serving: the embedder is asked once (the model loads then, not
    on the first tool call) and every object alive is frozen out of later full collections (gc.freeze)."""
    import gc

    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.mcp_server import settle

    class Counting(HashingEmbedder):
        calls = 0

        def embed_query(self, text):
            Counting.calls += 1
            return super().embed_query(text)

    with HybridMemory(embedder=Counting(dim=8)) as memory:
        assert gc.get_freeze_count() == 0
        try:
            settle(memory)
            assert Counting.calls == 1 and gc.get_freeze_count() > 1000
        finally:
            gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_port_without_http_is_refused_not_ignored(tmp_path, capsys):
    from hybrid_memory.cli.app import main

    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    assert main(["mcp", "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--port", "8000"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --port 8000 is for --http; add --http to serve on 127.0.0.1:8000, "
        "or leave --port out for stdio\n"
    )
