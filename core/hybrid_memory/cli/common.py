"""What the ``hybrid-memory`` subcommands share: opening the memory or shard a command names, the
``--index-key`` and scope options, and ``--scope FIELD=VALUE`` pairs. Argument parsing only: the library never
imports this package."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._exceptions import HybridMemoryError, InvalidRequestError
from ..models import SCOPE_FIELDS
from ..scopes import Scope, as_scope

if TYPE_CHECKING:
    from ..memory.hybrid import HybridMemory

__all__ = [
    "INDEX_KINDS",
    "add_index_key_argument",
    "add_scope_field_arguments",
    "index_key",
    "indexed_keys",
    "open_memory",
    "parse_scope",
]


def open_memory(args: argparse.Namespace, *, must_exist: bool = True, show_progress: bool = True) -> HybridMemory:
    """Open ``args.memory`` (with ``--hashing-dim`` when given) for a command, or the Qdrant Edge shard of
    ``--edge-path`` (``args.shard``, on ``search``, ``stats`` and ``mcp``) with its ``--index-key`` payload indexes;
    without ``--hashing-dim``, a shard whose export record names a hashing embedder is opened with it (as an
    embedded memory is).

    Raises:
        HybridMemoryError: ``--hashing-dim`` < 1 or > :data:`~hybrid_memory.embedders.MAX_HASHING_DIM` (65,536);
            ``must_exist`` and there is no memory at the path (a mistyped path must not silently create an empty
            memory); ``--memory`` holds a memory's index files but not its
            store (:func:`~hybrid_memory.paths.check_store_present`, a StoreFormatError: restore it from a backup);
            ``--memory`` names a Qdrant Edge shard's folder (the
            message says to give it as ``--edge-path``, or to open it with ``HybridMemory.qdrant``); ``--edge-path``
            holds no shard (the message names ``export-qdrant``) or is an embedded memory's folder.
    """
    from ..embedders import MAX_HASHING_DIM, HashingEmbedder
    from ..memory.hybrid import HybridMemory
    from ..paths import EDGE_CONFIG, STORE_FILE, check_store_present, memory_path

    dim = getattr(args, "hashing_dim", None)
    if dim is not None and not 1 <= dim <= MAX_HASHING_DIM:  # before any folder is created
        raise InvalidRequestError(
            f"--hashing-dim must be >= 1 and at most {MAX_HASHING_DIM:,} (MAX_HASHING_DIM: a chunk's vector is "
            f"dim x 4 bytes), got {dim:,}; the default of tests and demos is 64"
        )
    embedder = HashingEmbedder(dim) if dim is not None else None
    shard = getattr(args, "shard", None)
    if shard is not None:
        folder = Path(shard)
        if (folder / STORE_FILE).is_file():
            raise HybridMemoryError(
                f"--edge-path {shard} is an embedded memory's folder, not a Qdrant Edge shard; "
                f"give it as --memory {shard}"
            )
        if not (folder / EDGE_CONFIG).is_file():
            raise HybridMemoryError(
                f"no Qdrant Edge shard at {shard} (no {EDGE_CONFIG}); write one with: "
                f"hybrid-memory export-qdrant --memory DIR --edge-path {shard}"
            )
        from ..backends.qdrant.edge_info import read_export_info

        written = (read_export_info(folder) or {}).get("embedder") or {}
        if embedder is None:  # as an embedded memory does: the hashing embedder its export record names
            if written.get("name") == f"hashing-{written.get('dim')}" and isinstance(written.get("dim"), int):
                embedder = HashingEmbedder(written["dim"])
        _check_shard_embedder(shard, written, embedder)
        options: dict[str, Any] = {"indexed_keys": indexed_keys(getattr(args, "index_key", None) or [])}
        if getattr(args, "avgdl", None) is not None:
            options["avgdl"] = args.avgdl
        return HybridMemory.qdrant(edge_path=folder, embedder=embedder, show_progress=show_progress, **options)
    folder = memory_path(args.memory, "--memory")  # a file, not a folder: refused with the fix
    if not (folder / STORE_FILE).is_file() and (folder / EDGE_CONFIG).is_file():
        fix = (
            f"give it as --edge-path {args.memory}"
            if hasattr(args, "shard")
            else f"give the embedded memory as --memory; open the shard with "
            f"HybridMemory.qdrant(edge_path={args.memory!r})"
        )
        raise HybridMemoryError(
            f"{args.memory} holds a Qdrant Edge shard ({EDGE_CONFIG}), not an embedded memory; {fix}"
        )
    check_store_present(folder)  # index files without their store: say so, not "no memory at"
    if must_exist and not (folder / STORE_FILE).is_file():
        raise HybridMemoryError(
            f"no memory at {args.memory}; create it with: hybrid-memory ingest FILE_OR_FOLDER --memory {args.memory}"
        )
    return HybridMemory(args.memory, embedder=embedder, show_progress=show_progress)


def _check_shard_embedder(shard: str, written: dict[str, Any], embedder: Any) -> None:
    """Refuse to open a shard whose export record names another embedder of the same dimension than the one
    the command would open it with (``--hashing-dim`` or the default model), as an embedded memory built with
    another embedder is refused: its queries would be embedded by another model than its vectors, without an
    error (another dimension is refused when the shard is opened, naming the one that fits)."""
    from ..embedders import DEFAULT_MODEL_NAME

    name, dim = written.get("name"), written.get("dim")
    opened = (DEFAULT_MODEL_NAME, 384) if embedder is None else (embedder.name, int(embedder.dim))
    if isinstance(name, str) and dim == opened[1] and name != opened[0]:
        raise HybridMemoryError(
            f"Qdrant Edge shard {shard} was written with the embedder {name!r} (dim {dim}, its export record), not "
            f"{opened[0]!r}: its queries would be embedded by another model than its vectors; the command line "
            f"opens shards written with the default embedder or --hashing-dim N only: open it from Python with "
            f"HybridMemory.qdrant(edge_path={shard!r}, embedder=<the {name!r} embedder>)"
        )


INDEX_KINDS = ("keyword", "float", "integer", "bool")
"""Payload index kinds of ``--index-key KEY[=TYPE]`` (those ``QdrantBackend``'s ``indexed_keys`` takes)."""


def index_key(text: str) -> tuple[str, str]:
    """argparse type of ``--index-key``: ``KEY`` (a keyword index) or ``KEY=TYPE`` with TYPE one of
    :data:`INDEX_KINDS` -> ``(key, type)``; anything else is argparse's exit 2 naming the kinds."""
    key, sep, kind = text.partition("=")
    kind = kind if sep else "keyword"
    if not key or kind not in INDEX_KINDS:
        raise argparse.ArgumentTypeError(
            f"takes KEY or KEY=TYPE with TYPE one of {', '.join(INDEX_KINDS)} (e.g. severity=float), got {text!r}"
        )
    return key, kind


def indexed_keys(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``--index-key`` pairs as ``{key: type}``; a key given again with the same type counts once.

    Raises:
        HybridMemoryError: a key given with two types (the fix: give it once).
    """
    out: dict[str, str] = {}
    for key, kind in pairs:
        if out.get(key, kind) != kind:
            raise HybridMemoryError(
                f"--index-key {key} is given as {out[key]} and as {kind}; give each key once, "
                f"with the type of its values"
            )
        out[key] = kind
    return out


def add_index_key_argument(p: argparse.ArgumentParser, what: str) -> None:
    """``--index-key KEY[=TYPE]`` (repeatable) on ``p``; ``what`` ends its help."""
    p.add_argument(
        "--index-key",
        action="append",
        type=index_key,
        default=[],
        metavar="KEY[=TYPE]",
        help=f"metadata key with a payload index of TYPE ({', '.join(INDEX_KINDS)}; default keyword; a range "
        f"filter on a number needs float or integer); repeatable; {what}",
    )


def add_scope_field_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--tenant``, ``--user-id``, ``--agent-id``, ``--session-id`` on ``p`` (read by :func:`_ingest_scope`);
    ``what`` is each one's help, with ``{name}`` for the field."""
    for name in SCOPE_FIELDS:
        p.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=None,
            metavar=name.upper(),
            action=_OnceAction,
            help=what.format(name=name),
        )


class _OnceAction(argparse.Action):
    """A scope option given twice must give one value (argparse keeps the last, so ``--tenant a --tenant b`` would
    silently write or read tenant b): a second, different value is a usage error, exit 2."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        if given is not None and given != values:
            parser.error(f"{option_string} {given} and {option_string} {values} disagree; give {option_string} once")
        setattr(namespace, self.dest, values)


def parse_scope(pairs: list[str]) -> Scope | None:
    """``["user_id=u1", "tenant=acme"]`` -> ``Scope``. Each pair is checked as it is read, its value by
    :func:`~hybrid_memory.scopes.as_scope`, so a bad value gets the message every other entry point gives
    (``scoped()``, ``scope=`` of a search, ``--tenant`` / ``--user-id``): ``tenant= acme`` would scope to " acme",
    and is refused with "invalid scope: tenant: tenant must not have white space at its start or end, ...".

    Raises:
        InvalidRequestError: a pair that is not FIELD=VALUE, white space around its field, an unknown field, a bad
            value (white space at its start or end, a control character), or one field given two values (the last
            would silently win: for a server, the scope is who may read what).
    """
    fields: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep and key and key == key.strip() and key not in SCOPE_FIELDS:
            as_scope({key: value})  # names the unknown field (and the closest one), whatever the value
        if sep and key in SCOPE_FIELDS and not value:
            raise InvalidRequestError(
                f"--scope {pair!r} gives {key} no value; give --scope {key}=VALUE, or leave {key} out for no {key}"
            )
        if not sep or not key or not value:
            raise InvalidRequestError(
                f"--scope takes FIELD=VALUE (tenant, user_id, agent_id, session_id), got {pair!r}"
            )
        if key != key.strip():
            raise InvalidRequestError(
                f"--scope {pair!r} has white space around its field {key!r}; give --scope {key.strip()}={value.strip()}"
            )
        as_scope({key: value})  # the field and the value, as every entry point checks them
        if key in fields and fields[key] != value:
            raise InvalidRequestError(
                f"--scope {key}={fields[key]} and --scope {key}={value} disagree; give {key} once"
            )
        fields[key] = value
    return as_scope(fields)
