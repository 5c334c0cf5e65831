"""``hybrid-memory export-qdrant``: copy a memory into a Qdrant collection or an Edge shard with its stored
vectors (the library side is :func:`hybrid_memory.memory.export.export_to_qdrant`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from ..memory.export import check_target, export_to_qdrant, open_target
from .common import add_index_key_argument, indexed_keys, open_memory

__all__ = ["register"]


def _cmd_export(args: argparse.Namespace) -> int:
    """``hybrid-memory export-qdrant``: copy the memory at ``--memory`` into the collection; prints a JSON line
    (``copied``, ``memory``, ``target``, ``avgdl``: the BM25 average length the copy was written with, the memory's
    own unless ``--avgdl`` is given; ``replaced``: points of an earlier copy cleared by ``--replace``). A target
    that holds points is refused without ``--replace`` (:func:`check_target`).

    The API key is ``--api-key``, else the ``QDRANT_API_KEY`` environment variable (empty: none)."""
    import json

    from ..backends.qdrant.backend import QdrantBackend

    options: dict[str, Any] = {
        k: v
        for k, v in {
            "shard_number": args.shard_number,
            "replication_factor": args.replication_factor,
            "write_consistency_factor": args.write_consistency_factor,
            "write_ordering": args.write_ordering,
        }.items()
        if v is not None
    }
    if args.edge_path:
        if options or args.url or args.api_key:
            from .._exceptions import HybridMemoryError

            raise HybridMemoryError(
                "--edge-path takes no --url, --api-key or cluster options (an Edge shard is one local shard)"
            )
    elif not args.url:
        from .._exceptions import HybridMemoryError

        raise HybridMemoryError("give --url (a Qdrant server, e.g. http://localhost:6333) or --edge-path DIR")
    keys = indexed_keys(args.index_key)  # before anything is opened: a key given with two types is refused
    with open_memory(args, show_progress=False) as memory:
        # BM25's length normalisation is fixed when points are written: the memory's own average length, so the
        # copy ranks as the memory does (Qdrant's default 256 tokens would reorder its results)
        memory.flush()  # a merge still running would change avgdl when it ends: read the settled one
        params = memory.bm25_params
        avgdl = args.avgdl if args.avgdl is not None else params["avgdl"]
        bm25: dict[str, Any] = {"k1": params["k1"], "b": params["b"]}  # the memory's own (check_bm25)
        if args.edge_path:
            from ..backends.qdrant.collection import EdgeCollection

            # not QdrantBackend.edge, which takes an earlier copy's export record: this copy writes its own
            backend = QdrantBackend(EdgeCollection(args.edge_path), indexed_keys=keys, avgdl=avgdl, **bm25)
        else:
            api_key = args.api_key if args.api_key is not None else os.environ.get("QDRANT_API_KEY") or None
            backend = QdrantBackend.client(
                args.url, collection=args.collection, api_key=api_key, indexed_keys=keys, avgdl=avgdl, **bm25, **options
            )
        total = memory.count()
        try:  # connect and create or check the collection first: a refused connection draws no 0/N bar
            open_target(backend, int(memory.embedder.dim))  # an Edge shard of another dimension: named, with the fix
            held = check_target(backend, replace=args.replace)  # an earlier copy: refused without --replace
        except BaseException:
            backend.close()
            raise
        bar = None
        if not args.quiet:
            from tqdm import tqdm

            bar = tqdm(
                total=total, unit="chunk", desc="export-qdrant", file=sys.stderr, disable=None
            )  # None: off unless a terminal
        last = [0]

        def progress(done: int) -> None:
            if bar is not None:
                bar.update(done - last[0])
            last[0] = done

        try:
            copied = export_to_qdrant(memory, backend, progress=progress, replace=args.replace, avgdl=avgdl)
        finally:
            if bar is not None:
                bar.close()
            backend.close()
    target = args.edge_path or f"{args.url} collection {args.collection}"
    print(
        json.dumps(
            {"copied": copied, "memory": str(args.memory), "target": str(target), "avgdl": avgdl, "replaced": held}
        )
    )
    return 0


def register(sub: Any, memory_args: Callable[..., None]) -> None:
    """Add ``export-qdrant`` to the ``hybrid-memory`` command's subparsers."""
    p = sub.add_parser(
        "export-qdrant", help="copy a memory into a Qdrant collection with its stored vectors (no re-embedding)"
    )
    memory_args(p)
    p.add_argument("--url", default=None, help="Qdrant server URL, e.g. http://localhost:6333")
    p.add_argument(
        "--api-key",
        default=None,
        help=(
            "API key of the Qdrant server given by --url, sent to that server only (qdrant-client's api-key header); "
            "when the flag is absent the QDRANT_API_KEY environment variable is read (keeps the key out of the shell "
            "history); not used with --edge-path"
        ),
    )
    p.add_argument("--collection", default="hybrid_memory", help="collection name (default hybrid_memory)")
    p.add_argument("--edge-path", default=None, help="write a Qdrant Edge shard in this directory instead of a server")
    p.add_argument("--shard-number", type=int, default=None, help="shards of a new collection (server default)")
    p.add_argument("--replication-factor", type=int, default=None, help="replicas of each shard of a new collection")
    p.add_argument(
        "--write-consistency-factor",
        type=int,
        default=None,
        help="replicas that must confirm a write, for a new collection",
    )
    p.add_argument(
        "--write-ordering",
        choices=("weak", "medium", "strong"),
        default=None,
        help="Qdrant write ordering of the copy's upserts",
    )
    p.add_argument(
        "--avgdl",
        type=float,
        default=None,
        metavar="TOKENS",
        help="average document length BM25 normalises by in the copy (default: the memory's own, so the copy "
        "ranks as the memory does); open the copy later with the same avgdl",
    )
    add_index_key_argument(
        p,
        "open the copy later with the same keys (HybridMemory.qdrant(..., indexed_keys={KEY: "
        "TYPE}) or --index-key of search / stats / mcp --edge-path)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help=(
            "clear a target that already holds points (an earlier or interrupted copy) and copy again; without it such "
            "a target is refused, so a copy never keeps chunks deleted since the last one"
        ),
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_export)
