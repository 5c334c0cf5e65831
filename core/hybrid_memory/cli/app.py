"""The ``hybrid-memory`` command: demo, ingest, search, delete, stats, mcp, export-qdrant (and ``graph`` with the graph
extra).

Every command that searches prints the response JSON on stdout, ``ingest`` and ``delete`` a one-line JSON summary;
progress bars and logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any

from .. import __version__
from .._exceptions import HybridMemoryError, MissingDependencyError
from ..fusion import DEFAULT_FUSION, FUSION_METHODS
from ..models import SCOPE_FIELDS, Chunk
from .common import add_index_key_argument, add_scope_field_arguments, open_memory, parse_scope

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

_BATCH = 256


def _example_dir() -> Path:
    """The bundled example memory: package data in a wheel, ``examples/`` in a source checkout."""
    packaged = resources.files("hybrid_memory") / "_example_data" / "incident_memory"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[3] / "examples" / "incident_memory"
    if checkout.is_dir():
        return checkout
    raise HybridMemoryError("the bundled example memory is missing from this installation; reinstall hybrid-memory")


def _batched(items: Iterable[Chunk], size: int) -> Iterator[list[Chunk]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _parse_metadata(pairs: Sequence[str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HybridMemoryError(f"--metadata takes key=value, got {pair!r}")
        try:
            metadata[key] = json.loads(value)
        except json.JSONDecodeError:
            metadata[key] = value
        if key in SCOPE_FIELDS:  # legal metadata, but most likely meant as the scope
            logger.warning(
                "--metadata %s=... writes a metadata key, not the scope field %s: search --%s (or --scope "
                "%s=...) will not find these chunks by it; to stamp the scope, give --%s instead",
                key,
                key,
                key.replace("_", "-"),
                key,
                key.replace("_", "-"),
            )
    return metadata


def _ingest_scope(args: argparse.Namespace) -> Any:
    """The Scope of ``--tenant/--user-id/--agent-id/--session-id``, or None. Raises InvalidRequestError."""
    from ..scopes import as_scope

    return as_scope({name: getattr(args, name) for name in SCOPE_FIELDS if getattr(args, name, None) is not None})


def _search_scope(args: argparse.Namespace) -> Any:
    """The Scope of ``search`` and ``ingest``: their ``--tenant/--user-id/--agent-id/--session-id`` and their
    ``--scope FIELD=VALUE`` pairs (as mcp's, read by :func:`~hybrid_memory.cli.common.parse_scope`), or None.

    Raises:
        InvalidRequestError: a bad pair, field or value, or a field given two values."""
    from .._exceptions import InvalidRequestError
    from ..scopes import as_scope

    own = _ingest_scope(args)
    pairs = parse_scope(args.scope)
    fields = own.bound() if own else {}
    for name, value in (pairs.bound() if pairs else {}).items():
        if fields.get(name, value) != value:
            raise InvalidRequestError(
                f"--{name.replace('_', '-')} {fields[name]} and --scope {name}={value} disagree; give {name} once"
            )
        fields[name] = value
    return as_scope(fields)


def _check_ingest_args(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """Every check of ``ingest`` that needs no memory, run before the memory folder is created: the paths
    exist and are .jsonl files or folders, none of them is ``--memory`` itself, holds it, or is a memory's own
    folder (a memory inside a folder is skipped by :func:`~hybrid_memory.ingest.read_text_folder`),
    ``--metadata`` pairs, ``--chunk-size``, the scope options (the field options and ``--scope`` pairs).

    Returns ``(metadata added to every chunk, Scope or None)``. Raises HybridMemoryError naming the fix."""
    from ..filters import check_metadata
    from ..ingest import read_text_folder

    for raw in args.paths:
        path = Path(raw)
        if not path.exists():
            raise HybridMemoryError(
                f"{path}: no such file or folder (check the path; ingest reads .jsonl files and folders)"
            )
        if not path.is_dir() and path.suffix != ".jsonl":
            raise HybridMemoryError(f"{path}: give a BEIR-style .jsonl file or a folder of .md/.txt files")
        memory = Path(args.memory).absolute()
        if path.is_dir() and (memory == path.absolute() or memory in path.absolute().parents):
            # a memory inside the folder is skipped by the walk; one that IS the folder (or holds it) would
            # write its store among the documents and then refuse to read them
            raise HybridMemoryError(
                f"--memory {args.memory} is the folder being ingested ({path}) or holds it; keep the memory in a "
                f"folder of its own, e.g. --memory {path.absolute().parent / (path.absolute().name + '-memory')}"
            )
        if path.is_dir():
            read_text_folder(
                path, chunk_size=1, chunk_overlap=0
            )  # its checks run now (a memory's own folder is refused)
    if args.chunk_size < 1:
        raise HybridMemoryError(f"--chunk-size must be >= 1 (characters), got {args.chunk_size}")
    extra = _parse_metadata(args.metadata)
    try:
        check_metadata(extra)  # the key and value rules of stored metadata
    except HybridMemoryError as exc:
        raise HybridMemoryError(f"--metadata: {exc}") from exc
    return extra, _search_scope(args)  # --scope pairs as search reads them, with its conflict rules


def _read_inputs(
    paths: Sequence[str],
    args: argparse.Namespace,
    extra: dict[str, Any],
    skipped: list[str],
    empty: list[str] | None = None,
    linked: list[str] | None = None,
    outside: list[str] | None = None,
) -> Iterator[Chunk]:
    """Chunks of every path, in order. A folder's file that cannot be read as text (not UTF-8, binary, no
    permission) is skipped with a warning and its path appended to ``skipped``; a file with no text (empty,
    white space only) gives no chunk and its path is appended to ``empty``; a symbolic link to a folder is not
    followed (:func:`~hybrid_memory.ingest.read_text_folder` warns, naming it) and its path is appended to
    ``linked``; a file whose link leads out of the folder is not read unless ``--follow-symlinks`` is given (a
    warning names it) and its path is appended to ``outside``; a bad .jsonl line stops the ingest (the message
    names the line)."""
    from ..ingest import read_beir_corpus, read_text_folder, shown_path

    def skip(path: Path, reason: str) -> None:
        logger.warning("skipped %s: %s", shown_path(path), reason)
        skipped.append(str(path))

    chunk_overlap = min(100, args.chunk_size // 10)  # the library's default (100 of 1000), scaled to small sizes
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            seen = [0]  # chunks, unreadable and empty files, folder links: a folder with none of them gets a word

            def _skip(p: Path, reason: str, seen: list[int] = seen) -> None:
                seen[0] += 1
                skip(p, reason)

            def _empty(p: Path, seen: list[int] = seen) -> None:
                seen[0] += 1
                if empty is not None:
                    empty.append(str(p))

            def _linked(p: Path, seen: list[int] = seen) -> None:
                seen[0] += 1
                if linked is not None:
                    linked.append(str(p))

            def _outside(p: Path, seen: list[int] = seen) -> None:
                seen[0] += 1
                if outside is not None:
                    outside.append(str(p))

            for chunk in read_text_folder(
                path,
                chunk_size=args.chunk_size,
                chunk_overlap=chunk_overlap,
                metadata=extra,
                id_prefix=args.id_prefix,
                on_unreadable=_skip,
                on_empty=_empty,
                on_symlinked_folder=_linked,
                follow_symlinks=getattr(args, "follow_symlinks", False),
                on_outside_link=_outside,
            ):
                seen[0] += 1
                yield chunk
            if not seen[0]:
                logger.warning(
                    "no file under %s was read: only names ending in .md or .txt, as written, are read "
                    "(a.MD and notes.markdown are not); rename the files to read them",
                    path,
                )
        else:
            for chunk in read_beir_corpus(path):
                yield chunk.model_copy(update={"metadata": {**chunk.metadata, **extra}}) if extra else chunk


def _count(n: int, noun: str, *, was: bool = False) -> str:
    """``"1 file"`` / ``"2 files"`` (``0 files``); with ``was``, the verb follows: ``"1 file was"`` / ``"2 files
    were"``."""
    words = f"{n} {noun}" + ("" if n == 1 else "s")
    return f"{words} {'was' if n == 1 else 'were'}" if was else words


