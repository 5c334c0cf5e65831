"""Scopes: stamped on write, pre-filters of every read, views that cannot reach outside, old stores migrated."""

from __future__ import annotations

import json
import re
import sqlite3

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidRequestError, ScopedMemory
from hybrid_memory._exceptions import ScopeError
from hybrid_memory.scopes import Scope


@pytest.fixture
def memory():
    mem = HybridMemory(embedder=HashingEmbedder(64))
    yield mem
    mem.close()


def test_a_view_stamps_its_scope_on_every_write(memory):
    view = memory.scoped(tenant="acme", user_id="u1")
    view.add([{"chunk_id": "a", "text": "prefers dark mode"}])
    view.upsert([{"chunk_id": "b", "text": "uses vim", "session_id": "s9"}])
    view.add_texts(["likes tea"], ids=["c"])
    stored = {c.chunk_id: c for c in view.get(["a", "b", "c"])}
    assert [(c.tenant, c.user_id, c.session_id) for c in stored.values()] == [
        ("acme", "u1", None),
        ("acme", "u1", "s9"),
        ("acme", "u1", None),
    ]
    # the administrator's view shows the stored ids: the view's namespace (its scope key) and the caller's id
    key = view.scope.key()
    assert [c.chunk_id for c in memory.get([f"{key}:a", f"{key}:b", f"{key}:c", "a"])] == [
        f"{key}:a",
        f"{key}:b",
        f"{key}:c",
    ]


def test_a_chunk_of_another_scope_is_refused_and_nothing_is_written(memory):
    view = memory.scoped(user_id="u1")
    with pytest.raises(ScopeError, match="user_id='u2'"):
        view.add([{"chunk_id": "ok", "text": "fine"}, {"chunk_id": "bad", "text": "other", "user_id": "u2"}])
    assert memory.count() == 0


def test_ids_of_other_scopes_are_invisible(memory):
    memory.scoped(user_id="u2").add([{"chunk_id": "theirs", "text": "the launch code is 0000"}])
    mine = memory.scoped(user_id="u1")
    assert mine.get(["theirs"]) == []
    assert mine.delete(["theirs"]) == 0
    assert memory.count() == 1
    with pytest.raises(InvalidRequestError, match=r"unknown chunk ids \['theirs'\]"):
        mine.supersede(["theirs"], {"chunk_id": "new", "text": "replacement"})
    assert mine.get(["new"]) == [] and memory.count() == 1
    # an id another scope holds is a fresh id here (issue 35, class 1): written in u1's namespace, never refused
    assert mine.upsert([{"chunk_id": "theirs", "text": "mine now"}]) == ["theirs"]
    assert [c.text for c in mine.get(["theirs"])] == ["mine now"]
    assert [c.text for c in memory.scoped(user_id="u2").get(["theirs"])] == ["the launch code is 0000"]
    assert memory.count() == 2


def test_reads_are_restricted_to_the_scope(memory):
    memory.add(
        [
            {"chunk_id": "t1u1", "text": "deploy billing", "tenant": "t1", "user_id": "u1", "metadata": {"k": 1}},
            {"chunk_id": "t1u2", "text": "deploy billing", "tenant": "t1", "user_id": "u2", "metadata": {"k": 1}},
            {"chunk_id": "t2u1", "text": "deploy billing", "tenant": "t2", "user_id": "u1", "metadata": {"k": 2}},
            {"chunk_id": "shared", "text": "deploy billing", "tenant": "t1"},
        ]
    )
    tenant = memory.scoped(tenant="t1")
    user = tenant.scoped(user_id="u1")
    assert tenant.count() == 3 and user.count() == 1 and len(memory.scoped(user_id="u1")) == 2
    assert [c.chunk_id for c in tenant.iter_chunks({"k": 1})] == ["t1u1", "t1u2"]
    assert sorted(user.chunk_hashes()) == ["t1u1"]
    assert [r.chunk_id for r in user.search("deploy billing", top_k=10).results] == ["t1u1"]
    assert sorted(r.chunk_id for r in tenant.search("deploy billing", top_k=10).results) == ["shared", "t1u1", "t1u2"]
    assert [r.chunk_id for r in memory.scoped(tenant="t2").search("deploy", metadata_filter={"k": 1}).results] == []


