"""Bad Qdrant targets give the library's errors, naming the fix (found by the fresh-user review)."""

import pytest

pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed: pip install 'hybrid-memory[qdrant]'")

from hybrid_memory import BackendUnavailableError, HashingEmbedder, HybridMemory, InvalidRequestError  # noqa: E402


def qdrant(*args, **kwargs):
    return HybridMemory.qdrant(*args, embedder=HashingEmbedder(dim=8), **kwargs)


def test_an_unreachable_server_is_backend_unavailable_naming_the_collection():
    # port 1 on the loopback: nothing listens there, so the connection is refused at once
    with pytest.raises(BackendUnavailableError, match=r"could not open the Qdrant collection 'x'.*Connection refused"):
        qdrant("http://127.0.0.1:1", collection="x")


def test_a_host_and_port_without_scheme_is_refused_not_made_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequestError, match=r"give the URL, 'http://localhost:6333'"):
        qdrant("localhost:6333")
    assert list(tmp_path.iterdir()) == []  # no local-mode folder named after the address


def test_wrong_client_type_and_write_ordering_are_named():
    with pytest.raises(InvalidRequestError, match="client_or_url must be a qdrant_client.QdrantClient.*got int"):
        qdrant(5)
    with pytest.raises(InvalidRequestError, match="write_ordering must be 'weak', 'medium' or 'strong', got 'fast'"):
        qdrant(":memory:", write_ordering="fast")


# -- a Qdrant server that goes away after the memory opened (fresh-user review, session 3) ----------------------
def _memory_on_a_server_that_went_away(prefer_grpc):
    """A real remote ``QdrantClient`` at 127.0.0.1:1, where nothing listens. While the memory opens (create and
    check the collection) the client's collection calls answer from a local-mode client, as a server that was
    up then; every later call goes through qdrant-client's real transport and meets a refused connection."""
    from qdrant_client import QdrantClient

    remote = QdrantClient(url="http://127.0.0.1:1", prefer_grpc=prefer_grpc, grpc_port=1, check_compatibility=False,
                          timeout=5)
    local = QdrantClient(":memory:")
    for name in ("collection_exists", "create_collection", "get_collection", "create_payload_index"):
        setattr(remote, name, getattr(local, name))
    return HybridMemory.qdrant(remote, collection="notes", embedder=HashingEmbedder(dim=8), payload_indexes=False)


CALLS = {
    "search": (lambda m: m.search("HTTP 504"), "query"),
    "add": (lambda m: m.add([{"chunk_id": "a", "text": "HTTP 504"}]), "retrieve points"),
    "upsert with vectors": (lambda m: m.upsert([{"chunk_id": "a", "text": "HTTP 504"}], vectors=[[1.0] * 8],
                                               dedup="keep"), "retrieve points"),
    "delete": (lambda m: m.delete(["a"]), "retrieve points"),
    "count": (lambda m: m.count(), "count points"),
    "get": (lambda m: m.get(["a"]), "retrieve points"),
    "iter_chunks": (lambda m: list(m.iter_chunks()), "scroll points"),
}


@pytest.mark.parametrize("prefer_grpc, target, cause", [
    (False, "http://127.0.0.1:1", r"ConnectError: \[Errno 111\] Connection refused"),
    (True, r"http://127.0.0.1:1 \(gRPC port 1\)", "gRPC UNAVAILABLE: failed to connect to all addresses"),
])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_server_gone_after_open_is_backend_unavailable_naming_url_and_collection(prefer_grpc, target, cause, call):
    memory = _memory_on_a_server_that_went_away(prefer_grpc)
    run, what = CALLS[call]
    with pytest.raises(BackendUnavailableError, match=rf"^the Qdrant server at {target} could not be reached "
                                                      rf"\({what}, collection 'notes'\): {cause}.*; check that it is "
                                                      r"running and reachable at that URL \(and the API key\); "
                                                      r"nothing was changed; run the call again") as info:
        run(memory)
    assert isinstance(info.value, ConnectionError)
    cause_error = info.value.__cause__
    assert type(cause_error).__name__ in ("ResponseHandlingException", "_InactiveRpcError")  # qdrant-client's own
    memory.close()


def test_a_write_cut_mid_batch_says_it_may_be_partly_stored_and_to_run_it_again():
    """The write's reads answered (the server went away between them and the upsert)."""
    memory = _memory_on_a_server_that_went_away(False)
    remote = memory.backend.collection.client
    remote.retrieve = lambda *args, **kwargs: []  # nothing stored yet: the upsert is the first call that travels
    remote.scroll = lambda *args, **kwargs: ([], None)  # no stored duplicate
    with pytest.raises(BackendUnavailableError, match=r"could not be reached \(upsert points, collection 'notes'\): "
                                                      r"ConnectError: .*this write may be partly stored \(earlier "
                                                      r"batches of it\): writes are upserts by chunk id, so run the "
                                                      r"same call again once the server answers"):
        memory.upsert([{"chunk_id": "a", "text": "HTTP 504"}], vectors=[[1.0] * 8])
    memory.close()


def test_errors_that_are_not_a_lost_connection_pass_unchanged():
    import httpx
    from pydantic import BaseModel, ValidationError
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    from hybrid_memory.backends.qdrant_collection import _connection_lost

    class Shape(BaseModel):
        n: int

    try:
        Shape(n="x")
    except ValidationError as exc:
        parse_error = exc
    assert not _connection_lost(ResponseHandlingException(parse_error))  # a response that could not be parsed
    assert _connection_lost(ResponseHandlingException(httpx.ReadTimeout("timed out")))
    assert _connection_lost(UnexpectedResponse(503, "Service Unavailable", b"", httpx.Headers()))
    assert not _connection_lost(UnexpectedResponse(404, "Not Found", b"", httpx.Headers()))
    assert not _connection_lost(ValueError("x"))
