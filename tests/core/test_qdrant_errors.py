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
