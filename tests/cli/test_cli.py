"""The hybrid-memory command: demo on the bundled memory, ingest, search with a request file, stats."""

import json
from pathlib import Path

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli.app import main
from hybrid_memory.scopes import Scope

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "incident_memory"
PRODUCTION_BILLING = {
    "inc-0412-billing-504-pool",
    "pm-0415-billing-pool-exhaustion",
    "inc-0302-billing-stripe-webhook",
    "rb-billing-refund-retry",
    "inc-0519-billing-currency-rounding",
    "rb-billing-db-failover",
    "inc-0608-billing-cron-duplicate",
}


@pytest.mark.slow  # the demo loads the real all-MiniLM-L6-v2
def test_demo_answers_the_reference_request_with_the_default_embedder(capsys):
    assert main(["demo", "-q"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["query_id"] == "mem_req_99214"
    assert response["total_retrieved"] == len(response["results"]) == 5
    ids = [r["chunk_id"] for r in response["results"]]
    assert ids[0] == "inc-0412-billing-504-pool"
    assert set(ids) <= PRODUCTION_BILLING  # the staging 504 note is filtered out
    top = response["results"][0]
    assert (top["sparse_rank"], top["dense_rank"]) == (1, 1)
    assert top["rrf_score"] == pytest.approx(0.4 / 61 + 0.6 / 61)


def test_ingest_search_stats(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "64", "-q"]) == 0
    ingested = json.loads(capsys.readouterr().out)
    assert ingested["ingested"] == ingested["chunks"] == 38

    assert main(["search", "--memory", memory, "--request", str(EXAMPLE / "request.json"), "--hashing-dim", "64"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["query_id"] == "mem_req_99214"
    assert response["total_retrieved"] == 5
    assert {r["chunk_id"] for r in response["results"]} <= PRODUCTION_BILLING
    assert response["results"][0]["chunk_id"] == "inc-0412-billing-504-pool"

    assert (
        main(
            [
                "search",
                "ERR_CONN_RESET",
                "--memory",
                memory,
                "--top-k",
                "2",
                "--sparse-weight",
                "1",
                "--dense-weight",
                "0",
                "--hashing-dim",
                "64",
            ]
        )
        == 0
    )
    response = json.loads(capsys.readouterr().out)
    assert response["total_retrieved"] == 2
    assert "ERR_CONN_RESET" in response["results"][0]["text"]  # the one note that names it
    assert "ERR_CONN_RESET" not in response["results"][1]["text"]

    assert main(["stats", "--memory", memory, "--hashing-dim", "64"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["chunks"], stats["dense_vectors"], stats["bm25_documents"]) == (38, 38, 38)


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8"]) == 2  # a typo must not create one
    assert "no memory at" in capsys.readouterr().err
    assert not (tmp_path / "mem").exists()
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8", "--filter", '{"a": {"$regex": "b"}}']) == 2
    assert "unknown operator '$regex'" in capsys.readouterr().err
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "8", "--top-k", "0"]) == 2
    assert "top_k" in capsys.readouterr().err
    assert main(["search", "x", "--memory", memory, "--hashing-dim", "0"]) == 2
    assert "--hashing-dim must be >= 1" in capsys.readouterr().err
    request = tmp_path / "list.json"
    request.write_text("[1, 2]")
    assert main(["search", "--memory", memory, "--hashing-dim", "8", "--request", str(request)]) == 2
    assert "one JSON object" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "nope.csv"), "--memory", memory, "--hashing-dim", "8"]) == 2
    assert ".jsonl" in capsys.readouterr().err


