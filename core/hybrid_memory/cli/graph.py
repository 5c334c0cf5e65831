"""``hybrid-memory graph build | ask | show | export``: the GraphRAG commands (argparse).

``register(subparsers)`` adds the ``graph`` command to the main parser; every handler takes the parsed args
(``args.memory`` = memory directory), prints JSON on stdout (``show --text`` prints a table) and returns the exit
code. The graph lives in ``<memory>/graph/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..graph.errors import GraphStateError
from .common import open_memory, parse_scope

__all__ = ["register"]


def _open_memory(args: argparse.Namespace) -> Any:
    return open_memory(args, show_progress=False)


def _scope(args: argparse.Namespace) -> Any:
    return parse_scope(getattr(args, "scope", None) or [])


def _graph_dir(args: argparse.Namespace) -> Path:
    """``MEMORY/graph``, or ``MEMORY/graph_scopes/<scope key>`` with ``--scope`` (one graph per scope)."""
    scope = _scope(args)
    return Path(args.memory) / "graph" if scope is None else Path(args.memory) / "graph_scopes" / scope.key()


def _memory_folder_exists(args: argparse.Namespace) -> None:
    """Refuse a ``--memory`` folder that does not exist (a mistyped path), before any advice about its graph.

    Raises:
        GraphStateError: the message names the path, says it does not exist, and the fix.
    """
    if not Path(args.memory).exists():
        raise GraphStateError(
            f"no memory at {args.memory}: the folder does not exist; check --memory (the folder ingest wrote), or "
            f"create a memory with: hybrid-memory ingest FILE_OR_FOLDER --memory {args.memory}"
        )


def _load(args: argparse.Namespace, **kwargs: Any) -> Any:
    from ..graph.index import GraphIndex

    _memory_folder_exists(args)
    path = _graph_dir(args)
    if not (path / "manifest.json").is_file():
        scope = "".join(f" --scope {pair}" for pair in getattr(args, "scope", None) or [])
        others = _built_graphs(Path(args.memory), path)
        raise GraphStateError(
            f"no graph in {path}; run `hybrid-memory graph build --memory {args.memory}{scope}` first"
            + (f" (this memory has graphs for: {', '.join(others)})" if others else "")
        )
    return GraphIndex.load(path, **kwargs)


def _built_graphs(memory: Path, asked: Path) -> list[str]:
    """The graphs built in ``memory`` other than ``asked``, as the options that open them: ``no --scope`` for
    ``MEMORY/graph``, ``--scope F=V ...`` for each ``MEMORY/graph_scopes/*`` (read from its manifest's ``scope``),
    sorted; an unreadable manifest is left out."""
    found = []
    for manifest in [memory / "graph" / "manifest.json", *sorted((memory / "graph_scopes").glob("*/manifest.json"))]:
        if manifest.parent == asked or not manifest.is_file():
            continue
        try:
            bound = json.loads(manifest.read_text(encoding="utf-8")).get("scope") or {}
        except (OSError, ValueError, AttributeError):
            continue
        found.append(" ".join(f"--scope {k}={v}" for k, v in sorted(bound.items())) or "no --scope")
    return sorted(found)


def _cmd_build(args: argparse.Namespace) -> int:
    from ..graph.index import GraphIndex
    from ..graph.patterns import OfflineExtractor

    with _open_memory(args) as memory:
        scope = _scope(args)
        target = memory.scoped(scope) if scope is not None else memory
        if args.rebuild or not (_graph_dir(args) / "manifest.json").is_file():
            _some_chunks(args, memory, target, scope)
            index = GraphIndex(
                extractor=OfflineExtractor(proper_nouns=not args.technical),
                max_cluster_size=10 if args.max_cluster_size is None else args.max_cluster_size,
                seed=42 if args.seed is None else args.seed,
                community_backend=args.community_backend or "graspologic",
                embedder=memory.embedder,
                path=_graph_dir(args),
                show_progress=not args.quiet,
            )
        else:  # incremental: only what changed since the last build
            index = GraphIndex.open(target)
            index.show_progress = not args.quiet
            saved = {
                "max_cluster_size": index.max_cluster_size,
                "seed": index.seed,
                "community_backend": index.community_backend,
            }
            asked = {
                "max_cluster_size": args.max_cluster_size,
                "seed": args.seed,
                "community_backend": args.community_backend,
            }
            if any(value is not None and value != saved[key] for key, value in asked.items()):
                raise GraphStateError(
                    f"the graph was built with {saved}; to change them rebuild it: add --rebuild "
                    f"(or pass the saved values to refresh incrementally)"
                )
        stats = index.refresh(target)
    print(json.dumps({"refresh": stats.model_dump(mode="json"), "graph": index.stats()}, indent=2))
    return 0


