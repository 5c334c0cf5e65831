"""hybrid-memory export-qdrant: an embedded memory copied into Qdrant with its stored vectors (no re-embedding),
its scope, validity and history, in insertion order; the copy searches like the original."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory.cli.app import main

from tests.conftest import _note_chunks

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install 'hybrid-memory[qdrant]')")


class NoEmbedding(HashingEmbedder):
    """Refuses to embed documents: proves the copy reads the stored vectors."""

    def embed_documents(self, texts):
        raise AssertionError(f"re-embedded {len(texts)} texts")

    def embed_query(self, text):
        return HashingEmbedder(self.dim).embed_query(text)


def _memory(folder):
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(6, 16)).astype(np.float32)  # not what HashingEmbedder would give
    with HybridMemory(folder, embedder=HashingEmbedder(16)) as mem:
        mem.add(_note_chunks(), vectors=vectors)
        mem.upsert([{"chunk_id": "u1", "text": "Dana prefers PostgreSQL", "user_id": "u1", "valid_from": 10.0}])
        mem.supersede("u1", {"chunk_id": "u2", "text": "Dana prefers SQLite now", "valid_from": 20.0})
        mem.delete(["poem"])
    return vectors


def test_cli_copies_chunks_vectors_and_history(tmp_path, capsys):
    vectors = _memory(tmp_path / "mem")
    code = main(
        [
            "export-qdrant",
            "--memory",
            str(tmp_path / "mem"),
            "--hashing-dim",
            "16",
            "--edge-path",
            str(tmp_path / "shard"),
            "-q",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["copied"] == 7
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as source:
        originals = list(source.iter_chunks())
        # dense only: the copied vectors answer exactly as the stored ones (BM25's avgdl differs by design)
        expected = [
            (r.chunk_id, r.dense_score) for r in source.search("HTTP 504 PostgreSQL", top_k=4, sparse_weight=0).results
        ]
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=NoEmbedding(16)) as copy:
        copied = list(copy.iter_chunks())
        diffs = [
            (a.chunk_id, k, v, b.model_dump()[k])
            for a, b in zip(copied, originals, strict=True)
            for k, v in a.model_dump().items()
            if v != b.model_dump()[k]
        ]
        assert diffs == []
        assert copy.get(["u1"])[0].superseded_by == "u2" and copy.count(scope={"user_id": "u1"}) == 2
        assert copy.count(as_of=15.0, scope={"user_id": "u1"}) == 1
        stored = copy.backend.vectors(["prod-504", "reset"])
        norm = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        assert np.allclose(stored["prod-504"], norm[0], atol=1e-6) and np.allclose(stored["reset"], norm[3], atol=1e-6)
        got = [
            (r.chunk_id, r.dense_score) for r in copy.search("HTTP 504 PostgreSQL", top_k=4, sparse_weight=0).results
        ]
        assert [c for c, _ in got] == [c for c, _ in expected] and len(got) == 4
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)


def test_cli_copy_is_written_with_the_memorys_avgdl_and_ranks_as_the_memory(tmp_path, capsys):
    _memory(tmp_path / "mem")
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(tmp_path / "shard"),
                "-q",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    queries = ["HTTP 504 PostgreSQL", "Dana prefers SQLite", "connection reset"]
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as source:
        assert printed["avgdl"] == source.backend.sparse.avgdl  # the memory's own mean length, not Qdrant's 256
        expected = {
            q: [(r.chunk_id, r.sparse_score) for r in source.search(q, top_k=5, dense_weight=0).results]
            for q in queries
        }
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=NoEmbedding(16), avgdl=printed["avgdl"]) as copy:
        for q in queries:
            got = [(r.chunk_id, r.sparse_score) for r in copy.search(q, top_k=5, dense_weight=0).results]
            assert [c for c, _ in got] == [c for c, _ in expected[q]], q
            assert [s for _, s in got] == pytest.approx([s for _, s in expected[q]], rel=1e-5), q
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--avgdl",
                "12.5",
                "--edge-path",
                str(tmp_path / "shard2"),
                "-q",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["avgdl"] == 12.5


def test_cli_refuses_bad_targets(tmp_path, capsys):
    _memory(tmp_path / "mem")
    assert main(["export-qdrant", "--memory", str(tmp_path / "mem"), "--hashing-dim", "16", "-q"]) == 2
    assert "give --url" in capsys.readouterr().err
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(tmp_path / "s"),
                "--shard-number",
                "2",
            ]
        )
        == 2
    )
    assert "takes no --url, --api-key or cluster options" in capsys.readouterr().err
    assert (
        main(["export-qdrant", "--memory", str(tmp_path / "missing"), "--edge-path", str(tmp_path / "s2"), "-q"]) == 2
    )
    assert "no memory at" in capsys.readouterr().err
    # the dimension is checked against an existing target
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(tmp_path / "s3"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    other = tmp_path / "mem8"
    with HybridMemory(other, embedder=HashingEmbedder(8)) as mem:
        mem.add([{"chunk_id": "x", "text": "eight dims"}])
    for replace in ([], ["--replace"]):  # --replace clears points, not the dimension: the same refusal
        assert (
            main(
                [
                    "export-qdrant",
                    "--memory",
                    str(other),
                    "--hashing-dim",
                    "8",
                    "-q",
                    "--edge-path",
                    str(tmp_path / "s3"),
                    *replace,
                ]
            )
            == 2
        )
        assert capsys.readouterr().err == (
            f"hybrid-memory: error: Qdrant Edge shard {tmp_path / 's3'} holds vectors of dimension 16, this memory's "
            "are 8: a shard keeps its dimension (--replace clears its points, not its schema); give a new "
            f"--edge-path, or remove the shard folder {tmp_path / 's3'} and export again\n"
        )
    from hybrid_memory import DimensionMismatchError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(other, embedder=HashingEmbedder(8)) as mem:  # the library says the same
        backend = QdrantBackend.edge(tmp_path / "s3", avgdl=mem.backend.sparse.avgdl, payload_indexes=False)
        with pytest.raises(
            DimensionMismatchError, match=r"holds vectors of dimension 16, this memory's are 8: a shard"
        ):
            export_to_qdrant(mem, backend, replace=True)
        backend.close()
    with HybridMemory.qdrant(edge_path=tmp_path / "s3", embedder=HashingEmbedder(16)) as copy:
        assert copy.count() == 7  # the refused copies wrote nothing, cleared nothing
    assert (
        main(["export-qdrant", "--memory", str(other), "--hashing-dim", "8", "-q", "--edge-path", str(tmp_path / "s4")])
        == 0
    )


def test_an_unreachable_server_fails_before_the_progress_bar(tmp_path, capsys, monkeypatch):
    """The connection and the collection are checked before the bar is drawn: no '0/6' bar over the error; the
    message names the URL and no folder, and qdrant-client's version-check warning is not printed. Stderr plays
    a terminal here (the bar is drawn only on one)."""
    import sys
    import warnings

    _memory(tmp_path / "mem")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (
            main(
                [
                    "export-qdrant",
                    "--memory",
                    str(tmp_path / "mem"),
                    "--hashing-dim",
                    "16",
                    "--url",
                    "http://127.0.0.1:1",
                    "--collection",
                    "runbooks",
                ]
            )
            == 2
        )  # nothing listens on port 1
    assert [str(w.message) for w in caught] == []
    err = capsys.readouterr().err
    assert err == (
        "hybrid-memory: error: could not open the Qdrant collection 'runbooks' at http://127.0.0.1:1: "
        "ResponseHandlingException: [Errno 111] Connection refused; check that the server is running at "
        "that URL (and the API key)\n"
    )
    assert "export-qdrant:" not in err and "chunk/s" not in err  # tqdm's bar: never started
    # the bar still runs for a reachable target (stderr a terminal), from 0 to every chunk
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(tmp_path / "shard"),
            ]
        )
        == 0
    )
    assert "7/7" in capsys.readouterr().err


def test_search_stats_and_open_on_a_shard_folder_name_the_shard(tmp_path, capsys):
    """A fresh user's finding: search/stats/mcp --memory and HybridMemory.open on a shard said "no memory at".
    They say what ingest and HybridMemory(path) say, and search / stats serve the shard with --edge-path."""
    from hybrid_memory import InvalidRequestError

    _memory(tmp_path / "mem")
    shard = tmp_path / "shard"
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(shard),
                "--index-key",
                "service",
                "--index-key",
                "severity=float",
            ]
        )
        == 0
    )
    capsys.readouterr()
    for command in (["search", "HTTP 504"], ["stats"], ["mcp"]):
        assert main([*command, "--memory", str(shard), "--hashing-dim", "16"]) == 2
        assert capsys.readouterr().err == (
            f"hybrid-memory: error: {shard} holds a Qdrant Edge shard (edge_config.json), "
            f"not an embedded memory; give it as --edge-path {shard}\n"
        )
    assert main(["export-qdrant", "--memory", str(shard), "--edge-path", str(tmp_path / "s2"), "-q"]) == 2
    assert (
        f"{shard} holds a Qdrant Edge shard (edge_config.json), not an embedded memory; give the embedded memory as "
        f"--memory; open the shard with HybridMemory.qdrant(edge_path='{shard}')"
    ) in capsys.readouterr().err
    with pytest.raises(
        InvalidRequestError,
        match=r"holds a Qdrant Edge shard \(edge_config.json\), not an embedded "
        r"memory; open the shard with HybridMemory.qdrant\(edge_path=",
    ):
        HybridMemory.open(shard)
    assert not (shard / "store.sqlite3").exists()

    # --edge-path: the shard answers as the Python API does, its float index declared for the range filter
    flt = '{"severity": {"$lte": 2}}'
    assert (
        main(
            [
                "search",
                "HTTP 504 PostgreSQL",
                "--edge-path",
                str(shard),
                "--hashing-dim",
                "16",
                "--index-key",
                "severity=float",
                "--filter",
                flt,
                "--top-k",
                "3",
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    with HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(16), indexed_keys={"severity": "float"}) as copy:
        expected = copy.search("HTTP 504 PostgreSQL", top_k=3, metadata_filter={"severity": {"$lte": 2}})
    assert [r["chunk_id"] for r in got["results"]] == [r.chunk_id for r in expected.results]
    assert {r["chunk_id"] for r in got["results"]} <= {"prod-504", "auth-user", "reset", "upgrade"}
    assert main(["stats", "--edge-path", str(shard), "--hashing-dim", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 7

    # the wrong folder kinds, each with its fix; --memory and --edge-path are exclusive (argparse, exit 2)
    assert main(["search", "x", "--edge-path", str(tmp_path / "none")]) == 2
    assert (
        f"no Qdrant Edge shard at {tmp_path / 'none'} (no edge_config.json); write one with: hybrid-memory "
        f"export-qdrant --memory DIR --edge-path {tmp_path / 'none'}"
    ) in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    assert main(["stats", "--edge-path", str(tmp_path / "mem")]) == 2
    assert (
        f"--edge-path {tmp_path / 'mem'} is an embedded memory's folder, not a Qdrant Edge shard; give it as "
        f"--memory {tmp_path / 'mem'}"
    ) in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", "--edge-path", str(shard), "--memory", str(tmp_path / "mem")])
    assert exit_info.value.code == 2
    assert "argument --memory: not allowed with argument --edge-path" in capsys.readouterr().err
    # the MCP write tools on a shard need the avgdl it was written with: a shard without an export record
    (shard / "hybrid_memory_export.json").unlink()  # as export-qdrant wrote shards before the record existed
    assert main(["mcp", "--edge-path", str(shard), "--hashing-dim", "16"]) == 2
    assert "--edge-path with the write tools needs --avgdl TOKENS" in capsys.readouterr().err


def test_index_key_takes_a_type(tmp_path, capsys):
    _memory(tmp_path / "mem")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--edge-path",
                str(tmp_path / "s"),
                "--index-key",
                "severity=decimal",
            ]
        )
    assert exit_info.value.code == 2
    assert (
        "argument --index-key: takes KEY or KEY=TYPE with TYPE one of keyword, float, integer, bool (e.g. "
        "severity=float), got 'severity=decimal'"
    ) in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    from hybrid_memory.cli.common import index_key

    assert [index_key(t) for t in ("service", "severity=float", "n=integer", "ok=bool")] == [
        ("service", "keyword"),
        ("severity", "float"),
        ("n", "integer"),
        ("ok", "bool"),
    ]


def test_a_key_given_with_two_index_types_is_refused_before_anything_is_written(tmp_path, capsys):
    # a fresh user's finding: "--index-key severity=float --index-key severity=keyword" exited 0, the last one won
    _memory(tmp_path / "mem")
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--edge-path",
                str(tmp_path / "s"),
                "--index-key",
                "severity=float",
                "--index-key",
                "severity=keyword",
            ]
        )
        == 2
    )
    assert (
        "--index-key severity is given as float and as keyword; give each key once, with the type of its values"
    ) in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    from hybrid_memory.cli.common import indexed_keys

    assert indexed_keys([("service", "keyword"), ("severity", "float"), ("service", "keyword")]) == {
        "service": "keyword",
        "severity": "float",
    }


def _export(tmp_path, *extra):
    return main(
        [
            "export-qdrant",
            "--memory",
            str(tmp_path / "mem"),
            "--hashing-dim",
            "16",
            "-q",
            "--edge-path",
            str(tmp_path / "shard"),
            *extra,
        ]
    )


def test_stats_of_a_shard_report_its_path_and_the_avgdl_it_was_written_with(tmp_path, capsys):
    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    printed = json.loads(capsys.readouterr().out)
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as source:
        avgdl = source.backend.sparse.avgdl
    assert printed == {
        "copied": 7,
        "memory": str(tmp_path / "mem"),
        "target": str(tmp_path / "shard"),
        "avgdl": avgdl,
        "replaced": 0,
    }
    assert avgdl != 256.0  # Qdrant's default, which stats used to show
    assert main(["stats", "--edge-path", str(tmp_path / "shard"), "--hashing-dim", "16"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["path"], stats["points"], stats["chunks"], stats["bm25"]["avgdl"]) == (
        str(tmp_path / "shard"),
        7,
        7,
        avgdl,
    )
    export = stats["export"]
    assert {k: export[k] for k in ("format", "avgdl", "k1", "b", "memory", "chunks", "complete", "embedder")} == {
        "format": 1,
        "avgdl": avgdl,
        "k1": 1.5,
        "b": 0.75,
        "memory": str(tmp_path / "mem"),
        "chunks": 7,
        "complete": True,
        "embedder": {"name": "hashing-16", "dim": 16},
    }
    # the Python API reopens the shard with the recorded avgdl too, so later writes normalise as the copied points
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16)) as copy:
        assert copy.backend.encoder.avgdl == avgdl
        assert copy.stats()["path"] == str(tmp_path / "shard")


def test_an_explicit_avgdl_other_than_the_shards_is_used_and_warned_about(tmp_path, caplog):
    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as source:
        avgdl = source.backend.sparse.avgdl
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16), avgdl=100.0) as copy:
        assert copy.backend.encoder.avgdl == 100.0
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"Qdrant Edge shard {tmp_path / 'shard'} was written with avgdl={avgdl} (its export record); opened with "
        "avgdl=100.0, so new writes are normalised differently from the copied points"
    ]


def test_re_export_onto_a_shard_is_refused_without_replace_which_drops_deleted_chunks(tmp_path, capsys):
    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    capsys.readouterr()
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        first_avgdl = mem.backend.sparse.avgdl
        assert mem.delete(["prod-504", "reset"]) == 2
        mem.upsert(
            [
                {
                    "chunk_id": "new-1",
                    "text": "a much longer note about the billing-service HTTP 502 errors "
                    "seen on db-prod-3 after the failover",
                }
            ]
        )
        mem.flush()
        avgdl = mem.backend.sparse.avgdl
    assert avgdl != first_avgdl
    # without --replace: refused, naming what the shard holds; nothing is written
    assert _export(tmp_path) == 2
    assert capsys.readouterr().err == (
        f"hybrid-memory: error: Qdrant Edge shard {tmp_path / 'shard'} already holds 7 points: a complete copy of "
        f"{tmp_path / 'mem'}, 7 chunks, avgdl {first_avgdl:.6g}; copying onto it would keep the chunks deleted from "
        "the memory since then and mix two BM25 length normalisations: give --replace (replace=True) to clear it and "
        "copy again, or another --edge-path\n"
    )
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16)) as copy:
        assert copy.count() == 7 and copy.backend.encoder.avgdl == first_avgdl
    # --replace: cleared, then copied: the deleted chunks are gone and one avgdl holds for every point
    assert _export(tmp_path, "--replace") == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["copied"], printed["replaced"], printed["avgdl"]) == (6, 7, avgdl)
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16)) as copy:
        assert copy.count() == 6 and copy.backend.encoder.avgdl == avgdl
        assert copy.get(["prod-504", "reset"]) == [] and [c.chunk_id for c in copy.get(["new-1"])] == ["new-1"]
        assert copy.stats()["export"]["chunks"] == 6


def test_the_library_export_refuses_a_non_empty_target_and_records_an_interrupted_copy(tmp_path):
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    _memory(tmp_path / "mem")
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        backend = QdrantBackend.edge(tmp_path / "shard", avgdl=mem.backend.sparse.avgdl, payload_indexes=False)
        calls = []
        real_write = backend.write

        def write(versions, seqs=None):
            calls.append(len(versions))
            if len(calls) == 3:
                raise OSError("disk full")
            real_write(versions, seqs)

        backend.write = write
        with pytest.raises(OSError, match="disk full"):
            export_to_qdrant(mem, backend, batch_size=2)
        info = read_export_info(tmp_path / "shard")
        assert (info["complete"], info["chunks"], backend.collection.count(None)) == (False, 0, 4)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend)
        assert str(err.value).startswith(
            f"Qdrant Edge shard {tmp_path / 'shard'} already holds 4 points: a partial "
            f"copy of {tmp_path / 'mem'} (interrupted), avgdl "
        )
        backend.write = real_write
        assert export_to_qdrant(mem, backend, replace=True) == 7
        assert backend.collection.count(None) == 7
        assert (read_export_info(tmp_path / "shard")["complete"], read_export_info(tmp_path / "shard")["chunks"]) == (
            True,
            7,
        )
        backend.close()


def test_a_damaged_export_record_names_the_file_and_the_fix(tmp_path):
    from hybrid_memory import StoreFormatError

    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    record = tmp_path / "shard" / "hybrid_memory_export.json"
    fix = (
        "write the shard again with: hybrid-memory export-qdrant --memory DIR --edge-path SHARD --replace (or remove "
        "the file and give the avgdl the shard was written with)"
    )
    for text, problem in [
        ("{not json", "is not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ('{"format": 9}', "is not an export record of format 1 (found 9)"),
        ('{"format": 1, "avgdl": 0, "k1": 1.5, "b": 0.75}', ": avgdl must be a finite number (avgdl > 0), got 0"),
    ]:
        record.write_text(text)
        with pytest.raises(StoreFormatError) as err:
            HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16))
        assert str(err.value) == f"{record}{'' if problem.startswith(':') else ' '}{problem}; {fix}"


def test_a_server_collection_that_holds_points_is_refused_too_and_replace_clears_it(tmp_path):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (pip install 'hybrid-memory[qdrant]')")
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    _memory(tmp_path / "mem")
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        backend = QdrantBackend.client(
            ":memory:", collection="runbooks", avgdl=mem.backend.sparse.avgdl, payload_indexes=False
        )
        assert export_to_qdrant(mem, backend) == 7
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend)
        assert str(err.value) == (
            "Qdrant collection 'runbooks' already holds 7 points; copying onto it would keep the chunks deleted from the "
            "memory since then and mix two BM25 length normalisations: give --replace (replace=True) to clear it and "
            "copy again, or another --collection"
        )
        mem.delete(["prod-504"])  # the memory's avgdl moves: the same collection, reached with the new one
        assert mem.backend.sparse.avgdl != backend.encoder.avgdl
        with pytest.raises(InvalidRequestError, match=r"^the memory ranks with BM25 avgdl="):
            export_to_qdrant(mem, backend, replace=True)
        assert backend.collection.count(None) == 7  # the refused copy cleared nothing
        again = QdrantBackend.client(
            backend.collection.client, collection="runbooks", avgdl=mem.backend.sparse.avgdl, payload_indexes=False
        )
        assert export_to_qdrant(mem, again, replace=True) == 6
        assert again.collection.count(None) == 6 and again.get(["prod-504"]) == {}
        again.close()


def test_a_backend_with_other_bm25_k1_b_than_the_memorys_is_refused_before_anything_is_written(tmp_path):
    """The memory opened with k1=1.2, b=0.5 and a backend left at Qdrant's 1.5 / 0.75: the copy's sparse values
    would rank differently, so it is refused with both pairs and the fix; equal values copy."""
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16), k1=1.2, b=0.5) as mem:
        mem.add(_note_chunks())
        avgdl = mem.backend.sparse.avgdl  # the same: this test is about k1 / b (avgdl: the test below)
        backend = QdrantBackend.edge(tmp_path / "shard", avgdl=avgdl, payload_indexes=False)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend)
        assert str(err.value) == (
            "the memory ranks with BM25 k1=1.2, b=0.5 but the Qdrant backend writes k1=1.5, b=0.75, so the copy would "
            "rank differently from the memory; nothing was written: open the backend with k1=1.2, b=0.5 "
            "(QdrantBackend.edge(path, k1=1.2, b=0.5) or QdrantBackend.client(url, k1=1.2, b=0.5))"
        )
        assert read_export_info(tmp_path / "shard") is None  # no export record either
        backend.open(16)
        assert backend.collection.count(None) == 0
        backend.close()
        only_b = QdrantBackend.edge(tmp_path / "shard", k1=1.2, avgdl=avgdl, payload_indexes=False)
        with pytest.raises(
            InvalidRequestError, match=r"ranks with BM25 b=0\.5 but the Qdrant backend writes b=0\.75, "
        ):
            export_to_qdrant(mem, only_b)
        only_b.close()
        same = QdrantBackend.edge(tmp_path / "shard", k1=1.2, b=0.5, avgdl=avgdl, payload_indexes=False)
        assert export_to_qdrant(mem, same) == 6
        assert same.collection.count(None) == 6
        assert (read_export_info(tmp_path / "shard")["k1"], read_export_info(tmp_path / "shard")["b"]) == (1.2, 0.5)
        same.close()
    # the CLI opens the backend with the memory's own values (its memory: the defaults 1.5 / 0.75)
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(tmp_path / "shard2"),
            ]
        )
        == 0
    )
    assert (read_export_info(tmp_path / "shard2")["k1"], read_export_info(tmp_path / "shard2")["b"]) == (1.5, 0.75)


def test_a_backend_with_another_avgdl_than_the_memorys_is_refused_before_anything_is_written(tmp_path, capsys):
    """``export_to_qdrant(m, QdrantBackend.edge(path))`` from Python used Qdrant's default avgdl 256, not the
    memory's average chunk length, so the copy ranked differently without a word: refused, both values exact."""
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        # tokens: [kafka, broker], [postgr], [redi]: avgdl 4 / 3
        mem.add(
            [
                {"chunk_id": "a", "text": "kafka broker"},
                {"chunk_id": "b", "text": "postgres"},
                {"chunk_id": "c", "text": "redis"},
            ]
        )
        assert mem.backend.sparse.avgdl == 4 / 3
        backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend)
        assert str(err.value) == (
            "the memory ranks with BM25 avgdl=1.3333333333333333 but the Qdrant backend writes avgdl=256.0, so the "
            "copy would rank differently from the memory; nothing was written: open the backend with "
            "avgdl=1.3333333333333333 (QdrantBackend.edge(path, avgdl=1.3333333333333333) or "
            "QdrantBackend.client(url, avgdl=1.3333333333333333))"
        )
        assert read_export_info(tmp_path / "shard") is None  # no export record
        backend.open(16)
        assert backend.collection.count(None) == 0  # the target is empty
        backend.close()
        # k1 and avgdl both off: one message names both, and one fix
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, QdrantBackend.edge(tmp_path / "shard", k1=2.0, avgdl=1.3, payload_indexes=False))
        assert str(err.value).startswith(
            "the memory ranks with BM25 k1=1.5, avgdl=1.3333333333333333 but the Qdrant "
            "backend writes k1=2.0, avgdl=1.3, so the copy"
        )
        # the fix named copies, with the memory's avgdl in the export record
        fixed = QdrantBackend.edge(tmp_path / "shard", avgdl=1.3333333333333333, payload_indexes=False)
        assert export_to_qdrant(mem, fixed) == 3
        assert (fixed.collection.count(None), read_export_info(tmp_path / "shard")["avgdl"]) == (3, 4 / 3)
        fixed.close()
        # another avgdl on purpose (export-qdrant --avgdl): given to export_to_qdrant too, it is checked against that
        other = QdrantBackend.edge(tmp_path / "other", avgdl=12.5, payload_indexes=False)
        with pytest.raises(
            InvalidRequestError,
            match=r"ranks with BM25 avgdl=12\.25 but the Qdrant backend writes "
            r"avgdl=12\.5, ",
        ):
            export_to_qdrant(mem, other, avgdl=12.25)
        assert export_to_qdrant(mem, other, avgdl=12.5) == 3
        assert read_export_info(tmp_path / "other")["avgdl"] == 12.5
        other.close()
    # the CLI passes the memory's own avgdl: it exports, and prints it
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(tmp_path / "cli"),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (printed["copied"], printed["avgdl"], read_export_info(tmp_path / "cli")["avgdl"]) == (3, 4 / 3, 4 / 3)


