"""``python -m cp_memory.engine.build``: build llama.cpp's ``llama-server`` (CPU) where the package finds it.

The build script ships inside the package (``build_llama_server.sh`` next to this module; a checkout's
``scripts/build_llama_server.sh`` runs the same file), so an installed wheel can build the engine too. It
downloads the llama-cpp-python sdist with this interpreter's pip (PyPI), builds only the ``llama-server``
target (about 5-10 minutes on 2 cores; needs cmake, a C++ compiler and tar) into
``${CP_MEMORY_CACHE:-~/.cache/cp_memory}/llama.cpp-<version>/bin/`` and prints the binary's path. Idempotent:
an existing working binary is reused at once. The script's environment variables (``JOBS``,
``GGML_NATIVE``, ``LLAMA_CPP_SDIST``, ...) apply; ``PYTHON`` defaults to this interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .llamacpp import DEFAULT_LLAMA_CPP_PYTHON_VERSION

__all__ = ["build_llama_server", "main", "script_path"]


def script_path() -> Path:
    """The packaged build script."""
    return Path(__file__).with_name("build_llama_server.sh")


def build_llama_server(env: dict[str, str] | None = None) -> Path:
    """Run the build script (or reuse a built binary) and return the binary's path.

    Raises ``FileNotFoundError`` without bash or the script, ``subprocess.CalledProcessError`` when the
    build fails (its log went to stderr)."""
    bash = shutil.which("bash")
    script = script_path()
    if bash is None:
        raise FileNotFoundError("building llama-server needs bash (and cmake, a C++ compiler, tar)")
    if not script.is_file():
        raise FileNotFoundError(f"the build script is missing from this install: {script}")
    run_env = dict(os.environ if env is None else env)
    run_env.setdefault("PYTHON", sys.executable)
    run_env.setdefault("LLAMA_CPP_PYTHON_VERSION", DEFAULT_LLAMA_CPP_PYTHON_VERSION)
    out = subprocess.run([bash, str(script)], env=run_env, stdout=subprocess.PIPE, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("the llama-server build printed no binary path")
    return Path(lines[-1])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        sys.stderr.write(__doc__ or "")
        return 0 if args[0] in ("-h", "--help") else 2
    try:
        path = build_llama_server()
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through `python -m`
    raise SystemExit(main())