async def test_asearch_is_scoped(memory):
    memory.add(
        [
            {"chunk_id": "x", "text": "kafka lag", "user_id": "u1"},
            {"chunk_id": "y", "text": "kafka lag", "user_id": "u2"},
        ]
    )
    response = await memory.scoped(user_id="u2").asearch("kafka lag", top_k=5)
    assert [r.chunk_id for r in response.results] == ["y"]


def test_a_view_only_narrows(memory):
    view = memory.scoped(user_id="u1")
    assert view.scoped(session_id="s1").scope == Scope(user_id="u1", session_id="s1")
    with pytest.raises(ScopeError, match="cannot be re-bound"):
        view.scoped(user_id="u2")
    with pytest.raises(ScopeError, match="at least one bound field"):
        memory.scoped()
    with pytest.raises(InvalidRequestError, match="user_id"):
        memory.scoped(user_id="  ")
    with pytest.raises(InvalidRequestError, match="scope"):
        memory.scoped(owner="u1")
    assert isinstance(view, ScopedMemory) and view.stats() == {"scope": {"user_id": "u1"}, "chunks": 0}


def test_scope_key_is_stable_and_path_safe():
    assert Scope().key() == "all"
    key = Scope(user_id="u/1", tenant="t").key()
    assert key == Scope(tenant="t", user_id="u/1").key() and key.startswith("s-") and len(key) == 18
    assert "/" not in key and key != Scope(user_id="u/2", tenant="t").key()


