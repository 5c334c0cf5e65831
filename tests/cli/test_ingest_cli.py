"""``hybrid-memory ingest`` of folders: what the summary counts and the warnings say."""

from __future__ import annotations

import json

from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli.app import main
from hybrid_memory.scopes import Scope


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
        "ingested": 1,
        "repeated_ids": 0,
        "skipped_files": 0,
        "empty_files": 0,
        "symlinked_folders": 1,
        "outside_links": 0,
        "chunks": 1,
        "memory": str(memory),
    }
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("hybrid_memory")] == [
        (
            "hybrid_memory.ingest",
            "WARNING",
            f"skipped {docs / 'team-b'}: a symbolic link to the folder {outside}, and links to folders are not followed "
            "(one may loop, or lead out of the folder being read); to read that folder, ingest it as a path of its own",
        )
    ]
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [c.chunk_id for c in mem.get(["docs/a.md#0", "team-b/b.md#0", "docs/team-b/b.md#0"])] == ["docs/a.md#0"]


def test_a_file_link_that_leaves_the_folder_is_not_read_unless_asked(tmp_path, capsys, caplog):
    """Issue 35, class 4: ``docs/passwd.md -> /etc/passwd`` made any file on the machine searchable."""
    docs, secret = tmp_path / "docs", tmp_path / "secret.md"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("alpha ERR_A1")
    secret.write_text("root:x:0:0 ERR_SECRET")
    (docs / "passwd.md").symlink_to(secret)
    (docs / "sub" / "again.md").symlink_to(docs / "a.md")  # a link that stays inside the folder is read
    memory = tmp_path / "mem"
    with caplog.at_level("WARNING"):
        assert main(["ingest", str(docs), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ingested": 2,
        "repeated_ids": 0,
        "skipped_files": 0,
        "empty_files": 0,
        "symlinked_folders": 0,
        "outside_links": 1,
        "chunks": 2,
        "memory": str(memory),
    }
    assert [(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("hybrid_memory")] == [
        (
            "hybrid_memory.ingest",
            f"skipped {docs / 'passwd.md'}: a symbolic link to {secret}, outside the folder being read ({docs}); links "
            "that leave the folder are not followed by default: pass follow_symlinks=True (the CLI's --follow-symlinks) "
            "to read it",
        ),
        (
            "hybrid_memory.cli.app",
            "1 linked file was not read (listed above): a symbolic link that leads out of the "
            "folder being read; pass --follow-symlinks to read such files",
        ),
    ]
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert sorted(c.chunk_id for c in mem.iter_chunks()) == ["docs/a.md#0", "docs/sub/again.md#0"]
        assert "ERR_SECRET" not in {r.text for r in mem.search("ERR_SECRET", top_k=5).results}
    assert main(["ingest", str(docs), "--memory", str(memory), "--hashing-dim", "8", "-q", "--follow-symlinks"]) == 0
    assert json.loads(capsys.readouterr().out)["outside_links"] == 0
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [c.text for c in mem.get(["docs/passwd.md#0"])] == ["root:x:0:0 ERR_SECRET"]


def test_ingest_takes_scope_pairs_as_search_does(tmp_path, capsys):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "alice's note ERR_J1"}) + "\n")
    memory = tmp_path / "mem"
    assert (
        main(
            [
                "ingest",
                str(corpus),
                "--memory",
                str(memory),
                "--hashing-dim",
                "8",
                "-q",
                "--scope",
                "user_id=alice",
                "--scope",
                "tenant=acme",
                "--agent-id",
                "ops",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["scope"] == {"tenant": "acme", "user_id": "alice", "agent_id": "ops"}
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [
            (c.chunk_id, c.tenant, c.user_id, c.agent_id, c.session_id)
            for c in mem.scoped(tenant="acme", user_id="alice", agent_id="ops").iter_chunks()
        ] == [("j1", "acme", "alice", "ops", None)]
    assert (
        main(
            [
                "search",
                "ERR_J1",
                "--memory",
                str(memory),
                "--hashing-dim",
                "8",
                "--scope",
                "user_id=alice",
                "--scope",
                "tenant=acme",
                "--scope",
                "agent_id=ops",
            ]
        )
        == 0
    )
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["j1"]
    # a wider scope shows it by its stored id, the ingest scope's namespace and the id (hybrid_memory.isolation)
    assert main(["search", "ERR_J1", "--memory", str(memory), "--hashing-dim", "8", "--scope", "user_id=alice"]) == 0
    key = Scope(tenant="acme", user_id="alice", agent_id="ops").key()
    assert [r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"]] == [f"{key}:j1"]


def test_ingest_scope_conflicts_are_refused_before_the_memory_is_created(tmp_path, capsys):
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "note"}) + "\n")
    memory = tmp_path / "mem"
    base = ["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]
    assert main([*base, "--scope", "user_id=alice", "--user-id", "bob"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --user-id bob and --scope user_id=alice disagree; give user_id once\n"
    )
    assert main([*base, "--scope", "user_id=alice", "--scope", "user_id=bob"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope user_id=alice and --scope user_id=bob disagree; give user_id once\n"
    )
    assert main([*base, "--scope", "user_id"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope takes FIELD=VALUE (tenant, user_id, agent_id, session_id), got 'user_id'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.jsonl"]  # nothing was created
    assert main([*base, "--scope", "user_id=alice", "--user-id", "alice"]) == 0  # one field, one value: fine
    assert json.loads(capsys.readouterr().out)["scope"] == {"user_id": "alice"}


def _summary_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.cli.app"]


def test_summary_lines_say_1_file_and_2_files(tmp_path, capsys, caplog):
    for n in (1, 2):
        docs = tmp_path / f"docs{n}"
        docs.mkdir()
        (docs / "z.md").write_text("the one note with text")
        names = [f"e{i}.md" for i in range(n)]
        for name in names:
            (docs / name).write_text("")
            (docs / f"bad-{name}").write_bytes(b"\xff\xfe binary")
        caplog.clear()
        with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
            assert main(["ingest", str(docs), "--memory", str(tmp_path / f"mem{n}"), "--hashing-dim", "8", "-q"]) == 0
        capsys.readouterr()
        skipped = [
            f"skipped {docs / f'bad-{name}'}: not valid UTF-8 (invalid start byte at byte 0); convert it to UTF-8"
            for name in names
        ]
        assert _summary_warnings(caplog) == [
            *skipped,
            *{
                1: [
                    "1 unreadable file was skipped (listed above); fix it and run the same command again",
                    f"1 file held no text (empty or white space only) and gave no chunk: {docs / 'e0.md'}",
                ],
                2: [
                    "2 unreadable files were skipped (listed above); fix them and run the same command again",
                    f"2 files held no text (empty or white space only) and gave no chunk: {docs / 'e0.md'}, {docs / 'e1.md'}",
                ],
            }[n],
        ]


def test_summary_lines_say_1_line_and_1_chunk(tmp_path, capsys, caplog):
    corpus = tmp_path / "c.jsonl"
    lines = [{"_id": "a", "text": "first"}, {"_id": "a", "text": "second"}]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(corpus), "--memory", str(tmp_path / "mem"), "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    assert _summary_warnings(caplog) == ["1 line repeated an earlier chunk id; the last line of each id was kept"]
    caplog.clear()
    corpus.write_text("".join(json.dumps(line) + "\n" for line in [*lines, {"_id": "a", "text": "third"}]))
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(corpus), "--memory", str(tmp_path / "mem"), "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    assert _summary_warnings(caplog) == ["2 lines repeated an earlier chunk id; the last line of each id was kept"]
    corpus.write_text(json.dumps({"_id": "bad"}) + "\n")
    assert main(["ingest", str(corpus), "--memory", str(tmp_path / "mem"), "--hashing-dim", "8", "-q"]) == 2
    assert capsys.readouterr().err.endswith(
        "(the memory now holds 1 chunk, 0 new from this run; ingest is an upsert, so fix the input and run the same "
        "command again)\n"
    )
