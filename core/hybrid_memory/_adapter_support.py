"""What the LangChain and LlamaIndex adapters share, so each adapter only translates its framework's types.

- :func:`extra_installed` / :data:`GRAPH_EXTRA_MODULES`: whether an extra's packages can be found, without
  importing them (the graph package itself refuses to import without them).
- :func:`coerce_embedder`: a framework embedding model, a core ``Embedder`` or None -> what
  :class:`~hybrid_memory.HybridMemory` takes.
- :func:`check_memory_argument`: a retriever's ``memory`` refused, with the fix, when it is not a memory (a
  path names ``from_path``).
- :func:`build_owned`: construct a retriever over a memory it opened, closing the memory when construction
  fails, and marking it owned so the retriever's ``close()`` closes it.
- :func:`lazy_exports`: a module ``__getattr__`` that loads names from a submodule on first use.
- :func:`result_metadata` / :data:`SHADOWED_METADATA_KEY`: a returned document's or node's metadata, the
  chunk's own metadata plus the retrieval keys, keeping the chunk's own values of those keys visible;
  :func:`written_back_metadata` its inverse, for a returned document or node added back to a memory.
- :func:`absolute_score`: the score both adapters give a result (``NodeWithScore.score``, LangChain's
  ``metadata["score"]``), one whose meaning does not depend on the other results of the same query.
- :func:`check_search_settings` / :func:`unwrap_validation_error`: a retriever's search settings refused
  with an :class:`~hybrid_memory.InvalidRequestError` naming the retriever's own field (``k``,
  ``similarity_top_k``, ``rrf_k``) and its accepted range, never a pydantic ``ValidationError``.

Private to the project: the adapters import it, users do not.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, cast

from ._exceptions import missing_dependency

if TYPE_CHECKING:
    from .embedders import Embedder

__all__ = [
    "GRAPH_EXTRA_MODULES",
    "SHADOWED_METADATA_KEY",
    "build_owned",
    "check_memory_argument",
    "check_search_settings",
    "check_top_k",
    "refuse_memory_argument",
    "coerce_embedder",
    "extra_installed",
    "lazy_exports",
    "missing_dependency",
    "missing_modules",
    "result_metadata",
    "unwrap_validation_error",
    "RETRIEVAL_SCORE_KEYS",
    "written_back_metadata",
    "absolute_score",
    "FUSED_SCORE_KEY",
]

#: the top-level modules the ``graph`` extra installs and ``hybrid_memory.graph`` needs
GRAPH_EXTRA_MODULES: tuple[str, ...] = ("networkx", "graspologic_native", "json_repair")

R = TypeVar("R")

SHADOWED_METADATA_KEY = "chunk_metadata"
"""Metadata key of a returned document or node holding the chunk's own values of the keys the adapter adds
(``score``, ``source``, ``rrf_score``, ``*_rank``, ``*_score``, and this key itself) where they differ from
the added values; absent when nothing is shadowed."""


def result_metadata(own: Mapping[str, Any], added: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of a returned LangChain ``Document`` / LlamaIndex node: the chunk's ``own`` metadata, then
    the retrieval keys ``added`` by the adapter (the scores, ranks, ``source``), which always hold the
    retrieval values, so ``metadata["score"]`` is the result's :func:`absolute_score`, as LangChain's
    retrievers put it.

    A chunk's own key of the same name is not lost: when its value differs from the added one it is kept under
    ``metadata[SHADOWED_METADATA_KEY]`` (``"chunk_metadata"``), a dict of those keys and the chunk's values.
    ``"chunk_metadata"`` is reserved the same way (a chunk's own ``chunk_metadata`` goes inside that dict).
    The stored chunk is never changed (``memory.get`` returns its metadata as added).

    Example: own ``{"score": 99, "team": "sre"}``, added ``{"score": 0.5}`` ->
    ``{"score": 0.5, "team": "sre", "chunk_metadata": {"score": 99}}``.
    """
    metadata = {**own, **added}
    shadowed = {
        key: own[key]
        for key in (*added, SHADOWED_METADATA_KEY)
        if key in own and (key == SHADOWED_METADATA_KEY or own[key] != added[key])
    }
    metadata.pop(SHADOWED_METADATA_KEY, None)
    if shadowed:
        metadata[SHADOWED_METADATA_KEY] = shadowed
    return metadata


FUSED_SCORE_KEY = "fused_score"
"""Metadata key of a returned document or node holding the score the core ordered the results by
(``SearchResult.score``, or ``rrf_score`` for RRF): comparable within one response only."""