def test_a_store_of_the_previous_format_opens_and_gets_the_scope_columns(tmp_path):
    """A store written before the scope/time columns existed: the columns are added, old rows are unscoped."""
    folder = tmp_path / "mem"
    folder.mkdir()
    conn = sqlite3.connect(folder / "store.sqlite3")
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE chunks (rowid INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id TEXT NOT NULL UNIQUE,
            text TEXT NOT NULL, source TEXT NOT NULL DEFAULT '', metadata TEXT NOT NULL DEFAULT '{}',
            content_hash TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, vector BLOB);
    """)
    embedder = HashingEmbedder(16)
    manifest = {"format_version": 1, "embedder": {"name": embedder.name, "dim": 16}, "created_at": 1.0}
    conn.execute("INSERT INTO meta VALUES ('manifest', ?)", (json.dumps(manifest),))
    vector = embedder.embed_documents(["old note about kafka"])[0].astype("<f4").tobytes()
    conn.execute(
        "INSERT INTO chunks (chunk_id, text, content_hash, created_at, updated_at, vector) VALUES "
        "('old', 'old note about kafka', 'h', 1.0, 2.0, ?)",
        (vector,),
    )
    conn.commit()
    conn.close()
    with HybridMemory.open(folder, embedder=embedder) as memory:
        old = memory.get(["old"])[0]
        assert (old.user_id, old.valid_from, old.merged_ids) == (None, None, [])
        assert [r.chunk_id for r in memory.search("kafka").results] == ["old"]
        assert memory.scoped(user_id="u1").search("kafka").results == []
        memory.scoped(user_id="u1").add([{"chunk_id": "new", "text": "new note about kafka"}])
    conn = sqlite3.connect(folder / "store.sqlite3")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(chunks)")}
    conn.close()
    assert {"tenant", "user_id", "agent_id", "session_id", "valid_from", "valid_to", "merged"} <= columns
    assert {"chunks_user_id", "chunks_tenant", "chunks_content_hash"} <= indexes


def test_scope_prefilter_uses_the_index(tmp_path):
    """The scope resolves through its SQLite index, not a scan of the table."""
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        store = memory.backend.store
        plan = store._conn.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM chunks WHERE user_id = ? AND 1", ("u1",)
        ).fetchall()
    assert any("chunks_user_id" in row[-1] for row in plan)


def test_precomputed_vectors_work_through_a_view(memory):
    vectors = np.eye(64, dtype=np.float32)[:2]
    memory.scoped(agent_id="bot").add(
        [{"chunk_id": "v1", "text": "one"}, {"chunk_id": "v2", "text": "two"}], vectors=vectors
    )
    hits = memory.scoped(agent_id="bot").search("one", query_vector=vectors[1], sparse_weight=0).results
    assert [r.chunk_id for r in hits] == ["v2", "v1"]


def test_scope_and_as_of_resolve_from_the_filter_index_without_sql(memory, monkeypatch):
    """At scale the pre-filters must not scan: a scoped, as_of search never asks the store to filter rows."""
    memory.add(
        [
            {"chunk_id": "a", "text": "kafka lag", "user_id": "u1", "valid_from": 100.0},
            {"chunk_id": "b", "text": "kafka lag", "user_id": "u2", "valid_from": 100.0},
            {"chunk_id": "c", "text": "kafka lag", "user_id": "u1", "valid_from": 300.0},
        ]
    )

    def no_scan(*args, **kwargs):
        raise AssertionError("the store was asked to filter rows")

    monkeypatch.setattr(memory.backend.store, "filter_rowids", no_scan)
    view = memory.scoped(user_id="u1")
    assert [r.chunk_id for r in view.search("kafka", as_of=200.0, top_k=5).results] == ["a"]
    assert sorted(r.chunk_id for r in view.search("kafka", top_k=5).results) == ["a", "c"]


def test_changing_a_scope_without_changing_the_text_moves_the_chunk(memory):
    memory.add([{"chunk_id": "a", "text": "kafka lag", "user_id": "u1"}])
    assert [r.chunk_id for r in memory.scoped(user_id="u1").search("kafka").results] == ["a"]
    memory.upsert([{"chunk_id": "a", "text": "kafka lag", "user_id": "u2"}])  # the admin moves it
    assert memory.scoped(user_id="u1").search("kafka").results == []
    assert [r.chunk_id for r in memory.scoped(user_id="u2").search("kafka").results] == ["a"]


def test_another_process_sees_scopes_and_superseded_facts(tmp_path):
    """A second open of the folder (as another process would) follows scope stamps and validity closes."""
    path = tmp_path / "m"
    with (
        HybridMemory(path, embedder=HashingEmbedder(32)) as writer,
        HybridMemory.open(path, embedder=HashingEmbedder(32)) as reader,
    ):
        writer.scoped(user_id="u1").add(
            [{"chunk_id": "n1", "text": "Dana works on project Apollo", "valid_from": 1000.0}]
        )
        assert [r.chunk_id for r in reader.scoped(user_id="u1").search("Dana project").results] == ["n1"]
        assert reader.scoped(user_id="u2").search("Dana project").results == []
        writer.scoped(user_id="u1").supersede(
            ["n1"], {"chunk_id": "n2", "text": "Dana moved to project Zeus", "valid_from": 2000.0}
        )
        view = reader.scoped(user_id="u1")
        assert [r.chunk_id for r in view.search("Dana project", as_of=1500.0).results] == ["n1"]
        assert [r.chunk_id for r in view.search("Dana project", as_of=2500.0).results] == ["n2"]


def test_an_unscoped_upsert_keeps_the_stored_owner_unless_it_names_one(memory):
    memory.add([{"chunk_id": "a1", "text": "alice keeps her notes here", "user_id": "alice"}])
    memory.upsert([{"chunk_id": "a1", "text": "alice keeps her edited notes here"}])  # an admin edit or re-ingest
    assert [c.user_id for c in memory.get(["a1"])] == ["alice"]
    assert [c.text for c in memory.scoped(user_id="alice").get(["a1"])] == ["alice keeps her edited notes here"]
    assert memory.scoped(user_id="alice").search("edited notes", top_k=1).results[0].chunk_id == "a1"
    memory.upsert([{"chunk_id": "a1", "text": "now shared", "user_id": None}])  # stated explicitly: it wins
    assert [c.user_id for c in memory.get(["a1"])] == [None]
    assert memory.scoped(user_id="alice").get(["a1"]) == []


@pytest.mark.parametrize(
    "value, kind, position, fix",
    [
        ("u1\n", "the control character '\\n'", 2, "remove it (value.strip() drops a trailing new line)"),
        ("u\t1", "the control character '\\t'", 1, "remove it"),
        ("u1\x85", "the control character '\\x85'", 2, "remove it (value.strip() drops a trailing new line)"),
        ("u\u20281", "the line separator '\\u2028'", 1, "remove it"),
    ],
)
def test_a_scope_value_with_a_control_character_is_refused_naming_the_field_and_the_fix(
    memory, value, kind, position, fix
):
    """A fresh user's finding: a user_id read with its new line bound a scope no chunk is in, with no word. The
    strip hint is given only where strip() removes the character (at an end), a separator is called one."""
    with pytest.raises(InvalidRequestError) as info:
        memory.scoped({"user_id": value})
    assert str(info.value) == (
        f"invalid scope: user_id: user_id holds {kind} at position {position}; a scope value is an id on one line: "
        f"{fix}, or leave user_id out (None) for no user_id (got {value!r})"
    )
    with pytest.raises(InvalidRequestError, match=rf"^invalid scope: tenant: tenant holds {re.escape(kind)}"):
        memory.search("HTTP 504", scope={"tenant": value})
    with pytest.raises(InvalidRequestError, match=rf"^invalid scope: agent_id: agent_id holds {re.escape(kind)}"):
        memory.add([{"chunk_id": "c", "text": "x"}], scope={"agent_id": value})
    assert memory.count() == 0


def test_a_chunk_whose_scope_field_holds_a_control_character_is_refused_on_write(memory):
    """A fresh user's finding: such a chunk was stored in a scope no view can bind, so nothing could read it."""
    with pytest.raises(InvalidRequestError) as info:
        memory.add(
            [{"chunk_id": "a", "text": "fine"}, {"chunk_id": "b", "text": "Dana prefers SQLite", "user_id": "bob\n"}]
        )
    assert str(info.value) == (
        "chunk #1 ('b'): user_id holds the control character '\\n' at position 3; a scope value is an id on one line: "
        "remove it (value.strip() drops a trailing new line), or leave user_id out (None) for no user_id "
        "(got 'bob\\n')"
    )
    with pytest.raises(InvalidRequestError, match=r"^chunk #0 \('c'\): tenant holds the control character '\\t'"):
        memory.upsert([{"chunk_id": "c", "text": "x", "tenant": "t\tx"}])
    assert memory.count() == 0


