"""Sphinx configuration of the hybrid-memory docs.

Why Sphinx (with MyST for Markdown pages and the furo theme) rather than MkDocs: the docstrings already use
Sphinx's cross-reference roles (``:class:``, ``:func:``, ``:mod:``, ``:meth:``, ``:attr:``, ``:data:``, some 700
of them), which autodoc renders as links as written; mkdocstrings would need every docstring rewritten.

Build (warnings are errors, as in ``.ci/run``)::

    pip install -e '.[docs]'
    sphinx-build -W --keep-going -b html docs docs/_build/html

The build never reaches the network: there is no intersphinx mapping, so references to Python, numpy or pydantic
objects render as plain code. ``nitpicky`` stays off for the same reason (a reference to ``numpy.ndarray`` has no
target offline).
"""

from __future__ import annotations

import os
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a source checkout builds without an install too: the core and the two adapters from the checkout
for path in (ROOT / "core", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hybrid_memory  # noqa: E402

# The adapters are imported here, before autodoc runs: autodoc imports a module with its own import hooks, under
# which pydantic fails to build LangChain's and LlamaIndex's models (PydanticSchemaGenerationError on
# ``__pydantic_extra__``); imported normally first, autodoc reads them from ``sys.modules``.
import langchain_hybrid_memory  # noqa: E402,F401
import llamaindex_hybrid_memory  # noqa: E402,F401

# Benchmark tables are rendered from benchmarks/results/*.json at every build (docs/_scripts/results_tables.py), and
# the benchmarks page shows the figures of benchmarks/figures.py that are present: no number is typed by hand here.
sys.path.insert(0, str(ROOT / "docs" / "_scripts"))
import results_tables  # noqa: E402

GENERATED = ROOT / "docs" / "_generated"
results_tables.write_all(GENERATED)
FIGURES = {
    "ndcg_per_set.png": "nDCG@10 per set: BM25, dense, RRF, the default and the peers.",
    "latency_vs_size.png": "Search latency against corpus size, for each engine and the hybrid.",
    "query_latency_peers.png": "Query latency with the query embedding, this library against the peers.",
}
_figures = [
    f"```{{figure}} /_static/figures/{name}\n:alt: {caption}\n:width: 100%\n\n{caption}\n```\n"
    for name, caption in FIGURES.items()
    if (ROOT / "docs" / "_static" / "figures" / name).exists()
]
_figures_text = "\n".join(_figures) or (
    "*No figure rendered yet: run `python benchmarks/figures.py` (it reads `benchmarks/results/*.json`).*\n"
)
if not (GENERATED / "figures.md").exists() or (GENERATED / "figures.md").read_text(encoding="utf-8") != _figures_text:
    (GENERATED / "figures.md").write_text(_figures_text, encoding="utf-8")

project = "hybrid-memory"
author = "the hybrid-memory authors"
copyright = f"{date.today().year}, {author}"
release = hybrid_memory.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_scripts", "_generated", "conftest.py", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: the public surface is each package's __all__; members in source order, type hints in the description
autodoc_default_options = {
    "members": True,
    "undoc-members": False,
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_class_signature = "separated"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# an "Attributes:" section becomes :ivar: fields: the dataclass fields are documented once, by autodoc's members
napoleon_use_ivar = True

nitpicky = False

html_theme = "furo"
html_title = f"hybrid-memory {release}"
html_static_path = ["_static"]