def test_a_failed_ingest_says_what_was_stored(tmp_path, capsys):
    lines = (EXAMPLE / "notes.jsonl").read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:3] + ["{not json"]) + "\n")
    assert main(["ingest", str(broken), "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "-q"]) == 2
    err = capsys.readouterr().err
    assert (
        "line 4" in err
        and f"nothing was stored, so the folder this run created for the memory, {tmp_path / 'm'}" in err
    )


def test_same_named_folders_are_not_overwritten(tmp_path, capsys):
    for team, text in (("a", "alpha ERR_A1"), ("b", "beta ERR_B1")):
        (tmp_path / team / "runbooks").mkdir(parents=True)
        (tmp_path / team / "runbooks" / "x.md").write_text(text)
    memory = str(tmp_path / "mem")
    args = ["--memory", memory, "--hashing-dim", "16", "-q"]
    assert main(["ingest", str(tmp_path / "a" / "runbooks"), *args]) == 0
    assert main(["ingest", str(tmp_path / "b" / "runbooks"), *args]) == 2
    assert "--id-prefix" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "b" / "runbooks"), *args, "--id-prefix", "b/runbooks/"]) == 0
    assert main(["ingest", str(tmp_path / "a" / "runbooks"), *args]) == 0  # re-ingesting the same folder is fine
    capsys.readouterr()
    assert main(["search", "ERR_A1 ERR_B1", "--memory", memory, "--hashing-dim", "16", "--top-k", "5"]) == 0
    ids = sorted(r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"])
    assert ids == ["b/runbooks/x.md#0", "runbooks/x.md#0"]


# -- what the commands create, and when they refuse (issue 12 review) --------------------------------------------
@pytest.mark.parametrize(
    "command, message",
    [
        (["search", "x"], "no memory at {}; create it with: hybrid-memory ingest"),
        (["stats"], "no memory at {}; create it with: hybrid-memory ingest"),
        (["delete", "x"], "no memory at {}; create it with: hybrid-memory ingest"),
        (["mcp"], "no memory at {}; create it with: hybrid-memory ingest"),
        (["graph", "build"], "no memory at {}; create it with: hybrid-memory ingest"),
        (["graph", "show"], "no graph in {}/graph; run `hybrid-memory graph build --memory {}` first"),
        (["graph", "ask", "who?"], "no memory at {}; create it with: hybrid-memory ingest"),
    ],
)
def test_reading_commands_never_create_a_memory(tmp_path, capsys, command, message):
    missing = tmp_path / "typo"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*command, "--memory", str(empty), "--hashing-dim", "8"]) == 2
    assert message.format(empty, empty) in capsys.readouterr().err
    if command[0] != "graph":
        assert main([*command, "--memory", str(missing), "--hashing-dim", "8"]) == 2
        assert message.format(missing, missing) in capsys.readouterr().err
    assert not missing.exists() and list(empty.iterdir()) == []


@pytest.mark.parametrize("command", [["graph", "show"], ["graph", "ask", "who?"]])
def test_graph_show_and_ask_on_a_folder_that_does_not_exist_say_so(tmp_path, capsys, command):
    """A fresh user's finding: graph show on a mistyped --memory advised `graph build`, which cannot help."""
    missing = tmp_path / "typo"
    assert main([*command, "--memory", str(missing), "--hashing-dim", "8"]) == 2
    assert capsys.readouterr().err == (
        f"hybrid-memory: error: no memory at {missing}: the folder does not exist; check --memory (the folder ingest "
        f"wrote), or create a memory with: hybrid-memory ingest FILE_OR_FOLDER --memory {missing}\n"
    )
    assert not missing.exists()


def test_the_help_says_which_commands_create_the_memory(capsys):
    from hybrid_memory.cli.app import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for name in ("search", "stats", "delete", "mcp"):
        help_text = " ".join(sub[name].format_help().split())
        assert "an existing memory directory (never created: a missing one is an error, exit code 2" in help_text
        assert "created if absent" not in help_text
    assert "memory directory (created if absent)" in " ".join(sub["ingest"].format_help().split())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--chunk-size", "0"], "--chunk-size must be >= 1 (characters), got 0"),
        (["--metadata", "$team=sre"], "--metadata: metadata key '$team' cannot be filtered on"),
        (["--metadata", "team"], "--metadata takes key=value, got 'team'"),
        (["--user-id", " "], "invalid scope: user_id"),
    ],
)
def test_ingest_refuses_bad_arguments_before_creating_the_memory(tmp_path, capsys, extra, message):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("alpha ERR_A1")
    memory = tmp_path / "mem"
    assert main(["ingest", str(tmp_path / "docs"), "--memory", str(memory), "--hashing-dim", "8", "-q", *extra]) == 2
    assert message in capsys.readouterr().err
    assert not memory.exists()


def test_ingest_refuses_an_unknown_file_kind_before_creating_the_memory(tmp_path, capsys):
    (tmp_path / "notes.csv").write_text("a,b\n")
    memory = tmp_path / "mem"
    assert (
        main(
            [
                "ingest",
                str(EXAMPLE / "notes.jsonl"),
                str(tmp_path / "notes.csv"),
                "--memory",
                str(memory),
                "--hashing-dim",
                "8",
                "-q",
            ]
        )
        == 2
    )
    assert "notes.csv: give a BEIR-style .jsonl file or a folder of .md/.txt files" in capsys.readouterr().err
    assert not memory.exists()  # the valid first path was not ingested either


