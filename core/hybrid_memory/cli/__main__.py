"""``python -m hybrid_memory.cli``: the ``hybrid-memory`` command."""

import sys

from .app import main

sys.exit(main())
