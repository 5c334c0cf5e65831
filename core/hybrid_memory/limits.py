"""The bounds on what a caller may send, in one place: every path (the Python API, the CLI, the MCP tools, the
adapters) checks its input against these, through the same validators (:class:`~hybrid_memory.SearchRequest`,
:class:`~hybrid_memory.Chunk`, :func:`~hybrid_memory.filters.parse_filter`, :func:`check_question`).

Ground floor: imports nothing of the project but its exceptions, so any module may import it.

Two kinds of limit:

* **Wire limits** (:data:`MAX_TOP_K`, :data:`MAX_SEARCH_TEXT_CHARS`): part of the request's JSON schema, which
  MCP clients read; fixed when the library is imported. A caller over one changes its request (a smaller
  ``top_k``, a shorter query).
* **Operator limits** (:data:`MAX_CHUNK_TEXT_CHARS`, :data:`MAX_IN_VALUES`, :data:`MAX_REQUEST_BYTES`): read
  when each input is checked, so an operator who needs more may raise one before serving, e.g.
  ``hybrid_memory.limits.MAX_IN_VALUES = 50_000``; every message refusing an input names the limit's attribute.

Each bound keeps the cost of one call small and predictable: the measured cost of going past it is given with it.
"""

from __future__ import annotations

from typing import Any

from ._exceptions import InvalidRequestError

__all__ = [
    "MAX_CHUNK_TEXT_CHARS",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LEAVES",
    "MAX_IN_VALUES",
    "MAX_PAGE_POSITION",
    "MAX_PAGE_SIZE",
    "MAX_REQUEST_BYTES",
    "MAX_SEARCH_TEXT_CHARS",
    "MAX_TOP_K",
    "check_graph_level",
    "check_page",
    "check_question",
]

MAX_TOP_K = 1000
"""Largest ``top_k`` a request may ask for (wire limit). Deeper lists belong to offline evaluation, not to agents."""

MAX_SEARCH_TEXT_CHARS = 10_000
"""Longest ``search_text`` and GraphRAG ``question``, in characters (Unicode code points; wire limit).
all-MiniLM-L6-v2 reads only the first 256 word pieces (about 1,000 characters of English), so a longer query
changes only BM25, whose cost grows with the query's terms: a 50,000-word query took 100x a normal one. Cut
long contexts to what the agent asks."""

MAX_CHUNK_TEXT_CHARS = 1_000_000
"""Longest chunk ``text``, in characters (operator limit). A chunk is a passage an agent reads back; the embedder
reads its first 256 word pieces only, and BM25 and the store hold all of it, so a 1 GB chunk was stored whole
and returned in every result. Folder ingest cuts files into ``chunk_size`` (default 1,000) characters; split
longer texts before writing (``semantic-text-splitter``, as :func:`~hybrid_memory.ingest.read_text_folder`
does), or raise ``hybrid_memory.limits.MAX_CHUNK_TEXT_CHARS``."""

MAX_IN_VALUES = 10_000
"""Most values in the ``$in`` / ``$nin`` lists of one metadata filter, counted together (operator limit).
Resolving a list costs about 10 µs a value (300,000 values: about 3 s of CPU per call, through any MCP client).
For more, tag the chunks with a shared metadata value and filter on it, or raise
``hybrid_memory.limits.MAX_IN_VALUES``."""

MAX_FILTER_DEPTH = 32
"""Deepest nesting of ``$and`` / ``$or`` / ``$not`` in a metadata filter (:data:`hybrid_memory.filters.MAX_DEPTH`)."""

MAX_FILTER_LEAVES = 256
"""Most field tests in one metadata filter (:data:`hybrid_memory.filters.MAX_LEAVES`); an ``$in`` list counts
once (its values count against :data:`MAX_IN_VALUES`)."""

