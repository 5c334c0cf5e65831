"""TechDocs: a deterministic technical-domain retrieval set built from the Python standard library's source.

Nothing is downloaded: the text is the pure-Python source of the standard library of the interpreter that
runs this script (``sysconfig.get_paths()["stdlib"]``, CPython 3.11 on the benchmark machine; the Python
Software Foundation License allows redistribution, and nothing is written into the project anyway: the set is
rebuilt in memory in about two seconds whenever a benchmark needs it).

Corpus (one chunk per definition)
    The files of :data:`MODULES` (a fixed list of 40 modules of different kinds: parsing, networking,
    data formats, concurrency, file systems, email) are parsed with :mod:`ast` (never imported). Every
    top-level function, class and method whose docstring has at least 3 words becomes one chunk:

    * ``chunk_id``: ``<module>.<qualified name>`` (e.g. ``json.decoder.JSONDecoder.raw_decode``);
    * ``text``: the definition's source as written (``def``/``class`` line, docstring, body), cut to
      :data:`MAX_CHARS` characters; for a class only its header, docstring and method names (the methods
      are chunks of their own);
    * ``metadata``: ``module`` (``json.decoder``), ``package`` (``json``), ``kind`` (``function``,
      ``class`` or ``method``), ``lines`` (source lines).

Queries (four classes, ``metadata["class"]``), drawn with ``random.Random(SEED)`` from the eligible chunks
    * ``identifier`` -- an exact lookup by name: a definition name that is an identifier in the tokenizer's
      sense (has ``_``, a digit or a case change, e.g. ``_parse_isoformat_date``, ``getaddrinfo``-like
      camelCase) and is defined in exactly one chunk and named in at most :data:`MAX_ID_DF` chunks; half the
      queries are the name alone, half the name plus 2 words from its docstring's first line. Relevant: the
      defining chunk.
    * ``paraphrase`` -- the chunk's docstring summary line (a whole sentence of at least 5 words), *held out*: that line
      is removed from the
      chunk's text (the chunk keeps the rest of its docstring and code), so the query is a description of
      the code in words the chunk no longer contains verbatim. Relevant: that chunk.
    * ``error`` -- an exception message the code can raise, quoted as it would appear in a log:
      ``ValueError: <message>``. Messages are string constants (the literal parts of f-strings, joined by
      a space) of ``raise X("...")`` statements, with at least 3 words, that occur in exactly one chunk.
      Relevant: that chunk.
    * ``filtered`` -- a query of one of the three kinds above (round robin) carrying the metadata filter
      ``{"package": <its package>}``, as an agent would scope a search to one library. Relevant: the same
      chunk, which passes the filter.

    :data:`QUERIES_PER_CLASS` (150) queries per class, 600 in all; a chunk is the target of at most one
    query. The whole set (texts, ids, queries, qrels) is a pure function of the Python version's stdlib
    and :data:`SEED`; :func:`fingerprint` hashes it, and the benchmark prints it.

Usage: ``python benchmarks/techdocs.py`` prints the counts and a few queries of each class.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MODULES", "QUERIES_PER_CLASS", "SEED", "TechDocs", "build", "corpus_counts", "draw_targets", "fingerprint"]

SEED = 20260407
QUERIES_PER_CLASS = 150
MAX_CHARS = 3000
MAX_ID_DF = 3
MODULES = (
    "argparse",
    "ast",
    "asyncio/base_events",
    "asyncio/streams",
    "asyncio/tasks",
    "base64",
    "calendar",
    "configparser",
    "csv",
    "dataclasses",
    "datetime",
    "_pydecimal",
    "difflib",
    "email/message",
    "email/utils",
    "email/_header_value_parser",
    "fractions",
    "ftplib",
    "gettext",
    "gzip",
    "http/client",
    "http/cookiejar",
    "imaplib",
    "inspect",
    "ipaddress",
    "json/decoder",
    "json/encoder",
    "logging/__init__",
    "mailbox",
    "pathlib",
    "pickletools",
    "shutil",
    "smtplib",
    "statistics",
    "tarfile",
    "textwrap",
    "tokenize",
    "urllib/parse",
    "urllib/request",
    "zipfile",
)

_IDENTIFIER = re.compile(r"_|\d|[a-z][A-Z]")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


@dataclass
class TechDocs:
    """The built set: BEIR-like corpus, queries and qrels, plus per-query metadata."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    """``{"chunk_id", "text", "source", "metadata"}`` in corpus order."""
    queries: dict[str, str] = field(default_factory=dict)
    """query id -> query text."""
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    """query id -> {chunk_id: 1}."""
    query_class: dict[str, str] = field(default_factory=dict)
    """query id -> ``identifier`` | ``paraphrase`` | ``error`` | ``filtered``."""
    query_filter: dict[str, dict[str, Any]] = field(default_factory=dict)
    """query id -> metadata filter (filtered queries only)."""


@dataclass
class _Def:
    chunk_id: str
    name: str
    module: str
    kind: str
    text: str
    summary: str
    messages: list[tuple[str, str]]
    lines: int


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _message(node: ast.Raise) -> tuple[str, str] | None:
    """``(exception name, message)`` of ``raise Name("constant" ...)``, or None."""
    call = node.exc
    if not isinstance(call, ast.Call) or not call.args:
        return None
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    arg = call.args[0]
    if isinstance(arg, ast.BinOp):  # "..." % args
        arg = arg.left
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        text = arg.value
    elif isinstance(arg, ast.JoinedStr):
        text = " ".join(v.value.strip() for v in arg.values if isinstance(v, ast.Constant) and v.value.strip())
    else:
        return None
    text = " ".join(re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]|\{[^}]*\}", " ", text).split())
    if name is None or len(_WORD.findall(text)) < 3:
        return None
    return name, text


def _definitions(module: str, source: str, max_chars: int = MAX_CHARS) -> list[_Def]:
    tree = ast.parse(source)
    lines = source.splitlines()
    out: list[_Def] = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(child) or ""
            qualname = f"{prefix}{child.name}"
            is_class = isinstance(child, ast.ClassDef)
            if len(doc.split()) >= 3:
                start = min([d.lineno for d in child.decorator_list] + [child.lineno]) - 1
                if is_class:
                    body_start = child.body[0].end_lineno if child.body else child.lineno
                    methods = [c.name for c in child.body if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))]
                    text = "\n".join(lines[start:body_start])
                    if methods:
                        text += "\n    # methods: " + ", ".join(methods)
                else:
                    text = "\n".join(lines[start : child.end_lineno])
                messages = [m for n in ast.walk(child) if isinstance(n, ast.Raise) and (m := _message(n))]
                if is_class:
                    messages = []
                out.append(
                    _Def(
                        chunk_id=f"{module}.{qualname}",
                        name=child.name,
                        module=module,
                        kind="class" if is_class else "method" if in_class else "function",
                        text=text[:max_chars],
                        summary=doc.strip().splitlines()[0].strip(),
                        messages=messages,
                        lines=(child.end_lineno or child.lineno) - child.lineno + 1,
                    )
                )
            if is_class:
                visit(child, f"{qualname}.", True)

    visit(tree, "", False)
    return out


def _tokens(text: str) -> set[str]:
    return {t.casefold() for t in re.findall(r"[A-Za-z0-9_]+", text)}


def build(seed: int = SEED, per_class: int = QUERIES_PER_CLASS) -> TechDocs:
    """Build the set (deterministic for a given stdlib and seed). Takes about two seconds.

    Raises:
        FileNotFoundError: a module of :data:`MODULES` is missing from this Python's stdlib.
    """
    root = _stdlib()
    defs: list[_Def] = []
    for name in MODULES:
        path = root / f"{name}.py"
        module = name.replace("/__init__", "").replace("/", ".")
        defs.extend(_definitions(module, path.read_text(encoding="utf-8")))
    seen: set[str] = set()
    defs = [d for d in defs if not (d.chunk_id in seen or seen.add(d.chunk_id))]  # redefinitions: first wins

    token_df, name_count, message_count = corpus_counts(defs)

    rng = random.Random(seed)

    ident_pool = [
        d
        for d in defs
        if _IDENTIFIER.search(d.name.strip("_"))
        and name_count[d.name] == 1
        and token_df.get(d.name.casefold(), 0) <= MAX_ID_DF
    ]
    para_pool = [d for d in defs if len(_WORD.findall(d.summary)) >= 5 and d.summary.endswith(".")]
    error_pool = [d for d in defs if any(message_count[m] == 1 for _, m in d.messages)]
    need = per_class + (per_class + 2) // 3  # the filtered class borrows from each
    targets = draw_targets(
        {"error": error_pool, "identifier": ident_pool, "paraphrase": para_pool}, need, rng, message_count
    )

    out = TechDocs()
    held_out = {d.chunk_id: d.summary for kind in ("paraphrase",) for d, _ in targets[kind]}
    plan: list[tuple[str, _Def, str]] = []
    for kind in ("identifier", "paraphrase", "error"):
        for d, text in targets[kind][:per_class]:
            plan.append((kind, d, text))
    borrow = [targets[k][per_class:] for k in ("identifier", "paraphrase", "error")]
    for i in range(per_class):
        source = borrow[i % 3]
        if not source:
            continue
        d, text = source.pop(0)
        plan.append(("filtered", d, text))
    for d in defs:
        text = d.text
        if d.chunk_id in held_out:
            text = text.replace(held_out[d.chunk_id], "", 1)
        out.chunks.append(
            {
                "chunk_id": d.chunk_id,
                "text": text,
                "source": f"stdlib/{d.module.replace('.', '/')}.py",
                "metadata": {"module": d.module, "package": d.module.split(".")[0], "kind": d.kind, "lines": d.lines},
            }
        )
    counters: dict[str, int] = {}
    for kind, d, text in plan:
        counters[kind] = counters.get(kind, 0) + 1
        qid = f"{kind}-{counters[kind]:03d}"
        out.queries[qid] = text
        out.qrels[qid] = {d.chunk_id: 1}
        out.query_class[qid] = kind
        if kind == "filtered":
            out.query_filter[qid] = {"package": d.module.split(".")[0]}
    return out


_STOP = frozenset(
    "a an the of to and or in on for is are be by with from as that this it its if not return returns".split()
)


def corpus_counts(defs: list[_Def]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(document frequency of each token, definitions per name, definitions raising each message) over ``defs``:
    what decides which names are rare identifiers and which messages are quoted by one chunk only. Shared by
    TechDocs and APIDocs (``benchmarks/apidocs.py``)."""
    token_df: dict[str, int] = {}
    name_count: dict[str, int] = {}
    message_count: dict[str, int] = {}
    for d in defs:
        for token in _tokens(d.text):
            token_df[token] = token_df.get(token, 0) + 1
        name_count[d.name] = name_count.get(d.name, 0) + 1
        for message in {m for _, m in d.messages}:
            message_count[message] = message_count.get(message, 0) + 1
    return token_df, name_count, message_count


