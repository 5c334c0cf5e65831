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
