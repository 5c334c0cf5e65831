from hybrid_memory.graph.build import build_graph
from hybrid_memory.graph.models import ChunkExtraction, ExtractedEntity, ExtractedRelation
from hybrid_memory.graph.normalize import display_name, normalize_name, normalize_type


def test_four_spellings_are_one_key():
    spellings = ["Café API", "Cafe\u0301 API", "ＣＡＦＥ　ＡＰＩ", '"Café API "']
    assert {normalize_name(s) for s in spellings} == {"cafe api"}


def test_quotes_spaces_and_case():
    assert normalize_name("  “Billing-Service”  ") == "billing-service"
    assert normalize_name("'  DB   prod  '") == "db prod"
    assert normalize_name('""') == ""


def test_marks_outside_latin_block_are_kept():
    assert normalize_name("ガ") != normalize_name("カ")


def test_display_name_most_frequent_then_codepoint_order():
    assert display_name(["Café API", "cafe api", "Café API"]) == "Café API"
    assert display_name(["b", "a"]) == "a"
    assert normalize_type(" error code ") == "ERROR_CODE"


def _extraction(cid, entities, relations=()):
    return ChunkExtraction(
        chunk_id=cid,
        content_hash=cid,
        entities=[ExtractedEntity(name=n, type=t) for n, t in entities],
        relations=[ExtractedRelation(source=s, target=t, description=d) for s, t, d in relations],
    )


def test_spellings_merge_into_one_node_with_display_form_and_aliases():
    graph = build_graph(
        {
            "c1": _extraction("c1", [("Café API", "SERVICE")]),
            "c2": _extraction("c2", [("Cafe\u0301 API", "SERVICE")]),
            "c3": _extraction("c3", [("ＣＡＦＥ　ＡＰＩ", "SERVICE"), ('"Café API "', "SERVICE")]),
        }
    )
    assert list(graph.nodes) == ["cafe api"]
    node = graph.nodes["cafe api"]
    assert node["name"] == "Café API"  # NFKC composes Cafe\u0301 into Café: 3 of 4 mentions
    assert node["aliases"] == ["CAFE API", "Café API"]
    assert node["chunk_ids"] == ["c1", "c2", "c3"]
    assert node["mentions"] == 4


def test_same_name_two_types_is_one_node_and_no_edge_is_dropped():
    graph = build_graph(
        {
            "c1": _extraction(
                "c1", [("Redis", "DATABASE"), ("cache-api", "SERVICE")], [("cache-api", "Redis", "reads from")]
            ),
            "c2": _extraction(
                "c2",
                [("redis", "SERVICE"), ("billing-service", "SERVICE")],
                [("billing-service", "redis", "calls"), ("billing-service", "REDIS", "calls")],
            ),
        }
    )
    assert graph.nodes["redis"]["types"] == ["DATABASE", "SERVICE"]
    assert sorted(graph.edges(keys=True)) == [
        ("billing-service", "redis", "calls"),
        ("cache-api", "redis", "reads from"),
    ]
    assert graph.edges["billing-service", "redis", "calls"]["weight"] == 2.0
    assert graph.edges["billing-service", "redis", "calls"]["mentions"] == 2