def test_an_empty_memory_exports_as_before_with_any_avgdl(tmp_path, capsys):
    """A memory of no chunks has no average length (its avgdl reads 1.0): the avgdl check is skipped, so the
    Python copy with the backend's default and the CLI's both copy nothing, as before."""
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        assert (mem.count(), mem.backend.sparse.avgdl) == (0, 1.0)
        backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
        assert export_to_qdrant(mem, backend) == 0
        info = read_export_info(tmp_path / "shard")
        assert (info["avgdl"], info["chunks"], info["complete"], backend.collection.count(None)) == (256.0, 0, True, 0)
        backend.close()
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "-q",
                "--edge-path",
                str(tmp_path / "cli"),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (printed["copied"], printed["avgdl"], read_export_info(tmp_path / "cli")["avgdl"]) == (0, 1.0, 1.0)


@pytest.mark.parametrize(
    "avgdl, shown",
    [("x", "str 'x'"), ("8.0", "str '8.0'"), (True, "bool True"), (1j, "complex 1j"), ([8.0], "list [8.0]")],
)
def test_an_avgdl_that_is_not_a_number_is_refused_naming_it(tmp_path, avgdl, shown):
    """A fresh user's finding: export_to_qdrant(..., avgdl=) took "8.0" silently and raised raw errors for others."""
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka broker"}])
        backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend, avgdl=avgdl)
        assert str(err.value) == (
            f"avgdl must be a number of tokens > 0, got {shown}; leave it out to copy with the memory's own average "
            "chunk length, or pass a float such as avgdl=120.0"
        )
        for bad in (0, -1.0, float("nan"), float("inf")):
            with pytest.raises(InvalidRequestError) as err:
                export_to_qdrant(mem, backend, avgdl=bad)
            assert str(err.value) == (
                f"avgdl must be a finite number of tokens > 0, got {bad!r}; leave it out to copy with the memory's "
                "own average chunk length, or pass a float such as avgdl=120.0"
            )
        backend.open(16)
        assert backend.collection.count(None) == 0  # nothing was written
        backend.close()