def _last_of_each_id(batch: list[Chunk]) -> tuple[list[Chunk], int]:
    """The batch with each chunk_id once: at the place of its first occurrence, with the content of its last
    (what upserting the lines one by one gives); and how many lines were replaced by a later one."""
    last = {chunk.chunk_id: chunk for chunk in batch}
    unique = [last[chunk_id] for chunk_id in dict.fromkeys(chunk.chunk_id for chunk in batch)]
    return unique, len(batch) - len(unique)


@contextmanager
def logs_above_bar(enabled: bool, tqdm_class: Any = None) -> Iterator[None]:
    """While a progress bar is drawn (``enabled``), print log records and Python warnings above it instead of
    on the bar's line: tqdm's own ``tqdm.contrib.logging.logging_redirect_tqdm`` for the console handlers of
    the root logger, and ``tqdm_class.write`` (to stderr) for ``warnings.warn``. Does nothing when disabled."""
    if not enabled:
        yield
        return
    import warnings

    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    tqdm_class = tqdm if tqdm_class is None else tqdm_class

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        tqdm_class.write(
            warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"), file=sys.stderr
        )

    with logging_redirect_tqdm(tqdm_class=tqdm_class), warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _ingest(memory: Any, chunks: Iterable[Chunk], *, progress: bool, target: Any = None) -> tuple[int, int]:
    """Upsert ``chunks`` in batches of 256 inside ``memory.bulk()``, through ``target`` (a scoped view of
    ``memory``, which stamps its scope on every chunk and refuses ids of other scopes; default the memory).

    The rule for a chunk_id given more than once (in one file, or in several): the last one wins, as if each
    line were upserted in order, whether the repeats fall in one batch or in different ones. With ``progress``
    the bar is drawn on stderr when stderr is a terminal (tqdm's ``disable=None``: in a log file or a pipe its
    ``\\r`` redraws would put the bar and the first record on one line), and log records and warnings print
    above it (:func:`logs_above_bar`). Returns ``(lines read, repeated ids replaced by a later line)``."""
    from tqdm.auto import tqdm

    target = memory if target is None else target
    total = repeated = 0
    seen: set[str] = set()
    with (
        memory.bulk(),
        tqdm(desc="ingesting", unit="chunk", disable=None if progress else True, file=sys.stderr) as bar,
        logs_above_bar(not bar.disable, tqdm),
    ):
        for batch in _batched(chunks, _BATCH):
            unique, _ = _last_of_each_id(batch)
            _refuse_cross_folder_overwrite(target, unique)
            target.upsert(unique)
            for chunk in batch:
                if chunk.chunk_id in seen:
                    repeated += 1
                seen.add(chunk.chunk_id)
            total += len(batch)
            bar.update(len(batch))
    return total, repeated


