"""``python -m benchmarks.vllm_fidelity PROMPTS``: does ``benchmarks.common.cache_model`` predict vLLM's cache hits?

Replays a LoCoMo prompt export (``python -m benchmarks.locomo ... --export-prompts PROMPTS``; any engine,
``--engine model-cache`` makes it in seconds) on vLLM — launched here (:class:`~cp_memory.engine.VLLMServer`,
CPU build) or at ``--engine-url`` — in the export's order with its cache flushes, and serves the same
token ids (vLLM's own ``/tokenize``) to :class:`~benchmarks.common.cache_model.BlockPrefixCache` with vLLM's
block size and KV-cache capacity. Per request: vLLM's ``cached_tokens`` against the model's. Writes
``<out>/vllm_fidelity.{json,md}``: the agreement, the gap of every disagreeing request and its class.

Gap classes (each one a rule the two sides apply differently):

``block-aligned-prompt``  the prompt is a whole number of blocks and fully cached: vLLM recomputes the
                          whole last block (it caps a hit at ``n - 1`` tokens *in whole blocks*), the model
                          only the last token (``min(matched, n - 1)``): the model says ``B - 1`` more.
``eviction``              under capacity pressure: vLLM takes a request's whole prompt (partial last block
                          included) and its generated tokens from the pool before anything is freed, and never
                          evicts a block a running request holds; the model counts only full cached blocks
                          and evicts after the request, so it keeps a block or two more of older prefixes.
``other``                 anything else (listed with the request for a look).

    python -m benchmarks.locomo --engine model-cache --conversations 0-2 --questions 10 --top-k 20,100 \\
        --modes baseline,aligned --export-prompts results/prompts.json.gz
    python -m benchmarks.vllm_fidelity results/prompts.json.gz --model smollm2 --block-size 32
"""

from __future__ import annotations

import argparse
import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.config import ModelOptions, OutOptions, VerboseOptions, parse_config
from benchmarks.common.export import join_lines, load_prompts
from benchmarks.common.harness import (
    add_model,
    add_out,
    add_verbose,
    envelope,
    resolve_model,
    setup_logging,
    write_outputs,
)
from cp_memory.engine import EngineClient

logger = logging.getLogger("benchmarks.vllm_fidelity")

__all__ = ["Compared", "classify", "main"]


@dataclass(frozen=True)
class Compared:
    run: int
    mode: str
    k: str
    turn: int
    prompt_tokens: int
    vllm_cached: int
    model_cached: int
    gap: str | None  # None: they agree


def classify(n: int, vllm_cached: int, model_cached: int, block: int, evicting: bool) -> str | None:
    """Why vLLM's and the model's cached tokens differ for a prompt of ``n`` tokens (None: they agree)."""
    if vllm_cached == model_cached:
        return None
    if n % block == 0 and model_cached == n - 1 and vllm_cached == n - block:
        return "block-aligned-prompt"
    if evicting:
        return "eviction"
    return "other"