@pytest.mark.parametrize(
    "batch_size, shown",
    [("a", "str 'a'"), (0, "int 0"), (-3, "int -3"), (True, "bool True"), (2.5, "float 2.5"), (None, "NoneType None")],
)
def test_a_batch_size_that_is_not_an_int_of_at_least_1_is_refused_before_anything_is_written(
    tmp_path, batch_size, shown
):
    """A fresh user's finding: batch_size="a" raised a raw TypeError after the export record was written, and 0, -1,
    True and 2.5 were taken."""
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        mem.add([{"chunk_id": "a", "text": "kafka broker"}])
        backend = QdrantBackend.edge(tmp_path / "shard", avgdl=mem.backend.sparse.avgdl, payload_indexes=False)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(mem, backend, batch_size=batch_size)
        assert str(err.value) == (
            f"batch_size must be an int >= 1 (chunks per upsert request), got {shown}; nothing was written: pass an "
            "int such as batch_size=256 (the default)"
        )
        assert read_export_info(tmp_path / "shard") is None  # not even a record of a partial copy
        assert export_to_qdrant(mem, backend, batch_size=np.int64(1)) == 1
        assert backend.collection.count(None) == 1
        backend.close()


def test_a_folder_path_or_other_non_memory_given_as_the_memory_is_refused_naming_the_fix(tmp_path):
    """A fresh user's finding: export_to_qdrant("mem", backend) raised a raw AttributeError ('str' object has no
    attribute '_sparse')."""
    from pathlib import Path

    from hybrid_memory import InvalidRequestError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant

    _memory(tmp_path / "mem")
    folder = str(tmp_path / "mem")
    backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
    for given in (folder, Path(folder)):
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(given, backend)
        assert str(err.value) == (
            f"export_to_qdrant copies an open HybridMemory, got the path {folder!r}; open it first and pass the "
            f"memory: with HybridMemory.open({folder!r}) as memory: export_to_qdrant(memory, backend)"
        )
    with pytest.raises(InvalidRequestError) as err:
        export_to_qdrant(5, backend)
    assert str(err.value) == (
        "export_to_qdrant copies an open HybridMemory, got int 5; pass HybridMemory.open(path) of the memory's folder"
    )
    with HybridMemory.qdrant(edge_path=tmp_path / "other", embedder=HashingEmbedder(16)) as on_backend:
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(on_backend, backend)
    assert str(err.value) == (
        "export_to_qdrant copies an embedded HybridMemory (a folder), got a memory on a backend "
        "(QdrantBackend), whose chunks are already there; pass HybridMemory.open(path)"
    )
    assert read_export_info(tmp_path / "shard") is None
    with HybridMemory.open(folder, embedder=HashingEmbedder(16)) as mem:  # the fix named copies
        fixed = QdrantBackend.edge(tmp_path / "shard2", avgdl=mem.backend.sparse.avgdl, payload_indexes=False)
        assert export_to_qdrant(mem, fixed) == 7
        fixed.close()
    backend.close()


