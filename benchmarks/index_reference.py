"""cp_memory's ContextIndex next to the reference implementation (PyPI ``contextpilot``), in one run.

    pip install --no-deps contextpilot==0.5.0      # its index needs only numpy and scipy (installed here);
                                                    # plain `pip install contextpilot` pulls transformers,
                                                    # datasets, elasticsearch, fastapi, ...
    python -m benchmarks.index_reference [--contexts 2000] [--online 1000] [--probes 300] [--json FILE]

Same synthetic workload as ``python -m benchmarks.index_bench speed`` (k=15 blocks per context drawn
from a Zipf popularity over 5,000 ids):

* **batch build** of ``--contexts`` contexts: ``ContextIndex().build`` (Algorithms 4 + 5) vs the reference
  ``ContextPilot(use_gpu=False).build_and_schedule`` (its distance matrix in a multiprocessing pool over
  all cores, clustering, scheduling), best and median of ``--repeats``;
* **online insert** after an offline build of ``--online`` contexts: ``ContextIndex.insert`` vs the
  reference's ``reorder(context)`` (its incremental path: search, reorder, insert, schedule), the same
  ``--probes`` contexts in the same order, alternating which implementation goes first per probe.

The reference prints progress to stdout on every call; it is sent to /dev/null while timed (formatting
still costs it time: that is part of calling it). Timings on a shared machine: ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.locomo.metrics import percentile
from cp_memory.core.index import ContextIndex

from .index_bench import _git_commit, _machine, zipf_contexts

log = logging.getLogger("index_reference")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


def _reference() -> Any:
    try:
        with _quiet():
            from contextpilot.server.live_index import ContextPilot
    except ImportError as exc:
        raise SystemExit(f"the reference is not installed: pip install --no-deps contextpilot==0.5.0 ({exc})") from exc
    return ContextPilot


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(contexts: int, online: int, probes: int, repeats: int) -> dict[str, Any]:
    reference_cls = _reference()
    import contextpilot

    build_ctx = zipf_contexts(contexts, seed=2)
    ours_build, ref_build = [], []
    for i in range(repeats):  # alternate which goes first
        runs = [
            ("ours", lambda: ContextIndex().build(build_ctx)),
            ("reference", lambda: reference_cls(use_gpu=False).build_and_schedule(build_ctx)),
        ]
        for name, fn in runs if i % 2 == 0 else runs[::-1]:
            with _quiet():
                dt = _timed(fn)
            (ours_build if name == "ours" else ref_build).append(dt)
            log.info("build %d contexts, %s: %.3f s", contexts, name, dt)

    stream = zipf_contexts(online + probes, seed=1)
    base, probe = stream[:online], stream[online:]
    ours = ContextIndex()
    ours.build(base)
    with _quiet():
        ref = reference_cls(use_gpu=False)
        ref.build_and_schedule(base)
    ours_lat, ref_lat = [], []
    for i, ctx in enumerate(probe):
        pair = [(ours_lat, lambda c=ctx: ours.insert(c)), (ref_lat, lambda c=ctx: ref.reorder(list(c)))]
        for out, fn in pair if i % 2 == 0 else pair[::-1]:
            with _quiet():
                out.append(_timed(fn))

    def summary(xs: list[float]) -> dict[str, float]:
        return {
            "median_ms": statistics.median(xs) * 1e3,
            "p95_ms": percentile(xs, 95) * 1e3,
            "max_ms": max(xs) * 1e3,
            "n": len(xs),
        }

    return {
        "reference": f"contextpilot {getattr(contextpilot, '__version__', '?')} (PyPI), ContextPilot(use_gpu=False)",
        "build": {
            "contexts": contexts,
            "repeats": repeats,
            "ours_best_s": min(ours_build),
            "ours_median_s": statistics.median(ours_build),
            "reference_best_s": min(ref_build),
            "reference_median_s": statistics.median(ref_build),
        },
        "online": {"indexed": online, "probes": probes, "ours": summary(ours_lat), "reference": summary(ref_lat)},
    }


def markdown(r: dict[str, Any]) -> str:
    b, o = r["build"], r["online"]
    return "\n".join(
        [
            f"Reference: {r['reference']}; the same synthetic contexts in one run (shared machine).",
            "",
            "| | cp_memory | reference | ratio |",
            "|---|---:|---:|---:|",
            (
                f"| batch build, {b['contexts']:,} contexts (best of {b['repeats']}) | {b['ours_best_s']:.3f} s | "
                f"{b['reference_best_s']:.2f} s | {b['reference_best_s'] / b['ours_best_s']:.0f}x |"
            ),
            (
                f"| online insert after {o['indexed']:,} indexed, median of {o['probes']} | "
                f"{o['ours']['median_ms']:.3f} ms | {o['reference']['median_ms']:.2f} ms | "
                f"{o['reference']['median_ms'] / o['ours']['median_ms']:.0f}x |"
            ),
            (
                f"| online insert, p95 | {o['ours']['p95_ms']:.3f} ms | {o['reference']['p95_ms']:.2f} ms | "
                f"{o['reference']['p95_ms'] / o['ours']['p95_ms']:.0f}x |"
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, default=2000)
    ap.add_argument("--online", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="write the numbers here (e.g. docs/results/index_reference.json)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = bench(args.contexts, args.online, args.probes, args.repeats)
    table = markdown(result)
    sys.stdout.write(table + "\n")
    if args.json:
        payload = {
            "command": "python -m benchmarks.index_reference " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "git_commit": _git_commit(),
            "machine": _machine(),
            **result,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