def test_a_small_chunk_size_works(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("alpha beta gamma delta epsilon zeta eta theta")
    assert (
        main(
            [
                "ingest",
                str(tmp_path / "docs"),
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "8",
                "-q",
                "--chunk-size",
                "12",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["chunks"] == summary["ingested"] == 4
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(8)) as mem:
        assert [c.text for c in mem.iter_chunks()] == ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]


def test_unreadable_files_of_a_folder_are_skipped_counted_and_logged(tmp_path, capsys, caplog, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("alpha ERR_GOOD1")
    (docs / "latin1.txt").write_bytes(b"caf\xe9 ERR_LATIN1")
    (docs / "binary.txt").write_bytes(b"PK\x03\x04\x00\x00 ERR_BIN")
    (docs / "locked.md").write_text("ERR_LOCKED")
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):  # root ignores chmod, so the permission error is simulated
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(docs), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ingested"], summary["skipped_files"], summary["chunks"]) == (1, 3, 1)
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert warnings == [
        "3 unreadable files were skipped (listed above); fix them and run the same command again",
        f"skipped {docs / 'binary.txt'}: holds a NUL character at offset 4 (a binary file?); text chunks cannot hold NUL",
        f"skipped {docs / 'latin1.txt'}: not valid UTF-8 (invalid continuation byte at byte 3); convert it to UTF-8",
        f"skipped {docs / 'locked.md'}: cannot be read (Permission denied)",
    ]
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert [c.chunk_id for c in mem.iter_chunks()] == ["docs/good.md#0"]


def test_jsonl_lines_carry_their_scope_and_validity(tmp_path, capsys):
    from hybrid_memory import HashingEmbedder, HybridMemory

    lines = [
        {
            "_id": "n1",
            "text": "Dana works on project Apollo",
            "user_id": "dana",
            "tenant": "acme",
            "valid_from": "2024-01-01T00:00:00Z",
            "valid_to": 1717200000,
        },
        {
            "_id": "n2",
            "text": "Dana moved to project Zeus",
            "user_id": "dana",
            "session_id": "s-7",
            "agent_id": "planner",
            "valid_from": 1717200000,
        },
        {"_id": "n3", "text": "shared runbook"},
    ]
    corpus = tmp_path / "facts.jsonl"
    corpus.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(corpus), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    capsys.readouterr()
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        n1, n2, n3 = mem.get(["n1", "n2", "n3"])
        assert (n1.tenant, n1.user_id, n1.agent_id, n1.session_id) == ("acme", "dana", None, None)
        assert (n1.valid_from, n1.valid_to) == (1704067200.0, 1717200000.0)
        assert (n2.tenant, n2.user_id, n2.agent_id, n2.session_id) == (None, "dana", "planner", "s-7")
        assert (n2.valid_from, n2.valid_to) == (1717200000.0, None)
        assert (n3.user_id, n3.valid_from) == (None, None)
        assert [c.chunk_id for c in mem.scoped(user_id="dana").iter_chunks()] == ["n1", "n2"]
        assert [r.chunk_id for r in mem.search("Dana project", as_of="2024-03-01", top_k=5).results] == ["n1", "n3"]


def test_a_bad_scope_or_time_on_a_jsonl_line_names_the_line(tmp_path, capsys):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(
        json.dumps({"_id": "a", "text": "ok"})
        + "\n"
        + json.dumps({"_id": "b", "text": "x", "valid_from": 20, "valid_to": 10})
        + "\n"
    )
    assert main(["ingest", str(corpus), "--memory", str(tmp_path / "mem"), "--hashing-dim", "8", "-q"]) == 2
    err = capsys.readouterr().err
    assert (
        "bad.jsonl, line 2: invalid document 'b'" in err
        and (
            "valid_to must be after valid_from, got valid_from 1970-01-01T00:00:20Z (Unix 20) and valid_to "
            "1970-01-01T00:00:10Z (Unix 10)"
        )
        in err
    )


def test_ingest_scope_options_stamp_every_chunk(tmp_path, capsys):
    from hybrid_memory import HashingEmbedder, HybridMemory

    docs = tmp_path / "runbooks"
    docs.mkdir()
    (docs / "db.md").write_text("restart db-prod-3 ERR_DB1")
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "alice's note ERR_J1"}) + "\n")
    memory = str(tmp_path / "mem")
    assert (
        main(
            [
                "ingest",
                str(docs),
                str(corpus),
                "--memory",
                memory,
                "--hashing-dim",
                "8",
                "-q",
                "--tenant",
                "acme",
                "--user-id",
                "alice",
                "--agent-id",
                "ops",
                "--session-id",
                "s1",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["scope"] == {"tenant": "acme", "user_id": "alice", "agent_id": "ops", "session_id": "s1"}
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        chunks = list(mem.iter_chunks())
        # the administrator's view shows stored ids: a scoped ingest writes under the scope's namespace
        key = mem.scoped(tenant="acme", user_id="alice", agent_id="ops", session_id="s1").scope.key()
        assert [c.chunk_id for c in chunks] == [f"{key}:runbooks/db.md#0", f"{key}:j1"]
        assert {(c.tenant, c.user_id, c.agent_id, c.session_id) for c in chunks} == {("acme", "alice", "ops", "s1")}
        mem.upsert([{"chunk_id": "bob-1", "text": "bob's note", "user_id": "bob"}])
    # a line that names another owner is refused; an id another scope holds is a fresh id in this one
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"_id": "x1", "text": "t", "user_id": "bob"}) + "\n")
    assert main(["ingest", str(other), "--memory", memory, "--hashing-dim", "8", "-q", "--user-id", "alice"]) == 2
    assert "chunk 'x1' has user_id='bob' but this view is bound to user_id='alice'" in capsys.readouterr().err
    taken = tmp_path / "taken.jsonl"
    taken.write_text(json.dumps({"_id": "bob-1", "text": "overwrite"}) + "\n")
    assert main(["ingest", str(taken), "--memory", memory, "--hashing-dim", "8", "-q", "--user-id", "alice"]) == 0
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        assert mem.get(["bob-1"])[0].text == "bob's note" and mem.get(["x1"]) == []
        assert [c.text for c in mem.scoped(user_id="alice").get(["bob-1"])] == ["overwrite"]


