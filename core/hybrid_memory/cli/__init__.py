"""The ``hybrid-memory`` command: argument parsing and printing only, one way down into the library.

The entry point is :func:`hybrid_memory.cli.app.main`; ``python -m hybrid_memory.cli`` runs it too.
"""

from .app import main

__all__ = ["main"]
