"""Readers that turn files into :class:`~hybrid_memory.models.Chunk` records, and BEIR evaluation files into dicts.

Pure I/O and parsing: nothing here embeds, indexes or ranks. Pass the chunks to
``HybridMemory.add()`` / ``upsert()``.

* :func:`read_beir_corpus` -- a BEIR ``corpus.jsonl`` (one document per line) -> one chunk per document.
* :func:`read_text_folder` -- a folder of ``.md`` / ``.txt`` files -> chunks of at most ``chunk_size``
  characters, split on semantic boundaries by ``semantic-text-splitter`` (headings, paragraphs,
  sentences, words; in that order of preference).
* :func:`read_queries` / :func:`read_qrels` -- BEIR ``queries.jsonl`` and ``qrels/*.tsv`` in the
  shapes ``ranx`` and ``pytrec_eval`` take: ``{query_id: text}`` and ``{query_id: {doc_id: relevance}}``.

Malformed input raises :class:`~hybrid_memory.InvalidRequestError` (a ``ValueError``) whose message
names the file and the 1-based line number.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import limits
from ._exceptions import InvalidRequestError
from .filters import check_metadata
from .models import SCOPE_FIELDS, TIME_FIELDS, Chunk
from .paths import EDGE_CONFIG, STORE_FILE
from .scopes import check_scope_values

__all__ = [
    "DEFAULT_GLOBS",
    "beir_chunk_text",
    "read_beir_corpus",
    "read_qrels",
    "read_queries",
    "read_text_folder",
]

logger = logging.getLogger(__name__)

DEFAULT_GLOBS: tuple[str, ...] = ("**/*.md", "**/*.txt")
"""Files :func:`read_text_folder` picks up by default, relative to the folder."""

StrPath = str | os.PathLike[str]


def beir_chunk_text(title: str, text: str) -> str:
    """The text a BEIR document becomes: ``title + "\\n\\n" + text`` when the title is non-empty, else ``text``.

    A blank line keeps the title a paragraph of its own for readers and splitters. For BM25 and for
    the MiniLM tokenizer it is plain white space, so scores and vectors equal those of the
    ``title + " " + text`` convention used by BEIR baselines. Title and text are kept as given (not
    stripped); a white-space-only title counts as empty, and a white-space-only text gives the title alone.
    """
    if not title.strip():
        return text
    if not text.strip():
        return title
    return f"{title}\n\n{text}"


def read_beir_corpus(path: StrPath, *, source: str | None = None) -> Iterator[Chunk]:
    """Yield one chunk per line of a BEIR ``corpus.jsonl``, in file order.

    Each line is a JSON object ``{"_id": str, "title": str (optional), "text": str, "metadata": {...} (optional)}``.
    The chunk has:

    * ``chunk_id`` = ``_id`` (an integer ``_id`` is turned into its decimal string);
    * ``text`` = :func:`beir_chunk_text` of title and text, i.e. ``title + "\\n\\n" + text`` when the
      title is non-empty;
    * ``source`` = ``source`` if given, else ``str(path)``;
    * ``metadata`` = the line's ``metadata`` object plus ``"title"`` (when the title is non-empty and the
      line's metadata has no ``"title"`` of its own);
    * the scope fields ``tenant``, ``user_id``, ``agent_id``, ``session_id`` and the event-time fields
      ``valid_from``, ``valid_to`` when the line has them at its top level, read as :class:`Chunk` reads them
      (a scope value is a non-blank string; a time is Unix seconds or an ISO 8601 string, ``[valid_from,
      valid_to)``). Other top-level fields are ignored (BEIR lines carry some).

    Blank lines are skipped. Ids are not checked for uniqueness here; ``HybridMemory.add()`` raises
    ``DuplicateChunkError`` on a repeated id, ``upsert()`` keeps the last.

    Args:
        path: the JSONL file, UTF-8.
        source: value for every chunk's ``source``; default the path as given.

    Yields:
        Chunk, one per non-blank line.

    Raises:
        InvalidRequestError: a line is not a JSON object, lacks ``_id`` or ``text``, has a non-string
            ``title``/``text``, a non-object ``metadata`` or one breaking the metadata rules
            (:func:`~hybrid_memory.filters.check_metadata`: a key starting with ``$``, which is reserved for filter
            operators, or a value JSON cannot store), or yields an invalid chunk (empty text, empty id). The
            message names the file and the 1-based line number.
        FileNotFoundError: the file does not exist.
    """
    path_str = os.fspath(path)
    chunk_source = path_str if source is None else source
    for where, doc in _jsonl_objects(path_str):
        if "_id" not in doc:
            raise InvalidRequestError(f"{where}: missing '_id' (every BEIR corpus line needs a document id)")
        if "text" not in doc:
            raise InvalidRequestError(f'{where}: missing \'text\' (use "text": "" with a title-only document)')
        doc_id = doc["_id"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
            raise InvalidRequestError(f"{where}: '_id' must be a string, got {type(doc_id).__name__}")
        title = doc.get("title") or ""
        text = doc["text"]
        for name, value in (("title", title), ("text", text)):
            if not isinstance(value, str):
                raise InvalidRequestError(
                    f"{where}: {name!r} must be a string, got {type(value).__name__} "
                    f'{value!r:.40}; give a JSON string: "{name}": "..."'
                )
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InvalidRequestError(f"{where}: 'metadata' must be a JSON object, got {type(metadata).__name__}")
        metadata = dict(metadata)
        try:
            check_metadata(metadata)  # a key starting with '$' (reserved for operators), a value JSON cannot hold
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"{where}: document {str(doc_id)!r}: {exc}") from exc
        if title.strip():
            metadata.setdefault("title", title)
        own = {name: doc[name] for name in (*SCOPE_FIELDS, *TIME_FIELDS) if doc.get(name) is not None}
        try:
            chunk = Chunk(
                chunk_id=str(doc_id),
                text=beir_chunk_text(title, text),
                source=chunk_source,
                metadata=metadata,
                **own,
            )
        except ValidationError as exc:
            raise InvalidRequestError(f"{where}: invalid document {doc_id!r}: {_first_error(exc)}") from exc
        try:
            check_scope_values(chunk)  # the write would refuse it too, naming a batch position instead of the line
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"{where}: invalid document {doc_id!r}: {exc}") from exc
        yield chunk


def read_text_folder(
    folder: StrPath,
    *,
    chunk_size: int = 1000,
    chunk_overlap: int = 100,
    metadata: Mapping[str, Any] | None = None,
    glob: str | Sequence[str] = DEFAULT_GLOBS,
    id_prefix: str | None = None,
    on_unreadable: Callable[[Path, str], None] | None = None,
    on_empty: Callable[[Path], None] | None = None,
    on_symlinked_folder: Callable[[Path], None] | None = None,
    follow_symlinks: bool = False,
    on_outside_link: Callable[[Path], None] | None = None,
) -> Iterator[Chunk]:
    """Yield chunks of the ``.md`` and ``.txt`` files under ``folder``, files in sorted relative-path order.

    A memory's own files are never read as documents: a folder holding an embedded memory's store
    (``store.sqlite3``) or a Qdrant Edge shard (``edge_config.json``) is skipped with everything below it (logged
    at INFO), so a memory kept inside the folder being ingested (``HybridMemory("docs/mem")`` while ``docs`` is
    read) does not ingest its index files; a ``folder`` that is, or lies inside, such a folder is refused.

    Markdown (``.md``, ``.markdown``) is split with ``semantic_text_splitter.MarkdownSplitter``, which
    prefers heading, block and paragraph boundaries; every other matched file with
    ``semantic_text_splitter.TextSplitter`` (paragraphs, then sentences, then words). Chunks are trimmed
    of surrounding white space; white-space-only files give no chunks.

    Each chunk has:

    * ``chunk_id`` = ``"<id_prefix><relative path>#<n>"``, e.g. ``"kb/guides/setup.md#0"`` for the folder
      ``kb``: POSIX separators, ``n`` the 0-based chunk number within the file. The prefix (default: the
      folder's own name and a slash) keeps two folders that both hold ``README.md`` from overwriting
      each other's chunks. Deterministic, so re-reading an unchanged folder
      and calling ``upsert()`` replaces chunks in place (compare ``HybridMemory.chunk_hashes()`` to skip
      unchanged ones);
    * ``source`` = ``<id_prefix><relative path>``;
    * ``metadata`` = ``metadata`` (copied) plus ``{"path": <source>, "chunk_index": n, "folder": <absolute
      folder path>}`` (the CLI uses ``folder`` to refuse overwriting another folder's chunks), which
      win over keys of the same name.

    Args:
        folder: the root folder; searched recursively by the patterns in ``glob``.
        chunk_size: maximum chunk length in characters (Unicode code points), >= 1.
        chunk_overlap: characters that may be shared by neighbouring chunks, 0 <= overlap < chunk_size.
            The splitter only overlaps whole semantic units (words or larger), so the overlap is at most this.
        metadata: extra metadata for every chunk (JSON values).
        glob: one pattern or several, relative to ``folder`` (``pathlib`` syntax, ``**`` recursive).
            A file matched by several patterns is read once.
        id_prefix: put before every relative path in ids and sources; None means ``"<folder name>/"``,
            ``""`` means none.
        on_unreadable: what to do with a file that cannot be read as text (not valid UTF-8, a name that is not
            valid UTF-8 (bytes from another system's encoding, which no chunk id can hold), a NUL character,
            which text files do not hold and binary ones do, an OS error such as a permission denied, or a matched
            name that is a broken symbolic link: its target is missing or a loop of links): None
            (default) raises InvalidRequestError naming it; a callable ``(path, reason)`` is called and the
            file is skipped (the CLI logs a warning and counts it), so one bad file does not stop a folder.
        on_empty: called with the path of each file that gives no chunk (empty, or white space only); such a
            file is also logged at INFO. The CLI counts them (``empty_files``) and logs a warning.
        on_symlinked_folder: called with the path of each symbolic link to a folder found below ``folder``
            when a pattern is recursive (``**``). ``pathlib``'s ``**`` does not follow such links (one may loop,
            or lead out of the folder being read), so nothing under them is read; each is logged as a WARNING
            naming it and its target, with or without this callback. The CLI counts them (``symlinked_folders``).
        follow_symlinks: read a matched file whose real path (symbolic links resolved, ``Path.resolve``) lies
            outside ``folder``. Default False: such a file (``docs/passwd.md -> /etc/passwd``, or a file reached
            through a linked folder a non-recursive pattern names) is not read, and is logged as a WARNING naming it
            and its target, so a link cannot make a file anywhere on the machine searchable. Links that stay inside
            ``folder`` are always read. The CLI's ``--follow-symlinks`` sets it.
        on_outside_link: called with the path of each such file skipped (not called with ``follow_symlinks``).
            The CLI counts them (``outside_links``).

    Yields:
        Chunk, file by file, chunks in document order.

    Raises:
        InvalidRequestError: ``folder`` is not a directory, is (or lies inside) a memory's or an Edge shard's
            folder, ``chunk_size`` < 1, ``chunk_overlap`` outside ``[0, chunk_size)``, or (without
            ``on_unreadable``) a file cannot be read as text (the message names it). Checked when the iterator
            is created, before the first chunk is asked for.
    """
    root, chunk_size, chunk_overlap = _checked_folder_args(folder, chunk_size, chunk_overlap)
    return _text_folder_chunks(
        root,
        chunk_size,
        chunk_overlap,
        metadata,
        glob,
        id_prefix,
        on_unreadable,
        on_empty,
        on_symlinked_folder,
        follow_symlinks,
        on_outside_link,
    )


def _checked_folder_args(folder: StrPath, chunk_size: Any, chunk_overlap: Any) -> tuple[Path, int, int]:
    root = Path(folder)
    if not root.is_dir():
        raise InvalidRequestError(f"{os.fspath(folder)!r} is not a directory")
    for ancestor in (root.absolute(), *root.absolute().parents):
        if _holds_a_memory(ancestor):
            inside = "is" if ancestor == root.absolute() else f"lies inside {ancestor}, which is"
            raise InvalidRequestError(
                f"{os.fspath(folder)!r} {inside} a memory's own folder (it holds {_memory_file(ancestor)}); its files "
                "are the memory's indexes, not documents: ingest the folder that holds your documents"
            )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidRequestError(f"chunk_size must be an integer >= 1 (characters), got {chunk_size!r}")
    if chunk_size > limits.MAX_CHUNK_TEXT_CHARS:
        raise InvalidRequestError(
            f"chunk_size {chunk_size:,} is more than MAX_CHUNK_TEXT_CHARS ({limits.MAX_CHUNK_TEXT_CHARS:,}, "
            "hybrid_memory.limits), the longest text a chunk may hold; give a smaller chunk_size (default 1,000)"
        )
    if isinstance(chunk_overlap, bool) or not isinstance(chunk_overlap, int) or not 0 <= chunk_overlap < chunk_size:
        raise InvalidRequestError(
            f"chunk_overlap must be an integer with 0 <= chunk_overlap < chunk_size ({chunk_size}), "
            f"got {chunk_overlap!r}"
        )
    return root, chunk_size, chunk_overlap


def _text_folder_chunks(
    root: Path,
    chunk_size: int,
    chunk_overlap: int,
    metadata: Mapping[str, Any] | None,
    glob: str | Sequence[str],
    id_prefix: str | None,
    on_unreadable: Callable[[Path, str], None] | None,
    on_empty: Callable[[Path], None] | None = None,
    on_symlinked_folder: Callable[[Path], None] | None = None,
    follow_symlinks: bool = False,
    on_outside_link: Callable[[Path], None] | None = None,
) -> Iterator[Chunk]:
    patterns = [glob] if isinstance(glob, str) else list(glob)
    base_metadata = dict(metadata or {})
    prefix = f"{root.resolve().name}/" if id_prefix is None else id_prefix
    folder_path = str(root.resolve())

    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    markdown_splitter = MarkdownSplitter(chunk_size, overlap=chunk_overlap, trim=True)
    text_splitter = TextSplitter(chunk_size, overlap=chunk_overlap, trim=True)

    inside: dict[Path, bool] = {}
    memories: set[Path] = set()
    files = sorted(
        {
            p.relative_to(root).as_posix(): p
            for pattern in patterns
            for p in root.glob(pattern)
            if (p.is_file() or _dangling_link(p)) and not _in_a_memory_folder(p.parent, root, inside, memories)
        }.items()
    )
    if any("**" in pattern for pattern in patterns):  # ** does not follow a link to a folder: say so, once each
        for link in _symlinked_folders(root, inside, memories):
            logger.warning(
                "skipped %s: a symbolic link to the folder %s, and links to folders are not followed (one "
                "may loop, or lead out of the folder being read); to read that folder, ingest it as a "
                "path of its own",
                link,
                link.resolve(),
            )
            if on_symlinked_folder is not None:
                on_symlinked_folder(link)
    for folder in sorted(memories):
        logger.info("read_text_folder: skipped %s: a memory's own folder (it holds %s)", folder, _memory_file(folder))
    logger.debug("read_text_folder: %d files under %s", len(files), root)
    real_root = root.resolve()
    for rel, file_path in files:
        if not follow_symlinks and not _dangling_link(file_path) and not file_path.resolve().is_relative_to(real_root):
            logger.warning(
                "skipped %s: a symbolic link to %s, outside the folder being read (%s); links that leave "
                "the folder are not followed by default: pass follow_symlinks=True (the CLI's "
                "--follow-symlinks) to read it",
                file_path,
                file_path.resolve(),
                real_root,
            )
            if on_outside_link is not None:
                on_outside_link(file_path)
            continue
        content, reason = _read_text_file(file_path) if _utf8_name(rel) else ("", _not_utf8_name(rel))
        if reason is not None:
            if on_unreadable is None:
                raise InvalidRequestError(f"{shown_path(file_path)}: {reason}")
            on_unreadable(file_path, reason)
            continue
        splitter = markdown_splitter if file_path.suffix.lower() in (".md", ".markdown") else text_splitter
        pieces = [piece for piece in splitter.chunks(content) if piece.strip()]
        if not pieces:
            logger.info("%s holds no text (empty or white space only): no chunk", file_path)
            if on_empty is not None:
                on_empty(file_path)
            continue
        path = f"{prefix}{rel}"
        for n, piece in enumerate(pieces):
            yield Chunk(
                chunk_id=f"{path}#{n}",
                text=piece,
                source=path,
                metadata={**base_metadata, "path": path, "chunk_index": n, "folder": folder_path},
            )


def _memory_file(folder: Path) -> str | None:
    """The file that makes ``folder`` a memory's own folder (an embedded store or an Edge shard), else None."""
    for name in (STORE_FILE, EDGE_CONFIG):
        if (folder / name).is_file():
            return name
    return None


def _holds_a_memory(folder: Path) -> bool:
    return _memory_file(folder) is not None


def _in_a_memory_folder(folder: Path, root: Path, inside: dict[Path, bool], memories: set[Path]) -> bool:
    """Whether ``folder`` (``root`` or below it; ``root`` holds no memory) is or lies inside a memory's own
    folder. ``inside`` caches the answer per folder, so each folder is looked at once; the memory folders
    found are added to ``memories``."""
    chain = []
    while folder != root and folder not in inside:
        chain.append(folder)
        folder = folder.parent
    answer = inside.get(folder, False)
    for current in reversed(chain):  # from the top down: below a memory's folder everything is inside it
        if not answer and _holds_a_memory(current):
            memories.add(current)
            answer = True
        inside[current] = answer
    return answer


def _symlinked_folders(root: Path, inside: dict[Path, bool], memories: set[Path]) -> list[Path]:
    """The symbolic links to folders below ``root`` that a ``**`` walk meets and does not enter (none inside a
    memory's own folder), in sorted walk order."""
    links: list[Path] = []
    for current, folders, _files in os.walk(root):  # followlinks=False, as pathlib's ** walks
        folders.sort()
        for name in list(folders):
            path = Path(current) / name
            if path.is_symlink():
                folders.remove(name)  # os.walk does not enter it either
                if not _in_a_memory_folder(path, root, inside, memories):
                    links.append(path)
            elif _in_a_memory_folder(path, root, inside, memories):
                folders.remove(name)
    return links


def _dangling_link(path: Path) -> bool:
    """Whether ``path`` is a symbolic link whose target cannot be opened (missing, or a loop of links): such a
    path is no file for ``Path.is_file`` and would otherwise be dropped without a word."""
    return path.is_symlink() and not path.exists()


def _utf8_name(rel: str) -> bool:
    """Whether the relative path ``rel`` is UTF-8 text: a name of bytes that are not (``caf\\xe9.md`` from a Latin-1
    system) comes from :func:`os.fsdecode` with lone surrogates, which an id, a source or a store cannot hold."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_utf8_name(rel: str) -> str:
    """The reason a file whose name is not UTF-8 is not read."""
    return "its name is not valid UTF-8 (chunk ids and sources are text); rename the file to UTF-8 to read it"


def shown_path(path: StrPath) -> str:
    """``path`` for a message: a name of bytes that are not UTF-8 shows them as backslash escapes
    (``docs/caf\\xe9.md``), not as the lone surrogates :func:`os.fsdecode` gave, which strict streams cannot print."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _read_text_file(path: Path) -> tuple[str, str | None]:
    """``(content, None)``, or ``("", reason)`` when the file cannot be stored as text."""
    if _dangling_link(path):
        try:
            path.stat()
        except OSError as exc:
            return "", f"a broken symbolic link to {os.readlink(path)} ({exc.strerror or exc}); fix or remove the link"
    try:
        content = path.read_text(encoding="utf-8-sig")  # a leading BOM (Windows editors) is not text
    except UnicodeDecodeError as exc:
        return "", f"not valid UTF-8 ({exc.reason} at byte {exc.start}); convert it to UTF-8"
    except OSError as exc:
        return "", f"cannot be read ({exc.strerror or exc})"
    position = content.find("\x00")
    if position >= 0:
        return "", f"holds a NUL character at offset {position} (a binary file?); text chunks cannot hold NUL"
    return content, None


def read_queries(path: StrPath) -> dict[str, str]:
    """Read a BEIR ``queries.jsonl`` into ``{query_id: text}``, in file order.

    Each line is ``{"_id": str, "text": str, "metadata": {...} (optional, ignored)}``; blank lines are skipped.
    Filter the result to the query ids of the qrels you evaluate.

    Raises:
        InvalidRequestError: bad JSON, a missing ``_id``/``text``, or a repeated ``_id`` (file and line named).
    """
    queries: dict[str, str] = {}
    for where, doc in _jsonl_objects(os.fspath(path)):
        if "_id" not in doc or "text" not in doc:
            missing = "'_id'" if "_id" not in doc else "'text'"
            raise InvalidRequestError(f"{where}: missing {missing} (a BEIR query line needs '_id' and 'text')")
        if not isinstance(doc["text"], str):
            raise InvalidRequestError(f"{where}: 'text' must be a string")
        query_id = str(doc["_id"])
        if query_id in queries:
            raise InvalidRequestError(f"{where}: query id {query_id!r} appears twice")
        queries[query_id] = doc["text"]
    return queries


def read_qrels(path: StrPath) -> dict[str, dict[str, int]]:
    """Read BEIR relevance judgements (``qrels/test.tsv``) into ``{query_id: {doc_id: relevance}}``.

    The file is tab-separated ``query-id  corpus-id  score`` with a header row (detected as a first
    line whose score column is not an integer, so a header-less file is read too). Relevance is an
    int as in the file (0 included: ranx and pytrec_eval treat <= 0 as not relevant). Query and
    document order follow the file; a repeated pair keeps the last score.

    Raises:
        InvalidRequestError: a line without three tab-separated columns or with a non-integer score
            (file and line named).
    """
    path_str = os.fspath(path)
    qrels: dict[str, dict[str, int]] = {}
    first_row = True
    with open(path_str, "rb") as fh:  # bytes: a line that is not UTF-8 is named by its number
        for line_no, raw in enumerate(fh, start=1):
            raw = raw[3:] if line_no == 1 and raw.startswith(b"\xef\xbb\xbf") else raw  # a leading UTF-8 BOM
            line = _utf8_line(raw, f"{path_str}, line {line_no}").rstrip("\r\n")
            if not line.strip():
                continue
            is_first, first_row = first_row, False
            columns = line.split("\t")
            where = f"{path_str}, line {line_no}"
            if len(columns) != 3:
                raise InvalidRequestError(
                    f"{where}: expected 3 tab-separated columns (query-id, corpus-id, score), got {len(columns)}"
                )
            query_id, doc_id, score = (c.strip() for c in columns)
            try:
                relevance = int(score)
            except ValueError:
                if is_first:
                    continue  # the header row
                raise InvalidRequestError(f"{where}: score must be an integer, got {score!r}") from None
            qrels.setdefault(query_id, {})[doc_id] = relevance
    return qrels


def _jsonl_objects(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``"<path>, line <n>"``, object) for each non-blank line of a JSONL file (UTF-8, a leading byte order
    mark skipped, as Windows editors write one). Raises InvalidRequestError."""
    with open(path, "rb") as fh:  # bytes: a line that is not UTF-8 is named by its number, not by a codec error
        for line_no, raw in enumerate(fh, start=1):
            where = f"{path}, line {line_no}"
            line = _utf8_line(raw[3:] if line_no == 1 and raw.startswith(b"\xef\xbb\xbf") else raw, where)
            if line.strip():
                yield where, _json_object(line, where)


def _utf8_line(raw: bytes, where: str) -> str:
    """``raw`` decoded as UTF-8, or InvalidRequestError naming ``where`` (file and line), the byte's column and how
    to fix it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(
            f"{where}: not valid UTF-8 ({exc.reason}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); JSONL "
            "files are UTF-8: convert the file (iconv -f LATIN1 -t UTF-8, or your editor's 'save as UTF-8')"
        ) from None


def _json_object(line: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(doc, dict):
        raise InvalidRequestError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err.get("loc", ()))
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")  # pydantic's prefix for our validators
    return f"{loc}: {message}" if loc else message