MAX_REQUEST_BYTES = 1_048_576
"""Largest request file ``hybrid-memory search --request FILE`` reads, in bytes (1 MiB; operator limit). A
request holds a query of at most :data:`MAX_SEARCH_TEXT_CHARS` characters and a filter; reading without a bound
let ``--request /dev/zero`` grow past 20 GB before the kernel killed it."""

MAX_PAGE_SIZE = 10_000
"""Most chunks one ``page_chunks`` call returns (``limit``)."""

MAX_PAGE_POSITION = 2**63 - 1
"""Largest paging position (``page_chunks(after=...)``, an MCP ``list_memories`` cursor): SQLite's largest
INTEGER. A larger one was a raw ``OverflowError`` ("Error executing tool" through MCP)."""


def check_question(value: Any, field: str = "question") -> str:
    """``value`` if it is a query text every path accepts, else InvalidRequestError naming ``field`` and the fix.

    The rules of :class:`~hybrid_memory.SearchRequest`'s ``search_text``: a string, something other than white
    space, at most :data:`MAX_SEARCH_TEXT_CHARS` characters, no NUL character and no lone surrogate (UTF-8
    cannot store one). GraphRAG's ``global_search`` / ``ask`` (the Python API and the MCP tool) use it, so
    they refuse what ``search_memory`` refuses.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequestError(
            f"{field} must be a non-empty string, got {value!r:.40}: ask about the memory, "
            "e.g. 'how do services handle database timeouts?'"
        )
    if len(value) > MAX_SEARCH_TEXT_CHARS:
        raise InvalidRequestError(
            f"{field} has {len(value):,} characters, more than MAX_SEARCH_TEXT_CHARS ({MAX_SEARCH_TEXT_CHARS:,}, "
            "hybrid_memory.limits); ask a shorter question: the embedder reads about the first 1,000 characters"
        )
    position = value.find("\x00")
    if position >= 0:
        raise InvalidRequestError(f"{field} contains a NUL character ('\\x00') at position {position}; remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{field} is not valid Unicode text (a lone surrogate at position {exc.start}); remove it"
        ) from None
    return value


def check_graph_level(level: Any, levels: Any) -> int | None:
    """``level`` if it is None or one of ``levels`` (the community levels a graph holds, ints), else
    InvalidRequestError naming the levels there are (a graph with no community yet takes any level >= 0: it
    answers nothing anyway). ``True`` is not a level (JSON ``true`` is no number)."""
    if level is None:
        return None
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidRequestError(f"level must be an int or None, got {type(level).__name__} {level!r:.40}")
    known = sorted(set(levels))
    if level < 0 or (known and level not in known):
        if not known:
            raise InvalidRequestError(f"level must be >= 0 (0 is the first level of communities), got {level}")
        span = f"{known[0]}..{known[-1]}" if known and known == list(range(known[0], known[-1] + 1)) else known
        raise InvalidRequestError(
            f"level {level} is not a level of this graph (its levels: {span}); "
            "give one of them, or None for every level"
        )
    return level


def check_page(after: Any, limit: Any) -> int:
    """The keyset position a page of ``page_chunks`` starts after (-1: the first page, ``after`` None), with
    ``after`` (-1..:data:`MAX_PAGE_POSITION`) and ``limit`` (1..:data:`MAX_PAGE_SIZE`) checked. Raises
    InvalidRequestError naming the argument and its range (never OverflowError)."""
    if after is not None and (
        isinstance(after, bool) or not isinstance(after, int) or not -1 <= after <= MAX_PAGE_POSITION
    ):
        shown = (
            f"an int of {after.bit_length()} bits"
            if isinstance(after, int) and after.bit_length() > 128
            else f"{after!r:.60}"
        )
        raise InvalidRequestError(
            f"after must be a position a previous page returned (an int in -1..2**63-1, "
            f"MAX_PAGE_POSITION), or None for the first page, got {shown}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidRequestError(f"limit must be an int in 1..{MAX_PAGE_SIZE} (MAX_PAGE_SIZE), got {limit!r:.40}")
    return -1 if after is None else after