def absolute_score(result: Any) -> float:
    """The score the adapters give a :class:`~hybrid_memory.SearchResult`: the cosine similarity of the query's and
    the chunk's embeddings (``result.dense_score``, an inner product of L2-normalised vectors), clipped to
    ``[0, 1]``; 0.0 when the dense engine did not score the chunk (not among its candidates in an RRF search,
    or a search with ``dense_weight=0``): no cosine evidence for it, so any cut-off drops it.

    Why not the fused score: the default fusion normalises each engine's scores to the query's own top
    (theoretical min-max, Bruch et al. 2023), so the first result of every query scores about 1.0, however weak:
    a query matching one word of one chunk got ``NodeWithScore.score == 1.0`` (issue 35), and a
    ``SimilarityPostprocessor(similarity_cutoff=...)`` or a LangChain score threshold let it through. The cosine
    depends only on the query, the chunk and the embedder: not on what else the memory holds or the query
    returns, so one cut-off means the same for every query. It is the score LlamaIndex's and LangChain's vector
    stores report for cosine indexes, which their cut-offs are written for. The cost: exact-match evidence
    (an error code BM25 finds and the embedder does not) is not in it; the order still holds it, since the
    adapters return the results in the core's order (so the scores are not always descending), and the fused
    score stays under ``metadata["fused_score"]``.
    """
    dense = getattr(result, "dense_score", None)
    if dense is None or dense != dense:
        return 0.0
    return min(1.0, max(0.0, float(dense)))


RETRIEVAL_SCORE_KEYS = ("score", "rrf_score", "sparse_rank", "sparse_score", "dense_rank", "dense_score")
"""The retrieval keys both adapters add to every returned document's / node's metadata besides ``source``."""