def test_a_closed_memory_is_refused_as_closed_not_with_a_bm25_fix(tmp_path):
    """A closed memory reached check_bm25 first, whose refusal advised another avgdl."""
    from hybrid_memory import MemoryClosedError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    mem = HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16))
    mem.add([{"chunk_id": "a", "text": "kafka broker"}])
    mem.close()
    backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False)
    with pytest.raises(MemoryClosedError) as err:
        export_to_qdrant(mem, backend)
    assert str(err.value) == f"this memory is closed; open it again with HybridMemory.open(path) ({tmp_path / 'mem'})"
    assert not (tmp_path / "shard").exists() or not any((tmp_path / "shard").iterdir())  # nothing written
    backend.close()


def test_stats_of_a_shard_written_with_a_hashing_embedder_needs_no_hashing_dim_and_another_dim_names_the_fix(
    tmp_path, capsys
):
    """A fresh user's finding: `stats --edge-path` of a shard exported from a --hashing-dim memory loaded MiniLM and
    failed with Qdrant's raw 'expected vector size 384, but got 16' and no fix; it now opens with the hashing
    embedder the export record names (as an embedded memory does), and a wrong one names the one that fits."""
    from hybrid_memory import StoreFormatError

    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    capsys.readouterr()
    assert main(["stats", "--edge-path", str(tmp_path / "shard")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["embedder"], stats["points"]) == ({"name": "hashing-16", "dim": 16}, 7)
    shard = tmp_path / "shard"
    assert main(["stats", "--edge-path", str(shard), "--hashing-dim", "8"]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hybrid-memory: error: Qdrant Edge shard at {shard} holds vectors of dimension 16, this memory's embedder "
        "gives 8: open it with the embedder it was written with, 'hashing-16' (its export record): --hashing-dim 16 "
        "on the command line, embedder=HashingEmbedder(16) in Python"
    )
    record = shard / "hybrid_memory_export.json"
    info = json.loads(record.read_text())
    record.write_text(json.dumps({**info, "embedder": {"name": "my-model", "dim": 16}}))
    with pytest.raises(StoreFormatError) as err:
        HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(8))
    assert str(err.value) == (
        f"Qdrant Edge shard at {shard} holds vectors of dimension 16, this memory's embedder "
        "gives 8: open it with the embedder it was written with, 'my-model' (dim 16, its export "
        "record)"
    )
    record.unlink()
    with pytest.raises(StoreFormatError) as err:
        HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(8))
    assert str(err.value) == (
        f"Qdrant Edge shard at {shard} holds vectors of dimension 16, this memory's embedder "
        "gives 8: open it with the embedder it was written with, one of dimension 16 (the shard "
        "has no export record naming it; on the command line, --hashing-dim 16 if it was written "
        "with a HashingEmbedder), or give another directory"
    )
    with HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(16), avgdl=info["avgdl"]) as copy:
        assert copy.count() == 7  # nothing was lost by the refused opens