def test_chunks_stored_with_a_control_character_in_a_scope_field_still_open_and_search(tmp_path, monkeypatch):
    """The check is the scope's and the write's: a memory whose chunks were stored with such a value before (the
    write check did not exist then) still opens, reads and searches (unscoped), and its other scopes search as
    before."""
    import hybrid_memory.memory.hybrid as memory_module

    monkeypatch.setattr(memory_module, "check_scope_values", lambda chunk: None)  # the write of an earlier version
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        mem.add(
            [
                {"chunk_id": "old", "text": "Dana prefers PostgreSQL", "user_id": "u1\n"},
                {"chunk_id": "ok", "text": "Dana prefers SQLite", "user_id": "u1"},
            ]
        )
    monkeypatch.undo()
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        assert [(c.chunk_id, c.user_id) for c in mem.iter_chunks()] == [("old", "u1\n"), ("ok", "u1")]
        assert sorted(r.chunk_id for r in mem.search("Dana prefers", top_k=5).results) == ["ok", "old"]
        assert [r.chunk_id for r in mem.scoped({"user_id": "u1"}).search("Dana prefers", top_k=5).results] == ["ok"]
        with pytest.raises(InvalidRequestError, match=r"^invalid scope: user_id: user_id holds the control character"):
            mem.scoped({"user_id": "u1\n"})


