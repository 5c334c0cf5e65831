"""Issue 35, class 8: the dense and BM25 index files carry CRC-32s checked on load. Damage that keeps every array's
shape used to load silently and change rankings; now the index is rebuilt from the store, with a warning naming
the file."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from hybrid_memory import HashingEmbedder, HybridMemory
from hybrid_memory._checksums import BLOCK_BYTES, file_checksums, verify_files
from hybrid_memory.engines.bm25.index import BM25Index

TEXTS = [f"note {i}: service-{i % 5} saw error E{i:03d} during deploy of build {i * 7}" for i in range(40)]
QUERIES = ["service-3 error E013", "deploy build 70", "E027", "service-1 deploy"]


def _results(memory):
    return [
        [(r.chunk_id, r.score, r.sparse_score, r.dense_score) for r in memory.search(q, top_k=5).results]
        for q in QUERIES
    ]


def _same(got, expected):
    """Equal ids and order; scores equal up to float32 rounding (a rebuilt BM25 index holds the documents in its
    main segment, whose scores bm25s stores as float32, where the saved one held them in the float64 delta)."""
    assert [[r[0] for r in q] for q in got] == [[r[0] for r in q] for q in expected]
    for q_got, q_expected in zip(got, expected, strict=True):
        for r_got, r_expected in zip(q_got, q_expected, strict=True):
            for a, b in zip(r_got[1:], r_expected[1:], strict=True):
                assert a == b if b is None else a == pytest.approx(b, rel=1e-6)


def _damage_npy(path, row, value):
    array = np.load(path, mmap_mode="r+", allow_pickle=False)  # same dtype, same shape: only values change
    shape = array.shape
    array[row] = value
    array.flush()
    del array
    assert np.load(path, allow_pickle=False).shape == shape


def test_damaged_dense_and_bm25_files_of_a_memory_are_rebuilt_not_used(tmp_path, caplog):
    with HybridMemory(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        memory.add([{"chunk_id": f"c{i}", "text": t} for i, t in enumerate(TEXTS)])
        expected = _results(memory)
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    (base,) = (tmp_path / "m" / "dense").glob("vectors.*.npy")
    unit = np.zeros(16, dtype=np.float32)
    unit[0] = 1.0
    _damage_npy(base, 13, unit)  # c13's vector points elsewhere
    _damage_npy(tmp_path / "m" / "bm25" / "tokens.npy", slice(0, 4), 0)  # the first document's first tokens
    with caplog.at_level(logging.WARNING), HybridMemory.open(tmp_path / "m", embedder=HashingEmbedder(16)) as memory:
        _same(_results(memory), expected)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{base.name} does not match its CRC-32 (block 0 of 1 differs" in w and "rebuilt" in w for w in warnings)
    assert any("tokens.npy does not match its CRC-32" in w and "rebuilt" in w for w in warnings)
    caplog.clear()
    with caplog.at_level(logging.WARNING), HybridMemory.open(tmp_path / "copy", embedder=HashingEmbedder(16)) as memory:
        assert _results(memory) == expected  # an undamaged copy loads without a word
    assert [r for r in caplog.records if r.levelno >= logging.WARNING and "CRC-32" in r.getMessage()] == []


def test_a_damaged_bm25_main_segment_is_refused(tmp_path, caplog):
    index = BM25Index(compact_min=100_000)
    index.build(list(range(1, 41)), TEXTS)
    index.save(tmp_path / "bm25")
    expected = index.search("service-3 error E013", 5, cache={})
    data = tmp_path / "bm25" / "bm25s" / "data.csc.index.npy"
    assert data.is_file()
    scores = np.load(data, allow_pickle=False)
    _damage_npy(data, int(np.argmax(scores)), float(scores.max()) * 10)
    with caplog.at_level(logging.WARNING):
        assert BM25Index(compact_min=100_000).load(tmp_path / "bm25") is False
    assert "bm25s/data.csc.index.npy does not match its CRC-32" in caplog.text
    # saved again over an unchanged main segment, the links keep the checksums recorded when it was written
    index.save(tmp_path / "again", previous=tmp_path / "bm25")
    fresh = BM25Index(compact_min=100_000)
    assert fresh.load(tmp_path / "again") is False  # the linked file is the damaged one: still refused
    index.save(tmp_path / "third")
    fresh = BM25Index(compact_min=100_000)
    assert fresh.load(tmp_path / "third") and fresh.search("service-3 error E013", 5, cache={}) == expected


def test_checksums_are_per_block_and_name_the_file(tmp_path, monkeypatch):
    import hybrid_memory._checksums as checksums

    monkeypatch.setattr(checksums, "BLOCK_BYTES", 4)
    (tmp_path / "a.bin").write_bytes(b"0123456789")
    (tmp_path / "e.bin").write_bytes(b"")
    recorded = file_checksums(tmp_path, ["a.bin", "e.bin"])
    import zlib

    assert recorded == {"a.bin": [zlib.crc32(b"0123"), zlib.crc32(b"4567"), zlib.crc32(b"89")], "e.bin": [0]}
    verify_files(tmp_path, recorded)
    (tmp_path / "a.bin").write_bytes(b"0123456X89")
    with pytest.raises(ValueError, match=r"^a.bin does not match its CRC-32 \(block 1 of 3 differs"):
        verify_files(tmp_path, recorded)
    (tmp_path / "e.bin").unlink()
    with pytest.raises(ValueError, match=r"^e.bin is missing$"):
        verify_files(tmp_path, {"e.bin": [0]})
    assert BLOCK_BYTES == 1 << 26  # the module's value, imported before the patch