def test_bm25_params_give_the_memorys_k1_b_and_avgdl_and_a_backend_opened_with_them_takes_the_copy(tmp_path):
    """A fresh user's finding: README named the private memory.backend.sparse.avgdl for the backend's avgdl."""
    from hybrid_memory import MemoryClosedError
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.backends.qdrant.edge_info import read_export_info
    from hybrid_memory.memory.export import export_to_qdrant
    from hybrid_memory.tokenizer import TechnicalTokenizer

    texts = ["Kafka broker lag on orders", "postgres VACUUM stalled", "HTTP 504 from checkout-api"]
    tokens = [TechnicalTokenizer().tokenize(t) for t in texts]
    assert tokens == [
        ["kafka", "broker", "lag", "order"],
        ["postgr", "vacuum", "stall"],
        ["http", "504", "from", "checkout-api", "checkout", "api"],
    ]
    avgdl = (4 + 3 + 6) / 3  # the mean chunk length in tokens
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16), k1=1.2, b=0.5) as mem:
        assert mem.bm25_params == {"k1": 1.2, "b": 0.5, "avgdl": 1.0}  # no chunks yet: 1.0
        mem.add([{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(texts)])
        assert mem.bm25_params == {"k1": 1.2, "b": 0.5, "avgdl": avgdl}
        mem.bm25_params["avgdl"] = 99.0  # a copy: read only
        assert mem.bm25_params["avgdl"] == avgdl
        backend = QdrantBackend.edge(tmp_path / "shard", payload_indexes=False, **mem.bm25_params)
        assert export_to_qdrant(mem, backend) == 3
        backend.close()
    record = read_export_info(tmp_path / "shard")
    assert (record["k1"], record["b"], record["avgdl"]) == (1.2, 0.5, avgdl)
    with HybridMemory.open(tmp_path / "mem", k1=1.2, b=0.5) as mem:  # reopened: the merged main segment's mean
        assert mem.bm25_params == {"k1": 1.2, "b": 0.5, "avgdl": avgdl}
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16)) as copy:
        assert copy.bm25_params == {"k1": 1.2, "b": 0.5, "avgdl": avgdl}  # the backend's, from the export record
    with pytest.raises(MemoryClosedError):
        _ = mem.bm25_params


