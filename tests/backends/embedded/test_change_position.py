"""``EmbeddedBackend.change_position``: the change log's position, moved by every committed write of any memory
object on the folder (two objects have two SQLite connections, like two processes) and by nothing else; the
memory's and a scoped view's ``_change_position`` are internal (memory-wide: never shown to a scoped caller)."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, HybridMemory, MemoryClosedError, ScopedMemory


def _open(path) -> HybridMemory:
    return HybridMemory(path, embedder=HashingEmbedder(32))


def test_every_committed_write_moves_the_position_and_reads_do_not(tmp_path):
    with _open(tmp_path / "m") as memory:
        backend = memory.backend
        assert backend.change_position() == 0  # a new store
        memory.add([{"chunk_id": "a", "text": "kafka lag"}, {"chunk_id": "b", "text": "disk full"}])
        seen = [backend.change_position()]
        memory.upsert([{"chunk_id": "a", "text": "kafka lag on billing"}])  # a new text: a new row
        seen.append(backend.change_position())
        memory.upsert([{"chunk_id": "a", "text": "kafka lag on billing", "metadata": {"k": 1}}])  # metadata only
        seen.append(backend.change_position())
        memory.supersede(["b"], {"chunk_id": "c", "text": "disk replaced"})
        seen.append(backend.change_position())
        memory.delete(["c"])
        seen.append(backend.change_position())
        assert seen == sorted(set(seen)) and seen[0] > 0  # strictly increasing
        memory.search("kafka", top_k=3)
        memory.get(["a"])
        memory.chunk_hashes()
        assert memory.delete(["no-such-id"]) == 0  # commits nothing
        memory.persist()
        assert backend.change_position() == seen[-1]


def test_a_write_by_another_memory_on_the_folder_moves_the_position_with_no_catch_up(tmp_path):
    with _open(tmp_path / "m") as first, _open(tmp_path / "m") as second:
        first.add([{"chunk_id": "a", "text": "kafka lag"}])
        before = first._change_position()
        assert second.backend.change_position() == first.backend.change_position()
        second.delete(["a"])
        assert first.backend.seq < first.backend.change_position()  # the indexes have not caught up yet
        after = first._change_position()
        assert after != before and after[0] == before[0] and after[1] > before[1]
        assert first._change_position() == after  # stable while nothing is written


def test_the_position_belongs_to_one_memory_object(tmp_path):
    with _open(tmp_path / "m") as first, _open(tmp_path / "m") as second:
        assert first.backend.change_position() == second.backend.change_position()
        assert first._change_position() != second._change_position()  # two objects never share a key
        view = first.scoped(user_id="u1")
        assert view._change_position() == first._change_position()
    with pytest.raises(MemoryClosedError):
        first._change_position()


def test_the_position_is_not_public_on_a_scoped_view_or_the_memory():
    for cls in (ScopedMemory, HybridMemory):
        public = [name for name in dir(cls) if not name.startswith("_")]
        assert not [name for name in public if "position" in name or "change" in name], public
