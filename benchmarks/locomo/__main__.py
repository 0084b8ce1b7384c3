"""``python -m benchmarks.locomo``."""

from .cli import main

raise SystemExit(main())
