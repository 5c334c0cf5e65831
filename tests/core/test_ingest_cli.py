"""``hybrid-memory ingest`` of folders: what the summary counts and the warnings say."""

from __future__ import annotations

import json

from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli import main


def test_a_symlinked_sub_folder_is_counted_in_the_summary_and_named(tmp_path, capsys, caplog):
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (docs / "a.md").write_text("alpha ERR_A1")
    (outside / "b.md").write_text("beta ERR_B2")
    (docs / "team-b").symlink_to(outside, target_is_directory=True)
    memory = tmp_path / "mem"
    with caplog.at_level("WARNING"):
        assert main(["ingest", str(docs), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ingested": 1, "repeated_ids": 0, "skipped_files": 0, "empty_files": 0, "symlinked_folders": 1, "chunks": 1,
        "memory": str(memory)}
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("hybrid_memory")] == [
        ("hybrid_memory.ingest", "WARNING",
         f"skipped {docs / 'team-b'}: a symbolic link to the folder {outside}, and links to folders are not followed "
         "(one may loop, or lead out of the folder being read); to read that folder, ingest it as a path of its own")]
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [c.chunk_id for c in mem.get(["docs/a.md#0", "team-b/b.md#0", "docs/team-b/b.md#0"])] == ["docs/a.md#0"]


def test_ingest_takes_scope_pairs_as_search_does(tmp_path, capsys):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "alice's note ERR_J1"}) + "\n")
    memory = tmp_path / "mem"
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q",
                 "--scope", "user_id=alice", "--scope", "tenant=acme", "--agent-id", "ops"]) == 0
    assert json.loads(capsys.readouterr().out)["scope"] == {"tenant": "acme", "user_id": "alice", "agent_id": "ops"}
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [(c.chunk_id, c.tenant, c.user_id, c.agent_id, c.session_id) for c in mem.iter_chunks()] == [
            ("j1", "acme", "alice", "ops", None)]
    assert main(["search", "ERR_J1", "--memory", str(memory), "--hashing-dim", "8", "--scope", "user_id=alice"]) == 0
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["j1"]


def test_ingest_scope_conflicts_are_refused_before_the_memory_is_created(tmp_path, capsys):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "note"}) + "\n")
    memory = tmp_path / "mem"
    base = ["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]
    assert main([*base, "--scope", "user_id=alice", "--user-id", "bob"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --user-id bob and --scope user_id=alice disagree; give user_id once\n")
    assert main([*base, "--scope", "user_id=alice", "--scope", "user_id=bob"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope user_id=alice and --scope user_id=bob disagree; give user_id once\n")
    assert main([*base, "--scope", "user_id"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope takes FIELD=VALUE (tenant, user_id, agent_id, session_id), got 'user_id'\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.jsonl"]  # nothing was created
    assert main([*base, "--scope", "user_id=alice", "--user-id", "alice"]) == 0  # one field, one value: fine
    assert json.loads(capsys.readouterr().out)["scope"] == {"user_id": "alice"}
