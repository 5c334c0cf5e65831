"""The adapters' shared helpers: embedder coercion, owned construction, lazy exports, extra detection."""

from __future__ import annotations

import pytest
from hybrid_memory import HashingEmbedder, InvalidEmbedderError, InvalidRequestError
from hybrid_memory._adapter_support import (
    build_owned,
    coerce_embedder,
    extra_installed,
    lazy_exports,
    missing_modules,
)


class Framework:  # stands for a framework's embedding base class
    pass


class Bridge:
    def __init__(self, model):
        self.model = model


def coerce(obj):
    return coerce_embedder(
        obj, framework_type=Framework, wrapper=Bridge, argument="embed_model", framework="Framework model"
    )


def test_coerce_embedder_wraps_passes_through_and_refuses():
    model = Framework()
    wrapped = coerce(model)
    assert type(wrapped) is Bridge and wrapped.model is model
    assert coerce(wrapped) is wrapped  # already a bridge
    core = HashingEmbedder(dim=8)
    assert coerce(core) is core  # the core protocol passes through
    assert coerce(None) is None
    accepted = (
        "embed_model must be a Framework model or a hybrid_memory Embedder (name, dim, embed_documents, embed_query)"
    )
    default = "or leave embed_model unset for the default all-MiniLM-L6-v2"
    for bad, fix in [
        (3, "got int"),
        (HashingEmbedder, "got the class HashingEmbedder, not an instance: pass HashingEmbedder(...)"),
        (Framework, "got the class Framework, not an instance: pass Framework(...)"),
        (dict, "got the class dict"),
        (
            "all-MiniLM-L6-v2",
            "got the string 'all-MiniLM-L6-v2': a model name is not a model; pass the model built "
            "from it (a Framework model, or hybrid_memory.SentenceTransformerEmbedder(model_path=DIR) "
            "for a local sentence-transformers folder)",
        ),
    ]:
        with pytest.raises(InvalidEmbedderError) as err:
            coerce(bad)
        assert str(err.value) == f"{accepted}; {fix}, {default}"
        # the library's error tree, and still the TypeError the adapters raised before
        assert isinstance(err.value, InvalidRequestError) and isinstance(err.value, TypeError)


class Memory:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


class Retriever:
    def __init__(self, memory, fail=False):
        if fail:
            raise ValueError("bad field")
        self.memory = memory
        self._owns_memory = False


def test_build_owned_marks_ownership_and_closes_the_memory_on_failure():
    memory = Memory()
    filled = []
    retriever = build_owned(memory, Retriever, filled.append)
    assert retriever._owns_memory is True and filled == [retriever] and memory.closed == 0

    with pytest.raises(ValueError, match="bad field"):
        build_owned(memory, lambda m: Retriever(m, fail=True))
    assert memory.closed == 1

    def refuse(_retriever):
        raise KeyError("document refused")

    with pytest.raises(KeyError):
        build_owned(memory, Retriever, refuse)
    assert memory.closed == 2


def test_lazy_exports_loads_only_the_named_attributes():
    getter = lazy_exports("hybrid_memory", "fusion", ["reciprocal_rank_fusion"])
    from hybrid_memory.fusion import reciprocal_rank_fusion

    assert getter("reciprocal_rank_fusion") is reciprocal_rank_fusion
    with pytest.raises(AttributeError, match="module 'hybrid_memory' has no attribute 'nothing'"):
        getter("nothing")


def test_missing_modules_names_what_cannot_be_found():
    assert missing_modules(["json", "no_such_module_hm_x"]) == ["no_such_module_hm_x"]
    assert extra_installed(["json"]) is True
    assert extra_installed(["json", "no_such_module_hm_x"]) is False
