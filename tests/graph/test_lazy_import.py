import subprocess
import sys


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_core_import_does_not_import_the_graph_layer():
    done = _run(
        "import sys, hybrid_memory; print(any(m.startswith(('hybrid_memory.graph', 'networkx', 'cdlib'))"
        " for m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_missing_extra_raises_an_import_error_naming_the_install_line():
    done = _run(
        "import sys\n"
        "sys.modules['graspologic_native'] = None\n"  # find_spec raises / import fails like an absent package
        "try:\n"
        "    import hybrid_memory.graph\n"
        "except ImportError as exc:\n"
        "    from hybrid_memory import MissingDependencyError\n"
        "    print(type(exc).__name__, isinstance(exc, MissingDependencyError), exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingDependencyError True ")
    assert "pip install 'hybrid-memory[graph]'" in done.stdout


def test_the_graph_works_without_the_gpl_packages():
    """cdlib, leidenalg and igraph absent: the default backend clusters; asking for cdlib names its extra."""
    done = _run(
        "import sys\n"
        "for name in ('cdlib', 'leidenalg', 'igraph'):\n"
        "    sys.modules[name] = None\n"
        "import networkx as nx\n"
        "from hybrid_memory.graph import hierarchical_leiden\n"
        "g = nx.MultiDiGraph(); g.add_edge('a', 'b'); g.add_edge('b', 'c'); g.add_edge('x', 'y')\n"
        "print([c.entities for c in hierarchical_leiden(g)])\n"
        "try:\n"
        "    hierarchical_leiden(g, backend='cdlib')\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[['a', 'b', 'c'], ['x', 'y']]"
    assert lines[1].startswith("MissingDependencyError the cdlib community backend needs cdlib, leidenalg and igraph")
    assert "hybrid-memory[graph-cdlib]" in lines[1]
