"""A memory directory reopens with identical results, in another process too; derived indexes heal."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, MemoryNotFoundError, StoreFormatError

QUERIES = ["HTTP 504 connection pool", "user id", "故乡", "ERR_CONN_RESET restarts"]
FILTER = {"environment": "production"}


def run_queries(memory):
    return [
        memory.search(q, top_k=5, query_id=f"q{i}", metadata_filter=FILTER if i % 2 else None).model_dump()
        for i, q in enumerate(QUERIES)
    ]


@pytest.fixture
def saved(tmp_path, note_chunks):
    path = tmp_path / "memory"
    with HybridMemory(path, embedder=HashingEmbedder(64)) as mem:
        mem.add(note_chunks())
        mem.delete(["poem"])
        mem.upsert([{"chunk_id": "poem", "text": "低头思故乡 again", "metadata": {"environment": "dev"}}])
        expected = run_queries(mem)
    return path, expected


def test_reopen_gives_identical_results(saved):
    path, expected = saved
    with HybridMemory.open(path) as mem:  # the hashing embedder is recovered from the manifest
        assert mem.embedder.name == "hashing-64"
        assert run_queries(mem) == expected


def test_reopen_in_another_process_gives_identical_results(saved):
    path, expected = saved
    script = textwrap.dedent(f"""
        import json
        from hybrid_memory import HybridMemory
        QUERIES = {QUERIES!r}
        FILTER = {FILTER!r}
        with HybridMemory.open({str(path)!r}) as mem:
            out = [mem.search(q, top_k=5, query_id=f"q{{i}}", metadata_filter=FILTER if i % 2 else None).model_dump()
                   for i, q in enumerate(QUERIES)]
        print(json.dumps(out))
    """)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == json.loads(json.dumps(expected))


def test_saved_files_hold_no_pickle(saved):
    path, _ = saved
    names = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert "store.sqlite3" in names and "manifest.json" in names and "dense/slot_ids.npy" in names
    assert [n for n in names if n.startswith("dense/vectors.")] == [f"dense/{dense_base(path)}"]
    assert "bm25/manifest.json" in names and "bm25/ids.npy" in names
    for file in path.rglob("*"):
        if file.is_file():
            head = file.read_bytes()[:2]
            assert head not in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05"), file
        if file.suffix == ".npy":
            np.load(file, allow_pickle=False)


def dense_base(path):
    """The name of the dense index's base vectors file (``vectors.<token>.npy``)."""
    return json.loads((path / "dense" / "manifest.json").read_text())["vectors"]


