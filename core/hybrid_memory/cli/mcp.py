"""``hybrid-memory mcp``: serve a memory to agents over MCP (stdio, or Streamable HTTP on 127.0.0.1); the server
itself is :func:`hybrid_memory.mcp_server.build_server`."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from .._exceptions import InvalidRequestError
from ..mcp_server import build_server, settle
from .common import open_memory, parse_scope

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8765
"""TCP port of ``hybrid-memory mcp --http`` when ``--port`` is not given."""

__all__ = ["register"]


def _cmd_mcp(args: argparse.Namespace) -> int:
    scope = parse_scope(args.scope)
    if args.port is not None and not args.http:  # stdio has no port: a --port alone would be silently ignored
        raise InvalidRequestError(
            f"--port {args.port} is for --http; add --http to serve on 127.0.0.1:{args.port}, "
            "or leave --port out for stdio"
        )
    if args.port is None:
        args.port = DEFAULT_PORT
    if args.http:
        _check_port_free(args.port)  # before the memory opens: uvicorn's bind error is a raw traceback, exit 3
    if args.shard is not None and args.avgdl is None and not args.read_only and not _has_export_record(args.shard):
        raise InvalidRequestError(
            "--edge-path with the write tools needs --avgdl TOKENS, the BM25 average length the shard was written "
            "with (export-qdrant printed it; a shard it writes now records it), so added memories score like the "
            "stored ones; or give --read-only"
        )
    with open_memory(args, show_progress=False) as memory:
        server = build_server(memory, scope=scope, read_only=args.read_only)
        settle(memory)
        if args.http:
            logger.info("serving MCP over Streamable HTTP on http://127.0.0.1:%d/mcp", args.port)
            server.run("streamable-http", host="127.0.0.1", port=args.port)
        else:
            server.run("stdio")
    return 0


def _has_export_record(shard: str) -> bool:
    """Whether the Edge shard records the avgdl it was written with (export-qdrant writes it; opening uses it)."""
    from pathlib import Path

    from ..backends.qdrant.edge_info import EXPORT_INFO

    return (Path(shard) / EXPORT_INFO).is_file()


def _check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Refuse a ``--port`` that cannot be bound on ``host``, as uvicorn binds it (``SO_REUSEADDR`` set, so a
    port in TIME_WAIT is free): another server listening there is named, with the fix.

    Raises:
        InvalidRequestError: the port is in use ("port N is in use; choose another --port"), or cannot be bound
            for another reason (the OS's reason, e.g. permission denied).
    """
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidRequestError(f"port {port} is in use; choose another --port") from None
            raise InvalidRequestError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port"
            ) from None


def _port(text: str) -> int:
    """argparse type of ``--port``: an integer 1-65535 (argparse reports anything else with exit 2)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 1-65535, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1-65535, got {port}; choose another --port")
    return port


def register(sub: Any, memory_args: Callable[..., None]) -> None:
    """Add the ``mcp`` subcommand to the ``hybrid-memory`` parser."""
    mcp = sub.add_parser("mcp", help="serve the memory to agents over MCP (stdio, or --http on 127.0.0.1)")
    memory_args(mcp, shard=True)
    mcp.add_argument(
        "--avgdl",
        type=float,
        default=None,
        metavar="TOKENS",
        help=(
            "with --edge-path and the write tools: the BM25 average document length the shard was written with (the "
            "avgdl export-qdrant printed), so added memories are scored like the copied ones"
        ),
    )
    mcp.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="bind every tool to this scope (tenant, user_id, agent_id, session_id); repeatable",
    )
    mcp.add_argument("--read-only", action="store_true", help="serve only the read tools")
    mcp.add_argument("--http", action="store_true", help="Streamable HTTP on 127.0.0.1 instead of stdio")
    mcp.add_argument("--port", type=_port, default=None, help=f"TCP port of --http, 1-65535 (default {DEFAULT_PORT})")
    mcp.set_defaults(func=_cmd_mcp)
