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
of random values, so 7.5 GB are written at disk speed. Needs ``numpy`` and the ``gguf`` package (on a
bare machine: ``PYTHONPATH=gguf-<v>-py3-none-any.whl``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("random_gguf")


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    context_length: int = 40960
    rope_base: float = 1_000_000.0


SHAPES = {
    "qwen3-4b": Shape(n_layer=36, n_embd=2560, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728),
    "tiny": Shape(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=768),
}


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise SystemExit(f"the gguf package is needed (pip install gguf, or PYTHONPATH=gguf-*.whl): {exc}") from exc
    return gguf


def write_tokenizer(src: str, out: str) -> None:
    """``src``'s ``tokenizer.*`` keys (vocabulary, merges, special tokens, chat template) as JSON: reading
    them back from JSON takes a fraction of a second, from a GGUF (gguf's reader) tens of seconds."""
    import json

    gguf = _gguf()
    keys = {}
    for key, field in gguf.GGUFReader(src).fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            keys[key] = {"type": int(vtype), "sub": None if sub is None else int(sub), "value": field.contents()}
    if "tokenizer.ggml.tokens" not in keys:
        raise SystemExit(f"{src} has no tokenizer.ggml.tokens")
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"source": src, "keys": keys}, fh, ensure_ascii=False, separators=(",", ":"))
    logger.info("tokenizer of %s (%d tokens) -> %s", src, len(keys["tokenizer.ggml.tokens"]["value"]), out)


def _copy_tokenizer(path: str, writer: Any, gguf: Any) -> int:
    import json

    with open(path, encoding="utf-8") as fh:
        keys = json.load(fh)["keys"]
    for key, item in keys.items():
        sub = None if item["sub"] is None else gguf.GGUFValueType(item["sub"])
        writer.add_key_value(key, item["value"], gguf.GGUFValueType(item["type"]), sub)
    return len(keys["tokenizer.ggml.tokens"]["value"])


def write_model(tokenizer: str, out: str, shape: Shape, seed: int = 0) -> dict[str, Any]:
    """The random-weight ``qwen3`` GGUF; returns what was written (parameters, bytes, seconds)."""
    import numpy as np

    gguf = _gguf()
    t0 = time.perf_counter()
    writer = gguf.GGUFWriter(out, "qwen3")
    n_vocab = _copy_tokenizer(tokenizer, writer, gguf)
    writer.add_name(f"cp_memory random qwen3 {shape}")
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    d, hd = shape.n_embd, shape.head_dim
    tensors: list[tuple[str, tuple[int, ...], Any]] = [
        ("token_embd.weight", (n_vocab, d), np.float16),
        ("output_norm.weight", (d,), np.float32),
    ]
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        tensors += [
            (b + "attn_norm.weight", (d,), np.float32),
            (b + "attn_q.weight", (shape.n_head * hd, d), np.float16),
            (b + "attn_k.weight", (shape.n_head_kv * hd, d), np.float16),
            (b + "attn_v.weight", (shape.n_head_kv * hd, d), np.float16),
            (b + "attn_output.weight", (d, shape.n_head * hd), np.float16),
            (b + "attn_q_norm.weight", (hd,), np.float32),
            (b + "attn_k_norm.weight", (hd,), np.float32),
            (b + "ffn_norm.weight", (d,), np.float32),
            (b + "ffn_gate.weight", (shape.n_ff, d), np.float16),
            (b + "ffn_up.weight", (shape.n_ff, d), np.float16),
            (b + "ffn_down.weight", (d, shape.n_ff), np.float16),
        ]
    for name, dims, dtype in tensors:  # numpy (rows, cols) = GGUF ne [cols, rows]
        n = int(np.prod(dims))
        writer.add_tensor_info(name, dims, np.dtype(dtype), n * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(1 << 20, dtype=np.float32) * 0.02).astype(np.float16)
    params = nbytes = 0
    for i, (_name, dims, dtype) in enumerate(tensors):
        n = int(np.prod(dims))
        if dtype == np.float32:  # norm weights: ones
            data = np.ones(dims, dtype=np.float32)
        else:  # tiled random values, a different phase per tensor
            start = (i * 7919) % block.size
            data = np.resize(np.roll(block, -start), n).reshape(dims)
        writer.write_tensor_data(data)
        params += n
        nbytes += data.nbytes
    writer.close()
    info = {
        "shape": shape.__dict__,
        "n_vocab": n_vocab,
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
        import json

        info = write_model(args.tokenizer, args.out, SHAPES[args.shape], args.seed)
        sys.stdout.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
