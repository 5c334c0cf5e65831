"""A graph built from a scoped view sees that scope's chunks only: extraction, reports, sources and evidence."""

from hybrid_memory import HybridMemory
from hybrid_memory.graph import GraphIndex

U1 = {
    "u1-a": "billing-service returned HTTP 504 when db-prod-3 hit ERR_CONN_RESET.",
    "u1-b": "billing-service retries on db-prod-3 after ERR_CONN_RESET.",
}
U2 = {
    "u2-a": "billing-service calls ledger-service for every invoice.",
    "u2-b": "Priya Raman restarted billing-service on db-prod-3.",
}


def test_a_scoped_graph_sees_only_its_scope(embedder):
    with HybridMemory(None, embedder=embedder) as memory:
        memory.add(
            [{"chunk_id": c, "text": t, "user_id": "u1"} for c, t in U1.items()]
            + [{"chunk_id": c, "text": t, "user_id": "u2"} for c, t in U2.items()]
        )
        graph = GraphIndex.build(memory.scoped(user_id="u1"), save=False)
        assert graph.scope == {"user_id": "u1"}
        assert sorted(graph.extractions) == ["u1-a", "u1-b"]
        assert sorted(graph.graph.nodes) == ["billing-service", "db-prod-3", "err_conn_reset", "http 504"]
        assert sorted(graph.graph.nodes["billing-service"]["chunk_ids"]) == ["u1-a", "u1-b"]
        for report in graph.reports.values():
            assert set(report.chunk_ids) <= set(U1)
            assert set(report.quoted_chunk_ids) <= set(U1)
            assert {f.explanation for f in report.sources} <= {"source u1-a", "source u1-b"}
        result = graph.global_search("what does billing-service do on db-prod-3?", token_budget=4000)
        assert result.hits
        assert set(result.chunk_ids) <= set(U1) and set(result.quoted_chunk_ids) <= set(U1)
        assert all("ledger-service" not in h.text and "Priya" not in h.text for h in result.hits)
        whole = GraphIndex.build(memory, save=False)  # the unscoped (administrator's) graph sees both
        assert sorted(whole.extractions) == ["u1-a", "u1-b", "u2-a", "u2-b"]
