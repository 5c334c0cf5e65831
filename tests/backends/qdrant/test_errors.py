"""Bad Qdrant targets give the library's errors, naming the fix (found by the fresh-user review)."""

import pytest

pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed: pip install 'hybrid-memory[qdrant]'")

from hybrid_memory import BackendUnavailableError, HashingEmbedder, HybridMemory, InvalidRequestError, StoreBusyError  # noqa: E402


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


def test_a_url_with_another_scheme_is_refused_not_made_a_local_folder(tmp_path, monkeypatch):
    # a fresh user's finding: 'htps://...' was a local-mode folder named 'htps:/...', and export-qdrant said copied
    monkeypatch.chdir(tmp_path)
    for url, scheme in (("htps://qdrant.example:6333", "htps"), ("ftp://x", "ftp"), ("grpc://q:6334", "grpc")):
        with pytest.raises(InvalidRequestError) as err:
            qdrant(url)
        assert str(err.value) == (
            f"{url!r} has the scheme {scheme!r}: a Qdrant server's URL starts with 'http://' or 'https://' (for a "
            "local-mode directory give a path without '://')"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_local_mode_folder_open_elsewhere_is_store_busy(tmp_path):
    # a fresh user's finding: the second open raised qdrant-client's own RuntimeError
    folder = tmp_path / "qlocal"
    first = qdrant(str(folder))
    try:
        first.add([{"chunk_id": "a", "text": "kafka consumer lag"}])
        with pytest.raises(StoreBusyError) as err:
            qdrant(str(folder))
        assert str(err.value) == (
            f"qdrant-client local-mode folder {folder} is open elsewhere (in this process or another); local mode is "
            "opened by one client at a time: close the other memory on it, or use a Qdrant server for several "
            "processes"
        )
        assert first.count() == 1  # the first memory is untouched
    finally:
        first.close()
    with qdrant(str(folder)) as again:  # free once the first is closed
        assert again.count() == 1


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

    remote = QdrantClient(
        url="http://127.0.0.1:1", prefer_grpc=prefer_grpc, grpc_port=1, check_compatibility=False, timeout=5
    )
    local = QdrantClient(":memory:")
    for name in ("collection_exists", "create_collection", "get_collection", "create_payload_index"):
        setattr(remote, name, getattr(local, name))
    return HybridMemory.qdrant(remote, collection="notes", embedder=HashingEmbedder(dim=8), payload_indexes=False)


CALLS = {
    "search": (lambda m: m.search("HTTP 504"), "query"),
    "add": (lambda m: m.add([{"chunk_id": "a", "text": "HTTP 504"}]), "retrieve points"),
    "upsert with vectors": (
        lambda m: m.upsert([{"chunk_id": "a", "text": "HTTP 504"}], vectors=[[1.0] * 8], dedup="keep"),
        "retrieve points",
    ),
    "delete": (lambda m: m.delete(["a"]), "retrieve points"),
    "count": (lambda m: m.count(), "count points"),
    "get": (lambda m: m.get(["a"]), "retrieve points"),
    "iter_chunks": (lambda m: list(m.iter_chunks()), "scroll points"),
}


@pytest.mark.parametrize(
    "prefer_grpc, target, cause",
    [
        (False, "http://127.0.0.1:1", r"ConnectError: \[Errno 111\] Connection refused"),
        (True, r"http://127.0.0.1:1 \(gRPC port 1\)", "gRPC UNAVAILABLE: failed to connect to all addresses"),
    ],
)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_server_gone_after_open_is_backend_unavailable_naming_url_and_collection(prefer_grpc, target, cause, call):
    memory = _memory_on_a_server_that_went_away(prefer_grpc)
    run, what = CALLS[call]
    with pytest.raises(
        BackendUnavailableError,
        match=rf"^the Qdrant server at {target} could not be reached "
        rf"\({what}, collection 'notes'\): {cause}.*; check that it is "
        r"running and reachable at that URL \(and the API key\); "
        r"nothing was changed; run the call again",
    ) as info:
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
    with pytest.raises(
        BackendUnavailableError,
        match=r"could not be reached \(upsert points, collection 'notes'\): "
        r"ConnectError: .*this write may be partly stored \(earlier "
        r"batches of it\): writes are upserts by chunk id, so run the "
        r"same call again once the server answers",
    ):
        memory.upsert([{"chunk_id": "a", "text": "HTTP 504"}], vectors=[[1.0] * 8])
    memory.close()


def test_errors_that_are_not_a_lost_connection_pass_unchanged():
    import httpx
    from hybrid_memory.backends.qdrant.collection import _connection_lost
    from pydantic import BaseModel, ValidationError
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

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


@pytest.fixture
def answering_server():
    """A real HTTP server on a free loopback port that answers every request with the status and JSON body set
    in ``reply`` (as a Qdrant server, or the proxy in front of it, would), for qdrant-client's real transport."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    reply = {"status": 404, "body": {}}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            data = json.dumps(reply["body"]).encode()
            self.send_response(reply["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", reply
    server.shutdown()
    server.server_close()
    thread.join(10)


def _memory_on(url):
    from qdrant_client import QdrantClient

    remote = QdrantClient(url=url, check_compatibility=False, timeout=5)
    local = QdrantClient(":memory:")
    for name in ("collection_exists", "create_collection", "get_collection", "create_payload_index"):
        setattr(remote, name, getattr(local, name))  # the collection existed while the memory opened
    return HybridMemory.qdrant(remote, collection="notes", embedder=HashingEmbedder(dim=8), payload_indexes=False)


def test_a_collection_deleted_after_open_is_a_store_format_error_naming_it(answering_server):
    from hybrid_memory import StoreFormatError

    url, reply = answering_server
    reply.update(status=404, body={"status": {"error": "Not found: Collection `notes` doesn't exist!"}, "time": 0.0})
    memory = _memory_on(url)
    for call, what in (
        (lambda: memory.search("HTTP 504"), "query"),
        (lambda: memory.count(), "count points"),
        (lambda: memory.add([{"chunk_id": "a", "text": "HTTP 504"}]), "retrieve points"),
    ):
        with pytest.raises(
            StoreFormatError,
            match=rf"^the Qdrant collection 'notes' at {url} no longer exists "
            rf"\({what}: HTTP 404 Not Found: Not found: Collection `notes` "
            r"doesn't exist!\); it was deleted after this memory opened: open "
            r"the memory again to create it empty",
        ):
            call()
    memory.close()


def test_a_503_from_the_server_or_its_proxy_is_backend_unavailable(answering_server):
    url, reply = answering_server
    reply.update(status=503, body={"status": {"error": "Service Unavailable: shard is being transferred"}})
    memory = _memory_on(url)
    with pytest.raises(
        BackendUnavailableError,
        match=rf"^the Qdrant server at {url} could not be reached \(query, "
        r"collection 'notes'\): HTTP 503 Service Unavailable: Service "
        r"Unavailable: shard is being transferred; check that it is "
        r"running",
    ):
        memory.search("HTTP 504")
    memory.close()


def test_a_400_from_the_server_is_an_invalid_request_naming_the_collection_and_the_fix(answering_server):
    from qdrant_client.http.exceptions import UnexpectedResponse

    url, reply = answering_server
    reply.update(status=400, body={"status": {"error": 'Wrong input: Index required but not found for "team"'}})
    memory = _memory_on(url)
    with pytest.raises(
        InvalidRequestError,
        match=rf"^the Qdrant server at {url} refused the request \(count points, "
        r"collection 'notes'\): HTTP 400 Bad Request: Wrong input: Index "
        r"required but not found for \"team\"; nothing was changed\. The "
        r"request does not fit the collection as the server has it: check "
        r"the metadata filter's keys and values \(a server in strict mode "
        r"needs a payload index on each filtered key: give it in "
        r"indexed_keys=, or --index-key\)",
    ) as caught:
        memory.count(metadata_filter={"team": "sre"})
    assert isinstance(caught.value.__cause__, UnexpectedResponse)  # the server's answer stays the cause
    with pytest.raises(InvalidRequestError, match=r"refused the request \(query, collection 'notes'\): HTTP 400"):
        memory.search("HTTP 504", metadata_filter={"team": "sre"})
    with pytest.raises(
        InvalidRequestError,
        match=r"\(retrieve points, collection 'notes'\): HTTP 400 .*"
        r"nothing was changed",
    ):
        memory.add([{"chunk_id": "a", "text": "HTTP 504"}])
    memory.close()


@pytest.mark.parametrize(
    "status, kind, fix",
    [
        (401, "Unauthorized", r"Give the server's API key \(api_key=, or --api-key / QDRANT_API_KEY\)"),
        (403, "Forbidden", r"Give the server's API key \(api_key=, or --api-key / QDRANT_API_KEY\), with write access"),
        (
            500,
            "Internal Server Error",
            r"the server could not serve it \(see its log\); nothing was changed; run the call "
            r"again once the server answers",
        ),
    ],
)
def test_other_refusals_are_backend_unavailable_naming_the_fix(answering_server, status, kind, fix):
    url, reply = answering_server
    reply.update(status=status, body={"status": {"error": "no"}})
    memory = _memory_on(url)
    with pytest.raises(
        BackendUnavailableError,
        match=rf"^the Qdrant server at {url} refused the request \(count "
        rf"points, collection 'notes'\): HTTP {status} {kind}: no; .*{fix}",
    ):
        memory.count()
    memory.close()


def test_an_edge_shard_open_elsewhere_is_store_busy_naming_the_fix(tmp_path):
    """Qdrant Edge locks a shard's write-ahead log: a second open (here in this process) is the lock, not a
    mismatched shard, and the first memory's chunks are intact."""
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory._exceptions import StoreBusyError

    first = HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16))
    first.add([{"chunk_id": "a", "text": "HTTP 504 on billing"}])
    with pytest.raises(
        StoreBusyError,
        match=r"is open elsewhere .*WouldBlock.*one process at a time: close the "
        r"other memory on it, or use a Qdrant server for several processes",
    ):
        HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16))
    assert [c.chunk_id for c in first.iter_chunks()] == ["a"]
    first.close()
    with HybridMemory.qdrant(edge_path=tmp_path / "shard", embedder=HashingEmbedder(16)) as again:
        assert again.count() == 1


def test_a_closed_qdrant_memory_names_how_to_open_it_again(tmp_path):
    """A fresh user's finding: a closed Edge memory's message named HybridMemory.open(path), an embedded folder."""
    from hybrid_memory import HashingEmbedder, HybridMemory
    from hybrid_memory._exceptions import MemoryClosedError

    cases = [
        (
            HybridMemory.qdrant(edge_path=tmp_path / "edge1", embedder=HashingEmbedder(16)),
            f"this memory is closed; open it again with HybridMemory.qdrant(edge_path={str(tmp_path / 'edge1')!r})",
        ),
        (
            HybridMemory.qdrant(str(tmp_path / "local"), collection="notes", embedder=HashingEmbedder(16)),
            f"this memory is closed; open it again with HybridMemory.qdrant({str(tmp_path / 'local')!r}, collection='notes')",
        ),
        (
            HybridMemory.qdrant(":memory:", embedder=HashingEmbedder(16)),
            "this memory is closed; a qdrant-client ':memory:' collection's chunks are gone with it",
        ),
    ]
    for memory, message in cases:
        memory.close()
        with pytest.raises(MemoryClosedError) as err:
            memory.search("x")
        assert str(err.value) == message