def _refuse_cross_folder_overwrite(memory: Any, batch: list[Chunk]) -> None:
    """Two different folders with the same name give the same chunk ids: refuse instead of overwriting."""
    new_folder = {c.chunk_id: c.metadata.get("folder") for c in batch if c.metadata.get("folder")}
    if not new_folder:
        return
    for stored in memory.get(list(new_folder)):
        old = stored.metadata.get("folder")
        if old and old != new_folder[stored.chunk_id]:
            raise HybridMemoryError(
                f"chunk {stored.chunk_id!r} already holds text from {old}; ingesting {new_folder[stored.chunk_id]} "
                "would replace it. Give --id-prefix (e.g. --id-prefix team-b/) to keep both"
            )


def _first_new_folder(path: str) -> Path | None:
    """The topmost folder of ``path`` (itself or an ancestor) that does not exist yet: what opening a memory
    there creates (``--memory a/b`` with no ``a`` creates ``a``); None when ``path`` exists."""
    folder = Path(path).absolute()
    if folder.exists() or folder.is_symlink():
        return None
    while not folder.parent.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _cmd_ingest(args: argparse.Namespace) -> int:
    extra, scope = _check_ingest_args(args)  # before the memory is opened (and created)
    created = _first_new_folder(args.memory)
    discard = [created is not None]  # until the memory is known to hold a chunk (or to be another's)
    try:
        return _run_ingest(args, extra, scope, created, discard)
    except BaseException as exc:
        if not (discard[0] and created is not None and created.exists()):
            if isinstance(exc, KeyboardInterrupt):  # main prints this one line instead of a traceback
                raise type(exc)(
                    "what was stored before stays (ingest is an upsert); run the same command again"
                ) from exc
            raise
        what = _discard_new_folder(created, Path(args.memory).absolute())
        if isinstance(exc, KeyboardInterrupt):
            raise type(exc)(f"{what}; run the same command again") from exc
        if isinstance(exc, HybridMemoryError):
            raise HybridMemoryError(f"{exc} ({what}; fix the input and run the same command again)") from exc
        logger.warning("%s", what)
        raise


