"""The adapters' shared helpers: embedder coercion, owned construction, lazy exports, extra detection."""

from __future__ import annotations

import pytest

from hybrid_memory import HashingEmbedder
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
    with pytest.raises(TypeError, match=r"embed_model must be a Framework model or a hybrid_memory Embedder .* got int"):
        coerce(3)


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
