"""``hybrid-memory delete``: chunks deleted by id through HybridMemory.delete, reported as one JSON line; and what the
commands say about a memory folder whose store.sqlite3 was lost."""

import json
import logging
from pathlib import Path

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli.app import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "incident_memory"
POOL = "inc-0412-billing-504-pool"


@pytest.fixture
def memory(tmp_path, capsys):
    """The bundled incident memory (38 notes), ingested with the hashing embedder; its folder as a str."""
    folder = str(tmp_path / "mem")
    assert main(["ingest", str(EXAMPLE / "notes.jsonl"), "--memory", folder, "--hashing-dim", "64", "-q"]) == 0
    capsys.readouterr()
    return folder


def search_ids(capsys, memory, text, *options):
    """The chunk ids `hybrid-memory search` prints for ``text`` (every chunk it ranks, up to 38)."""
    assert main(["search", text, "--memory", memory, "--hashing-dim", "64", "--top-k", "38", *options]) == 0
    return [result["chunk_id"] for result in json.loads(capsys.readouterr().out)["results"]]


def test_delete_prints_what_it_deleted_and_search_no_longer_finds_it(memory, capsys, caplog):
    assert POOL in search_ids(capsys, memory, "HTTP 504 PostgreSQL connection pool")
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.cli.app"):
        assert main(["delete", "--memory", memory, POOL, "no-such-note", POOL]) == 0
    out = capsys.readouterr().out
    assert out == f'{{"deleted": ["{POOL}"], "not_found": ["no-such-note"], "chunks": 37, "memory": "{memory}"}}\n'
    assert [record.getMessage() for record in caplog.records] == [
        "1 id not found in the memory, so not deleted: no-such-note (ids are matched exactly, as search prints "
        "them; a chunk ingested with a scope option is deleted with the same option)"
    ]
    assert POOL not in search_ids(capsys, memory, "HTTP 504 PostgreSQL connection pool")
    # every engine forgot it: BM25 alone and dense alone, after the memory was closed and reopened
    assert POOL not in search_ids(capsys, memory, "HTTP 504 PostgreSQL connection pool", "--dense-weight", "0")
    assert POOL not in search_ids(capsys, memory, "HTTP 504 PostgreSQL connection pool", "--sparse-weight", "0")
    with HybridMemory.open(memory) as reopened:
        assert reopened.get([POOL]) == [] and reopened.count() == 37
        stats = reopened.stats()
        assert (stats["chunks"], stats["dense_vectors"], stats["bm25_documents"]) == (37, 37, 37)
    # deleting again is safe: nothing is stored under the id any more, and the run says so
    assert main(["delete", "--memory", memory, POOL]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": [], "not_found": [POOL], "chunks": 37, "memory": memory}


def test_delete_goes_through_the_public_delete(memory, capsys, monkeypatch):
    calls = []
    original = HybridMemory.delete

    def spy(self, chunk_ids, **kwargs):
        calls.append((list(chunk_ids), kwargs))
        return original(self, chunk_ids, **kwargs)

    monkeypatch.setattr(HybridMemory, "delete", spy)
    assert main(["delete", "--memory", memory, POOL, "rb-postgres-pool-triage"]) == 0
    assert calls == [([POOL, "rb-postgres-pool-triage"], {})]
    assert json.loads(capsys.readouterr().out)["deleted"] == [POOL, "rb-postgres-pool-triage"]


def test_delete_with_a_scope_deletes_only_that_scope_chunks(tmp_path, capsys):
    folder = tmp_path / "mem"
    with HybridMemory(folder, embedder=HashingEmbedder(16)) as mem:
        mem.scoped({"user_id": "alice"}).add([{"chunk_id": "n1", "text": "alice prefers dark mode"}])
        mem.scoped({"user_id": "bob"}).add([{"chunk_id": "n1", "text": "bob prefers light mode"}])
    memory = str(folder)
    # unscoped, the id is not stored under its plain name (a scoped view namespaces it): reported, nothing deleted
    assert main(["delete", "--memory", memory, "n1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": [], "not_found": ["n1"], "chunks": 2, "memory": memory}
    assert main(["delete", "--memory", memory, "--user-id", "alice", "n1"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "deleted": ["n1"],
        "not_found": [],
        "chunks": 1,
        "memory": memory,
        "scope": {"user_id": "alice"},
    }
    assert main(["delete", "--memory", memory, "--scope", "user_id=alice", "n1"]) == 0
    assert json.loads(capsys.readouterr().out)["not_found"] == ["n1"]
    with HybridMemory.open(folder) as mem:
        assert [c.text for c in mem.scoped({"user_id": "bob"}).get(["n1"])] == ["bob prefers light mode"]
        assert mem.scoped({"user_id": "alice"}).count() == 0


@pytest.mark.parametrize(
    "command, message",
    [
        (
            ["delete", "--memory", "{missing}", "x"],
            "no memory at {missing}; create it with: hybrid-memory ingest FILE_OR_FOLDER --memory {missing}",
        ),
        (
            ["delete", "--memory", "{memory}", "x", "--user-id", "alice", "--scope", "user_id=bob"],
            "--user-id alice and --scope user_id=bob disagree; give user_id once",
        ),
        (
            ["delete", "--memory", "{memory}", "x", "--scope", "user=alice"],
            "invalid scope: 'user' is not a scope field (did you mean 'user_id'?); the scope fields are tenant, "
            "user_id, agent_id, session_id (metadata keys are filtered with metadata_filter instead)",
        ),
    ],
    ids=["missing-memory", "two-scopes", "unknown-scope-field"],
)
def test_delete_errors_are_one_line_exit_2(memory, tmp_path, capsys, command, message):
    missing = tmp_path / "typo"
    argv = [part.format(missing=missing, memory=memory) for part in command]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"hybrid-memory: error: {message.format(missing=missing)}\n"
    assert not missing.exists()
    with HybridMemory.open(memory) as mem:
        assert mem.count() == 38  # nothing was deleted


def test_delete_needs_an_id(memory, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["delete", "--memory", memory])
    assert exit_.value.code == 2
    assert "the following arguments are required: ID" in capsys.readouterr().err


# -- a memory folder whose store.sqlite3 was lost ------------------------------------------------------------------
def lost_store_line(folder, found):
    return (
        f"hybrid-memory: error: {folder} holds a memory's files ({found}) but not its store, store.sqlite3: the store "
        "is the source of truth (the chunks' texts, metadata and vectors) and cannot be rebuilt from the index files; "
        "nothing was changed. Restore store.sqlite3 from a backup (put the copy into an empty folder and open that: "
        f"its indexes are rebuilt from it), or move {folder} aside and ingest the documents into a new memory\n"
    )


@pytest.mark.parametrize(
    "command",
    [["search", "HTTP 504"], ["stats"], ["delete", POOL], ["ingest", str(EXAMPLE / "notes.jsonl"), "-q"]],
    ids=["search", "stats", "delete", "ingest"],
)
@pytest.mark.parametrize("manifest", [True, False], ids=["with-manifest", "index-files-only"])
def test_a_memory_whose_store_was_lost_says_so_and_the_fix(memory, capsys, command, manifest):
    """A fresh user's finding: search on such a folder said only "no memory at ...", and ingest (or search, once
    the manifest was gone too) created an empty store over the index files. Now every command names what is
    missing and the fix, exit code 2, and the folder is left exactly as it was."""
    folder = Path(memory)
    (folder / "store.sqlite3").unlink()
    if not manifest:
        (folder / "manifest.json").unlink()
    before = {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}
    assert main([command[0], "--memory", memory, "--hashing-dim", "64", *command[1:]]) == 2
    found = "indexes.json, bm25/, dense/, filters/"
    captured = capsys.readouterr()
    assert captured.err == lost_store_line(memory, f"manifest.json, {found}" if manifest else found)
    assert captured.out == ""
    after = {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}
    assert after == before


def test_delete_prints_a_non_ascii_id_as_utf8_as_search_does(tmp_path, capsys):
    folder = str(tmp_path / "mem")
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"_id": "alarme-réseau-🔥", "text": "le réseau est tombé"}) + "\n", encoding="utf-8")
    assert main(["ingest", str(notes), "--memory", folder, "--hashing-dim", "64", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 1
    assert main(["delete", "--memory", folder, "alarme-réseau-🔥"]) == 0
    out = capsys.readouterr().out
    assert out == f'{{"deleted": ["alarme-réseau-🔥"], "not_found": [], "chunks": 0, "memory": "{folder}"}}\n'


def test_version_prints_the_package_version(capsys):
    import hybrid_memory

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"hybrid-memory {hybrid_memory.__version__}\n"
