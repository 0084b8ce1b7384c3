"""Install size of each integration extra beyond what cp-memory's own extras already install.

    .venv/bin/python -m benchmarks.frameworks.install_size --json docs/results/frameworks_install.json

For the base (``.[mem0,engine,bench,agents]``) and for base + each extra, pip resolves the full set of
distributions from scratch (``--dry-run --ignore-installed``, pinned to the versions this venv has, so
the two resolutions agree); the extra's cost is the distributions only the second one has, installed with
``--no-deps --target`` into a scratch folder and measured on disk (no ``.pyc``). Needs the package index.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import JsonOptions, parse_config

EXTRAS = ("langgraph", "llamaindex", "openai-agents")
BASE = "mem0,engine,bench,agents"
_SKIP = ("cp-memory", "cp_memory", "openai==", "openai-agents==")


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=True)


def _resolve(extras: str, constraints: Path, report: Path) -> dict[str, str]:
    _pip(
        "install",
        "--dry-run",
        "-q",
        "--ignore-installed",
        "--report",
        str(report),
        "-c",
        str(constraints),
        f".[{extras}]",
    )
    data = json.loads(report.read_text())
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in data["install"]}


def _size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cp_extras_") as tmp:
        root = Path(tmp)
        frozen = [
            line for line in _pip("freeze").stdout.splitlines() if "==" in line and not line.lower().startswith(_SKIP)
        ]
        constraints = root / "constraints.txt"
        constraints.write_text("\n".join(frozen) + "\n")
        base = _resolve(BASE, constraints, root / "base.json")
        out: dict[str, Any] = {"base_extras": BASE, "base_distributions": len(base), "extras": {}}
        for extra in EXTRAS:
            full = _resolve(f"{BASE},{extra}", constraints, root / f"{extra}.json")
            beyond = {k: v for k, v in full.items() if k not in base and k != "cp-memory"}
            changed = {k: [base[k], v] for k, v in full.items() if k in base and base[k] != v}
            target = root / f"t_{extra}"
            if beyond:
                _pip(
                    "install",
                    "-q",
                    "--no-deps",
                    "--no-compile",
                    "--target",
                    str(target),
                    *[f"{k}=={v}" for k, v in beyond.items()],
                )
            out["extras"][extra] = {
                "distributions": sorted(f"{k}=={v}" for k, v in beyond.items()),
                "versions_changed": changed,
                "megabytes": round(_size_mb(target), 1) if beyond else 0.0,
            }
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.frameworks.install_size", description=__doc__)
    harness.add_json(p)
    args = parse_config(p, JsonOptions, argv)
    result = harness.envelope("benchmarks.frameworks.install_size", argv, **measure())
    if args.json:
        harness.write_json(args.json, result)
    sys.stdout.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
