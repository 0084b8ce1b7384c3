"""Random-weight GGUF models with a real architecture's shape, for prefill-time measurements.

    python3 scripts/gpu/random_gguf.py tokenizer SRC.gguf OUT.json      # the tokenizer as JSON (~2 MB, carried)
    python3 scripts/gpu/random_gguf.py model TOKENIZER.json OUT.gguf --shape qwen3-4b

Prefill cost depends on the architecture (layers, widths, heads, prompt length) and the weight type,
not on the weight values, so a random-weight model of Qwen3-4B's shape prefills like Qwen3-4B; its
answers are noise. ``qwen3-4b``: llama.cpp's ``qwen3`` architecture with Qwen3-4B's dimensions (36 layers,
hidden 2560, 32 query / 8 KV heads of 128, FFN 9728, per-head q/k RMSNorm, tied embeddings), f16
weights; the vocabulary is the tokenizer file's (SmolLM2's 49,152 tokens, not Qwen's 151,936: it only
changes the embedding table and the last position's logits). ``tiny``: the same architecture at 4
layers x 256 for CPU rehearsals.

Weights are written tensor by tensor (streamed: memory stays at one tensor), filled by tiling one block
of random values, so 7.5 GB are written at disk speed. The writer is the package's own
(``cp_memory/engine/random_model.py``, which also writes the llama test model), loaded from its file so the
``cp_memory`` package and its dependencies are not needed: only ``numpy`` and the ``gguf`` package (on a
bare machine: ``PYTHONPATH=gguf-<v>-py3-none-any.whl``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

logger = logging.getLogger("random_gguf")


def _random_model() -> ModuleType:
    """cp_memory/engine/random_model.py loaded from its file (standard library only at import): the
    package's ``__init__`` and its HTTP stack are never imported."""
    path = Path(__file__).resolve().parents[2] / "cp_memory" / "engine" / "random_model.py"
    spec = importlib.util.spec_from_file_location("cp_memory_random_model", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the GGUF writer from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


RM = _random_model()
_QWEN3 = {"arch": "qwen3", "context_length": 40960, "rope_base": 1_000_000.0, "rms_eps": 1e-6}
SHAPES = {
    "qwen3-4b": RM.GGUFShape(n_layer=36, n_embd=2560, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728, **_QWEN3),
    "tiny": RM.GGUFShape(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=768, **_QWEN3),
}


def write_tokenizer(src: str, out: str) -> None:
    """``src``'s ``tokenizer.*`` keys (vocabulary, merges, special tokens, chat template) as JSON: reading
    them back from JSON takes a fraction of a second, from a GGUF (gguf's reader) tens of seconds."""
    keys = {k: {"type": vtype, "sub": sub, "value": value} for k, (value, vtype, sub) in RM.tokenizer_keys(src).items()}
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"source": src, "keys": keys}, fh, ensure_ascii=False, separators=(",", ":"))
    logger.info("tokenizer of %s (%d tokens) -> %s", src, len(keys["tokenizer.ggml.tokens"]["value"]), out)


def read_tokenizer(path: str) -> dict[str, tuple[Any, int, int | None]]:
    """The JSON of :func:`write_tokenizer` as the writer's tokenizer keys."""
    with open(path, encoding="utf-8") as fh:
        keys = json.load(fh)["keys"]
    return {k: (item["value"], item["type"], item["sub"]) for k, item in keys.items()}


def write_model(tokenizer: str, out: str, shape: Any, seed: int = 0, name: str | None = None) -> dict[str, Any]:
    """The random-weight ``qwen3`` GGUF of ``shape`` (a ``GGUFShape``, one of :data:`SHAPES`); returns what
    was written (parameters, bytes, seconds)."""
    keys = read_tokenizer(tokenizer)
    t0 = time.perf_counter()
    name = name or f"cp_memory random qwen3 {shape}"
    params, nbytes = RM.write_random_gguf(out, shape, keys, name=name, seed=seed, tiled=True)
    info = {
        "shape": {k: v for k, v in shape.__dict__.items() if k not in ("arch", "rms_eps")},
        "n_vocab": len(keys["tokenizer.ggml.tokens"][0]),
        "parameters": params,
        "bytes": nbytes,
        "seconds": round(time.perf_counter() - t0, 2),
        "path": out,
    }
    logger.info(
        "random qwen3 %s: %.2fB parameters, %.2f GB in %.1f s -> %s",
        shape,
        params / 1e9,
        nbytes / 1e9,
        info["seconds"],
        out,
    )
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tokenizer", help="extract a GGUF's tokenizer as JSON")
    t.add_argument("src")
    t.add_argument("out")
    m = sub.add_parser("model", help="write a random-weight model")
    m.add_argument("tokenizer")
    m.add_argument("out")
    m.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    m.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.what == "tokenizer":
        write_tokenizer(args.src, args.out)
    else:
        info = write_model(args.tokenizer, args.out, SHAPES[args.shape], args.seed)
        sys.stdout.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