def test_broken_symlinks_in_a_folder_are_skipped_counted_and_named(tmp_path, capsys, caplog):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "good.md").write_text("alpha ERR_GOOD1")
    (docs / "gone.md").symlink_to(tmp_path / "deleted.md")  # a real dangling link
    (docs / "sub" / "loop.txt").symlink_to("loop.txt")  # a link to itself: ELOOP
    (docs / "alias.md").symlink_to(docs / "good.md")  # a link that works is read as its target
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(docs), "--memory", memory, "--hashing-dim", "8", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ingested"], summary["skipped_files"], summary["chunks"]) == (2, 2, 2)
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert warnings == [
        "2 unreadable files were skipped (listed above); fix them and run the same command again",
        f"skipped {docs / 'gone.md'}: a broken symbolic link to {tmp_path / 'deleted.md'} (No such file or directory); "
        "fix or remove the link",
        f"skipped {docs / 'sub' / 'loop.txt'}: a broken symbolic link to loop.txt (Too many levels of symbolic links); "
        "fix or remove the link",
    ]


def _bad_corpus(tmp_path, good_lines):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"n{i}", "text": f"note {i}"}) + "\n" for i in range(good_lines))
        + json.dumps({"_id": "bad"})
        + "\n"
    )
    return corpus


def test_a_failed_first_batch_removes_the_memory_folder_the_ingest_created(tmp_path, capsys):
    corpus = _bad_corpus(tmp_path, 3)  # the bad line is in the first batch: nothing is stored
    memory = tmp_path / "new" / "deep" / "mem"
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 2
    assert capsys.readouterr().err == (
        f'hybrid-memory: error: {corpus}, line 4: missing \'text\' (use "text": "" with a title-only document) '
        f"(nothing was stored, so the folder this run created for the memory, {tmp_path / 'new'}, was removed; fix "
        "the input and run the same command again)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]  # new/, new/deep/ and mem/ are gone


def _ctrl_c() -> None:
    raise KeyboardInterrupt  # Ctrl-C while the first batch is embedded


def _sigterm() -> None:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGTERM)  # what timeout, docker stop and systemd send
    raise AssertionError("the SIGTERM handler raises before this line")  # pragma: no cover