def _discard_new_folder(created: Path, memory: Path) -> str:
    """Remove ``created``, the folder this ingest created for ``memory`` and stored nothing in, when that loses
    nothing (:func:`~hybrid_memory.backends.embedded.discard.remove_new_memory`: under the memory's locks, 0 chunks, no
    other
    process has it open); the clause saying what happened, for the message."""
    from ..backends.embedded.discard import remove_new_memory

    outcome = remove_new_memory(created, memory)
    if outcome.removed:
        return f"nothing was stored, so the folder this run created for the memory, {created}, was removed"
    return f"this run stored nothing, but the folder it created for the memory, {created}, was kept: {outcome.reason}"


def _run_ingest(
    args: argparse.Namespace, extra: dict[str, Any], scope: Any, created: Path | None, discard: list[bool]
) -> int:
    """The ingest itself; ``discard[0]`` is left True only when the run fails with nothing stored in a memory
    folder it created (``created``), which :func:`_cmd_ingest` then removes if that loses nothing. A run that
    succeeds with nothing stored in such a folder (no file held text) removes it itself once the memory is closed,
    by the same rule, and says so in a warning."""
    skipped: list[str] = []
    empty: list[str] = []
    linked: list[str] = []
    outside: list[str] = []
    with open_memory(args, must_exist=False) as memory:
        before = memory.count()
        discard[0] = created is not None and before == 0
        target = memory.scoped(scope) if scope else memory
        try:
            count, repeated = _ingest(
                memory,
                _read_inputs(args.paths, args, extra, skipped, empty, linked, outside),
                progress=not args.quiet,
                target=target,
            )
        except BaseException as exc:
            new_folder, discard[0] = discard[0], False  # kept if the count below fails: nothing is known then
            total = memory.count()
            discard[0] = new_folder and total == 0
            if not isinstance(exc, HybridMemoryError) or discard[0]:
                raise  # _cmd_ingest says what became of the folder it created
            raise HybridMemoryError(
                f"{exc} (the memory now holds {_count(total, 'chunk')}, {total - before} new from this run; ingest is "
                "an upsert, so fix the input and run the same command again)"
            ) from exc
        discard[0] = False
        if repeated:
            logger.warning(
                "%s repeated an earlier chunk id; the last line of each id was kept", _count(repeated, "line")
            )
        if skipped:
            logger.warning(
                "%s skipped (listed above); fix %s and run the same command again",
                _count(len(skipped), "unreadable file", was=True),
                "it" if len(skipped) == 1 else "them",
            )
        if outside:
            logger.warning(
                "%s not read (listed above): a symbolic link that leads out of the folder being read; pass "
                "--follow-symlinks to read such files",
                _count(len(outside), "linked file", was=True),
            )
        if empty:
            shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
            logger.warning(
                "%s held no text (empty or white space only) and gave no chunk: %s", _count(len(empty), "file"), shown
            )
        total = memory.count()
        summary = {
            "ingested": count,
            "repeated_ids": repeated,
            "skipped_files": len(skipped),
            "empty_files": len(empty),
            "symlinked_folders": len(linked),
            "outside_links": len(outside),
            "chunks": total,
            "memory": str(memory.path),
        }
        if scope:
            summary["scope"] = scope.bound()
    if created is not None and before == total == 0 and created.exists():  # no text was read: an empty memory
        logger.warning("%s", _discard_new_folder(created, Path(args.memory).absolute()))
    _print_json(json.dumps(summary, ensure_ascii=False))
    return 0


