"""bm25s is imported without numba (hybrid_memory._bm25s): numba's import is 0.3-0.6 s of every cold start here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed (the eval extra brings it)"
)
def test_importing_the_library_leaves_numba_unloaded_and_importable():
    code = (
        "import sys\n"
        "import hybrid_memory\n"
        "from hybrid_memory.tokenizer import STOPWORDS_EN\n"
        "print('bm25s' in sys.modules, 'numba' in sys.modules, 'the' in STOPWORDS_EN)\n"
        "import numba\n"  # the caller's own import of numba still works
        "print(type(numba).__name__)\n"
    )
    env = {"PYTHONPATH": str(ROOT / "core")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["True False True", "module"]
