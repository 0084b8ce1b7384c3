"""``python -m cp_memory.gateway --upstream URL [--port N]``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