def _print_json(text: str, *, indent: int | None = None) -> None:
    """Print the JSON ``text``; when stdout's encoding cannot encode it (``PYTHONIOENCODING=ascii``, a cp1252
    console, a non-ASCII id), print it ASCII-escaped instead (``"caf\\u00e9"``): the same JSON value, so the
    command that already did its work (a delete, an ingest) still exits 0 with output a parser reads."""
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except UnicodeEncodeError:
        text = json.dumps(json.loads(text), ensure_ascii=True, indent=indent)
    except LookupError:  # an encoding name Python does not know: print as given, and let print say so
        pass
    print(text)


def _utf8_text(value: str, what: str) -> str:
    """``value`` from the command line, refused when it is not UTF-8 text: bytes of another encoding reach
    Python as lone surrogates (``caf\\udce9``), which no id or query can hold. Raises InvalidRequestError."""
    from .._exceptions import InvalidRequestError

    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(value).decode("utf-8", "backslashreplace")
        raise InvalidRequestError(
            f"{what} '{shown:.80}' is not valid UTF-8 text (the terminal or script passed bytes of another encoding); "
            "give it as UTF-8 text"
        ) from None
    return value


def _request_from_args(args: argparse.Namespace) -> dict[str, Any]:
    request: dict[str, Any] = {}
    if args.request:
        request = _load_json(_read_request_file(args.request), f"--request {args.request}")
        if not isinstance(request, dict):
            raise HybridMemoryError(
                f"--request {args.request} must hold one JSON object (query_id, search_text, top_k, ...), "
                f"got a JSON {type(request).__name__}"
            )
        if args.text is not None and "search_text" in request:
            raise HybridMemoryError(
                f"two search texts: {args.text!r} on the command line and search_text {request['search_text']!r:.80} "
                f"in --request {args.request}; give one (drop the positional text, or the file's search_text)"
            )
    if args.text is not None:
        request["search_text"] = _utf8_text(args.text, "the search text")
    if args.top_k is not None:
        request["top_k"] = args.top_k
    if args.filter:
        request["metadata_filter"] = _load_json(
            args.filter,
            "--filter",
            fix="give a JSON object in single quotes for the shell, with double quotes inside: "
            '--filter \'{"environment": "production"}\'',
        )
    params = request.get("hybrid_params") or {}
    if not isinstance(params, dict):
        raise HybridMemoryError(
            f'hybrid_params must be a JSON object such as {{"dense_weight": 0.6, "sparse_weight": 0.4, '
            f'"rrf_k_constant": 60}}, got a JSON {type(params).__name__}'
        )
    params = dict(params)
    for name in ("dense_weight", "sparse_weight", "rrf_k_constant", "fusion"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    if params:
        request["hybrid_params"] = params
    if "search_text" not in request:
        raise HybridMemoryError("give the search text, or --request FILE.json with a search_text")
    return request


def _read_request_file(path: str) -> str:
    """The text of the ``--request`` file, at most :data:`~hybrid_memory.limits.MAX_REQUEST_BYTES` (1 MiB) read.
    Raises HybridMemoryError naming the file (missing, a folder, unreadable, not UTF-8, larger than the limit)."""
    from .. import limits

    try:
        with open(path, "rb") as fh:  # at most one byte past the limit: --request /dev/zero must not read forever
            data = fh.read(limits.MAX_REQUEST_BYTES + 1)
        if len(data) > limits.MAX_REQUEST_BYTES:
            raise HybridMemoryError(
                f"--request {path} holds more than MAX_REQUEST_BYTES ({limits.MAX_REQUEST_BYTES:,} bytes, "
                "hybrid_memory.limits); a request is one JSON object with a query of at most "
                f"{limits.MAX_SEARCH_TEXT_CHARS:,} characters and a filter: give the request's file, not a data file"
            )
        return data.decode("utf-8-sig")  # a leading BOM is skipped
    except FileNotFoundError:
        raise HybridMemoryError(
            f"--request {path}: no such file (give the path of a JSON file holding the request, "
            "e.g. examples/incident_memory/request.json)"
        ) from None
    except IsADirectoryError:
        raise HybridMemoryError(
            f"--request {path} is a folder; give the path of a JSON file holding the request"
        ) from None
    except UnicodeDecodeError as exc:
        raise HybridMemoryError(
            f"--request {path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 JSON"
        ) from None
    except OSError as exc:
        raise HybridMemoryError(
            f"--request {path}: cannot be read ({exc.strerror or exc}); check its permissions"
        ) from None


def _load_json(text: str, where: str, fix: str | None = None) -> Any:
    """json.loads with the errors a user can fix named: bad JSON (with ``fix`` appended when given), or nesting
    too deep for the parser."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HybridMemoryError(
            f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})" + (f"; {fix}" if fix else "")
        ) from exc
    except RecursionError as exc:
        raise HybridMemoryError(f"{where}: JSON nested too deeply (thousands of levels); flatten it") from exc


def _cmd_search(args: argparse.Namespace) -> int:
    request = _request_from_args(args)
    scope = _search_scope(args)  # before the memory opens: a bad pair opens nothing
    with open_memory(args) as memory:
        response = (memory.scoped(scope) if scope else memory).search(request)
    _print_json(response.model_dump_json(indent=2), indent=2)
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    """``hybrid-memory delete --memory M ID [ID ...]``: delete chunks by id through :meth:`HybridMemory.delete
    <hybrid_memory.memory.hybrid.HybridMemory.delete>` (the store, both engines, the filter index and the graph
    layer forget them), within the scope options when given (through ``memory.scoped(scope)``: ids are read as a
    scoped ``search`` prints them, and chunks of other scopes are never touched).

    Prints one JSON line: ``deleted`` (the given ids that were stored, in the order given, each once),
    ``not_found`` (the others: unknown, or outside the scope), ``chunks`` (what the memory holds now, as ``ingest``
    reports it) and ``memory``; ``scope`` with a scope option. An id not found is reported and warned about on
    stderr, not an error (exit 0: a delete is idempotent, so running the same command again is safe); a missing
    memory, a bad scope option or a memory that cannot be opened is exit 2 with one line naming the fix."""
    ids = list(dict.fromkeys(_utf8_text(chunk_id, "the id") for chunk_id in args.ids))
    scope = _search_scope(args)  # before the memory opens: a bad pair opens nothing
    with open_memory(args) as memory:
        target = memory.scoped(scope) if scope else memory
        stored = {chunk.chunk_id for chunk in target.get(ids)}
        deleted = [chunk_id for chunk_id in ids if chunk_id in stored]
        missing = [chunk_id for chunk_id in ids if chunk_id not in stored]
        target.delete(deleted)
        summary: dict[str, Any] = {
            "deleted": deleted,
            "not_found": missing,
            "chunks": memory.count(),
            "memory": str(memory.path),
        }
        if scope:
            summary["scope"] = scope.bound()
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        logger.warning(
            "%s not found %s, so not deleted: %s (ids are matched exactly, as search prints them; a chunk ingested "
            "with a scope option is deleted with the same option)",
            _count(len(missing), "id"),
            f"in the scope {scope.bound()}" if scope else "in the memory",
            shown,
        )
    _print_json(json.dumps(summary, ensure_ascii=False))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        print(json.dumps(memory.stats(), indent=2))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..ingest import read_beir_corpus
    from ..memory.hybrid import HybridMemory

    data = _example_dir()
    request = json.loads((data / "request.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="hybrid-memory-demo-") as tmp:
        target = Path(args.memory) if args.memory else Path(tmp) / "memory"
        with HybridMemory(target) as memory:
            if memory.count() == 0:
                _ingest(
                    memory,
                    read_beir_corpus(data / "notes.jsonl", source="examples/incident_memory/notes.jsonl"),
                    progress=not args.quiet,
                )
            response = memory.search(request)
    _print_json(response.model_dump_json(indent=2), indent=2)
    return 0


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argparse parser of the ``hybrid-memory`` command.

    ``argv``, the command line about to be parsed: when it names neither ``graph`` nor ``-h``/``--help``, the
    ``graph`` command is a stub that is never chosen, and the graph extra (networkx and the GraphRAG layer, about
    0.4 s) is not imported: a cold ``hybrid-memory search`` pays only for what it runs. None: the full parser.
    """
    parser = argparse.ArgumentParser(
        prog="hybrid-memory",
        description=(
            "Long-term memory for agents: BM25 + dense vectors, fused query by query "
            "(adaptive by default, weighted RRF on request)."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    parser.add_argument("--version", action="version", version=f"hybrid-memory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def memory_args(p: argparse.ArgumentParser, *, creates: bool = False, shard: bool = False) -> None:
        where = p.add_mutually_exclusive_group(required=True) if shard else p
        where.add_argument(
            "--memory",
            help=(
                "memory directory (created if absent)"
                if creates
                else "an existing memory directory (never created: a missing one is an error, exit code 2; "
                "create it with `hybrid-memory ingest`)"
            ),
            required=not shard,
        )
        if shard:
            where.add_argument(
                "--edge-path",
                dest="shard",
                metavar="DIR",
                help=(
                    "a Qdrant Edge shard instead of --memory (written by `hybrid-memory export-qdrant --edge-path DIR`)"
                ),
            )
            add_index_key_argument(p, "with --edge-path: the shard's indexes (as given to export-qdrant)")
        p.add_argument(
            "--hashing-dim",
            type=int,
            default=None,
            help="use the offline HashingEmbedder of this dimension instead of all-MiniLM-L6-v2 (tests, demos)",
        )

    demo = sub.add_parser("demo", help="build the bundled incident memory and answer the bundled request")
    demo.add_argument("--memory", default=None, help="keep the demo memory in this directory (default: temporary)")
    demo.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (none is drawn when stderr is not a terminal)"
    )
    demo.set_defaults(func=_cmd_demo)

    ingest = sub.add_parser("ingest", help="add BEIR-style .jsonl files or folders of .md/.txt files (upsert)")
    ingest.add_argument(
        "paths",
        nargs="+",
        help=".jsonl files (_id, title, text, metadata, and optionally tenant, "
        "user_id, agent_id, session_id, valid_from, valid_to) or folders of .md/.txt files",
    )
    memory_args(ingest, creates=True)
    ingest.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata added to every chunk (VALUE parsed as JSON when it is JSON); repeatable",
    )
    ingest.add_argument("--chunk-size", type=int, default=1000, help="characters per chunk for .md/.txt (default 1000)")
    ingest.add_argument(
        "--id-prefix",
        default=None,
        help="put before folder chunk ids and sources (default: the folder's name and a slash)",
    )
    add_scope_field_arguments(
        ingest,
        "stamp {name}=VALUE on every chunk (a line with another {name} is refused; ids are the scope's own: "
        "an id another scope holds is written as a separate chunk, never refused)",
    )
    ingest.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="stamp this scope on every chunk (tenant, user_id, agent_id, session_id); repeatable, as "
        "for search, mcp and graph build; the same as the field options above",
    )
    ingest.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read files in a folder whose symbolic link leads out of that folder (default: skipped "
        "with a warning and counted as outside_links, so a link cannot make any file on the "
        "machine searchable)",
    )
    ingest.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (none is drawn when stderr is not a terminal)"
    )
    ingest.set_defaults(func=_cmd_ingest)

    search = sub.add_parser("search", help="search and print the response JSON")
    search.add_argument(
        "text",
        nargs="?",
        help="search text (or give --request; not both texts: a positional text "
        "with a --request file holding search_text is refused)",
    )
    memory_args(search, shard=True)
    search.add_argument(
        "--request",
        metavar="FILE",
        help=(
            "a JSON file in the request shape (query_id, search_text, top_k, ...); --top-k, --filter, the weight "
            "options and --fusion replace the file's fields of the same name"
        ),
    )
    search.add_argument("--top-k", type=int, default=None)
    add_scope_field_arguments(search, "search only chunks with {name}=VALUE (as ingest's option stamped them)")
    search.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="search only this scope's chunks (tenant, user_id, agent_id, session_id); repeatable, as "
        "for mcp and graph build; the same as the field options above",
    )
    search.add_argument("--filter", help='metadata filter as JSON, e.g. \'{"environment": "production"}\'')
    search.add_argument("--dense-weight", dest="dense_weight", type=float, default=None)
    search.add_argument("--sparse-weight", dest="sparse_weight", type=float, default=None)
    search.add_argument("--rrf-k", dest="rrf_k_constant", type=float, default=None)
    fusions = [DEFAULT_FUSION, *(name for name in FUSION_METHODS if name != DEFAULT_FUSION)]  # the default first
    search.add_argument(
        "--fusion",
        choices=fusions,
        default=None,
        help=(
            f"fusion method (hybrid_params.fusion; default {DEFAULT_FUSION!r}): "
            + "; ".join(f"{name}: {FUSION_METHODS[name].summary}" for name in fusions).replace("%", "%%")
        ),
    )
    search.set_defaults(func=_cmd_search)

    delete = sub.add_parser(
        "delete", help="delete chunks by id (from the store and every index) and print what was deleted"
    )
    delete.add_argument("ids", nargs="+", metavar="ID", help="chunk ids, as search prints them")
    memory_args(delete)
    add_scope_field_arguments(
        delete,
        "delete only chunks with {name}=VALUE (as ingest's option stamped them); ids of other scopes are "
        "reported as not found and kept",
    )
    delete.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="delete only this scope's chunks (tenant, user_id, agent_id, session_id); repeatable, as for search "
        "and ingest; the same as the field options above",
    )
    delete.set_defaults(func=_cmd_delete)

    stats = sub.add_parser("stats", help="counts and parameters of a memory")
    memory_args(stats, shard=True)
    stats.set_defaults(func=_cmd_stats)

    wanted = None if argv is None else set(argv)
    if wanted is not None and not wanted & {"graph", "-h", "--help"}:
        sub.add_parser("graph", help="GraphRAG commands")  # never chosen: "graph" is not on this command line
    else:
        _register_graph(sub)

    # `mcp`: the server lives in mcp_server.py and imports the SDK only when run
    from .mcp import register as register_mcp

    register_mcp(sub, memory_args)

    # `export-qdrant`: qdrant-client / qdrant-edge are imported only when it runs
    from .export import register as register_export

    register_export(sub, memory_args)
    return parser


