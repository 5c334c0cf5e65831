"""The README works as written: its Python blocks, run top to bottom in one fresh process in an empty folder,
print what their comments say; its results table is the latest benchmark JSON; it stays a few screens long."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SKIP = "<!-- skip: next -->"


def _blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in order, without those a ``<!-- skip: next -->`` line precedes."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().splitlines()
        if match.group(1) == language and not (before and before[-1].strip() == SKIP):
            found.append(match.group(2))
    return found


def _expected_prints(code: str) -> list[str]:
    """The comment after each ``print(...)`` line: what that line must print."""
    return [
        line.split("  # ", 1)[1].strip()
        for line in code.splitlines()
        if line.lstrip().startswith("print(") and "  # " in line
    ]


def test_readme_is_a_few_screens():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_two_set_up_commands_come_first():
    text = README.read_text(encoding="utf-8")
    first_two = [m.group(0) for m in FENCE.finditer(text)][:2]
    assert first_two[0].startswith("```bash\n") and "hybrid-memory demo" in first_two[0]
    # the second installs what the tests need (the test extra) and runs them, as .ci/run does
    assert (
        first_two[1] == "```bash\npip install torch==2.13.0 && pip install -e '.[all,test]' && python -m pytest -q\n```"
    )


@pytest.mark.slow
def test_python_blocks_run_top_to_bottom_in_a_fresh_process(tmp_path):
    for extra in ("langchain_core", "llama_index.core"):
        if importlib.util.find_spec(extra.split(".")[0]) is None:
            pytest.skip(f"the README's snippets need {extra} (pip install -e '.[all,test]')")
    code = "\n".join(_blocks(README.read_text(encoding="utf-8"), "python"))
    expected = _expected_prints(code)
    assert expected[0] == "mem_req_99214 ['inc-0412', 'inc-0302']"  # the reference request's answer
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == expected
    assert (tmp_path / "memory" / "store.sqlite3").is_file()  # the quickstart's folder, in the empty folder


def test_results_table_is_the_latest_peers_run():
    spec = importlib.util.spec_from_file_location("results_tables", ROOT / "docs" / "_scripts" / "results_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    rows = tables.readme_rows()
    assert len(rows) == 6
    lines = README.read_text(encoding="utf-8").splitlines()
    for row in rows:  # regenerate with: python docs/_scripts/results_tables.py readme
        assert row in lines, row
    assert tables.readme_note() + "." in lines
