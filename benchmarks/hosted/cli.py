"""``python -m benchmarks.hosted``: mem0's documented patterns vs cp_memory on the hosted providers' caches.

By default against a local server that applies the providers' documented cache rules (127.0.0.1; nothing
leaves the machine); with ``--base-url`` and an API key (``--api-key-env``, default ``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY``) against the real provider, with the same code (``--providers`` one of them then).
Writes ``hosted.json``, ``hosted.md`` and ``hosted.png`` under ``--out`` (default docs/results/);
``--report`` re-renders them from an earlier run's JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import harness
from benchmarks.common.config import LocomoOptions, OutOptions, VerboseOptions, parse_config

from .report import aims, markdown, plot, summarize
from .run import Record, run_provider

__all__ = ["HostedConfig", "build_parser", "main", "parse_args"]

logger = logging.getLogger("benchmarks.hosted")

MODELS = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4-5"}
QUIET = ("httpx", "httpx2", "openai", "anthropic", "mem0", "sentence_transformers", "urllib3", "qdrant_client")
LOCAL_TARGET = "local server applying the documented cache rules (benchmarks.common.provider_cache)"
LOCAL_SECRET = "benchmark-local-secret-not-for-production"


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
    harness.add_locomo(p)
    harness.add_out(p, "docs/results")
    p.add_argument("--name", default="hosted", help="file name stem")
    p.add_argument("--report", metavar="JSON", help="only re-render the summary, markdown and PNG of an earlier run")
    harness.add_verbose(p)
    return p


@dataclass(frozen=True, kw_only=True)
class HostedConfig(LocomoOptions, OutOptions, VerboseOptions):
    """The run's options (:func:`parse_args`)."""

    providers: str
    systems: str
    conversations: str
    chats: int
    turns: int
    chat_top_k: int
    questions: int
    qa_top_k: str
    step_s: float
    openai_model: str
    anthropic_model: str
    base_url: str | None
    api_key_env: str | None
    key_secret_env: str
    name: str
    report: str | None


def parse_args(argv: Sequence[str] | None) -> HostedConfig:
    return parse_config(build_parser(), HostedConfig, argv)


def _providers(args: HostedConfig) -> list[str]:
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    if any(p not in MODELS for p in providers):
        raise SystemExit(f"--providers: choose from {sorted(MODELS)}")
    if args.base_url and len(providers) != 1:
        raise SystemExit("--base-url talks to one provider: pass --providers openai or --providers anthropic")
    return providers


def _endpoints(args: HostedConfig, providers: Sequence[str], stack: ExitStack) -> dict[str, tuple[str, str]]:
    """provider -> (base URL, API key): the real provider's with ``--base-url``, else the local server's."""
    from .server import ProviderServer

    if args.base_url:
        env = args.api_key_env or f"{providers[0].upper()}_API_KEY"
        if not os.environ.get(env):
            raise SystemExit(f"--base-url needs an API key in ${env}")
        return {providers[0]: (args.base_url, os.environ[env])}
    server = stack.enter_context(ProviderServer(step_s=args.step_s))
    return {p: (server.url + ("/v1" if p == "openai" else ""), "local") for p in providers}


def _measure(args: HostedConfig) -> tuple[dict[str, Any], list[Record]]:
    """Build the workload, send it to every provider; returns (meta, records)."""
    from benchmarks.common.ingest import make_memory
    from cp_memory.providers import PromptCacheKeys, default_counting

    from .workload import build_workload

    providers, t0 = _providers(args), time.perf_counter()
    counting = default_counting()
    models = {"openai": args.openai_model, "anthropic": args.anthropic_model}
    keys = PromptCacheKeys(os.environ.get(args.key_secret_env) or LOCAL_SECRET)
    records: list[Record] = []
    accounts: dict[str, Any] = {}
    with ExitStack() as stack:
        endpoints = _endpoints(args, providers, stack)
        work = build_workload(
            make_memory(),
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
        systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        for provider, (base_url, api_key) in endpoints.items():
            recs, accounts[provider] = run_provider(
                provider,
                models[provider],
                work,
                base_url=base_url,
                api_key=api_key,
                systems=systems,
                keys=keys,
                counter=counting.tokens,
            )
            records += recs
    meta = {
        "label": "measured on the provider" if args.base_url else "modelled on the documented rules",
        "target": f"measured on {args.base_url}" if args.base_url else LOCAL_TARGET,
        "args": asdict(args),
        "models": models,
        "tokenizer": counting.name,
        "memories": work.memories,
        "seconds": round(time.perf_counter() - t0, 1),
        "search_seconds": round(searched_s, 1),
        "accounts": accounts,
    }
    return meta, records


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    harness.setup_logging(args.verbose)
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.report:  # the records of an earlier run, the envelope it was made with
        payload = json.loads(Path(args.report).read_text(encoding="utf-8"))
        records = [Record(**r) for r in payload["records"]]
    else:
        meta, records = _measure(args)
        payload = harness.envelope("benchmarks.hosted", argv, meta=meta)
    rows = summarize(records)
    payload.update(summary=rows, records=[r.to_dict() for r in records])
    payload["meta"]["aims"] = aims(rows)
    harness.write_outputs(args.out, args.name, payload, markdown=markdown(payload), plot=lambda path: plot(rows, path))
    for a in payload["meta"]["aims"]:
        logger.info("aim %s [%s]: %.3f %s", a["aim"], a["system"], a["value"], "met" if a["met"] else "NOT met")
    logger.info("wrote %s/%s.{json,md,png} in %.0f s", args.out, args.name, payload["meta"]["seconds"])
    return 0