@pytest.mark.parametrize(("interrupt", "name", "code"), [(_ctrl_c, "Ctrl-C", 130), (_sigterm, "SIGTERM", 143)])
def test_an_ingest_interrupted_before_its_first_batch_removes_the_folder_it_created(
    tmp_path, monkeypatch, capsys, interrupt, name, code
):
    # one line and exit 130 / 143, not a traceback, and SIGTERM runs Ctrl-C's clean-up (fresh users' findings)
    import signal

    import hybrid_memory.cli.app as cli

    before = signal.getsignal(signal.SIGTERM)

    def interrupted(memory, chunks, **kwargs):
        next(iter(chunks))
        interrupt()

    monkeypatch.setattr(cli, "_ingest", interrupted)
    corpus = _bad_corpus(tmp_path, 3)
    assert main(["ingest", str(corpus), "--memory", str(tmp_path / "mem"), "--hashing-dim", "8", "-q"]) == code
    assert capsys.readouterr().err == (
        f"hybrid-memory: interrupted ({name}); nothing was stored, so the folder this run created for the memory, "
        f"{tmp_path / 'mem'}, was removed; run the same command again\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is gone again


def test_a_failed_first_batch_keeps_a_folder_that_existed_with_its_contents(tmp_path, capsys):
    from hybrid_memory import HashingEmbedder, HybridMemory

    corpus = _bad_corpus(tmp_path, 3)
    memory = tmp_path / "mem"
    memory.mkdir()
    (memory / "notes.txt").write_text("mine")
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 2
    assert capsys.readouterr().err.endswith(
        "(the memory now holds 0 chunks, 0 new from this run; ingest is an upsert, so fix the input and run the "
        "same command again)\n"
    )
    assert (memory / "notes.txt").read_text() == "mine" and (memory / "store.sqlite3").is_file()
    # an existing memory with chunks is never removed either, nor one whose first batch was stored
    with HybridMemory.open(memory, embedder=HashingEmbedder(8)) as mem:
        mem.upsert([{"chunk_id": "kept", "text": "kept note"}])
    assert main(["ingest", str(corpus), "--memory", str(memory), "--hashing-dim", "8", "-q"]) == 2
    assert "(the memory now holds 1 chunk, 0 new from this run;" in capsys.readouterr().err
    second = tmp_path / "second"
    assert main(["ingest", str(_bad_corpus(tmp_path, 256)), "--memory", str(second), "--hashing-dim", "8", "-q"]) == 2
    assert "(the memory now holds 256 chunks, 256 new from this run;" in capsys.readouterr().err
    with HybridMemory.open(second, embedder=HashingEmbedder(8)) as mem:
        assert mem.count() == 256


def test_ingest_warnings_print_on_lines_of_their_own_with_or_without_a_terminal(tmp_path):
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios
    import tty

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").symlink_to(tmp_path / "deleted.md")  # read first: its warning comes while the bar is drawn
    (docs / "b.md").write_text("beta ERR_B1")

    def ingest(*extra, terminal=False):  # the real command in its own process: its root logger has the console handler
        command = [
            sys.executable,
            "-c",
            "from hybrid_memory.cli.app import main; raise SystemExit(main())",
            "ingest",
            str(docs),
            "--memory",
            str(tmp_path / "mem"),
            "--hashing-dim",
            "8",
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        if not terminal:  # stderr a pipe, as with 2>log
            return subprocess.run(command, capture_output=True, check=True, env=env).stderr.decode()
        leader, follower = pty.openpty()
        tty.setraw(follower)  # no \n -> \r\n translation: the bytes as written
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a new pty is 0 columns wide
        try:
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=follower, check=True, env=env)
        finally:
            os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the follower side is closed and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        return b"".join(chunks).decode()  # bytes: text mode would turn the bar's \r into \n

    warning = (
        f"WARNING hybrid_memory.cli.app: skipped {docs / 'a.md'}: a broken symbolic link to {tmp_path / 'deleted.md'} "
        "(No such file or directory); fix or remove the link\n"
    )
    summary = (
        "WARNING hybrid_memory.cli.app: 1 unreadable file was skipped (listed above); fix it and run the same "
        "command again\n"
    )
    # not a terminal (a log file, a pipe): no bar, so each record is a line of its own, nothing before it
    assert ingest() == warning + summary
    assert ingest("-q") == warning + summary
    # a terminal: tqdm.write clears the bar's line (\r, blanks, \r), prints the record, redraws the bar
    bar = "\ringesting: 0chunk [00:00, ?chunk/s]"
    stderr = ingest(terminal=True)
    assert stderr.startswith(f"{bar}\r{' ' * (len(bar) - 1)}\r{warning}\ringesting: 0chunk [")
    assert stderr.endswith(f"]\n{summary}") and stderr.count("WARNING") == 2 and "]WARNING" not in stderr
    assert ingest("-q", terminal=True) == warning + summary


def test_logs_above_bar_routes_records_and_warnings_through_tqdm_write_only_when_enabled():
    import logging
    import sys
    import warnings

    from hybrid_memory.cli.app import logs_above_bar

    class Bar:
        written: list[str] = []

        @classmethod
        def write(cls, text, file=None):
            cls.written.append(text)

    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(console)
    try:
        with logs_above_bar(True, Bar):
            logging.getLogger("hybrid_memory.test").warning("skipped x")
            warnings.warn("deprecated y", UserWarning, stacklevel=1)
        with logs_above_bar(False, Bar), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logging.getLogger("hybrid_memory.test").warning("not through the bar")
            warnings.warn("nor this", UserWarning, stacklevel=1)
    finally:
        root.removeHandler(console)
    assert Bar.written[0] == "WARNING skipped x"
    assert (
        Bar.written[1]
        .splitlines()[0]
        .endswith("test_cli.py:" + Bar.written[1].split(":")[1] + ": UserWarning: deprecated y")
    )
    assert len(Bar.written) == 2
    assert [str(w.message) for w in caught] == ["nor this"]
    assert root.handlers.count(console) == 0 and console not in root.handlers  # the redirect put the handler back


def test_search_scope_returns_only_that_scopes_chunks(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    for user, ids in (("alice", ("a1", "a2")), ("bob", ("b1", "b2"))):
        corpus = tmp_path / f"{user}.jsonl"
        corpus.write_text("".join(json.dumps({"_id": i, "text": f"billing error E42 note {i}"}) + "\n" for i in ids))
        assert main(["ingest", str(corpus), "--memory", memory, "--hashing-dim", "16", "-q", "--user-id", user]) == 0
    capsys.readouterr()

    def ids(*extra):
        assert main(["search", "billing E42", "--memory", memory, "--hashing-dim", "16", "--top-k", "10", *extra]) == 0
        return sorted(r["chunk_id"] for r in json.loads(capsys.readouterr().out)["results"])

    alice, bob = (Scope(user_id=u).key() for u in ("alice", "bob"))  # unscoped: the stored ids
    assert ids() == sorted([f"{alice}:a1", f"{alice}:a2", f"{bob}:b1", f"{bob}:b2"])
    assert ids("--scope", "user_id=alice") == ["a1", "a2"]
    assert ids("--scope", "user_id=bob") == ["b1", "b2"]
    assert ids("--scope", "user_id=carol") == []
    assert ids("--scope", "user_id=bob", "--scope", "tenant=acme") == []  # both fields bind
    assert ids("--user-id", "alice") == ["a1", "a2"]  # ingest's option names work too
    assert ids("--user-id", "bob", "--scope", "user_id=bob") == ["b1", "b2"]
    assert (
        main(
            [
                "search",
                "billing",
                "--memory",
                memory,
                "--hashing-dim",
                "16",
                "--user-id",
                "bob",
                "--scope",
                "user_id=alice",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --user-id bob and --scope user_id=alice disagree; give user_id once\n"
    )
    assert main(["search", "billing", "--memory", memory, "--hashing-dim", "16", "--scope", "user_id"]) == 2
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope takes FIELD=VALUE (tenant, user_id, agent_id, session_id), got 'user_id'\n"
    )
    # one field, two values: refused in either form (argparse and a dict kept the last; a fresh user's finding)
    assert ids("--user-id", "alice", "--user-id", "alice") == ["a1", "a2"]  # the same value twice is one
    assert (
        main(
            [
                "search",
                "billing",
                "--memory",
                memory,
                "--hashing-dim",
                "16",
                "--scope",
                "user_id=alice",
                "--scope",
                "user_id=bob",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        "hybrid-memory: error: --scope user_id=alice and --scope user_id=bob disagree; give user_id once\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "billing", "--memory", memory, "--user-id", "alice", "--user-id", "bob"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(
        "hybrid-memory search: error: --user-id alice and --user-id bob disagree; give --user-id once\n"
    )


def test_ingest_never_reads_the_memorys_own_files(tmp_path, capsys):
    from hybrid_memory import HybridMemory

    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("alpha runbook", encoding="utf-8")
    (docs / "sub" / "c.txt").write_text("gamma guide", encoding="utf-8")
    memory = docs / "mem"
    args = ["--memory", str(memory), "--hashing-dim", "16", "-q"]
    assert main(["ingest", str(docs), *args]) == 0
    (memory / "notes.md").write_text("a note left inside the memory folder", encoding="utf-8")
    # run again, as a user re-ingests an edited folder: the memory (now inside docs) is skipped
    assert main(["ingest", str(docs), *args]) == 0
    summaries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(s["ingested"], s["chunks"], s["skipped_files"]) for s in summaries] == [(2, 2, 0), (2, 2, 0)]
    with HybridMemory.open(memory) as opened:
        assert sorted(c.chunk_id for c in opened.iter_chunks()) == ["docs/a.md#0", "docs/sub/c.txt#0"]


@pytest.mark.parametrize("memory_of", [lambda docs: docs, lambda docs: docs.parent])
def test_ingest_refuses_a_memory_that_is_the_ingested_folder_before_creating_it(tmp_path, capsys, memory_of):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("alpha runbook", encoding="utf-8")
    memory = memory_of(docs)
    assert main(["ingest", str(docs), "--memory", str(memory), "--hashing-dim", "16", "-q"]) == 2
    assert (
        f"--memory {memory} is the folder being ingested ({docs}) or holds it; keep the memory in a folder of "
        f"its own, e.g. --memory {tmp_path / 'docs-memory'}"
    ) in capsys.readouterr().err
    assert sorted(p.name for p in memory.iterdir()) == (["a.md"] if memory == docs else ["docs"])  # nothing created


def test_ingest_of_the_memory_folder_itself_is_refused_and_keeps_its_chunks(tmp_path, capsys):
    memory = tmp_path / "mem"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("alpha runbook", encoding="utf-8")
    assert main(["ingest", str(notes), "--memory", str(memory), "--hashing-dim", "16", "-q"]) == 0
    capsys.readouterr()
    assert main(["ingest", str(memory / "bm25"), "--memory", str(tmp_path / "other"), "--hashing-dim", "16", "-q"]) == 2
    assert f"lies inside {memory}, which is a memory's own folder (it holds store.sqlite3)" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()  # refused before the target memory was created
    assert main(["stats", "--memory", str(memory), "--hashing-dim", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 1


def test_search_fusion_flag_takes_the_registrys_methods(tmp_path, capsys):
    from hybrid_memory.cli.app import build_parser
    from hybrid_memory.fusion import FUSION_METHODS

    search = build_parser()._subparsers._group_actions[0].choices["search"]
    [fusion] = [a for a in search._actions if a.dest == "fusion"]
    assert fusion.choices[0] == "adaptive" and sorted(fusion.choices) == sorted(FUSION_METHODS)  # the default first
    assert fusion.default is None
    assert "adaptive" in fusion.help and "Cormack et al. 2009" in fusion.help  # documented in --help

    memory = str(tmp_path / "mem")
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "64", "-q"]) == 0
    capsys.readouterr()
    base = ["search", "ERR_CONN_RESET", "--memory", memory, "--hashing-dim", "64", "--top-k", "3"]
    assert main([*base, "--fusion", "rrf"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["fusion"] == "rrf" and all(r["score"] is None for r in response["results"])
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["fusion"] == "adaptive"  # no flag: the core's default
    # --fusion replaces the --request file's hybrid_params.fusion, and keeps the file's weights
    request = tmp_path / "req.json"
    request.write_text(
        json.dumps(
            {
                "search_text": "ERR_CONN_RESET",
                "top_k": 3,
                "hybrid_params": {"fusion": "dbsf", "dense_weight": 0.25, "sparse_weight": 1},
            }
        )
    )
    assert (
        main(["search", "--request", str(request), "--memory", memory, "--hashing-dim", "64", "--fusion", "rrf"]) == 0
    )
    response = json.loads(capsys.readouterr().out)
    # the weights are reported convex (0.25 / 1.25 and 1 / 1.25); the RRF arithmetic uses them as given
    assert response["fusion"] == "rrf" and response["effective_weights"] == {"dense": 0.2, "sparse": 0.8}
    first = response["results"][0]
    assert first["rrf_score"] == pytest.approx(
        (1.0 / (60 + first["sparse_rank"]) if first["sparse_rank"] else 0.0)
        + (0.25 / (60 + first["dense_rank"]) if first["dense_rank"] else 0.0),
        rel=1e-12,
    )
    with pytest.raises(SystemExit) as exc:
        main([*base, "--fusion", "bogus"])
    assert exc.value.code == 2
    assert "argument --fusion: invalid choice: 'bogus'" in capsys.readouterr().err


def test_a_folder_ingest_that_reads_no_file_says_so(tmp_path, capsys, caplog):
    # a fresh user's finding: a folder of .rst and .MD files gave 0 chunks, exit 0 and no word
    folder = tmp_path / "rst"
    folder.mkdir()
    (folder / "a.rst").write_text("hello")
    (folder / "C.MD").write_text("hi")
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(folder), "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 0
    assert [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.cli.app"] == [
        f"no file under {folder} was read: only names ending in .md or .txt, as written, are read (a.MD and "
        "notes.markdown are not); rename the files to read them",
        f"nothing was stored, so the folder this run created for the memory, {tmp_path / 'm'}, was removed",
    ]
    assert not (tmp_path / "m").exists()
    caplog.clear()
    (folder / "b.md").write_text("# runbook\nrestart the consumer")
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert main(["ingest", str(folder), "--memory", str(tmp_path / "m"), "--hashing-dim", "8", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 1
    assert [r for r in caplog.records if r.name == "hybrid_memory.cli.app"] == []


def test_metadata_named_like_a_scope_field_gets_a_warning(tmp_path, capsys, caplog):
    # a fresh user's finding: --metadata tenant=acme wrote metadata, and search --tenant acme then found nothing
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "text": "billing error E42"}) + "\n")
    with caplog.at_level("WARNING", logger="hybrid_memory.cli.app"):
        assert (
            main(
                [
                    "ingest",
                    str(corpus),
                    "--memory",
                    str(tmp_path / "m"),
                    "--hashing-dim",
                    "8",
                    "-q",
                    "--metadata",
                    "user_id=alice",
                    "--metadata",
                    "team=sre",
                ]
            )
            == 0
        )
    capsys.readouterr()
    assert [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.cli.app"] == [
        "--metadata user_id=... writes a metadata key, not the scope field user_id: search --user-id (or --scope "
        "user_id=...) will not find these chunks by it; to stamp the scope, give --user-id instead"
    ]


def test_graph_build_on_an_unknown_scope_names_the_first_five_values_of_each_field(tmp_path, capsys):
    memory = tmp_path / "mem"
    with HybridMemory(memory, embedder=HashingEmbedder(8)) as mem:
        mem.add(
            [{"chunk_id": f"c{i}", "text": f"note {i}", "user_id": f"u{i}"} for i in (6, 1, 3, 5, 2, 4)]
            + [{"chunk_id": "none", "text": "no user"}]
        )
        assert mem.backend.store.scope_values("user_id", 5) == [
            "u1",
            "u2",
            "u3",
            "u4",
            "u5",
            "u6",
        ]  # limit + 1, no None
        assert mem.backend.store.scope_values("tenant") == []
    assert (
        main(
            [
                "graph",
                "build",
                "--memory",
                str(memory),
                "--hashing-dim",
                "8",
                "--scope",
                "tenant=acme",
                "--scope",
                "user_id=u9",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        f"hybrid-memory: error: 0 chunks matched --scope tenant=acme --scope user_id=u9 (the memory at {memory} holds 7 "
        "chunks; its tenant values: none (no chunk has a tenant); its user_id values: 'u1', 'u2', 'u3', 'u4', 'u5', "
        "...), so no graph was built; give --scope values the chunks hold (each field must equal the chunks' own, as "
        "ingest stamped them), or leave --scope out to build the whole memory's graph\n"
    )
    assert not (memory / "graph_scopes").exists()


def test_graph_build_on_a_scope_of_no_chunks_says_so_and_builds_nothing(tmp_path, capsys):
    """A fresh user's finding: graph build --scope of a value no chunk holds saved an empty graph with no word."""
    memory = tmp_path / "mem"
    with HybridMemory(memory, embedder=HashingEmbedder(8)) as mem:
        mem.add([{"chunk_id": "a", "text": "Dana prefers PostgreSQL at Acme Corp", "user_id": "u1"}])
    assert main(["graph", "build", "--memory", str(memory), "--hashing-dim", "8", "--scope", "user_id=u2"]) == 2
    assert capsys.readouterr().err == (  # it advised `stats`, which has no --scope: now the values held are named
        f"hybrid-memory: error: 0 chunks matched --scope user_id=u2 (the memory at {memory} holds 1 chunk; its user_id "
        "values: 'u1'), so no graph was built; give --scope values the chunks hold (each field must equal the chunks' "
        "own, as ingest stamped them), or leave --scope out to build the whole memory's graph\n"
    )
    assert not (memory / "graph_scopes").exists()
    empty = tmp_path / "empty"
    HybridMemory(empty, embedder=HashingEmbedder(8)).close()
    assert main(["graph", "build", "--memory", str(empty), "--hashing-dim", "8"]) == 2
    assert capsys.readouterr().err == (
        f"hybrid-memory: error: the memory at {empty} holds 0 chunks, so no graph was built; add some first: "
        f"hybrid-memory ingest FILE_OR_FOLDER --memory {empty}\n"
    )
    assert not (empty / "graph").exists()


def test_a_filter_that_is_not_json_shows_how_to_quote_one(tmp_path, capsys):
    memory = str(tmp_path / "mem")
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", memory, "--hashing-dim", "64", "-q"]) == 0
    capsys.readouterr()
    for given in ("environment=production", "{'environment': 'production'}"):
        assert main(["search", "504", "--memory", memory, "--hashing-dim", "64", "--filter", given]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hybrid-memory: error: --filter: invalid JSON (")
        assert err.rstrip().endswith(
            "give a JSON object in single quotes for the shell, with double quotes inside: "
            '--filter \'{"environment": "production"}\''
        )