def draw_targets(
    pools: dict[str, list[_Def]], need: int, rng: random.Random, message_count: dict[str, int]
) -> dict[str, list[tuple[_Def, str]]]:
    """Up to ``need`` (definition, query text) pairs per class, drawn in the order of ``pools`` (error, identifier,
    paraphrase), each pool sorted by chunk id then shuffled by ``rng``, no definition used twice: an identifier query
    is the name, every other one followed by two content words of its summary; a paraphrase is the summary (held out
    of the chunk by the caller); an error query is ``Exception: message`` of a message no other chunk raises.
    Shared by TechDocs and APIDocs (``benchmarks/apidocs.py``)."""
    used: set[str] = set()
    targets: dict[str, list[tuple[_Def, str]]] = {"identifier": [], "paraphrase": [], "error": []}
    for kind, pool in pools.items():
        pool = sorted(pool, key=lambda d: d.chunk_id)
        rng.shuffle(pool)
        for d in pool:
            if len(targets[kind]) >= need:
                break
            if d.chunk_id in used:
                continue
            if kind == "identifier":
                words = [w for w in _WORD.findall(d.summary) if w.casefold() not in _STOP][:2]
                text = d.name if len(targets[kind]) % 2 == 0 or len(words) < 2 else f"{d.name} {' '.join(words)}"
            elif kind == "paraphrase":
                text = d.summary
            else:
                exc, message = sorted((e, m) for e, m in d.messages if message_count[m] == 1)[0]
                text = f"{exc}: {message}"
            used.add(d.chunk_id)
            targets[kind].append((d, text))
    return targets


def fingerprint(data: TechDocs) -> str:
    """sha256 (16 hex digits) over the chunks, queries, qrels and filters: equal fingerprints, equal sets."""
    payload = json.dumps([data.chunks, data.queries, data.qrels, data.query_filter], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


if __name__ == "__main__":  # pragma: no cover
    data = build()
    classes: dict[str, int] = {}
    for c in data.query_class.values():
        classes[c] = classes.get(c, 0) + 1
    kinds: dict[str, int] = {}
    for c in data.chunks:
        kinds[c["metadata"]["kind"]] = kinds.get(c["metadata"]["kind"], 0) + 1
    print(f"{len(data.chunks)} chunks {kinds}; {len(data.queries)} queries {classes}; fingerprint {fingerprint(data)}")
    for cls in ("identifier", "paraphrase", "error", "filtered"):
        for qid in [q for q, c in data.query_class.items() if c == cls][:4]:
            print(f"  {qid}: {data.queries[qid]!r} -> {list(data.qrels[qid])} {data.query_filter.get(qid, '')}")
