"""``python -m benchmarks.hosted``: mem0's documented patterns vs cp_memory on the hosted providers' caches.

By default against a local server that applies the providers' documented cache rules (127.0.0.1; nothing
leaves the machine); with ``--base-url`` and an API key (``--api-key-env``, default ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY``) against the real provider, with the same code (``--providers`` one of them then).
Writes ``hosted.json``, ``hosted.md`` and ``hosted.png`` under ``--out`` (default docs/results/).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

logger = logging.getLogger("benchmarks.hosted")

MODELS = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4-5"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hosted", description=__doc__.split("\n\n")[0])
    p.add_argument("--providers", default="openai,anthropic", help="comma list: openai, anthropic")
    p.add_argument("--systems", default="short,realistic", help="system prompts: short (mem0's), realistic")
    p.add_argument("--conversations", default="0,1", help="LoCoMo conversation indexes")
    p.add_argument("--chats", type=int, default=2, help="chats per conversation")
    p.add_argument("--turns", type=int, default=8, help="turns per chat")
    p.add_argument("--chat-top-k", type=int, default=10, help="memories per chat turn")
    p.add_argument("--questions", type=int, default=20, help="one-shot questions per conversation")
    p.add_argument("--qa-top-k", default="20,100", help="k of the one-shot questions")
    p.add_argument("--step-s", type=float, default=15.0, help="simulated seconds between requests")
    p.add_argument("--openai-model", default=MODELS["openai"])
    p.add_argument("--anthropic-model", default=MODELS["anthropic"])
    p.add_argument("--base-url", help="a real provider's API (one provider at a time); default: local server")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument(
        "--key-secret-env",
        default="CP_MEMORY_CACHE_KEY_SECRET",
        help="environment variable with the prompt_cache_key secret (a fixed one for the local run)",
    )
    p.add_argument("--locomo", help="path of locomo10.json (default: $CP_MEMORY_LOCOMO or shared/data)")
    p.add_argument("--out", default="docs/results", help="folder of hosted.json / .md / .png")
    p.add_argument("--name", default="hosted", help="file name stem")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in (
        "httpx",
        "httpx2",
        "openai",
        "anthropic",
        "mem0",
        "sentence_transformers",
        "urllib3",
        "qdrant_client",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    if any(p not in MODELS for p in providers):
        raise SystemExit(f"--providers: choose from {sorted(MODELS)}")
    if args.base_url and len(providers) != 1:
        raise SystemExit("--base-url talks to one provider: pass --providers openai or --providers anthropic")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]

    from benchmarks.locomo.ingest import make_memory
    from benchmarks.locomo.report import machine_info
    from cp_memory.providers import PromptCacheKeys, default_counting

    from .report import aims, markdown, plot, summarize
    from .run import run_provider
    from .server import ProviderServer
    from .workload import build_workload

    t0 = time.perf_counter()
    counting = default_counting()
    memory = make_memory()
    work = build_workload(
        memory,
        [int(c) for c in args.conversations.split(",")],
        chats=args.chats,
        turns=args.turns,
        chat_top_k=args.chat_top_k,
        questions=args.questions,
        qa_top_k=[int(k) for k in args.qa_top_k.split(",")],
        locomo=args.locomo,
    )
    searched_s = time.perf_counter() - t0
    logger.info("workload ready in %.0f s (%s memories)", searched_s, work.memories)
    secret = os.environ.get(args.key_secret_env) or "benchmark-local-secret-not-for-production"
    keys = PromptCacheKeys(secret)
    records: list[Any] = []
    accounts: dict[str, Any] = {}
    models = {"openai": args.openai_model, "anthropic": args.anthropic_model}
    if args.base_url:
        env = args.api_key_env or f"{providers[0].upper()}_API_KEY"
        api_key = os.environ.get(env)
        if not api_key:
            raise SystemExit(f"--base-url needs an API key in ${env}")
        target = f"measured on {args.base_url}"
        recs, acc = run_provider(
            providers[0],
            models[providers[0]],
            work,
            base_url=args.base_url,
            api_key=api_key,
            systems=systems,
            keys=keys,
            counter=counting.tokens,
        )
        records += recs
        accounts[providers[0]] = acc
    else:
        target = "local server applying the documented cache rules (benchmarks.common.provider_cache)"
        with ProviderServer(step_s=args.step_s) as server:
            for provider in providers:
                base = server.url + ("/v1" if provider == "openai" else "")
                recs, acc = run_provider(
                    provider,
                    models[provider],
                    work,
                    base_url=base,
                    api_key="local",
                    systems=systems,
                    keys=keys,
                    counter=counting.tokens,
                )
                records += recs
                accounts[provider] = acc
    rows = summarize(records)
    meta: dict[str, Any] = {
        "label": "modelled on the documented rules" if not args.base_url else "measured on the provider",
        "target": target,
        "command": "python -m benchmarks.hosted " + " ".join(argv if argv is not None else os.sys.argv[1:]),
        "args": vars(args),
        "models": models,
        "tokenizer": counting.name,
        "memories": work.memories,
        "seconds": round(time.perf_counter() - t0, 1),
        "search_seconds": round(searched_s, 1),
        "git_commit": _git_commit(),
        "machine": machine_info(),
        "accounts": accounts,
    }
    meta["aims"] = aims(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(
        json.dumps({"meta": meta, "summary": rows, "records": [r.to_dict() for r in records]}, indent=1) + "\n",
        encoding="utf-8",
    )
    (out / f"{args.name}.md").write_text(markdown(rows, meta), encoding="utf-8")
    plot(rows, out / f"{args.name}.png")
    for a in meta["aims"]:
        logger.info("aim %s [%s]: %.3f %s", a["aim"], a["system"], a["value"], "met" if a["met"] else "NOT met")
    logger.info("wrote %s/%s.{json,md,png} in %.0f s", out, args.name, meta["seconds"])
    return 0