def test_opening_an_interrupted_export_warns_naming_the_fix_and_stats_say_so(tmp_path, caplog, capsys):
    """A fresh user's finding: a shard whose export failed part way (its record says complete: false) opened and
    searched without a word, missing chunks."""
    import logging

    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    shard = tmp_path / "shard"
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        mem.add([{"chunk_id": f"c{i}", "text": f"kafka broker {i}"} for i in range(5)])
        backend = QdrantBackend.edge(shard, payload_indexes=False, **mem.bm25_params)
        real_write, calls = backend.write, []

        def write(versions, seqs=None):
            calls.append(len(versions))
            if len(calls) == 2:
                raise OSError("disk full")
            real_write(versions, seqs)

        backend.write = write
        with pytest.raises(OSError, match="disk full"):
            export_to_qdrant(mem, backend, batch_size=2)
        backend.close()
    warning = (
        f"Qdrant Edge shard {shard} holds a partial copy of {tmp_path / 'mem'}: its export was interrupted (its "
        "record hybrid_memory_export.json says complete: false), so searches miss the chunks it did not copy; "
        f"write it again with: hybrid-memory export-qdrant --memory {tmp_path / 'mem'} --edge-path {shard} "
        f"--replace, or remove the folder {shard}"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.backends.qdrant.backend"):
        with HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(16), payload_indexes=False) as copy:
            assert [r.message for r in caplog.records] == [warning]
            assert copy.count() == 2  # the shard still opens and reads: 2 of 5 chunks were copied
            stats = copy.stats()
            assert (stats["export"]["complete"], stats["export_warning"]) == (False, warning)
    assert main(["stats", "--edge-path", str(shard), "--hashing-dim", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["export_warning"] == warning
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(shard),
                "--replace",
                "-q",
            ]
        )
        == 0
    )  # the fix the warning names
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.backends.qdrant.backend"):
        with HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(16), payload_indexes=False) as copy:
            assert (copy.count(), copy.stats()["export_warning"], caplog.records) == (5, None, [])


