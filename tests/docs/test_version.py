"""``hybrid_memory.__version__`` is the version pyproject.toml declares (the docs' title and the changelog read it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import hybrid_memory

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_declared_one():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert hybrid_memory.__version__ == declared