def assert_same_results(got, expected):
    """Same ids, ranks, texts and metadata; scores equal up to float32 rounding (1e-6 relative)."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert [r["chunk_id"] for r in g["results"]] == [r["chunk_id"] for r in e["results"]]
        for gr, er in zip(g["results"], e["results"], strict=True):
            for key, value in er.items():
                if key.endswith("score") and value is not None:
                    assert gr[key] == pytest.approx(value, rel=1e-6), key
                else:
                    assert gr[key] == value, key


def fresh_build_results(path):
    """Results of a memory built in one go from the stored chunks (what a rebuild must equal)."""
    with HybridMemory.open(path) as saved_mem:
        chunks = [c.model_dump(include={"chunk_id", "text", "source", "metadata"}) for c in saved_mem.iter_chunks()]
    with HybridMemory(embedder=HashingEmbedder(64)) as fresh:
        fresh.add(chunks)
        return run_queries(fresh)


def test_corrupt_dense_index_is_rebuilt_from_stored_vectors(saved):
    path, expected = saved
    (path / "dense" / dense_base(path)).write_bytes(b"not a numpy array")
    with HybridMemory.open(path) as mem:
        assert run_queries(mem) == expected


@pytest.mark.parametrize("damage", ["delete_bm25", "corrupt_bm25", "delete_all"])
def test_missing_or_damaged_indexes_are_rebuilt_from_the_store(saved, damage):
    path, _ = saved
    expected = fresh_build_results(path)
    if damage in ("delete_bm25", "delete_all"):
        shutil.rmtree(path / "bm25")
    if damage == "delete_all":
        shutil.rmtree(path / "dense")
    if damage == "corrupt_bm25":
        (path / "bm25" / "ids.npy").write_bytes(b"garbage")
    with HybridMemory.open(path) as mem:
        assert_same_results(run_queries(mem), expected)
        assert mem.count() == 6
        assert mem.stats()["bm25_delta_documents"] == 0  # rebuilt as one main segment


@pytest.mark.parametrize("damage", ["empty", "half", "garbage"])
def test_every_derived_file_damaged_any_way_is_rebuilt_from_the_store(saved, tmp_path, damage):
    """Each file beside the store (indexes, manifests, the filter index's npz) emptied, cut in half or overwritten
    with bytes of its length: the memory opens and answers as before (a fresh user's finding: a cut
    ``filters/arrays.npz`` raised zipfile's BadZipFile, an empty one numpy's EOFError)."""
    path, expected = saved
    files = sorted(
        f.relative_to(path) for f in path.rglob("*") if f.is_file() and not f.name.startswith("store.sqlite3")
    )
    assert Path("filters/arrays.npz") in files and Path("indexes.json") in files
    for name in files:
        copy = tmp_path / f"{damage}-{name.as_posix().replace('/', '-')}"
        shutil.copytree(path, copy)
        data = (copy / name).read_bytes()
        (copy / name).write_bytes(
            {
                "empty": b"",
                "half": data[: len(data) // 2],
                "garbage": bytes((i * 37 + 11) % 256 for i in range(max(16, len(data)))),
            }[damage]
        )
        with HybridMemory.open(copy) as mem:
            assert_same_results(run_queries(mem), expected)


def test_stale_indexes_catch_up_with_the_store(saved, tmp_path):
    path, _ = saved
    old_indexes = tmp_path / "old"
    shutil.copytree(path / "bm25", old_indexes / "bm25")
    shutil.copytree(path / "dense", old_indexes / "dense")
    with HybridMemory.open(path) as mem:
        mem.delete(["reset"])
        mem.add(
            [{"chunk_id": "late", "text": "late note about ERR_CONN_RESET", "metadata": {"environment": "production"}}]
        )
        expected = run_queries(mem)
    shutil.rmtree(path / "bm25")
    shutil.copytree(old_indexes / "bm25", path / "bm25")  # indexes from before the change
    shutil.rmtree(path / "dense")
    shutil.copytree(old_indexes / "dense", path / "dense")
    with HybridMemory.open(path) as mem:
        assert run_queries(mem) == expected
        assert mem.stats()["dense_vectors"] == 6


def test_reopening_with_another_embedder_is_refused(saved):
    path, _ = saved
    with pytest.raises(StoreFormatError, match="hashing-64"):
        HybridMemory.open(path, embedder=HashingEmbedder(32))


def test_a_file_path_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ValueError, match="give a directory"):
        HybridMemory(file, embedder=HashingEmbedder(8))


def test_bm25_files_from_two_saves_are_detected_and_rebuilt(saved, tmp_path):
    path, _ = saved
    shutil.copytree(path / "bm25", tmp_path / "old_bm25")
    with HybridMemory.open(path) as mem:
        mem.delete(["reset", "auth-user"])
        mem.add([{"chunk_id": "y1", "text": "brand new ERR_QUOTA note", "metadata": {"environment": "production"}}])
    for name in ("ids.npy", "alive.npy"):  # a crash between two writes: half old, half new
        shutil.copy(tmp_path / "old_bm25" / name, path / "bm25" / name)
    expected = fresh_build_results(path)
    with HybridMemory.open(path) as mem:
        assert_same_results(run_queries(mem), expected)
        assert mem.search("ERR_QUOTA", top_k=1, dense_weight=0.0).results[0].chunk_id == "y1"
    assert not (path / "bm25.tmp").exists() and not (path / "bm25.old").exists()


def lost_store_message(path, found):
    return (
        f"{path} holds a memory's files ({found}) but not its store, store.sqlite3: the store is the source of truth "
        "(the chunks' texts, metadata and vectors) and cannot be rebuilt from the index files; nothing was changed. "
        "Restore store.sqlite3 from a backup (put the copy into an empty folder and open that: its indexes are "
        f"rebuilt from it), or move {path} aside and ingest the documents into a new memory"
    )


def folder_contents(path):
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def test_a_missing_or_corrupt_store_is_a_clear_error(saved):
    path, _ = saved
    (path / "store.sqlite3").rename(path / "moved.sqlite3")
    with pytest.raises(StoreFormatError) as err:
        HybridMemory.open(path)
    assert str(err.value) == lost_store_message(path, "manifest.json, indexes.json, bm25/, dense/, filters/")
    (path / "store.sqlite3").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreFormatError, match="not a readable SQLite database"):
        HybridMemory.open(path)


@pytest.mark.parametrize("manifest", [True, False], ids=["with-manifest", "index-files-only"])
@pytest.mark.parametrize(
    "opening",
    [
        lambda path: HybridMemory(path),
        lambda path: HybridMemory(path, embedder=HashingEmbedder(64)),
        lambda path: HybridMemory.open(path),
        lambda path: HybridMemory.open(path, create=True),
    ],
    ids=["constructor", "constructor-embedder", "open", "open-create"],
)
def test_index_files_without_their_store_are_refused_naming_the_fix(saved, manifest, opening):
    """A fresh user's finding: a folder whose store.sqlite3 was lost while its index files stayed said only "no memory
    at ..." (HybridMemory.open, the CLI), and HybridMemory(path) without a manifest.json silently created an empty
    store there and rebuilt the index files to nothing. Every way of opening it now says what is wrong and the fix,
    and leaves every file as it was (no store created, no index file removed or rewritten)."""
    path, _ = saved
    (path / "store.sqlite3").unlink()
    if not manifest:
        (path / "manifest.json").unlink()
    before = folder_contents(path)
    with pytest.raises(StoreFormatError) as err:
        opening(path)
    found = "indexes.json, bm25/, dense/, filters/"
    assert str(err.value) == lost_store_message(path, f"manifest.json, {found}" if manifest else found)
    assert type(err.value) is StoreFormatError  # not MemoryNotFoundError: a memory is there, its store is lost
    assert folder_contents(path) == before


def test_a_store_write_ahead_log_without_its_store_is_refused(tmp_path):
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "store.sqlite3-wal").write_bytes(b"wal")
    with pytest.raises(StoreFormatError) as err:
        HybridMemory(folder, embedder=HashingEmbedder(8))
    assert str(err.value) == lost_store_message(folder, "store.sqlite3-wal")
    assert [p.name for p in folder.iterdir()] == ["store.sqlite3-wal"]


def test_only_a_memory_own_files_count_as_a_lost_store(tmp_path):
    """The files a memory writes once its store exists (the index manifests, not folder names), so a folder of
    one's own is not taken for a memory that lost its store, and a new memory still opens in it."""
    from hybrid_memory.paths import memory_files_without_store

    folder = tmp_path / "notes"
    (folder / "filters").mkdir(parents=True)
    (folder / "dense").mkdir()
    (folder / "readme.md").write_text("mine")
    assert memory_files_without_store(folder) == []
    assert memory_files_without_store(tmp_path / "missing") == []
    (folder / "dense" / "manifest.json").write_text("{}")
    assert memory_files_without_store(folder) == ["dense/"]
    (folder / "store.sqlite3").write_bytes(b"")
    assert memory_files_without_store(folder) == []  # the store is there: not this check's business
    (folder / "store.sqlite3").unlink()
    (folder / "dense" / "manifest.json").unlink()
    with HybridMemory(folder, embedder=HashingEmbedder(8)) as memory:
        assert memory.count() == 0


def test_manifest_file_is_rewritten_from_the_store(saved):
    path, _ = saved
    (path / "manifest.json").write_text("garbage")
    with HybridMemory.open(path) as mem:
        assert mem.embedder.name == "hashing-64"
    assert json.loads((path / "manifest.json").read_text())["embedder"] == {"name": "hashing-64", "dim": 64}


def test_open_refuses_a_folder_without_a_memory(tmp_path):
    with pytest.raises(StoreFormatError, match="no memory at") as err:
        HybridMemory.open(tmp_path / "typo", embedder=HashingEmbedder(8))
    # one class that both old (StoreFormatError) and Python-idiomatic (FileNotFoundError) handlers catch
    assert type(err.value) is MemoryNotFoundError and isinstance(err.value, FileNotFoundError)
    assert not (tmp_path / "typo").exists()
    with HybridMemory.open(tmp_path / "new", create=True, embedder=HashingEmbedder(8)) as mem:
        assert mem.count() == 0


@pytest.mark.parametrize("state", ['{"seq": "x"}', '{"seq": 99999999}', "[1, 2]", '{"seq": true}', "not json"])
def test_a_damaged_index_state_file_is_treated_as_missing(tmp_path, state):
    from hybrid_memory import HashingEmbedder, HybridMemory

    with HybridMemory(tmp_path, embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": "a", "text": "alpha"}])
    (tmp_path / "indexes.json").write_text(state)
    with HybridMemory.open(tmp_path, embedder=HashingEmbedder(32)) as memory:
        memory.add([{"chunk_id": "z", "text": "zebra"}])  # closing saves the indexes again
    saved = json.loads((tmp_path / "indexes.json").read_text())
    assert saved["seq"] == 2
    with HybridMemory.open(tmp_path, embedder=HashingEmbedder(32)) as memory:
        assert [r.chunk_id for r in memory.search("zebra", sparse_weight=1.0, dense_weight=0.0).results] == ["z"]


def test_a_save_after_one_upsert_links_the_big_files_and_reopens_identically(tmp_path):
    """The vectors base file, the IVF file and the BM25 main segment are hard-linked into the new save (same
    inode), not rewritten;
    only the one changed row is written; a reopen from those files gives the same results."""
    path, dim, n = tmp_path / "memory", 32, 6000
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    chunks = [{"chunk_id": f"c{i}", "text": f"note {i} on topic{i % 7}", "metadata": {"k": i % 3}} for i in range(n)]
    options = {"embedder": HashingEmbedder(dim), "dense_index": "ivf", "background_compaction": False}
    with HybridMemory(path, **options) as mem:
        mem.add(chunks, vectors=vectors)
        assert mem.stats()["dense"]["approximate"] is True
    first = json.loads((path / "dense" / "manifest.json").read_text())
    inodes = {name: (path / "dense" / name).stat().st_ino for name in (first["vectors"], first["ivf"])}
    bm25_main = path / "bm25" / "bm25s" / "data.csc.index.npy"
    bm25_inode = bm25_main.stat().st_ino
    probes = [vectors[i] / np.linalg.norm(vectors[i]) for i in (5, 17, 400)]

    def results(mem):
        return [
            [
                (r.chunk_id, r.score)
                for r in mem.search("topic3 note", query_vector=p, top_k=8, metadata_filter=f).results
            ]
            for p in [*probes, -probes[0]]
            for f in (None, {"k": 1})
        ]

    with HybridMemory.open(path, **options) as mem:
        mem.upsert([{"chunk_id": "c5", "text": "note 5 rewritten", "metadata": {"k": 1}}], vectors=-vectors[5:6])
        mem.persist()
        expected = results(mem)
        # the upserted vector is the best match of its own direction
        assert mem.search("x", query_vector=-probes[0], top_k=1, sparse_weight=0.0).results[0].chunk_id == "c5"
    second = json.loads((path / "dense" / "manifest.json").read_text())
    assert (second["vectors"], second["ivf"]) == (first["vectors"], first["ivf"])
    assert {name: (path / "dense" / name).stat().st_ino for name in inodes} == inodes
    assert bm25_main.stat().st_ino == bm25_inode  # the BM25 main segment too (the upsert went to the delta)
    assert (second["base_rows"], second["delta_rows"]) == (n, 1)  # the freed slot, reused by the new version
    with HybridMemory.open(path, **options) as mem:
        assert mem.last_sync["dense"] == {"rebuilt": False, "added": 0, "removed": 0}
        assert results(mem) == expected


def _filter_memory(path):
    """Eight notes with a string and a number key, saved; their filter index's folder."""
    with HybridMemory(path, embedder=HashingEmbedder(16)) as mem:
        mem.add(
            [
                {
                    "chunk_id": f"n{i}",
                    "text": f"retry note {i}",
                    "metadata": {"service": "auth" if i == 3 else f"svc{i % 3}", "severity": i % 4},
                }
                for i in range(8)
            ]
        )
    return path / "filters"


FILTER_QUERIES = [{"service": "auth"}, {"severity": {"$gte": 2}}, {"severity": 1}, {"service": {"$ne": "svc1"}}]


def _filtered_ids(mem):
    return [
        sorted(r.chunk_id for r in mem.search("retry", top_k=10, metadata_filter=f).results) for f in FILTER_QUERIES
    ]


def _rewrite_npz(folder, **changed):
    with np.load(folder / "arrays.npz", allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays.update(changed)
    np.savez(folder / "arrays.npz", **arrays)


@pytest.mark.parametrize(
    "damage", ["num_values cut", "terms emptied", "number keys emptied", "stale arrays", "bitmap bytes changed"]
)
def test_a_filter_index_whose_files_disagree_is_rebuilt_not_trusted(tmp_path, caplog, damage):
    """Both files readable but not of one save: the layout or the recorded CRC-32s tell, and the index is rebuilt
    from the store (a fresh user's finding: each of these loaded silently and filters gave wrong ids, on every
    open)."""
    import logging

    path = tmp_path / "m"
    folder = _filter_memory(path)
    expected = [["n3"], ["n2", "n3", "n6", "n7"], ["n1", "n5"], ["n0", "n2", "n3", "n5", "n6"]]
    if damage == "stale arrays":  # the arrays of an earlier save beside the meta.json of a later one
        shutil.copy(folder / "arrays.npz", tmp_path / "old.npz")
        with HybridMemory.open(path, embedder=HashingEmbedder(16)) as mem:
            mem.upsert([{"chunk_id": "n1", "text": "retry note 1", "metadata": {"service": "auth", "severity": 1}}])
        shutil.copy(tmp_path / "old.npz", folder / "arrays.npz")
        expected[0], expected[3] = ["n1", "n3"], ["n0", "n1", "n2", "n3", "n5", "n6"]
    elif damage == "num_values cut":
        with np.load(folder / "arrays.npz") as npz:
            _rewrite_npz(folder, num_values=npz["num_values"][:4])
    elif damage == "bitmap bytes changed":
        with np.load(folder / "arrays.npz") as npz:
            blobs = npz["term_blobs"].copy()
        blobs[-1] ^= 0x01
        _rewrite_npz(folder, term_blobs=blobs)
    else:
        meta = json.loads((folder / "meta.json").read_text())
        meta["terms" if damage == "terms emptied" else "number_keys"] = []
        (folder / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.backends.embedded.filter_index"):
        with HybridMemory.open(path, embedder=HashingEmbedder(16)) as mem:
            assert _filtered_ids(mem) == expected
    assert any(
        "is unreadable" in r.getMessage() and "rebuilding it from the store" in r.getMessage() for r in caplog.records
    )


def test_a_filter_index_saved_before_the_checksums_still_loads(tmp_path, caplog):
    """A save without the ``crc32`` entry (written before it) is checked by its layout alone and used as is."""
    import logging

    path = tmp_path / "m"
    folder = _filter_memory(path)
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta.pop("crc32")) == {
        "term_blobs",
        "term_offsets",
        "exists_blobs",
        "exists_offsets",
        "universe",
        "num_values",
        "num_rows",
        "num_offsets",
        "csr_rows",
        "csr_offsets",
        "csr_terms",
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.backends.embedded.filter_index"):
        with HybridMemory.open(path, embedder=HashingEmbedder(16)) as mem:
            assert _filtered_ids(mem) == [
                ["n3"],
                ["n2", "n3", "n6", "n7"],
                ["n1", "n5"],
                ["n0", "n2", "n3", "n5", "n6"],
            ]
    assert caplog.records == []