def _register_graph(sub: Any) -> None:
    """Add the ``graph`` command: the GraphRAG layer's parser, or one that names the extra it needs."""
    try:
        from .graph import register
    except ImportError as exc:  # the graph extra is not installed
        reason = f"the graph commands need the graph extra: pip install 'hybrid-memory[graph]' ({exc})"
        graph = sub.add_parser("graph", help="GraphRAG commands (needs: pip install 'hybrid-memory[graph]')")
        graph.set_defaults(func=lambda _args: _fail(reason))
    else:
        register(sub)


def _fail(message: str) -> int:
    print(f"hybrid-memory: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 2 bad input)."""
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs index builds at DEBUG
    previous = _on_sigterm_interrupt()
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except (HybridMemoryError, MissingDependencyError, json.JSONDecodeError, OSError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (timeout, docker stop, systemd): one line, no traceback
        signal_name = "SIGTERM" if isinstance(exc, _Terminated) else "Ctrl-C"
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "nothing more was done"
        print(f"hybrid-memory: interrupted ({signal_name}); {message}", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that what runs on Ctrl-C (an ingest's clean-up) runs on it too."""


def _on_sigterm_interrupt() -> Any:
    """Turn SIGTERM into :class:`_Terminated` for the command's duration; returns the previous handler (None when
    not in the main thread, where Python lets no handler be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def _raise(signum: int, frame: Any) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, _raise)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
