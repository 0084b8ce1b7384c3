"""``python -m benchmarks.agents record ...`` (see :mod:`benchmarks.agents.record`)."""

from __future__ import annotations

import sys

from benchmarks.agents import record


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "record":
        sys.exit("usage: python -m benchmarks.agents record [--harness claude,codex] [--task docs,code] ...")
    record.main(args[1:])


if __name__ == "__main__":
    main()