def _some_chunks(args: argparse.Namespace, memory: Any, target: Any, scope: Any) -> None:
    """Refuse to build a new graph of no chunks (an empty graph would be saved with no word).

    Raises:
        GraphStateError: the message names the scope, the memory's chunk count and, for each field of the scope,
            the values the memory's chunks hold (the first five), and the fix.
    """
    if target.count() > 0:
        return
    if scope is None:
        raise GraphStateError(
            f"the memory at {args.memory} holds 0 chunks, so no graph was built; add some first: "
            f"hybrid-memory ingest FILE_OR_FOLDER --memory {args.memory}"
        )
    bound = scope.bound()
    pairs = " ".join(f"--scope {name}={value}" for name, value in bound.items())
    total = memory.count()
    held = "; ".join(f"its {name} values: {_held_values(memory, name)}" for name in bound)
    raise GraphStateError(
        f"0 chunks matched {pairs} (the memory at {args.memory} holds {total} chunk{'' if total == 1 else 's'}; "
        f"{held}), so no graph was built; give --scope values the chunks hold (each field must equal the chunks' "
        "own, as ingest stamped them), or leave --scope out to build the whole memory's graph"
    )


def _held_values(memory: Any, field: str, limit: int = 5) -> str:
    """The values of the scope field ``field`` the memory's chunks hold, for a message: ``'u1', 'u2'`` (at most
    ``limit``, then ``...``), or ``none (no chunk has a user_id)``."""
    values = memory.backend.store.scope_values(field, limit)  # the embedded store: graph build reads a --memory folder
    if not values:
        return f"none (no chunk has a {field})"
    return ", ".join(repr(v) for v in values[:limit]) + (", ..." if len(values) > limit else "")


def _check_level(index: Any, level: int | None) -> None:
    levels = sorted({c.level for c in index.communities.values()})
    if level is not None and levels and level not in levels:
        raise GraphStateError(f"--level {level}: this graph has levels {levels[0]}..{levels[-1]}")


