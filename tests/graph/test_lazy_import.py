import subprocess
import sys


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_core_import_does_not_import_the_graph_layer():
    done = _run("import sys, hybrid_memory; print(any(m.startswith(('hybrid_memory.graph', 'networkx', 'cdlib'))"
                " for m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_missing_extra_raises_an_import_error_naming_the_install_line():
    done = _run(
        "import sys\n"
        "sys.modules['cdlib'] = None\n"  # makes find_spec('cdlib') raise / import fail like an absent package
        "try:\n"
        "    import hybrid_memory.graph\n"
        "except ImportError as exc:\n"
        "    from hybrid_memory import MissingDependencyError\n"
        "    print(type(exc).__name__, isinstance(exc, MissingDependencyError), exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingDependencyError True ")
    assert "pip install 'hybrid-memory[graph]'" in done.stdout
