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
import importlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.common.config import JsonOptions, VerboseOptions, parse_config
from benchmarks.common.harness import add_json, add_verbose, envelope, setup_logging, write_json
from cp_memory.core.index import ContextIndex

from .index_workload import p95_ms, zipf_contexts

log = logging.getLogger("index_reference")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


def _reference() -> tuple[Any, str]:
    """The reference's ``ContextPilot`` class and its version (untyped: imported by name)."""
    try:
        with _quiet():
            live_index = importlib.import_module("contextpilot.server.live_index")
    except ImportError as exc:
        raise SystemExit(f"the reference is not installed: pip install --no-deps contextpilot==0.5.0 ({exc})") from exc
    return live_index.ContextPilot, getattr(importlib.import_module("contextpilot"), "__version__", "?")


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(contexts: int, online: int, probes: int, repeats: int) -> dict[str, Any]:
    reference_cls, version = _reference()
    build_ctx = zipf_contexts(contexts, seed=2)
    ours_build: list[float] = []
    ref_build: list[float] = []
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
    ours_lat: list[float] = []
    ref_lat: list[float] = []
    for i, ctx in enumerate(probe):
        pair = [(ours_lat, lambda c=ctx: ours.insert(c)), (ref_lat, lambda c=ctx: ref.reorder(list(c)))]
        for out, fn in pair if i % 2 == 0 else pair[::-1]:
            with _quiet():
                out.append(_timed(fn))

    def summary(xs: list[float]) -> dict[str, float]:
        return {
            "median_ms": statistics.median(xs) * 1e3,
            "p95_ms": p95_ms(xs),
            "max_ms": max(xs) * 1e3,
            "n": len(xs),
        }

    return {
        "reference": f"contextpilot {version} (PyPI), ContextPilot(use_gpu=False)",
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


@dataclass(frozen=True, kw_only=True)
class ReferenceConfig(JsonOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    contexts: int
    online: int
    probes: int
    repeats: int


def parse_args(argv: list[str] | None) -> ReferenceConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.index_reference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--contexts", type=int, default=2000, help="contexts of the batch build")
    ap.add_argument("--online", type=int, default=1000, help="contexts built offline before the online inserts")
    ap.add_argument("--probes", type=int, default=300, help="online inserts timed")
    ap.add_argument("--repeats", type=int, default=3, help="batch builds of each implementation")
    add_json(ap)
    add_verbose(ap)
    return parse_config(ap, ReferenceConfig, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.verbose)
    result = bench(args.contexts, args.online, args.probes, args.repeats)
    sys.stdout.write(markdown(result) + "\n")
    if args.json:
        write_json(args.json, envelope("benchmarks.index_reference", argv, **result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
