"""A metadata filter on a scope field's name (``{"tenant": "small"}``) when the chunks carry that scope, not that
metadata (a fresh user's finding: 0 results and no word). Such a filter is refused, naming the fix, exactly when no
chunk searched has the key in its metadata, on every backend; when some chunk's metadata holds it (``benchmarks/scale.py`` stores
``tenant`` as metadata), the filter runs with its usual semantics."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, InvalidFilterError

from tests.backends.test_backends import ENGINES, open_memory


def _message(name: str, value: str | None, where: str = "this memory", shell: str | None = None) -> str:
    python = f"{name}={value!r}" if value is not None else f"{name}=..."
    shell = shell or (value if value is not None else "VALUE")
    return (
        f"metadata_filter key {name!r} is a scope field, not metadata: no chunk in {where} has {name!r} in its "
        "metadata (scope fields are stored apart from it), so this filter tests a key no chunk has. Restrict by "
        f"scope instead: memory.scoped({python}) in Python, --scope {name}={shell} on the command line "
        "(hybrid-memory search, and hybrid-memory mcp for an MCP server) (scope fields: tenant, user_id, agent_id, "
        "session_id)"
    )


@pytest.fixture(params=ENGINES)
def memory(request, tmp_path):
    """The same memory on every backend (each test id names the engine it ran on)."""
    mem = open_memory(request.param, tmp_path, embedder=HashingEmbedder(16))
    # written unscoped with their scope fields, so the administrator's view lists them by these ids (a view
    # would store them under its namespace, hybrid_memory.isolation)
    mem.add(
        [
            {"chunk_id": "s1", "text": "kafka consumer lag", "tenant": "small"},
            {"chunk_id": "s2", "text": "kafka broker disk", "tenant": "small"},
        ]
    )
    mem.add(
        [
            {
                "chunk_id": "b1",
                "text": "kafka topic retention",
                "metadata": {"team": "sre"},
                "tenant": "big",
                "user_id": "alice",
            }
        ]
    )
    yield mem
    mem.close()


@pytest.mark.parametrize(
    "metadata_filter, name, value, shell",
    [
        ({"tenant": "small"}, "tenant", "small", None),
        ({"tenant": {"$eq": "small"}}, "tenant", "small", None),
        ({"user_id": "alice"}, "user_id", "alice", None),
        ({"agent_id": {"$in": ["bot", "cron"]}}, "agent_id", None, None),
        ({"$or": [{"team": "sre"}, {"$not": {"session_id": "s 1"}}]}, "session_id", "s 1", "'s 1'"),
    ],
)
def test_a_scope_field_no_chunk_holds_as_metadata_is_refused(memory, metadata_filter, name, value, shell):
    for call in (
        lambda: memory.search("kafka", metadata_filter=metadata_filter),
        lambda: memory.count(metadata_filter),
        lambda: memory.page_chunks(metadata_filter),
        lambda: list(memory.iter_chunks(metadata_filter)),
    ):
        with pytest.raises(InvalidFilterError) as raised:
            call()
        assert str(raised.value) == _message(name, value, shell=shell)
    assert memory.count() == 3  # nothing changed


def test_the_scope_is_the_fix(memory):
    assert [r.chunk_id for r in memory.scoped(tenant="small").search("kafka", top_k=5).results] == ["s1", "s2"]


def test_when_some_chunk_has_the_key_as_metadata_the_filter_runs_unchanged(memory):
    memory.add(
        [
            {"chunk_id": "m1", "text": "kafka lag alert", "metadata": {"tenant": "small"}},
            {"chunk_id": "m2", "text": "kafka rebalance", "metadata": {"tenant": "other"}},
        ]
    )
    # metadata, not the scope: s1 and s2 (scope tenant=small, no metadata tenant) do not match
    assert [r.chunk_id for r in memory.search("kafka", top_k=10, metadata_filter={"tenant": "small"}).results] == ["m1"]
    assert memory.count({"tenant": "small"}) == 1
    assert sorted(c.chunk_id for c in memory.iter_chunks({"tenant": {"$exists": False}})) == ["b1", "s1", "s2"]
    assert sorted(c.chunk_id for c in memory.iter_chunks({"tenant": {"$ne": "small"}})) == ["b1", "m2", "s1", "s2"]
    with pytest.raises(InvalidFilterError) as raised:
        memory.count({"user_id": "alice"})
    assert str(raised.value) == _message("user_id", "alice")
    memory.delete(["m1", "m2"])  # the last chunks holding the key: the refusal is back
    with pytest.raises(InvalidFilterError) as raised:
        memory.search("kafka", metadata_filter={"tenant": "small"})
    assert str(raised.value) == _message("tenant", "small")


def test_in_a_scoped_view_the_view_is_what_is_searched(memory):
    memory.add([{"chunk_id": "b2", "text": "kafka quota", "metadata": {"tenant": "legacy"}, "tenant": "big"}])
    # the unscoped memory and tenant big's view hold a metadata tenant: the filter runs
    assert [r.chunk_id for r in memory.search("kafka", metadata_filter={"tenant": "legacy"}).results] == ["b2"]
    assert [
        r.chunk_id for r in memory.scoped(tenant="big").search("kafka", metadata_filter={"tenant": "legacy"}).results
    ] == ["b2"]
    # tenant small's view holds none: refused, saying "this scope"
    with pytest.raises(InvalidFilterError) as raised:
        memory.scoped(tenant="small").search("kafka", metadata_filter={"tenant": "legacy"})
    assert str(raised.value) == _message("tenant", "legacy", where="this scope")


def test_the_scale_benchmarks_metadata_tenant_still_filters(tmp_path):
    """benchmarks/scale.py's tenant filters (metadata tenant t0..t99; here 200 chunks, tenant t{i % 20}), also
    after a reopen (the key list is saved with the filter index)."""
    chunks = [
        {
            "chunk_id": f"c{i:03d}",
            "text": f"INC-{i:07d} kafka note",
            "metadata": {"tenant": f"t{i % 20}", "env": ("prod", "staging", "dev")[i % 3], "sev": i % 5},
        }
        for i in range(200)
    ]
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        mem.add(chunks)
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        assert mem.count({"tenant": {"$in": [f"t{i}" for i in range(2)]}}) == 20
        assert [c.chunk_id for c in mem.iter_chunks({"tenant": "t7"})] == [f"c{i:03d}" for i in range(7, 200, 20)]
        hits = mem.search("kafka", top_k=20, metadata_filter={"tenant": "t7", "env": "dev", "sev": 2}).results
        # i % 20 == 7, i % 3 == 2, i % 5 == 2: i = 47, 107, 167
        assert sorted(h.chunk_id for h in hits) == ["c047", "c107", "c167"]


def test_the_command_line_names_its_scope_option_and_that_option_finds_the_chunks(tmp_path, capsys):
    import json

    from hybrid_memory.cli.app import main

    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "text": "kafka consumer lag"}) + "\n", encoding="utf-8")
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(corpus), "--memory", memory, "--tenant", "small", "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", "kafka", "--memory", memory, "--hashing-dim", "8", "--filter", '{"tenant": "small"}']) == 2
    assert capsys.readouterr().err == f"hybrid-memory: error: {_message('tenant', 'small')}\n"
    assert main(["search", "kafka", "--memory", memory, "--hashing-dim", "8", "--scope", "tenant=small"]) == 0
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["a"]