def written_back_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata to store for a document or node being added to a memory: a copy of ``metadata``, except for
    one that a retriever of this project returned (it holds every key of :data:`RETRIEVAL_SCORE_KEYS`), whose
    chunk metadata is restored, the inverse of :func:`result_metadata`: the retrieval keys and ``source`` (the
    chunk's source, which the adapters store as the chunk's ``source``) are dropped, and the chunk's own values
    that ``chunk_metadata`` kept come back under their keys. So a search's documents added back store the
    metadata their chunks had, not the scores and ranks of one search.

    Example: ``{"team": "sre", "source": "pd", "score": 0.5, "rrf_score": 0.03, "sparse_rank": 1, "sparse_score":
    2.1, "dense_rank": None, "dense_score": None, "chunk_metadata": {"score": 99}}`` -> ``{"team": "sre",
    "score": 99}``. A document that lacks any of those keys is stored as given (``{"score": 5}`` stays).
    """
    if not all(key in metadata for key in RETRIEVAL_SCORE_KEYS):
        return dict(metadata)
    added = {*RETRIEVAL_SCORE_KEYS, FUSED_SCORE_KEY, "source", SHADOWED_METADATA_KEY}
    own = {key: value for key, value in metadata.items() if key not in added}
    shadowed = metadata.get(SHADOWED_METADATA_KEY)
    if isinstance(shadowed, Mapping):
        own.update(shadowed)
    return own


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The names in ``modules`` that cannot be found; a broken or blocked install counts as missing."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def extra_installed(modules: Iterable[str] = GRAPH_EXTRA_MODULES) -> bool:
    """True when every module in ``modules`` can be found (nothing is imported)."""
    return not missing_modules(modules)


def _follows_core_protocol(obj: object) -> TypeGuard[Embedder]:
    return _follows_core_protocol_class(type(obj))


def _follows_core_protocol_class(cls: type) -> bool:
    return all(callable(getattr(cls, attr, None)) for attr in ("embed_documents", "embed_query"))


def coerce_embedder(
    embedder: object | None,
    *,
    framework_type: type,
    wrapper: type,
    argument: str,
    framework: str,
) -> Embedder | None:
    """Return what :class:`~hybrid_memory.HybridMemory` takes as ``embedder``.

    Args:
        embedder: None (the core's default embedder), an instance of ``framework_type`` (wrapped as
            ``wrapper(embedder)``), an instance of ``wrapper`` (already wrapped), or any object with the
            core ``Embedder`` methods ``embed_documents`` and ``embed_query`` (passed through).
        framework_type: the framework's embedding base class (LangChain ``Embeddings``, LlamaIndex
            ``BaseEmbedding``).
        wrapper: the bridge class, built from a framework model.
        argument: the adapter's parameter name, for the error message.
        framework: the framework class's name as users know it, for the error message.

    Raises:
        InvalidEmbedderError: ``embedder`` is none of the above (an ``InvalidRequestError`` and a ``TypeError``);
            the message names what is accepted and the fix (a class given instead of an instance, a model name
            given instead of a model, or leave it unset for the default all-MiniLM-L6-v2).
    """
    if embedder is None or isinstance(embedder, wrapper):
        return cast("Embedder | None", embedder)  # a wrapper is an Embedder
    if isinstance(embedder, framework_type):
        return cast("Embedder", wrapper(embedder))
    if _follows_core_protocol(embedder):
        return embedder
    from hybrid_memory._exceptions import InvalidEmbedderError

    accepted = f"{argument} must be a {framework} or a hybrid_memory Embedder (name, dim, embed_documents, embed_query)"
    if isinstance(embedder, type):
        fix = (
            f"got the class {embedder.__name__}, not an instance: pass {embedder.__name__}(...)"
            if issubclass(embedder, framework_type) or _follows_core_protocol_class(embedder)
            else f"got the class {embedder.__name__}"
        )
    elif isinstance(embedder, str):
        fix = (
            f"got the string {embedder!r:.60}: a model name is not a model; pass the model built from it (a "
            f"{framework}, or hybrid_memory.SentenceTransformerEmbedder(model_path=DIR) for a local "
            "sentence-transformers folder)"
        )
    else:
        fix = f"got {type(embedder).__name__}"
    raise InvalidEmbedderError(f"{accepted}; {fix}, or leave {argument} unset for the default all-MiniLM-L6-v2")


def check_memory_argument(owner: str, value: Any) -> Any:
    """``value`` when it is what a retriever's ``memory`` takes: a :class:`~hybrid_memory.HybridMemory` or a
    :class:`~hybrid_memory.ScopedMemory` view of one.

    A path is refused, not opened: a memory given as ``memory`` stays the caller's (the retriever never closes
    it), while a folder the retriever opens is the retriever's to close; ``from_path`` is the constructor that
    opens one, as LangChain's ``FAISS.load_local`` and LlamaIndex's ``load_index_from_storage`` open theirs.

    Args:
        owner: the retriever's class name, first in the message and in the ``from_path`` it names.
        value: what was given as ``memory``.

    Raises:
        InvalidRequestError: ``value`` is a path (a ``str`` or ``os.PathLike``): the one-line message names
            ``{owner}.from_path(path)`` (the retriever opens and closes the folder) and
            ``memory=HybridMemory.open(path)`` (the caller opens and closes it); anything else that is not a
            memory: the message names its type and the same two ways.
    """
    import os

    from hybrid_memory._exceptions import InvalidRequestError
    from hybrid_memory.memory.hybrid import HybridMemory
    from hybrid_memory.memory.scoped import ScopedMemory

    if isinstance(value, HybridMemory | ScopedMemory):
        return value
    path = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if isinstance(path, str):
        raise InvalidRequestError(
            f"{owner}: memory must be a HybridMemory, not a path ({path!r}); open the folder with "
            f"{owner}.from_path({path!r}) (the retriever closes it), or pass memory=HybridMemory.open({path!r}) "
            "(you close it)"
        )
    raise InvalidRequestError(
        f"{owner}: memory must be a hybrid_memory.HybridMemory (or a scoped view of one), got {type(value).__name__}; "
        f"open one with HybridMemory.open(path), or build the retriever with {owner}.from_documents(...) / "
        "from_path(path)"
    )


def refuse_memory_argument(kwargs: Mapping[str, Any], method: str) -> None:
    """Refuse ``memory=`` in a constructor that builds its own memory (``from_documents``, ``from_path``, ...),
    before anything is created: a LangChain or LlamaIndex user reaching for "load these documents into my
    memory" would otherwise get a bare ``TypeError`` about a repeated keyword.

    Raises:
        InvalidRequestError: ``kwargs`` holds ``memory``.
    """
    if "memory" in kwargs:
        from hybrid_memory._exceptions import InvalidRequestError

        raise InvalidRequestError(
            f"{method} builds its own memory (path=... for a folder, or in RAM) and takes no memory=; for a "
            "memory you already hold, construct the retriever with it (Retriever(memory=memory)) and add "
            "documents to it (the retriever's add method, or memory.upsert(...))"
        )


def build_owned(memory: Any, make: Callable[[Any], R], fill: Callable[[R], object] | None = None) -> R:
    """A retriever that owns ``memory``: ``make(memory)``, marked owned (its ``close()`` closes the memory),
    then ``fill(retriever)`` (adding the documents it was built from) when given.

    The retriever must have an ``_owns_memory`` attribute. If ``make`` or ``fill`` raises (bad retriever
    arguments, documents the core refuses), the memory is closed first, so no store is left open, and the
    error propagates unchanged.
    """
    try:
        retriever = make(memory)
        retriever._owns_memory = True  # type: ignore[attr-defined]
        if fill is not None:
            fill(retriever)
    except BaseException:
        memory.close()
        raise
    return retriever


def lazy_exports(module_name: str, submodule: str, names: Iterable[str]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` (PEP 562) that imports ``module_name + "." + submodule`` on the first
    access to one of ``names`` and returns the attribute; any other name raises ``AttributeError``."""
    lazy = frozenset(names)

    def __getattr__(name: str) -> object:
        if name in lazy:
            return getattr(importlib.import_module(f"{module_name}.{submodule}"), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


def check_search_settings(owner: str, names: Mapping[str, str], settings: Mapping[str, Any]) -> None:
    """Check the keywords a retriever passes to :meth:`HybridMemory.search` (``top_k``, ``metadata_filter``,
    ``dense_weight``, ``sparse_weight``, ``rrf_k_constant``, ``fusion``), naming the retriever's own fields.

    Args:
        owner: the retriever's name, first in the message (``"HybridMemoryRetriever"``).
        names: core keyword -> the retriever's field, where they differ (``{"top_k": "k", "rrf_k_constant":
            "rrf_k"}``).
        settings: the keywords, as the retriever passes them to the core.

    The ranges are the core's (:class:`~hybrid_memory.SearchRequest`, :class:`~hybrid_memory.HybridParams`):
    ``top_k`` an integer 1..MAX_TOP_K (1000; a bool is not a number of results), weights in [0, 1e6] and not
    both 0, the RRF constant a finite number >= 0, ``fusion`` one of ``FUSION_METHODS``.

    Raises:
        InvalidRequestError: a value out of range; the message names the retriever's field, the accepted
            range and the value given.
        InvalidFilterError: the metadata filter is malformed (the core's message).
    """
    from pydantic import ValidationError

    from hybrid_memory._exceptions import InvalidRequestError
    from hybrid_memory.memory.hybrid import HybridMemory
    from hybrid_memory.models import _SHORT, HybridParams

    def name(core: str) -> str:
        return names.get(core, core)

    if "top_k" in settings:
        check_top_k(owner, name("top_k"), settings["top_k"])
    params = {
        key: settings[key] for key in ("dense_weight", "sparse_weight", "rrf_k_constant", "fusion") if key in settings
    }
    try:
        HybridParams.model_validate(params)
    except ValidationError as exc:
        parts = []
        for error in exc.errors()[:10]:
            field = ".".join(name(str(p)) for p in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            if field and "got " not in message:  # the core's own messages already show the value
                message = f"{message} (got {_SHORT.repr(error.get('input'))})"
            parts.append(f"{field}: {message}" if field else message)
        raise InvalidRequestError(f"{owner}: " + "; ".join(parts)) from exc
    HybridMemory.make_request("validation probe", **settings)  # the filter, and anything the core adds later


def check_top_k(owner: str, field: str, value: Any) -> int:
    """``value`` when it is a number of results the core takes (an int 1..MAX_TOP_K, 1000; not a bool, not a
    string: the core's ``top_k`` is strict). Raises InvalidRequestError naming ``field`` and the range."""
    from hybrid_memory._exceptions import InvalidRequestError
    from hybrid_memory.models import _SHORT, MAX_TOP_K

    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_K:
        raise InvalidRequestError(
            f"{owner}: {field} must be an integer from 1 to {MAX_TOP_K} (the number of results), "
            f"got {_SHORT.repr(value)}"
        )
    return value


def unwrap_validation_error(exc: Exception, owner: str) -> Exception:
    """The library error to raise for a pydantic ``ValidationError`` of a retriever's constructor: the
    library's own error when one of the model's validators raised it (pydantic wraps it), else an
    :class:`~hybrid_memory.InvalidRequestError` naming each bad field (a misspelt argument, a wrong type)."""
    from hybrid_memory._exceptions import HybridMemoryError, InvalidRequestError
    from hybrid_memory.models import _SHORT

    errors = exc.errors() if hasattr(exc, "errors") else []
    for error in errors:
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, HybridMemoryError):
            return cause
    parts = []
    for error in errors[:10]:
        field = ".".join(str(p) for p in error["loc"])
        if error.get("type") == "extra_forbidden":
            parts.append(f"{field}: not an argument of {owner} (check the spelling)")
        else:
            parts.append(f"{field}: {error['msg']} (got {_SHORT.repr(error.get('input'))})")
    return InvalidRequestError(f"invalid {owner} argument: " + "; ".join(parts))
