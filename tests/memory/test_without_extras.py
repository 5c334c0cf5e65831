"""The core works with no agent framework and no graph extra installed (simulated by blocking imports)."""

import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent("""
    import sys, importlib.abc
    BLOCKED = ("langchain", "langchain_core", "langchain_community", "llama_index", "networkx", "cdlib",
               "leidenalg", "igraph", "tiktoken", "graspologic_native", "json_repair")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {name!r} (blocked by test)")
            return None
    sys.meta_path.insert(0, Block())
""")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], capture_output=True, text=True)


def test_core_imports_and_searches_without_frameworks():
    out = run("""
        import sys
        from hybrid_memory import HybridMemory, HashingEmbedder
        with HybridMemory(embedder=HashingEmbedder(16)) as mem:
            mem.add([{"chunk_id": "a", "text": "HTTP 504 from billing-service"}])
            print(mem.search("HTTP 504").results[0].chunk_id)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("langchain_core", "llama_index", "networkx")))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["a", "[]"]


def test_graph_without_its_extra_names_the_install_line():
    out = run("""
        from hybrid_memory import MissingDependencyError
        try:
            import hybrid_memory.graph
        except MissingDependencyError as exc:
            print(exc)
    """)
    assert out.returncode == 0, out.stderr
    assert "pip install 'hybrid-memory[graph]'" in out.stdout


def test_cli_works_without_the_graph_extra():
    out = run("""
        from hybrid_memory.cli.app import build_parser
        print("parser-ok")
        args = build_parser().parse_args(["graph"])
        print(args.func(args))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "parser-ok"
    assert out.stdout.splitlines()[1] == "2"
    assert "hybrid-memory[graph]" in out.stderr
