"""APIDocs: a deterministic scientific-computing reference set built from NumPy's and SciPy's own source.

A second technical set beside ``techdocs.py``, in another domain and of another shape: the numpydoc reference
of a numerical library (long entries: a summary line, then Parameters, Returns, See Also, Notes, References and
Examples sections, then the code), where all-MiniLM-L6-v2 is weak. It reads only what every machine running the
project has: NumPy and SciPy are dependencies of faiss-cpu and bm25s. Nothing is downloaded, imported from the
parsed files, or written into the project; the set is rebuilt in memory in a few seconds (both are BSD-licensed).

Corpus (one chunk per documented definition)
    Every ``.py`` file (tests excluded) directly inside the packages of :data:`PACKAGES` is parsed with :mod:`ast`
    (the shared reader of ``techdocs.py``). Every top-level function, class and method whose docstring has at least
    3 words becomes one chunk: ``chunk_id`` ``<package>.<file>.<qualified name>``, ``text`` the definition's source
    as written (``def`` line, docstring, body; for a class its header, docstring and method names), cut to
    :data:`MAX_CHARS` characters (numpydoc entries are long: the model reads only the first 256 word pieces,
    BM25 the whole entry, as with any long manual section); ``metadata``: ``package`` (``scipy.signal``),
    ``module``, ``kind``, ``lines``.

Queries (four classes, ``metadata["class"]``), drawn with ``random.Random(SEED)``
    * ``identifier`` -- a definition's name that is an identifier in the tokenizer's sense (``_``, a digit or a
      case change: ``nan_to_num``, ``solve_banded``, ``fft2``), defined by exactly one chunk *and named by at least
      one other* (See Also lists, cross references, callers), at most :data:`MAX_ID_DF` chunks in all: the
      defining chunk must win among chunks that hold the name. Half the queries are the name alone, half the
      name plus 2 words of its summary line. Relevant: the defining chunk.
    * ``paraphrase`` -- the entry's summary line (the heading of its reference page; a sentence of at least 5
      words), *held out* of the chunk, as the query. Relevant: that chunk.
    * ``error`` -- an exception message the code raises, as a log shows it (``ValueError: <message>``), from a
      ``raise X("...")`` of at least 3 words found in exactly one chunk. Relevant: that chunk.
    * ``filtered`` -- a query of the three kinds above (round robin) with the filter ``{"package": <package>}``
      (``numpy.linalg`` and ``scipy.linalg`` define many of the same names). Relevant: the same chunk.

    :data:`QUERIES_PER_CLASS` (150) per class, 600 in all; a chunk is the target of at most one query. The set is
    a pure function of the installed NumPy and SciPy versions and :data:`SEED` (:func:`fingerprint`; NumPy 2.4.6
    and SciPy 1.17.1 on the benchmark machine).

Usage: ``python benchmarks/apidocs.py`` prints the counts and a few queries of each class.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import techdocs  # noqa: E402  (the shared ast reader and the set's container)
from techdocs import _IDENTIFIER, _WORD, TechDocs, _Def, _definitions  # noqa: E402

__all__ = ["MAX_CHARS", "PACKAGES", "QUERIES_PER_CLASS", "SEED", "build", "fingerprint"]

SEED = 20261206
QUERIES_PER_CLASS = 150
MAX_CHARS = 6000
MAX_ID_DF = 12
PACKAGES = (
    "numpy._core",
    "numpy.lib",
    "numpy.linalg",
    "numpy.fft",
    "numpy.polynomial",
    "scipy.linalg",
    "scipy.signal",
    "scipy.optimize",
    "scipy.interpolate",
    "scipy.integrate",
    "scipy.spatial",
    "scipy.ndimage",
    "scipy.sparse.linalg",
    "scipy.special",
    "scipy.cluster",
    "scipy.fft",
)


def _files(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)  # finds the folder; runs only the parents' __init__
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {package} is not installed")
    folder = Path(spec.origin).parent
    return [f for f in sorted(folder.glob("*.py")) if not f.name.startswith(("test", "conftest"))]


def build(seed: int = SEED, per_class: int = QUERIES_PER_CLASS) -> TechDocs:
    """Build the set (deterministic for given NumPy and SciPy versions and seed).

    Raises:
        FileNotFoundError: a package of :data:`PACKAGES` is not installed.
    """
    defs: list[_Def] = []
    for package in PACKAGES:
        for path in _files(package):
            module = f"{package}.{path.stem}" if path.stem != "__init__" else package
            try:
                found = _definitions(module, path.read_text(encoding="utf-8"), MAX_CHARS)
            except SyntaxError:  # a file of a newer syntax than this interpreter: not part of the set
                continue
            defs.extend(found)
    seen: set[str] = set()
    defs = [d for d in defs if not (d.chunk_id in seen or seen.add(d.chunk_id))]  # redefinitions: first wins
    package_of = {d.chunk_id: _package(d.module) for d in defs}

    token_df, name_count, message_count = techdocs.corpus_counts(defs)

    rng = random.Random(seed)
    ident_pool = [
        d
        for d in defs
        if _IDENTIFIER.search(d.name.strip("_"))
        and not d.name.startswith("_")
        and name_count[d.name] == 1
        and 2 <= token_df.get(d.name.casefold(), 0) <= MAX_ID_DF
    ]
    para_pool = [d for d in defs if len(_WORD.findall(d.summary)) >= 5 and d.summary.endswith(".")]
    error_pool = [d for d in defs if any(message_count[m] == 1 for _, m in d.messages)]
    need = per_class + (per_class + 2) // 3  # the filtered class borrows from each
    targets = techdocs.draw_targets(
        {"error": error_pool, "identifier": ident_pool, "paraphrase": para_pool}, need, rng, message_count
    )

    out = TechDocs()
    held_out = {d.chunk_id: d.summary for d, _ in targets["paraphrase"]}
    plan: list[tuple[str, _Def, str]] = []
    for kind in ("identifier", "paraphrase", "error"):
        plan.extend((kind, d, text) for d, text in targets[kind][:per_class])
    borrow = [targets[k][per_class:] for k in ("identifier", "paraphrase", "error")]
    for i in range(per_class):
        source = borrow[i % 3]
        if source:
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
                "source": d.module.replace(".", "/") + ".py",
                "metadata": {"module": d.module, "package": package_of[d.chunk_id], "kind": d.kind, "lines": d.lines},
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
            out.query_filter[qid] = {"package": package_of[d.chunk_id]}
    return out


def _package(module: str) -> str:
    """The entry of :data:`PACKAGES` that holds ``module`` (the longest prefix)."""
    return max((p for p in PACKAGES if module == p or module.startswith(p + ".")), key=len)


fingerprint = techdocs.fingerprint


if __name__ == "__main__":  # pragma: no cover
    data = build()
    classes: dict[str, int] = {}
    for c in data.query_class.values():
        classes[c] = classes.get(c, 0) + 1
    lengths = sorted(len(c["text"]) for c in data.chunks)
    print(
        f"{len(data.chunks)} chunks (median {lengths[len(lengths) // 2]} chars); {len(data.queries)} queries "
        f"{classes}; fingerprint {fingerprint(data)}"
    )
    for cls in ("identifier", "paraphrase", "error", "filtered"):
        for qid in [q for q, c in data.query_class.items() if c == cls][:4]:
            print(f"  {qid}: {data.queries[qid]!r} -> {list(data.qrels[qid])} {data.query_filter.get(qid, '')}")
