"""``python -m benchmarks.agents record ...`` (:mod:`benchmarks.agents.record`) and ``python -m
benchmarks.agents replay ...`` (:mod:`benchmarks.agents.bench`)."""

from __future__ import annotations

import sys

from benchmarks.agents import bench, record


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("record", "replay"):
        sys.exit("usage: python -m benchmarks.agents record|replay [--help]")
    if args[0] == "record":
        record.main(args[1:])
    else:
        bench.main(args[1:])


if __name__ == "__main__":
    main()
