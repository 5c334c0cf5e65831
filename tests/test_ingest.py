"""Tests of hybrid_memory.ingest: BEIR readers and the folder splitter. Small files in tmp_path, exact ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hybrid_memory import Chunk, InvalidRequestError
from hybrid_memory.ingest import (
    beir_chunk_text,
    read_beir_corpus,
    read_qrels,
    read_queries,
    read_text_folder,
)

EXAMPLE_NOTES = Path(__file__).resolve().parents[1] / "examples" / "incident_memory" / "notes.jsonl"


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- read_beir_corpus


def test_beir_corpus_ids_text_source_metadata(tmp_path: Path) -> None:
    corpus = _write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Pool exhausted", "text": "HTTP 504 from billing.", "metadata": {"env": "prod"}},
            {"_id": "d2", "title": "", "text": "No title here."},
            {"_id": 3, "text": "Integer id, no title key."},
        ],
    )
    chunks = list(read_beir_corpus(corpus))
    assert [c.chunk_id for c in chunks] == ["d1", "d2", "3"]
    assert all(isinstance(c, Chunk) for c in chunks)
    assert chunks[0].text == "Pool exhausted\n\nHTTP 504 from billing."
    assert chunks[1].text == "No title here."
    assert chunks[0].metadata == {"env": "prod", "title": "Pool exhausted"}
    assert chunks[1].metadata == {}
    assert {c.source for c in chunks} == {str(corpus)}


def test_beir_corpus_source_override_blank_lines_and_title_only(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '\n{"_id": "a", "title": "Only a title", "text": ""}\n   \n{"_id": "b", "text": "x"}\n', encoding="utf-8"
    )
    chunks = list(read_beir_corpus(corpus, source="kb"))
    assert [(c.chunk_id, c.text, c.source) for c in chunks] == [("a", "Only a title", "kb"), ("b", "x", "kb")]


def test_beir_corpus_keeps_explicit_metadata_title(tmp_path: Path) -> None:
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "title": "T", "text": "x", "metadata": {"title": "M"}}])
    assert next(read_beir_corpus(corpus)).metadata == {"title": "M"}


def test_beir_chunk_text() -> None:
    assert beir_chunk_text("Title", "Body") == "Title\n\nBody"
    assert beir_chunk_text("", "Body") == "Body"
    assert beir_chunk_text("  ", "Body") == "Body"
    assert beir_chunk_text("Title", "") == "Title"
    assert beir_chunk_text("Title ", "Body") == "Title \n\nBody"  # kept as given, not stripped


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: invalid JSON"),
        ('["a", "b"]', "line 2: expected a JSON object"),
        ('{"title": "t", "text": "x"}', "line 2: missing '_id'"),
        ('{"_id": "z", "title": "t"}', "line 2: missing 'text'"),
        ('{"_id": "z", "text": 5}', 'line 2: \'text\' must be a string, got int 5; give a JSON string: "text": "..."'),
        (
            '{"_id": "z", "title": ["a"], "text": "t"}',
            "line 2: 'title' must be a string, got list ['a']; give a JSON string: \"title\": \"...\"",
        ),
        ('{"_id": "z", "text": "x", "metadata": [1]}', "line 2: 'metadata' must be a JSON object"),
        ('{"_id": "z", "text": "   "}', "line 2: invalid document 'z'"),
        ('{"_id": "", "text": "x"}', "line 2: invalid document ''"),
    ],
)
def test_beir_corpus_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"_id": "ok", "text": "fine"}\n' + line + "\n", encoding="utf-8")
    reader = read_beir_corpus(corpus)
    assert next(reader).chunk_id == "ok"  # lazy: lines before the bad one are yielded
    with pytest.raises(InvalidRequestError) as info:
        next(reader)
    assert str(corpus) in str(info.value)
    assert message in str(info.value)


def test_invalid_request_error_is_value_error() -> None:
    assert issubclass(InvalidRequestError, ValueError)


def test_example_notes_are_valid() -> None:
    chunks = list(read_beir_corpus(EXAMPLE_NOTES))
    assert 36 <= len(chunks) <= 48
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    for c in chunks:
        md = c.metadata
        assert set(md) == {"service", "environment", "kind", "severity", "date", "tags", "title"}
        assert md["environment"] in {"production", "staging", "dev"}
        assert md["kind"] in {"incident", "runbook", "postmortem"}
        assert md["severity"] in {1, 2, 3, 4} and type(md["severity"]) is int
        assert md["date"].startswith("2026-")
        assert isinstance(md["tags"], list) and all(isinstance(t, str) for t in md["tags"])
    prod_billing = [
        c.chunk_id
        for c in chunks
        if (c.metadata["environment"], c.metadata["service"]) == ("production", "billing-service")
    ]
    assert len(prod_billing) >= 5
    assert "inc-0412-billing-504-pool" in prod_billing
    staging = next(c for c in chunks if c.chunk_id == "inc-0410-billing-staging-504")
    assert (staging.metadata["service"], staging.metadata["environment"]) == ("billing-service", "staging")


# --------------------------------------------------------------------------- read_text_folder


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "guides").mkdir(parents=True)
    (root / "b.txt").write_text("Alpha beta gamma.", encoding="utf-8")
    (root / "guides" / "a.md").write_text(
        "# Setup\n\nInstall the package.\n\n## Run\n\nStart the worker with make run.\n", encoding="utf-8"
    )
    (root / "empty.md").write_text("  \n\n", encoding="utf-8")
    (root / "skip.rst").write_text("not matched", encoding="utf-8")
    return root


def test_text_folder_one_chunk_per_small_file(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    chunks = list(read_text_folder(root, metadata={"team": "sre", "path": "overridden"}))
    assert [c.chunk_id for c in chunks] == ["kb/b.txt#0", "kb/guides/a.md#0"]
    assert [c.source for c in chunks] == ["kb/b.txt", "kb/guides/a.md"]
    assert chunks[0].text == "Alpha beta gamma."
    assert chunks[1].text == "# Setup\n\nInstall the package.\n\n## Run\n\nStart the worker with make run."
    assert chunks[1].metadata == {
        "team": "sre",
        "path": "kb/guides/a.md",
        "chunk_index": 0,
        "folder": str(root.resolve()),
    }


def test_text_folder_markdown_splits_at_headings(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    chunks = list(read_text_folder(root, chunk_size=40, chunk_overlap=0, glob="**/*.md", id_prefix=""))
    assert [c.chunk_id for c in chunks] == ["guides/a.md#0", "guides/a.md#1"]
    assert [c.text for c in chunks] == ["# Setup\n\nInstall the package.", "## Run\n\nStart the worker with make run."]
    assert [c.metadata["chunk_index"] for c in chunks] == [0, 1]


def test_text_folder_text_splitter_respects_size_and_is_deterministic(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    sentences = " ".join(f"Sentence number {i} mentions ERR_CONN_RESET on db-prod-{i}." for i in range(30))
    (root / "log.txt").write_text(sentences, encoding="utf-8")
    first = list(read_text_folder(root, chunk_size=200, chunk_overlap=50, id_prefix=""))
    second = list(read_text_folder(root, chunk_size=200, chunk_overlap=50, id_prefix=""))
    assert first == second
    assert len(first) > 1
    assert [c.chunk_id for c in first] == [f"log.txt#{n}" for n in range(len(first))]
    assert all(len(c.text) <= 200 for c in first)
    assert first[0].text.startswith("Sentence number 0 ")
    assert first[-1].text.endswith("db-prod-29.")


def test_text_folder_several_globs_read_a_file_once(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    chunks = list(read_text_folder(root, glob=("**/*.md", "guides/*.md", "*.rst"), id_prefix=""))
    assert [c.chunk_id for c in chunks] == ["guides/a.md#0", "skip.rst#0"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
        ({"chunk_size": 100, "chunk_overlap": 100}, "chunk_overlap must be"),
        ({"chunk_overlap": -1}, "chunk_overlap must be"),
    ],
)
def test_text_folder_bad_sizes(tmp_path: Path, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        list(read_text_folder(tmp_path, **kwargs))


def test_text_folder_not_a_directory_and_bad_utf8(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="is not a directory"):
        list(read_text_folder(tmp_path / "missing"))
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(InvalidRequestError, match=r"bad\.txt: not valid UTF-8"):
        list(read_text_folder(tmp_path))


# --------------------------------------------------------------------------- read_queries / read_qrels


def test_read_queries(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "queries.jsonl",
        [{"_id": "q1", "text": "what is bm25", "metadata": {"a": 1}}, {"_id": 2, "text": "rrf"}],
    )
    assert read_queries(path) == {"q1": "what is bm25", "2": "rrf"}
    assert list(read_queries(path)) == ["q1", "2"]


def test_read_queries_errors(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}])
    with pytest.raises(InvalidRequestError, match=r"q\.jsonl, line 2: query id 'q1' appears twice"):
        read_queries(path)
    path = _write_jsonl(tmp_path / "q2.jsonl", [{"_id": "q1"}])
    with pytest.raises(InvalidRequestError, match=r"line 1: missing 'text'"):
        read_queries(path)


def test_read_qrels_with_header(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td7\t2\nq2\td3\t0\n\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d7": 2}, "q2": {"d3": 0}}


def test_read_qrels_without_header_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "plain.tsv"
    path.write_text("q1\td1\t1\r\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match=r"bad\.tsv, line 2: score must be an integer, got 'high'"):
        read_qrels(bad)
    bad.write_text("q1 d1 1\n", encoding="utf-8")
    with pytest.raises(InvalidRequestError, match=r"line 1: expected 3 tab-separated columns"):
        read_qrels(bad)


def test_two_folders_with_the_same_file_names_do_not_collide(tmp_path: Path) -> None:
    for team, text in (("teamA", "restart kafka-broker-1"), ("teamB", "flush the redis cache")):
        (tmp_path / team).mkdir()
        (tmp_path / team / "README.md").write_text(text, encoding="utf-8")
    a = list(read_text_folder(tmp_path / "teamA"))
    b = list(read_text_folder(tmp_path / "teamB"))
    assert [c.chunk_id for c in a + b] == ["teamA/README.md#0", "teamB/README.md#0"]
    assert [c.source for c in a + b] == ["teamA/README.md", "teamB/README.md"]


def test_text_folder_skips_unreadable_files_when_asked(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("alpha")
    (tmp_path / "b.txt").write_bytes(b"caf\xe9")
    (tmp_path / "c.txt").write_text("nul\x00inside")
    skipped: list[tuple[str, str]] = []
    chunks = list(read_text_folder(tmp_path, on_unreadable=lambda path, reason: skipped.append((path.name, reason))))
    assert [c.chunk_id for c in chunks] == [f"{tmp_path.name}/a.md#0"]
    assert skipped == [
        ("b.txt", "not valid UTF-8 (unexpected end of data at byte 3); convert it to UTF-8"),
        ("c.txt", "holds a NUL character at offset 3 (a binary file?); text chunks cannot hold NUL"),
    ]
    with pytest.raises(InvalidRequestError, match=r"c\.txt: holds a NUL character at offset 3"):
        list(read_text_folder(tmp_path, glob="c.txt"))


def test_text_folder_names_a_broken_symlink(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("alpha")
    (tmp_path / "b.md").symlink_to(tmp_path / "missing.md")
    skipped: list[str] = []
    chunks = list(read_text_folder(tmp_path, on_unreadable=lambda path, reason: skipped.append(path.name)))
    assert [c.chunk_id for c in chunks] == [f"{tmp_path.name}/a.md#0"] and skipped == ["b.md"]
    with pytest.raises(InvalidRequestError) as err:  # without on_unreadable it is an error naming the link
        list(read_text_folder(tmp_path))
    assert str(err.value) == (
        f"{tmp_path / 'b.md'}: a broken symbolic link to {tmp_path / 'missing.md'} "
        "(No such file or directory); fix or remove the link"
    )


def test_text_folder_checks_its_arguments_when_called(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="is not a directory"):
        read_text_folder(tmp_path / "missing")  # no list(): refused before the first chunk is asked for
    with pytest.raises(InvalidRequestError, match="chunk_size must be an integer >= 1"):
        read_text_folder(tmp_path, chunk_size=0)


def test_beir_lines_keep_scope_and_validity(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "c.jsonl",
        [
            {
                "_id": "a",
                "text": "t",
                "tenant": "acme",
                "user_id": "u1",
                "agent_id": "g",
                "session_id": "s",
                "valid_from": "2024-01-01",
                "valid_to": 1800000000,
                "extra_field": "ignored",
            },
            {"_id": "b", "text": "t", "user_id": None},
        ],
    )
    a, b = list(read_beir_corpus(path))
    assert a.scope_values() == {"tenant": "acme", "user_id": "u1", "agent_id": "g", "session_id": "s"}
    assert (a.valid_from, a.valid_to) == (1704067200.0, 1800000000.0)
    assert b.scope_values() == {"tenant": None, "user_id": None, "agent_id": None, "session_id": None}
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"_id": "c", "text": "t", "user_id": 5}])
    with pytest.raises(InvalidRequestError, match=r"bad\.jsonl, line 1: invalid document 'c': user_id"):
        list(read_beir_corpus(bad))
    empty = _write_jsonl(tmp_path / "empty.jsonl", [{"_id": "d", "text": "t", "valid_from": 10, "valid_to": 5}])
    with pytest.raises(InvalidRequestError) as err:
        list(read_beir_corpus(empty))
    # the library's own message, without pydantic's "Value error, " prefix
    assert str(err.value) == (
        f"{empty}, line 1: invalid document 'd': valid_to must be after valid_from, got valid_from "
        "1970-01-01T00:00:10Z (Unix 10) and valid_to 1970-01-01T00:00:05Z (Unix 5): the interval [valid_from, "
        "valid_to) would be empty; give a later valid_to, or none (the fact still holds)"
    )


def _docs_with_memories(tmp_path: Path) -> Path:
    """docs/ with three documents, an embedded memory at docs/mem (its own files, plus a note a user left in it),
    an Edge shard folder at docs/sub/shard and a second memory at docs/sub/old-mem."""
    from hybrid_memory import HashingEmbedder, HybridMemory

    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("alpha runbook", encoding="utf-8")
    (docs / "b.txt").write_text("beta notes", encoding="utf-8")
    (docs / "sub" / "c.md").write_text("gamma guide", encoding="utf-8")
    with HybridMemory(docs / "mem", embedder=HashingEmbedder(16)) as memory:
        memory.add([{"chunk_id": "kept", "text": "stored before"}])
    (docs / "mem" / "notes.md").write_text("a note inside the memory folder", encoding="utf-8")
    (docs / "sub" / "shard" / "segments").mkdir(parents=True)
    (docs / "sub" / "shard" / "edge_config.json").write_text("{}", encoding="utf-8")
    (docs / "sub" / "shard" / "segments" / "s.txt").write_text("shard text", encoding="utf-8")
    (docs / "sub" / "old-mem").mkdir()
    (docs / "sub" / "old-mem" / "store.sqlite3").write_bytes(b"SQLite format 3\x00")
    (docs / "sub" / "old-mem" / "x.md").write_text("old memory note", encoding="utf-8")
    return docs


def test_text_folder_skips_memory_and_edge_shard_folders_inside_it(tmp_path: Path, caplog) -> None:
    import logging

    docs = _docs_with_memories(tmp_path)
    unreadable: list[str] = []
    with caplog.at_level(logging.INFO, logger="hybrid_memory.ingest"):
        everything = list(read_text_folder(docs, glob="**/*", on_unreadable=lambda p, r: unreadable.append(p.name)))
    # not one of the memory's own files (store.sqlite3, *.npy, manifest.json, ...) nor anything below a memory
    # or shard folder; no memory file was even opened (none reported unreadable)
    assert [c.chunk_id for c in everything] == ["docs/a.md#0", "docs/b.txt#0", "docs/sub/c.md#0"]
    assert unreadable == []
    assert [c.chunk_id for c in read_text_folder(docs)] == ["docs/a.md#0", "docs/b.txt#0", "docs/sub/c.md#0"]
    skipped = sorted(r.getMessage() for r in caplog.records if "skipped" in r.getMessage())
    assert skipped == [
        f"read_text_folder: skipped {docs / 'mem'}: a memory's own folder (it holds store.sqlite3)",
        f"read_text_folder: skipped {docs / 'sub' / 'old-mem'}: a memory's own folder (it holds store.sqlite3)",
        f"read_text_folder: skipped {docs / 'sub' / 'shard'}: a memory's own folder (it holds edge_config.json)",
    ]


@pytest.mark.parametrize(
    "inside, holds",
    [
        ("mem", "store.sqlite3"),
        ("mem/bm25", "store.sqlite3"),
        ("sub/shard", "edge_config.json"),
        ("sub/shard/segments", "edge_config.json"),
    ],
)
def test_text_folder_refuses_a_memorys_own_folder(tmp_path: Path, inside: str, holds: str) -> None:
    docs = _docs_with_memories(tmp_path)
    with pytest.raises(
        InvalidRequestError,
        match=rf"a memory's own folder \(it holds {holds}\); its files are the "
        r"memory's indexes, not documents: ingest the folder that holds "
        r"your documents",
    ):
        read_text_folder(docs / inside)


def test_a_symlinked_sub_folder_is_named_in_a_warning_and_reported(tmp_path, caplog):
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    (outside / "deep").mkdir(parents=True)
    (docs / "a.md").write_text("alpha")
    (docs / "sub" / "b.md").write_text("beta")
    (outside / "c.md").write_text("gamma")
    (outside / "deep" / "d.md").write_text("delta")
    (docs / "linked").symlink_to(outside, target_is_directory=True)
    (docs / "sub" / "loop").symlink_to(docs, target_is_directory=True)  # a loop: never entered
    (docs / "c.md").symlink_to(outside / "c.md")  # a link to a file out of the folder: not read unless asked
    reported: list[Path] = []
    left: list[Path] = []
    with caplog.at_level("WARNING", logger="hybrid_memory.ingest"):
        chunks = list(
            read_text_folder(docs, id_prefix="", on_symlinked_folder=reported.append, on_outside_link=left.append)
        )
    assert [c.chunk_id for c in chunks] == ["a.md#0", "sub/b.md#0"]
    assert reported == [docs / "linked", docs / "sub" / "loop"]
    assert left == [docs / "c.md"]
    assert [r.getMessage() for r in caplog.records if r.name == "hybrid_memory.ingest"] == [
        f"skipped {docs / 'linked'}: a symbolic link to the folder {outside}, and links to folders are not followed "
        "(one may loop, or lead out of the folder being read); to read that folder, ingest it as a path of its own",
        f"skipped {docs / 'sub' / 'loop'}: a symbolic link to the folder {docs}, and links to folders are not "
        "followed (one may loop, or lead out of the folder being read); to read that folder, ingest it as a path of "
        "its own",
        f"skipped {docs / 'c.md'}: a symbolic link to {outside / 'c.md'}, outside the folder being read ({docs}); "
        "links that leave the folder are not followed by default: pass follow_symlinks=True (the CLI's "
        "--follow-symlinks) to read it",
    ]
    caplog.clear()
    assert [c.chunk_id for c in read_text_folder(docs, id_prefix="", glob="*.md", follow_symlinks=True)] == [
        "a.md#0",
        "c.md#0",
    ]
    assert caplog.records == []  # a pattern that does not recurse would not enter a folder anyway: no word
    # a pattern naming the linked folder would enter it: the files it reaches lie outside, so they are not read
    assert [c.chunk_id for c in read_text_folder(docs, id_prefix="", glob="linked/**/*.md")] == []
    assert [c.chunk_id for c in read_text_folder(docs, id_prefix="", glob="linked/**/*.md", follow_symlinks=True)] == [
        "linked/c.md#0",
        "linked/deep/d.md#0",
    ]


def test_a_scope_value_no_view_could_bind_is_refused_naming_the_file_and_line(tmp_path):
    """A fresh user's finding: a zero-width space on line 1101 was reported as "chunk #76" of the write's batch;
    now the reader names the file and line, as for every other bad document."""
    corpus = tmp_path / "c.jsonl"
    lines = [{"_id": f"e{i}", "text": "x", "user_id": "u1"} for i in range(3)]
    lines[2]["user_id"] = "u\u200b1"
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    reader = read_beir_corpus(corpus)
    assert [next(reader).chunk_id for _ in range(2)] == ["e0", "e1"]
    with pytest.raises(InvalidRequestError) as info:
        next(reader)
    assert str(info.value) == (
        f"{corpus}, line 3: invalid document 'e2': user_id holds the invisible format character '\\u200b' (ZERO WIDTH "
        "SPACE) at position 1; a scope value is an id, and one that prints like another would bind a scope no chunk "
        "is in: remove it, or leave user_id out (None) for no user_id (got 'u\\u200b1')"
    )


@pytest.mark.parametrize("reader", [read_beir_corpus, read_queries])
def test_a_jsonl_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path, reader):
    """Issue 35, class 10: a Latin-1 byte gave "'utf-8' codec can't decode byte 0xff" with no file or line."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'\xef\xbb\xbf{"_id": "a", "text": "fine"}\n\n{"_id": "b", "text": "caf\xe9 \xff"}\n')
    with pytest.raises(InvalidRequestError) as info:
        list(reader(corpus)) if reader is read_beir_corpus else reader(corpus)
    assert str(info.value) == (
        f"{corpus}, line 3: not valid UTF-8 (invalid continuation byte: byte 0xe9 at column 26); JSONL files are "
        "UTF-8: convert the file (iconv -f LATIN1 -t UTF-8, or your editor's 'save as UTF-8')"
    )


def test_a_qrels_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    qrels = tmp_path / "test.tsv"
    qrels.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td\xff\t1\n")
    with pytest.raises(
        InvalidRequestError,
        match=rf"^{qrels}, line 2: not valid UTF-8 \(invalid start byte: byte "
        r"0xff at column 5\)",
    ):
        read_qrels(qrels)