def test_stats_of_a_shard_written_with_another_embedder_of_the_same_dimension_is_refused_naming_it(tmp_path, capsys):
    """Checking a fresh user's finding (stats --edge-path of a memory with a non-default embedder): a shard whose
    record names an embedder the command line cannot give, of the dimension it would open it with, opened with the
    default model (stats then showed two embedders, search embedded queries with the wrong model)."""
    from hybrid_memory.backends.qdrant.edge_info import EXPORT_INFO

    for dim, given in ((384, []), (16, ["--hashing-dim", "16"])):
        shard = tmp_path / f"shard{dim}"
        with HybridMemory(tmp_path / f"mem{dim}", embedder=HashingEmbedder(dim)) as mem:
            mem.add([{"chunk_id": "a", "text": "kafka broker"}])
        assert (
            main(
                [
                    "export-qdrant",
                    "--memory",
                    str(tmp_path / f"mem{dim}"),
                    "--hashing-dim",
                    str(dim),
                    "--edge-path",
                    str(shard),
                    "-q",
                ]
            )
            == 0
        )
        record = json.loads((shard / EXPORT_INFO).read_text(encoding="utf-8"))
        record["embedder"]["name"] = "local:bge-small-en"  # as a memory built with HybridMemory(embedder=...) writes
        (shard / EXPORT_INFO).write_text(json.dumps(record), encoding="utf-8")
        capsys.readouterr()
        assert main(["stats", "--edge-path", str(shard), *given]) == 2
        opened = "hashing-16" if given else "sentence-transformers/all-MiniLM-L6-v2"
        assert capsys.readouterr().err.strip() == (
            f"hybrid-memory: error: Qdrant Edge shard {shard} was written with the embedder 'local:bge-small-en' "
            f"(dim {dim}, its export record), not {opened!r}: its queries would be embedded by another model than its "
            "vectors; the command line opens shards written with the default embedder or --hashing-dim N only: open "
            f"it from Python with HybridMemory.qdrant(edge_path={str(shard)!r}, embedder=<the 'local:bge-small-en' "
            "embedder>)"
        )
        with HybridMemory.qdrant(edge_path=shard, embedder=HashingEmbedder(dim)) as copy:
            assert copy.count() == 1  # the library still opens it with the embedder given


def test_a_backend_that_is_not_a_qdrant_backend_is_refused_before_anything_is_written(tmp_path):
    """A fresh user's finding: export_to_qdrant(memory, "./shard") and (memory, None) raised a raw AttributeError
    ('str' object has no attribute 'encoder')."""
    from hybrid_memory import InvalidRequestError
    from hybrid_memory.memory.export import export_to_qdrant

    _memory(tmp_path / "mem")
    shard = str(tmp_path / "shard")
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(16)) as memory:
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(memory, shard)
        assert str(err.value) == (
            f"export_to_qdrant writes to a QdrantBackend, got the path {shard!r}; nothing was written: open the shard "
            f"first, QdrantBackend.edge({shard!r}, **memory.bm25_params), and pass that"
        )
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(memory, None)
        assert str(err.value) == (
            "export_to_qdrant writes to a QdrantBackend, got NoneType None; nothing was written: pass "
            "QdrantBackend.edge(path, **memory.bm25_params) or QdrantBackend.client(url_or_client, collection=..., "
            "**memory.bm25_params)"
        )
    assert not (tmp_path / "shard").exists()


def test_a_closed_backend_is_refused_naming_how_to_open_it_again(tmp_path):
    """A fresh user's finding: a QdrantBackend closed before export_to_qdrant raised a raw AttributeError
    ('NoneType' object has no attribute 'count') from inside the shard (a RuntimeError for a client)."""
    from hybrid_memory import InvalidRequestError, export_to_qdrant
    from hybrid_memory.backends.qdrant.backend import QdrantBackend

    _memory(tmp_path / "mem")
    shard = str(tmp_path / "shard")
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(16)) as memory:
        backend = QdrantBackend.edge(shard, **memory.bm25_params)
        backend.open(16)
        backend.close()
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(memory, backend)
        assert str(err.value) == (
            f"export_to_qdrant was given a closed QdrantBackend (of the Qdrant Edge shard {shard!r}: backend.close() "
            f"was called); nothing was written: open it again, QdrantBackend.edge({shard!r}, **memory.bm25_params), "
            "and pass that"
        )
        client = QdrantBackend.client(":memory:", collection="notes", **memory.bm25_params)
        client.open(16)
        client.close()
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(memory, client)
        assert str(err.value) == (
            "export_to_qdrant was given a closed QdrantBackend (of the Qdrant collection 'notes': backend.close() was "
            "called); nothing was written: open it again, QdrantBackend.client(url_or_client, collection='notes', "
            "**memory.bm25_params), and pass that"
        )
        backend.open(16)  # an Edge backend opened again is taken
        assert (backend.closed, export_to_qdrant(memory, backend)) == (False, 7)
        backend.close()


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"progress": 5},
            "progress must be a function called with the number of chunks copied, or None, got int 5; "
            "nothing was written: pass e.g. progress=print, or leave it out",
        ),
        (
            {"replace": "yes"},
            "replace must be a bool, got str 'yes'; nothing was written: pass replace=True to clear a "
            "target that holds points, or False (the default) to refuse one",
        ),
        (
            {"replace": 1},
            "replace must be a bool, got int 1; nothing was written: pass replace=True to clear a target "
            "that holds points, or False (the default) to refuse one",
        ),
    ],
)
def test_a_bad_progress_or_replace_is_refused_before_anything_is_written(tmp_path, options, message):
    """A fresh user's finding: progress=5 failed after the first batch ('int' object is not callable), leaving a
    'complete: false' export record, and replace="yes" was taken as true (clearing the target)."""
    from hybrid_memory import InvalidRequestError, export_to_qdrant
    from hybrid_memory.backends.qdrant.backend import QdrantBackend

    _memory(tmp_path / "mem")
    with HybridMemory.open(tmp_path / "mem", embedder=HashingEmbedder(16)) as memory:
        backend = QdrantBackend.edge(tmp_path / "shard", **memory.bm25_params)
        with pytest.raises(InvalidRequestError) as err:
            export_to_qdrant(memory, backend, batch_size=2, **options)
        assert str(err.value) == message
        assert not (tmp_path / "shard").exists()  # no shard, no export record
        done = []
        assert export_to_qdrant(memory, backend, batch_size=2, progress=done.append, replace=np.bool_(False)) == 7
        assert done == [2, 4, 6, 7]
        backend.close()


