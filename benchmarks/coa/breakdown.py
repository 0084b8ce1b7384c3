"""Where each arm's prefilled tokens go: ``python -m benchmarks.coa.breakdown results.json [workload]``.

Every worker call of a run is classified by its route (agent arms: affinity / home / least_loaded /
balance; router arms: ``router``) and whether the engine reused the segment (``hit``: cached >= 80% of
the segment tokens). Per segment, the first miss is unavoidable (a first sight); every further miss is
the segment *prefilled again* — the cost a router can avoid (counted without relying on call order).
Also: how many workers each segment was prefilled on, and the manager calls' prefill.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from typing import Any

__all__ = ["breakdown", "main"]


def breakdown(data: dict[str, Any], workload: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for run in data["runs"]:
        if run["workload"] != workload:
            continue
        arm, rep = run["arm"], run["rep"]
        calls = [
            c
            for q in data["questions"]
            if q["arm"] == arm and q["rep"] == rep and q["workload"] == workload
            for c in q["calls"]
        ]
        kinds: Counter[str] = Counter()
        tokens: Counter[str] = Counter()
        workers: dict[tuple[str, ...], set[int]] = defaultdict(set)
        misses: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for c in calls:
            if c["role"] != "worker":
                continue
            seg = tuple(str(b) for b in c["block_ids"])
            route = c["route"] if c["route"] != "round_robin" or run["reasons"] else "router"
            hit = c["cached_tokens"] >= 0.8 * c["segment_tokens"]
            kind = f"{route}/{'hit' if hit else 'miss'}"
            kinds[kind] += 1
            tokens[kind] += c["prompt_tokens"] - c["cached_tokens"]
            workers[seg].add(c["worker"])
            if not hit:
                misses[seg].append(c["segment_tokens"] - c["cached_tokens"])
        again = sum(sum(v) - min(v) for v in misses.values())
        managers = [c for c in calls if c["role"] == "manager"]
        out[f"{arm} rep {rep}"] = {
            "prefilled_tokens": run["prefilled_tokens"],
            "calls": {k: (kinds[k], tokens[k]) for k in sorted(kinds)},
            "prefilled_again_tokens": again,
            "prefilled_again_calls": sum(len(v) - 1 for v in misses.values()),
            "manager_prefilled": sum(c["prompt_tokens"] - c["cached_tokens"] for c in managers),
            "segments": len(workers),
            "workers_per_segment": sum(len(v) for v in workers.values()) / max(1, len(workers)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write(__doc__ or "")
        return 2
    with open(args[0], encoding="utf-8") as fh:
        data = json.load(fh)
    workload = args[1] if len(args) > 1 else "single"
    for name, b in breakdown(data, workload).items():
        sys.stdout.write(
            f"{name}: prefilled {b['prefilled_tokens']:,}, segments prefilled again "
            f"{b['prefilled_again_calls']} times ({b['prefilled_again_tokens']:,} segment tokens), "
            f"manager {b['manager_prefilled']:,}, "
            f"{b['workers_per_segment']:.2f} workers per segment\n"
        )
        for kind, (n, t) in b["calls"].items():
            sys.stdout.write(f"    {kind:20s} {n:4d} calls {t:8,d} tokens prefilled\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
