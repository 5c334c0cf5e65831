"""Bad input, measured: generated search requests and filters through ``HybridMemory.search`` and the CLI.

Usage::

    python benchmarks/fuzz.py                   # 10,000 requests, each through the API and the CLI
    python benchmarks/fuzz.py --n 500 --seed 3

What is generated (seeded, ``random.Random``), as a new user's agent would send it, malformed ones included:
wrong types for every field, NaN / infinities / 2**70 / 1e308 numbers, deep (up to 5,000 levels) and wide
(up to 20,000 keys or values) filters, unknown and misspelled operators, unicode junk (control characters,
RTL marks, emoji, CJK, NUL), lone surrogates, very long text (up to 200,000 characters), unknown fields,
``hybrid_params`` as a number / list / bool / string. The CLI run writes each request to a file with
``json.dumps`` (so NaN becomes ``NaN`` and a lone surrogate ``\\ud800``) and calls ``hybrid-memory search
--request FILE`` in-process; one request in 50 is raw deeply nested JSON text instead.

A request's ``metadata_filter`` also goes through ``HybridMemory.count`` (escapes there count as escaped).
Outcomes per call: ``ok`` (a response, which must serialise with ``model_dump_json`` and parse back with
every ``rrf_score`` a finite number), ``library error`` (an exception of the library's error tree, or CLI
exit code 2 with a one-line message), ``escaped`` (any other exception, or a CLI traceback), ``hang``
(over 5 s). Target: 0 escaped, 0 hangs. Prints a table and writes ``benchmarks/results/fuzz.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

HANG_SECONDS = 5.0
DIM = 64
OPERATORS = [
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$contains",
    "$exists",
    "$and",
    "$or",
    "$not",
    "$regex",
    "$EQ",
    "$",
    "$$",
    "$in ",
    "$elemMatch",
    "$size",
    "$all",
    "eq",
    "$where",
]
KEYS = [
    "environment",
    "service",
    "severity",
    "tags",
    "labels",
    "score",
    "nested",
    "café",
    "",
    " ",
    "a.b",
    "a\nb",
    "k\\q",
    "$bad",
    'q"uote',
    "\x00",
    "\ud800",
    "x" * 300,
    "severity ",
    "SERVICE",
]
JUNK = [
    "",
    " ",
    "\x00",
    "\u202e",
    "\ud800",
    "\udfff",
    "\ufeff",
    "😀",
    "床前明月光",
    "\x1b[31m",
    "\r\n",
    "\t",
    "NaN",
    "null",
    "{",
    "}",
    "'",
    '"',
    "\\",
    "%s",
    "' OR 1=1 --",
    "☃" * 50,
    "e\u0301",
    "\U0001f600" * 3,
]


def _number(rng: random.Random) -> Any:
    return rng.choice(
        [
            0,
            1,
            -1,
            5,
            2**31,
            2**63,
            2**70,
            -(2**70),
            10**400,
            0.5,
            -0.0,
            1e308,
            -1e308,
            1e-320,
            math.nan,
            math.inf,
            -math.inf,
            3.0,
            1000,
            1001,
            10**6,
            True,
            False,
        ]
    )


def _text(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(
            [
                "HTTP 504",
                "billing timeout",
                "postgres pool",
                "getUserById",
                "ERR_CONN_RESET",
                "v2.3.1 10.0.0.12",
                "what happened in production?",
            ]
        )
    if kind < 0.7:
        return "".join(rng.choice(JUNK + ["word", " ", "504"]) for _ in range(rng.randint(1, 12)))
    if kind < 0.8:
        return " ".join(rng.choice(["word", "504", "billing", "x"]) for _ in range(rng.choice([2_000, 20_000, 50_000])))
    if kind < 0.85:
        return "a" * rng.choice([10_000, 200_000])
    return rng.choice([None, 5, 1.5, [], ["HTTP"], {"text": "x"}, True, math.nan])


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if kind < 0.3:
        return _number(rng)
    if kind < 0.6:
        return rng.choice(["production", "billing-service", "db", "café", "", "\ud800", "x" * 5000] + JUNK)
    if kind < 0.75 and depth < 4:
        return [_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 5, 300]))]
    if kind < 0.85 and depth < 4:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice([None, True, False, [], {}, [1.0], ["café"], [[1]]])


def _filter(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if kind < 0.05:
        return rng.choice([None, 5, "production", [], [{"a": 1}], True, math.nan])
    if kind < 0.1:  # deep
        node: Any = {"environment": "production"}
        for _ in range(rng.choice([40, 200, 1_100, 5_000])):
            node = {rng.choice(["$and", "$or", "$not"]): [node] if rng.random() < 0.8 else node}
        return node
    if kind < 0.15:  # wide
        width = rng.choice([1_000, 20_000])
        if rng.random() < 0.5:
            return {"service": {"$in": [f"s{i}" for i in range(width)]}}
        return {f"k{i}": i for i in range(width)}
    out: dict[str, Any] = {}
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(KEYS + OPERATORS)
        if key in ("$and", "$or") and depth < 3:
            out[key] = (
                [_filter(rng, depth + 1) for _ in range(rng.randint(0, 3))] if rng.random() < 0.8 else _value(rng)
            )
        elif key == "$not" and depth < 3:
            out[key] = _filter(rng, depth + 1)
        elif rng.random() < 0.5:
            out[key] = {rng.choice(OPERATORS): _value(rng) for _ in range(rng.randint(1, 2))}
        else:
            out[key] = _value(rng)
    return out


def _hybrid_params(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.15:
        return rng.choice([5, 0, [], [0.5, 0.5], True, "Infinity", None, math.inf, {"dense": 1}])
    params: dict[str, Any] = {}
    for name in ("dense_weight", "sparse_weight", "rrf_k_constant", "unknown"):
        if rng.random() < 0.6:
            params[name] = _number(rng) if rng.random() < 0.8 else _value(rng)
    return params


def make_request(rng: random.Random) -> Any:
    """One generated request: usually a dict of request fields, sometimes not a dict at all."""
    if rng.random() < 0.03:
        return rng.choice([None, 5, [], "just a string", ["HTTP 504"], math.nan])
    request: dict[str, Any] = {}
    if rng.random() < 0.9:
        request["search_text"] = _text(rng)
    if rng.random() < 0.5:
        request["query_id"] = rng.choice(["q1", "", "\ud800", "x" * 100_000, 5, None, "😀", "\x00"])
    if rng.random() < 0.5:
        request["top_k"] = rng.choice([1, 5, 0, -1, 1000, 1001, 2**70, 2.5, 5.0, "5", None, True, math.nan])
    if rng.random() < 0.5:
        request["hybrid_params"] = _hybrid_params(rng)
    if rng.random() < 0.6:
        request["metadata_filter"] = _filter(rng)
    if rng.random() < 0.1:
        request[rng.choice(["filter", "k", "as_of", "extra", "\ud800"])] = _value(rng)
    if rng.random() < 0.05:
        request["as_of"] = rng.choice(["2024-01-01", "yesterday", 1e308, -1, math.nan, "2024-13-45T99:00"])
    return request


def build_memory(path: Path):  # noqa: ANN201
    """A memory of 300 chunks with metadata of every JSON kind (HashingEmbedder)."""
    from hybrid_memory import HashingEmbedder, HybridMemory

    rng = random.Random(0)
    chunks = [
        {
            "chunk_id": f"c{i}",
            "text": f"{rng.choice(['billing', 'auth', 'search'])} HTTP {rng.choice([500, 503, 504])} "
            f"{rng.choice(['postgres pool', 'timeout', 'ERR_CONN_RESET', 'café'])} note {i}",
            "metadata": {
                "environment": rng.choice(["production", "staging"]),
                "severity": rng.randint(1, 5),
                "score": rng.random(),
                "tags": rng.sample(["db", "oncall", "network", "café"], 2),
                "labels": ["db", "oncall"] if i % 7 == 0 else [],
                "service": f"s{i % 9}",
            },
        }
        for i in range(300)
    ]
    memory = HybridMemory(path, embedder=HashingEmbedder(DIM))
    memory.upsert(chunks)
    return memory


def _check_response(response: Any) -> str | None:
    """None if the response serialises and parses back with finite scores, else what is wrong."""
    data = json.loads(response.model_dump_json())
    for result in data["results"]:
        if not isinstance(result["rrf_score"], (int, float)) or not math.isfinite(result["rrf_score"]):
            return f"rrf_score {result['rrf_score']!r}"
    return None


def generate(n: int, seed: int) -> Iterator[Any]:
    """The ``n`` requests of ``seed``, made one at a time (the wide and deep ones weigh megabytes each)."""
    rng = random.Random(seed)
    for _ in range(n):
        yield make_request(rng)


def run_api(memory: Any, requests: Iterable[Any]) -> tuple[Counter, list[dict]]:
    """Every request through ``memory.search``; returns outcome counts and the escaped / hang samples."""
    from hybrid_memory import HybridMemoryError

    outcomes: Counter = Counter()
    samples: list[dict] = []
    for i, request in enumerate(requests):
        t0 = time.perf_counter()
        outcome, detail = "ok", ""
        try:
            problem = _check_response(memory.search(request))
            if problem:
                outcome, detail = "escaped", f"bad output: {problem}"
        except HybridMemoryError:
            outcome = "library error"
        except BaseException as exc:  # noqa: BLE001 - what the fuzz is for
            if isinstance(exc, KeyboardInterrupt):
                raise
            outcome, detail = "escaped", f"{type(exc).__name__}: {str(exc)[:200]}"
        if outcome != "escaped" and isinstance(request, dict) and "metadata_filter" in request:
            try:  # the same filter through count() (and so iter_chunks' validation)
                memory.count(request["metadata_filter"])
            except HybridMemoryError:
                pass
            except Exception as exc:  # noqa: BLE001
                outcome, detail = "escaped", f"{type(exc).__name__} from count(): {str(exc)[:200]}"
        elapsed = time.perf_counter() - t0
        if elapsed > HANG_SECONDS:
            outcome, detail = "hang", f"{elapsed:.1f} s"
        outcomes[outcome] += 1
        if outcome in ("escaped", "hang"):
            outcomes[f"{outcome}: {detail.split(':')[0]}"] += 1
            if len(samples) < 40:
                samples.append({"i": i, "outcome": outcome, "detail": detail, "request": _short(request)})
    return outcomes, samples


def run_cli(
    memory_path: Path, requests: Iterable[Any], rng: random.Random, tmp: Path, start: int = 0
) -> tuple[Counter, list[dict]]:
    """Every request as ``hybrid-memory search --request FILE``, in-process; exit code 2 with a message is a
    library error, an exception out of ``main`` or a traceback on stderr is escaped. ``start``: skip the
    first requests (generated and drawn exactly as in a full run, so request ``i`` is the same; to re-time
    a window of a run)."""
    from hybrid_memory.cli.app import main

    outcomes: Counter = Counter()
    samples: list[dict] = []
    file = tmp / "request.json"
    for i, request in enumerate(requests):
        raw = rng.random() < 0.02
        if raw:
            depth = rng.choice([1_000, 100_000])
        if i < start:
            continue
        if raw:
            file.write_text(
                '{"search_text": "x", "metadata_filter": ' + '{"$and": [' * depth + "{}" + "]}" * depth + "}"
            )
        else:
            try:
                text = json.dumps(request)
            except RecursionError:  # deeper than json.dumps goes: the same nesting as raw text
                text = '{"search_text": "x", "metadata_filter": ' + '{"$not": ' * 5_000 + "{}" + "}" * 5_000 + "}"
            file.write_text(text, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        outcome, detail = "ok", ""
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["search", "--request", str(file), "--memory", str(memory_path), "--hashing-dim", str(DIM)])
            if code == 2 and "Traceback" not in err.getvalue() and err.getvalue().startswith("hybrid-memory: error:"):
                outcome = "library error"
            elif code == 0:
                data = json.loads(out.getvalue())
                bad = [r["rrf_score"] for r in data["results"] if not isinstance(r["rrf_score"], (int, float))]
                if bad:
                    outcome, detail = "escaped", f"bad output: rrf_score {bad[0]!r}"
            else:
                outcome, detail = "escaped", f"exit {code}: {err.getvalue()[-200:]}"
        except SystemExit as exc:  # argparse
            outcome, detail = ("library error", "") if exc.code == 2 else ("escaped", f"SystemExit {exc.code}")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            outcome, detail = "escaped", f"{type(exc).__name__}: {str(exc)[:200]}"
        elapsed = time.perf_counter() - t0
        if elapsed > HANG_SECONDS:
            outcome, detail = "hang", f"{elapsed:.1f} s"
        outcomes[outcome] += 1
        if outcome in ("escaped", "hang"):
            outcomes[f"{outcome}: {detail.split(':')[0]}"] += 1
            if len(samples) < 40:
                samples.append({"i": i, "outcome": outcome, "detail": detail, "request": _short(request)})
    return outcomes, samples


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "<nested too deeply to print>"
    return text if len(text) < 300 else text[:300] + f"... ({len(text)} chars)"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--no-cli", action="store_true", help="only the API run")
    parser.add_argument(
        "--cli-n", type=int, default=None, help="requests for the CLI run (default: --n; the first ones)"
    )
    parser.add_argument(
        "--cli-from",
        type=int,
        default=0,
        help="run only the CLI requests from this index on (same requests as a full run; no API run)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    common.ensure_core_importable()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    cli_n = args.n if args.cli_n is None else min(args.cli_n, args.n)
    summary: dict[str, Any] = {
        "n": args.n,
        "cli_n": 0 if args.no_cli else cli_n,
        "seed": args.seed,
        "hang_seconds": HANG_SECONDS,
    }
    with tempfile.TemporaryDirectory(prefix="hm-fuzz-") as tmp:
        memory_path = Path(tmp) / "memory"
        memory = build_memory(memory_path)
        t0 = time.perf_counter()
        if not args.cli_from:
            api, api_samples = run_api(memory, generate(args.n, args.seed))
            summary["api"] = {
                "outcomes": dict(api),
                "seconds": round(time.perf_counter() - t0, 1),
                "samples": api_samples,
            }
        memory.close()
        if not args.no_cli:
            summary["cli_from"] = args.cli_from
            t0 = time.perf_counter()
            cli, cli_samples = run_cli(
                memory_path, generate(cli_n, args.seed), random.Random(args.seed + 1), Path(tmp), start=args.cli_from
            )
            summary["cli"] = {
                "outcomes": dict(cli),
                "seconds": round(time.perf_counter() - t0, 1),
                "samples": cli_samples,
            }
    rows = []
    for run in ("api", "cli"):
        if run in summary:
            outcomes = summary[run]["outcomes"]
            rows.append(
                [
                    run,
                    args.n if run == "api" else cli_n - args.cli_from,
                    outcomes.get("ok", 0),
                    outcomes.get("library error", 0),
                    outcomes.get("escaped", 0),
                    outcomes.get("hang", 0),
                    summary[run]["seconds"],
                ]
            )
    print(common.format_table(rows, ["run", "requests", "ok", "library error", "escaped", "hang > 5 s", "seconds"]))
    for run in ("api", "cli"):
        for key, count in sorted(summary.get(run, {}).get("outcomes", {}).items()):
            if ": " in key:
                print(f"{run}  {key}: {count}")
    summary["meets_target"] = all(
        summary[r]["outcomes"].get("escaped", 0) == 0 and summary[r]["outcomes"].get("hang", 0) == 0
        for r in ("api", "cli")
        if r in summary
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=repr))
    else:
        print("wrote", common.write_results("fuzz", json.loads(json.dumps(summary, default=repr))))
    return summary


if __name__ == "__main__":
    main()