def test_search_on_a_hashing_shard_with_another_dimension_names_hashing_dim(tmp_path, capsys):
    """search --edge-path with a --hashing-dim other than the shard's names --hashing-dim N: from the export record,
    or, a shard without one, from the dimension the shard holds (it said only 'or give another directory')."""
    from hybrid_memory.backends.qdrant.edge_info import embedder_fix

    _memory(tmp_path / "mem")
    assert _export(tmp_path) == 0
    shard = tmp_path / "shard"
    capsys.readouterr()
    assert main(["search", "Dana", "--edge-path", str(shard), "--hashing-dim", "8"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hybrid-memory: error: Qdrant Edge shard at {shard} holds vectors of dimension 16, this memory's embedder "
        "gives 8: open it with the embedder it was written with, 'hashing-16' (its export record): --hashing-dim 16 "
        "on the command line, embedder=HashingEmbedder(16) in Python"
    )
    (shard / "hybrid_memory_export.json").unlink()
    assert main(["search", "Dana", "--edge-path", str(shard), "--hashing-dim", "8"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hybrid-memory: error: Qdrant Edge shard at {shard} holds vectors of dimension 16, this memory's embedder "
        "gives 8: open it with the embedder it was written with, one of dimension 16 (the shard has no export record "
        "naming it; on the command line, --hashing-dim 16 if it was written with a HashingEmbedder), or give another "
        "directory"
    )
    assert embedder_fix(shard, 384) == (  # the default model's dimension: no --hashing-dim
        ", one of dimension 384 (the shard has no export record naming it; on the command line, leave --hashing-dim "
        "out: the default all-MiniLM-L6-v2 gives 384), or give another directory"
    )
    assert main(["search", "Dana", "--edge-path", str(shard), "--hashing-dim", "16"]) == 0  # the fix named works
    assert json.loads(capsys.readouterr().out)["results"]


def test_cli_draws_no_bar_when_stderr_is_not_a_terminal(tmp_path, capsys):
    _memory(tmp_path / "mem")
    capsys.readouterr()
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(tmp_path / "shard"),
            ]
        )
        == 0
    )  # no -q: stderr captured, not a terminal
    err = capsys.readouterr().err
    assert "export-qdrant:" not in err and "\r" not in err


def test_an_exported_shard_opens_with_its_calibration_statistics_read_not_built(tmp_path, capsys, monkeypatch):
    from hybrid_memory.backends.qdrant.calibration import SAVED, CorpusStats

    _memory(tmp_path / "mem")
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(tmp_path / "shard"),
                "-q",
            ]
        )
        == 0
    )
    assert (tmp_path / "shard" / SAVED).is_file()  # kept in step by the copy's writes, saved when it closed
    real_build = CorpusStats._build
    monkeypatch.setattr(CorpusStats, "_build", lambda self: pytest.fail("built instead of read back"))
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=NoEmbedding(16)) as copy:
        corpus = copy.backend.corpus
        assert corpus._built is True and corpus.points == 7
        kept = (corpus.moments.to_array(), corpus.moments.count, dict(corpus._df))
        monkeypatch.setattr(CorpusStats, "_build", real_build)
        corpus.invalidate()
        copy.backend.calibration()  # a scroll of the copied points gives exactly the counts the copy kept
        assert np.array_equal(corpus.moments.to_array(), kept[0])
        assert (corpus.moments.count, corpus._df, corpus.points) == (*kept[1:], 7)


def test_export_reads_the_bm25_parameters_after_the_memorys_maintenance_has_settled(tmp_path, monkeypatch, capsys):
    """A fresh user's finding: ``bm25_params`` read right after a bulk load gave the average length before a BM25
    merge still running in the background ended (17.4104, then 17.469 two seconds later, no write between), and
    an Edge copy written with it ranked 33 of 156 near-ties unlike the memory. ``export_to_qdrant`` and the CLI
    now wait for the maintenance (``flush``) before they read or check the parameters."""
    from hybrid_memory.backends.qdrant.backend import QdrantBackend
    from hybrid_memory.memory.export import export_to_qdrant

    _memory(tmp_path / "mem")
    calls = []
    params = HybridMemory.bm25_params
    flush = HybridMemory.flush
    monkeypatch.setattr(
        HybridMemory, "bm25_params", property(lambda self: (calls.append("params"), params.fget(self))[1])
    )
    monkeypatch.setattr(HybridMemory, "flush", lambda self: (calls.append("flush"), flush(self))[1])
    assert (
        main(
            [
                "export-qdrant",
                "--memory",
                str(tmp_path / "mem"),
                "--hashing-dim",
                "16",
                "--edge-path",
                str(tmp_path / "shard"),
                "-q",
            ]
        )
        == 0
    )
    assert calls[:2] == ["flush", "params"]
    capsys.readouterr()
    calls.clear()
    with HybridMemory(tmp_path / "mem", embedder=HashingEmbedder(16)) as mem:
        settled = params.fget(mem)
        backend = QdrantBackend.edge(tmp_path / "shard2", payload_indexes=False, **settled)
        assert export_to_qdrant(mem, backend) == 7
        backend.close()
    assert calls[:2] == ["flush", "params"]