def _cmd_ask(args: argparse.Namespace) -> int:
    _memory_folder_exists(args)
    with _open_memory(args) as memory:
        index = _load(args, embedder=memory.embedder)
        _check_level(index, args.level)
        answer = index.ask(args.question, token_budget=args.token_budget, level=args.level)
    if args.text:
        print(answer.answer)
        t = answer.tokens
        print(
            f"\n[{len(answer.search.hits)} reports, {t.report_tokens} tokens, standing for {t.source_chunks} "
            f"chunks of {t.source_chunk_tokens} tokens ({t.tokenizer})]",
            file=sys.stderr,
        )
    else:
        print(answer.model_dump_json(indent=2))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise GraphStateError(f"--top must be >= 1, got {args.top}")
    index = _load(args)
    largest = sorted(index.communities.values(), key=lambda c: (-len(c.entities), c.level, c.community_id))
    rows = []
    for community in largest[: args.top]:
        report = index.reports.get(community.community_id)
        rows.append(
            {
                "community_id": community.community_id,
                "level": community.level,
                "entities": len(community.entities),
                "chunks": len(community.chunk_ids),
                "title": report.title if report else "",
                "rating": report.rating if report else None,
            }
        )
    stats = index.stats()
    if args.text:
        print(f"entities {stats['entities']}, edges {stats['edges']}, coverage {stats['coverage']:.0%}")
        for level, count in stats["communities_per_level"].items():
            print(f"level {level}: {count} communities")
        for row in rows:
            print(
                f"{row['community_id']:>10}  {row['entities']:>5} entities  {row['chunks']:>5} chunks  {row['title']}"
            )
    else:
        print(json.dumps({"graph": stats, "largest_communities": rows}, indent=2, ensure_ascii=False))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from ..graph.export import export_graphml, export_html

    index = _load(args)
    _check_level(index, args.level)
    suffix = Path(args.output).suffix.lower()
    if args.format is None and suffix not in (".graphml", ".xml", ".html", ".htm"):
        raise GraphStateError(f"cannot tell the format of {args.output}: name it .graphml or .html, or give --format")
    fmt = args.format or ("html" if suffix in (".html", ".htm") else "graphml")
    if fmt == "html":
        path = export_html(index, args.output, level=args.level)
    else:
        path = export_graphml(index, args.output)
    print(json.dumps({"written": str(path), "format": fmt}))
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``graph`` (with build, ask, show, export) to the main parser's subparsers; returns its parser."""
    graph = subparsers.add_parser("graph", help="GraphRAG: entity graph, communities, reports, global answers")
    sub = graph.add_subparsers(dest="graph_command", required=True)

    def memory_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--memory", required=True, help="memory directory (the graph is kept in MEMORY/graph)")
        p.add_argument(
            "--hashing-dim",
            type=int,
            default=None,
            help="open the memory with the HashingEmbedder of this dimension (tests, demos)",
        )
        p.add_argument(
            "--scope",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="the graph of this scope only (tenant, user_id, agent_id, session_id; repeatable), "
            "kept in MEMORY/graph_scopes/",
        )

    build = sub.add_parser("build", help="extract entities, cluster, write reports (incremental after the first)")
    memory_args(build)
    build.add_argument(
        "--max-cluster-size",
        type=int,
        default=None,
        help="split communities above this size (10; a refresh keeps the saved value)",
    )
    build.add_argument("--seed", type=int, default=None, help="Leiden seed (42; a refresh keeps the saved value)")
    build.add_argument(
        "--community-backend",
        choices=("graspologic", "cdlib"),
        default=None,
        help="Leiden implementation: graspologic (graspologic-native, MIT; default) or cdlib "
        "(leidenalg/igraph, GPL; extra graph-cdlib); a refresh keeps the saved value",
    )
    build.add_argument(
        "--technical", action="store_true", help="offline extractor without capitalised proper nouns (logs, code)"
    )
    build.add_argument("--rebuild", action="store_true", help="start from scratch instead of refreshing")
    build.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars (they are drawn only when stderr is a terminal)"
    )
    build.set_defaults(func=_cmd_build)

    ask = sub.add_parser("ask", help="answer a question about the whole memory from community reports")
    ask.add_argument("question")
    memory_args(ask)
    ask.add_argument("--token-budget", type=int, default=2000, help="tokens of reports to use (2000)")
    ask.add_argument("--level", type=int, default=None, help="only reports of this community level")
    ask.add_argument("--text", action="store_true", help="print the answer text instead of JSON")
    ask.set_defaults(func=_cmd_ask)

    show = sub.add_parser("show", help="counts per level and the largest communities")
    memory_args(show)
    show.add_argument("--top", type=int, default=10, help="how many communities to list (10)")
    show.add_argument("--text", action="store_true", help="a plain table instead of JSON")
    show.set_defaults(func=_cmd_show)

    export = sub.add_parser("export", help="write the graph as GraphML or an interactive HTML page")
    memory_args(export)
    export.add_argument("--output", "-o", required=True, help="file to write (.graphml or .html)")
    export.add_argument("--format", choices=("graphml", "html"), default=None, help="default: from the extension")
    export.add_argument("--level", type=int, default=0, help="community level that colours the HTML nodes (0)")
    export.set_defaults(func=_cmd_export)
    return graph