def test_a_scope_value_with_white_space_around_it_is_refused_on_every_entry_point(memory, tmp_path, capsys):
    """A fresh user's finding: a chunk with user_id " u1 " was stored as is while ``--scope user_id= u1 `` was
    refused; now one rule everywhere: refused naming the value and the fix, never stripped."""
    from hybrid_memory.cli.app import main

    fix = (
        "user_id must not have white space at its start or end, got ' u1 '; a scope value is an id: give "
        "user_id='u1' (value.strip()), or leave user_id out (None) for no user_id"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.add(
            [{"chunk_id": "a", "text": "fine"}, {"chunk_id": "b", "text": "Dana prefers SQLite", "user_id": " u1 "}]
        )
    assert str(info.value) == f"chunk #1 ('b'): {fix}"
    with pytest.raises(InvalidRequestError) as info:
        memory.upsert([{"chunk_id": "c", "text": "x", "tenant": "acme "}])
    assert str(info.value) == (
        "chunk #0 ('c'): tenant must not have white space at its start or end, got 'acme '; a "
        "scope value is an id: give tenant='acme' (value.strip()), or leave tenant out (None) for "
        "no tenant"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.scoped(user_id=" u1 ")
    assert str(info.value) == f"invalid scope: user_id: {fix}"
    with pytest.raises(InvalidRequestError) as info:
        memory.search("Dana", scope={"user_id": " u1 "})
    assert str(info.value) == f"invalid scope: user_id: {fix}"
    assert memory.count() == 0
    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    assert main(["search", "Dana", "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--user-id", " u1 "]) == 2
    assert f"invalid scope: user_id: {fix}" in capsys.readouterr().err
    for command in (["search", "Dana"], ["mcp"]):  # --scope pairs (mcp_server.parse_scope): the same message
        assert main([*command, "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--scope", "user_id= u1 "]) == 2
        assert capsys.readouterr().err == f"hybrid-memory: error: invalid scope: user_id: {fix}\n"


def test_chunks_stored_with_white_space_around_a_scope_value_still_read_and_delete(tmp_path, monkeypatch):
    """Values stored before the rule stay readable and deletable through the unscoped memory."""
    import hybrid_memory.memory.hybrid as memory_module

    monkeypatch.setattr(memory_module, "check_scope_values", lambda chunk: None)  # the write of an earlier version
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        mem.add(
            [
                {"chunk_id": "old", "text": "Dana prefers PostgreSQL", "user_id": " u1 "},
                {"chunk_id": "ok", "text": "Dana prefers SQLite", "user_id": "u1"},
            ]
        )
    monkeypatch.undo()
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        assert [(c.chunk_id, c.user_id) for c in mem.get(["old", "ok"])] == [("old", " u1 "), ("ok", "u1")]
        assert sorted(r.chunk_id for r in mem.search("Dana prefers", top_k=5).results) == ["ok", "old"]
        assert [r.chunk_id for r in mem.scoped({"user_id": "u1"}).search("Dana prefers", top_k=5).results] == ["ok"]
        assert mem.delete(["old"]) == 1
        assert [c.chunk_id for c in mem.iter_chunks()] == ["ok"]


def test_a_scope_value_of_white_space_only_is_called_blank_not_told_to_strip(memory):
    """Stripping "  " gives "", which is refused too: the message must not suggest it. One wording for chunks
    and scopes."""
    fix = "user_id must not be blank (white space only), got '  '; leave it out (None) for no user_id"
    with pytest.raises(InvalidRequestError) as info:
        memory.add([{"chunk_id": "a", "text": "fine", "user_id": "  "}])
    assert str(info.value) == f"invalid chunk #0: user_id: {fix}"
    with pytest.raises(InvalidRequestError) as info:
        memory.scoped(user_id=" ")
    assert str(info.value) == (
        "invalid scope: user_id: user_id must not be blank (white space only), got ' '; leave it "
        "out (None) for no user_id"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.search("Dana", scope={"user_id": "  "})
    assert str(info.value) == f"invalid scope: user_id: {fix}"
    assert memory.count() == 0


def test_an_empty_a_nul_or_an_invisible_scope_value_gets_its_own_message(memory, tmp_path, capsys):
    """A fresh user's findings: '' was told "blank or contain NUL", ``--scope user_id=`` only "FIELD=VALUE", and a
    zero-width space bound a scope that prints like "u1" but holds no chunk of u1's."""
    from hybrid_memory.cli.app import main

    with pytest.raises(InvalidRequestError) as info:
        memory.scoped(user_id="")
    assert (
        str(info.value)
        == "invalid scope: user_id: user_id must not be empty; leave it out (None) for no user_id (got '')"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.add([{"chunk_id": "a", "text": "fine", "tenant": ""}])
    assert (
        str(info.value)
        == "invalid chunk #0: tenant: tenant must not be empty; leave it out (None) for no tenant (got '')"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.scoped(user_id="u\x001")
    assert str(info.value) == (
        "invalid scope: user_id: user_id holds a NUL character at position 1; remove it, or leave "
        "user_id out (None) for no user_id (got 'u\\x001')"
    )
    with pytest.raises(InvalidRequestError) as info:
        memory.add([{"chunk_id": "a", "text": "fine", "user_id": "u\x001"}])
    assert str(info.value) == (
        "invalid chunk #0: user_id: user_id holds a NUL character at position 1; remove it, or "
        "leave it out (None) for no user_id (got 'u\\x001')"
    )
    invisible = (
        "user_id holds the invisible format character '\\u200b' (ZERO WIDTH SPACE) at position 1; a scope "
        "value is an id, and one that prints like another would bind a scope no chunk is in: remove it, or "
        "leave user_id out (None) for no user_id"
    )
    zero_width = "u\u200b1"
    with pytest.raises(InvalidRequestError) as info:
        memory.scoped(user_id=zero_width)
    assert str(info.value) == f"invalid scope: user_id: {invisible} (got {zero_width!r})"
    with pytest.raises(InvalidRequestError) as info:
        memory.add([{"chunk_id": "a", "text": "fine", "user_id": zero_width}])
    assert str(info.value) == f"chunk #0 ('a'): {invisible} (got {zero_width!r})"
    with pytest.raises(
        InvalidRequestError,
        match=r"^invalid scope: tenant: tenant holds the invisible format character "
        r"'\\ufeff' \(ZERO WIDTH NO-BREAK SPACE\) at position 0",
    ):
        memory.search("Dana", scope={"tenant": "\ufeffacme"})
    assert memory.count() == 0
    HybridMemory(tmp_path / "m", embedder=HashingEmbedder(8)).close()
    for command in (["search", "Dana"], ["mcp"]):
        assert main([*command, "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--scope", "user_id="]) == 2
        assert capsys.readouterr().err == (
            "hybrid-memory: error: --scope 'user_id=' gives user_id no value; give "
            "--scope user_id=VALUE, or leave user_id out for no user_id\n"
        )
        assert main([*command, "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "--scope", "userid="]) == 2
        assert capsys.readouterr().err.startswith(
            "hybrid-memory: error: invalid scope: 'userid' is not a scope field (did you mean 'user_id'?)"
        )


def test_a_chunk_stored_with_a_scope_value_refused_since_can_still_be_superseded(tmp_path, monkeypatch):
    """A fresh user's finding: supersede copies the old fact's scope onto the new one, and the write check
    refused the copied value ("remove it, or leave user_id out") although the caller gave none. Only what the
    caller gives is checked; the inherited value is the stored one."""
    import hybrid_memory.memory.hybrid as memory_module

    monkeypatch.setattr(memory_module, "check_scope_values", lambda chunk: None)  # the write of an earlier version
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        mem.add([{"chunk_id": "old", "text": "Dana works on Apollo", "user_id": "u1\u200b", "valid_from": 10.0}])
    monkeypatch.undo()
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(64)) as mem:
        assert mem.supersede(["old"], {"chunk_id": "new", "text": "Dana works on Zeus", "valid_from": 20.0}) == "new"
        assert [(c.chunk_id, c.user_id, c.valid_to, c.superseded_by) for c in mem.get(["old", "new"])] == [
            ("old", "u1\u200b", 20.0, "new"),
            ("new", "u1\u200b", None, None),
        ]
        with pytest.raises(
            InvalidRequestError, match=r"^chunk #0 \('n2'\): user_id holds the invisible format character"
        ):
            mem.supersede(["new"], {"chunk_id": "n2", "text": "Dana works on Hermes", "user_id": "u2\u200b"})
        assert mem.count() == 2