@dataclass(frozen=True, kw_only=True)
class FidelityConfig(ModelOptions, OutOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    prompts: str
    engine_url: str | None
    block_size: int | None
    num_blocks: int | None
    max_model_len: int
    vllm_args: str
    max_requests: int | None


def parse_args(argv: list[str] | None) -> FidelityConfig:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.vllm_fidelity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("prompts", help="a LoCoMo prompt export (--export-prompts); completion runs only")
    ap.add_argument("--engine-url", help="a running vLLM (started with VLLM_SERVER_DEV_MODE=1 for the flush)")
    add_model(ap, "smollm2", free=True)
    ap.add_argument("--block-size", type=int, default=None, help="vLLM's block (default: the engine's, 128 on CPU)")
    ap.add_argument(
        "--num-blocks", type=int, default=None, help="KV-cache blocks (default: vLLM's from its memory budget)"
    )
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--vllm-args", default="", help="more arguments for vLLM's api_server (one string)")
    ap.add_argument("--max-requests", type=int, default=None, help="stop after N measured requests")
    add_out(ap)
    add_verbose(ap)
    return parse_config(ap, FidelityConfig, argv)


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _engine_block_and_capacity(client: EngineClient) -> tuple[int | None, int | None]:
    """vLLM's ``cache_config_info`` gauge: block size and number of blocks (None when not exposed)."""
    for line in (client.metrics() or "").splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(_LABEL.findall(line))
            block, blocks = labels.get("block_size", ""), labels.get("num_gpu_blocks", "")
            return (int(block) if block.isdigit() else None), (int(blocks) if blocks.isdigit() else None)
    return None, None


def replay(
    data: dict[str, Any], client: EngineClient, block: int, capacity: int | None, limit: int | None
) -> list[Compared]:
    lines, meta = data["lines"], data.get("meta", {})
    max_tokens = int(meta.get("max_tokens", 16))
    out: list[Compared] = []
    model = BlockPrefixCache(capacity, block_size=block)
    for i, run in enumerate(data["runs"]):
        if any("user" in r for r in run["requests"]):
            logger.warning("run %d is a chat run: skipped (completions only)", i)
            continue
        if run.get("flush", True):
            if not client.flush_cache():
                raise RuntimeError(
                    "the engine refused POST /reset_prefix_cache (start vLLM with VLLM_SERVER_DEV_MODE=1)"
                )
            model = BlockPrefixCache(capacity, block_size=block)
        warm = meta.get("warmup_prompt")
        for _ in range(int(run.get("warmup", 0))):
            if warm:
                r = client.complete(warm, max_tokens=2, temperature=0.0)
                toks = client.tokenize(warm) or []
                model.serve(toks, generated=r.completion_tokens or 0)
        for req in run["requests"]:
            prompt = join_lines(lines, req["prompt"])
            tokens = client.tokenize(prompt)
            if tokens is None:
                raise RuntimeError("the engine's /tokenize answered nothing")
            r = client.complete(prompt, max_tokens=max_tokens, temperature=0.0)
            evicting = capacity is not None and model.cached_blocks * block >= capacity - block
            predicted = model.serve(tokens, generated=r.completion_tokens or 0).cached
            if r.prompt_tokens not in (None, len(tokens)):
                logger.warning("vLLM counted %s prompt tokens, /tokenize %d", r.prompt_tokens, len(tokens))
            if not req.get("measured", True):
                continue
            n, cached = len(tokens), r.cached_tokens or 0
            gap = classify(n, cached, predicted, block, evicting)
            out.append(Compared(i, run["mode"], run["k"], req["turn"], n, cached, predicted, gap))
            if limit is not None and len(out) >= limit:
                return out
    return out


def summarize(rows: list[Compared]) -> dict[str, Any]:
    agree = sum(r.gap is None for r in rows)
    return {
        "requests": len(rows),
        "agree": agree,
        "agreement": agree / len(rows) if rows else 0.0,
        "vllm_cached_tokens": sum(r.vllm_cached for r in rows),
        "model_cached_tokens": sum(r.model_cached for r in rows),
        "prompt_tokens": sum(r.prompt_tokens for r in rows),
        "abs_gap_tokens": sum(abs(r.vllm_cached - r.model_cached) for r in rows),
        "gaps": dict(Counter(r.gap for r in rows if r.gap is not None)),
    }


def markdown(summary: dict[str, Any], rows: list[Compared], header: str) -> str:
    s = summary
    out = [
        header,
        "",
        "| requests | agree | vLLM cached | model cached | prompt tokens | sum of gaps | gaps by class |",
        "|---:|---:|---:|---:|---:|---:|---|",
        f"| {s['requests']} | {s['agree']} ({100 * s['agreement']:.1f} %) | {s['vllm_cached_tokens']} | "
        f"{s['model_cached_tokens']} | {s['prompt_tokens']} | {s['abs_gap_tokens']} | "
        + (", ".join(f"{k}: {v}" for k, v in s["gaps"].items()) or "none")
        + " |",
    ]
    odd = [r for r in rows if r.gap is not None]
    if odd:
        out += [
            "",
            "| run | mode | k | turn | prompt | vLLM | model | class |",
            "|---:|---|---|---:|---:|---:|---:|---|",
        ]
        out += [
            f"| {r.run} | {r.mode} | {r.k} | {r.turn} | {r.prompt_tokens} | {r.vllm_cached} | {r.model_cached} | "
            f"{r.gap} |"
            for r in odd[:50]
        ]
    return "\n".join(out) + "\n"


def _compare(a: FidelityConfig, data: dict[str, Any]) -> tuple[int, int | None, list[Compared]]:
    """Launch vLLM (or use ``--engine-url``), read its block size and capacity, replay: (block, capacity, rows)."""
    server: Any = None
    try:
        if a.engine_url:
            url = a.engine_url
        else:
            from cp_memory.engine import VLLMServer

            server = VLLMServer(
                str(resolve_model(a.model, "vllm")),
                max_model_len=a.max_model_len,
                block_size=a.block_size,
                num_blocks=a.num_blocks,
                extra_args=a.vllm_args.split(),
            ).start()
            url = server.base_url
        with EngineClient(url, timeout=600.0, api_key=None if server is None else server.api_key) as client:
            block, blocks = _engine_block_and_capacity(client)
            block = a.block_size or block
            if block is None:
                raise SystemExit("vLLM's block size is unknown: pass --block-size")
            capacity = (blocks - 1) * block if blocks else None  # vLLM keeps one block back (the null block)
            return block, capacity, replay(data, client, block, capacity, a.max_requests)
    finally:
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    setup_logging(a.verbose)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    block, capacity, rows = _compare(a, load_prompts(a.prompts))
    summary = summarize(rows)
    header = (
        f"vLLM vs benchmarks.common.cache_model (BlockPrefixCache, block {block}, capacity "
        f"{capacity if capacity is not None else 'unbounded'} tokens) on {a.prompts}: per request, cached tokens."
    )
    table = markdown(summary, rows, header)
    payload = envelope(
        "benchmarks.vllm_fidelity",
        argv,
        block_size=block,
        capacity_tokens=capacity,
        summary=summary,
        requests=[asdict(r) for r in rows],
    )
    write_outputs(a.out, "vllm_fidelity", payload, markdown=table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
