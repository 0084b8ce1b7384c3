"""Summaries, the aims, markdown and the plot of a hosted-provider run."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cp_memory.providers.rules import OPENAI_MIN_TOKENS

from .run import Record

__all__ = ["aims", "markdown", "plot", "summarize"]

#: a read counts as reaching into the memory lines when it passes the stable prefix by this many tokens
INTO_MEMORIES = 20


def _share(a: float, b: float) -> float | None:
    return a / b if b else None


def _per_turn(rs: Sequence[Record]) -> list[dict[str, Any]]:
    by_turn: dict[int, list[Record]] = defaultdict(list)
    for r in rs:
        by_turn[r.turn].append(r)
    return [
        {
            "turn": t,
            "input_tokens": sum(r.input_tokens for r in g) / len(g),
            "cached_share": _share(sum(r.cache_read_tokens for r in g), sum(r.input_tokens for r in g)),
            "cost": sum(r.cost for r in g) / len(g),
        }
        for t, g in sorted(by_turn.items())
    ]


def _chat_fields(rs: Sequence[Record]) -> dict[str, Any]:
    """A chat row's own: cached share from turn 3, per turn, cost per chat."""
    late = [r for r in rs if r.turn >= 3]
    by_chat: dict[tuple[int, int], float] = defaultdict(float)
    for r in rs:
        by_chat[(r.conversation, r.chat)] += r.cost
    return {
        "cached_share_from_turn_3": _share(sum(r.cache_read_tokens for r in late), sum(r.input_tokens for r in late)),
        "per_turn": _per_turn(rs),
        "cost_per_chat": [round(v, 1) for _, v in sorted(by_chat.items())],
    }


def _qa_fields(rs: Sequence[Record]) -> dict[str, Any]:
    """A one-shot row's own: the share of questions whose cached prefix reaches into the memory lines."""
    beyond = [
        r
        for r in rs
        if r.cache_read_tokens >= OPENAI_MIN_TOKENS and r.cache_read_tokens >= r.stable_tokens + INTO_MEMORIES
    ]
    return {"questions_cached_into_memories": _share(len(beyond), len(rs))}


def summarize(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per (provider, system, workload, arm)."""
    groups: dict[tuple[str, str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.provider, r.system, r.workload, r.arm)].append(r)
    rows = []
    for (provider, system, workload, arm), rs in sorted(groups.items()):
        n = len(rs)
        inp = sum(r.input_tokens for r in rs)
        read = sum(r.cache_read_tokens for r in rs)
        cost = sum(r.cost for r in rs)
        row: dict[str, Any] = {
            "provider": provider,
            "system": system,
            "workload": workload,
            "arm": arm,
            "requests": n,
            "stable_tokens": rs[0].stable_tokens,
            "input_tokens": inp,
            "cache_read_tokens": read,
            "cache_write_tokens": sum(r.cache_write_tokens for r in rs),
            "uncached_tokens": sum(r.uncached_tokens for r in rs),
            "cached_share": _share(read, inp),
            "input_cost": cost,
            "cost_per_100": cost / n * 100 if n else None,
            "cost_vs_no_cache": _share(cost, inp),
            "memories_per_request": sum(r.memories for r in rs) / n,
            "shared_per_request": sum(r.shared for r in rs) / n,
            "pointers_per_request": sum(r.pointers for r in rs) / n,
        }
        rows.append(row | (_chat_fields(rs) if workload == "chat" else _qa_fields(rs)))
    return rows


def _find(rows: Sequence[Mapping[str, Any]], **want: str) -> Mapping[str, Any] | None:
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def _aim(aim: str, system: str, value: float, met: bool) -> dict[str, Any]:
    return {"aim": aim, "system": system, "value": value, "met": met}


def aims(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's three aims, per system prompt, with the measured value."""
    out = []
    for system in sorted({r["system"] for r in rows}):
        base = _find(rows, provider="anthropic", system=system, workload="chat", arm="mem0")
        for arm in ("cp-append", "cp-late"):
            cp = _find(rows, provider="anthropic", system=system, workload="chat", arm=arm)
            if cp and base and base["input_cost"]:
                ratio = cp["input_cost"] / base["input_cost"]
                aim = f"Anthropic 8-turn chats: {arm} input cost <= 0.5x mem0's documented pattern"
                out.append(_aim(aim, system, ratio, ratio <= 0.5))
        for arm in ("cp-append", "cp-late"):
            cp = _find(rows, provider="openai", system=system, workload="chat", arm=arm)
            if cp and cp.get("cached_share_from_turn_3") is not None:
                share = cp["cached_share_from_turn_3"]
                aim = f"OpenAI 8-turn chats: >= 70% of input tokens cached from turn 3 on ({arm})"
                out.append(_aim(aim, system, share, share >= 0.70))
        for provider in ("openai", "anthropic"):
            for arm in ("cp", "cp-swap"):
                cp = _find(rows, provider=provider, system=system, workload="qa100", arm=arm)
                if cp and cp.get("questions_cached_into_memories") is not None:
                    share = cp["questions_cached_into_memories"]
                    aim = (
                        f"{provider} one-shot QA k=100: >= 40% of questions cached past 1,024 tokens and into the "
                        f"memory lines ({arm})"
                    )
                    out.append(_aim(aim, system, share, share >= 0.40))
    return out


def _f(x: Any, fmt: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, fmt)


def markdown(payload: Mapping[str, Any]) -> str:
    """The table and the aims of a run's JSON (``command`` and ``machine`` from its envelope, or from the
    ``meta`` of a result written before the envelope)."""
    rows, meta = payload["summary"], {**payload, **payload["meta"]}
    lines = [
        "# Hosted prompt caches: mem0's documented pattern vs cp_memory",
        "",
        f"**Modelled on the documented rules** ({meta.get('target')}), not measured on the providers. "
        f"{meta.get('command', '')}",
        "",
        f"Machine: {meta.get('machine', {}).get('summary', '?')} (loaded: shared by several jobs; the figures are"
        " token counts, not timings, and do not depend on it). Tokenizer: "
        f"{meta.get('tokenizer')}. Models: {meta.get('models')}.",
        "",
        "Cost: input cost in uncached-input-token units at list-price ratios (OpenAI cached 0.1x for the GPT-5"
        " family; Anthropic reads 0.1x, writes 1.25x), per 100 questions.",
        "",
        "| provider | system | workload | arm | requests | input tok/req | cached share | written | "
        "cost / 100 q | vs no cache | from turn 3 | QA: cached into memories |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['provider']} | {r['system']} | {r['workload']} | {r['arm']} | {r['requests']} | "
            f"{r['input_tokens'] / r['requests']:.0f} | {_f(r['cached_share'], '.0%')} | {r['cache_write_tokens']} | "
            f"{_f(r['cost_per_100'], '.0f')} | {_f(r['cost_vs_no_cache'], '.2f')} | "
            f"{_f(r.get('cached_share_from_turn_3'), '.0%')} | {_f(r.get('questions_cached_into_memories'), '.0%')} |"
        )
    lines += ["", "## Aims", "", "| aim | system | measured | met |", "|---|---|---:|---|"]
    for a in meta.get("aims", []):
        value = _f(a["value"], ".2f") if "cost" in a["aim"] else _f(a["value"], ".0%")
        lines.append(f"| {a['aim']} | {a['system']} | {value} | {'yes' if a['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def _bars(ax: Any, rows: Sequence[Mapping[str, Any]], values: list[float], labels: list[str], **ticks: Any) -> None:
    """One bar per row, coloured by arm (cp blue, mem0 red, mem0+auto orange)."""
    colors = ["#4c72b0" if r["arm"].startswith("cp") else "#c44e52" if r["arm"] == "mem0" else "#dd8452" for r in rows]
    ax.bar(range(len(rows)), values, color=colors)
    ax.set_xticks(range(len(rows)), labels, **ticks)


def plot(rows: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    chat = [r for r in rows if r["provider"] == "anthropic" and r["workload"] == "chat"]
    labels = [f"{r['system']}\n{r['arm']}" for r in chat]
    _bars(axes[0], chat, [r["cost_per_100"] for r in chat], labels, fontsize=8)
    axes[0].set_ylabel("input cost per 100 questions (input-token units)")
    axes[0].set_title("Anthropic, 8-turn chats")
    ax = axes[1]
    for r in rows:
        if r["provider"] == "openai" and r["workload"] == "chat":
            turns = [p["turn"] for p in r["per_turn"]]
            ax.plot(
                turns,
                [p["cached_share"] or 0 for p in r["per_turn"]],
                marker="o",
                linestyle="-" if r["arm"].startswith("cp") else "--",
                label=f"{r['arm']} ({r['system']})",
            )
    ax.axhline(0.7, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("turn")
    ax.set_title("OpenAI, 8-turn chats")
    ax.legend(fontsize=8)
    qa = [r for r in rows if r["workload"].startswith("qa")]
    labels = [f"{r['provider'][:4]} {r['system'][:5]}\n{r['workload']} {r['arm']}" for r in qa]
    _bars(axes[2], qa, [r["cached_share"] or 0 for r in qa], labels, fontsize=6, rotation=90)
    axes[2].set_title("one-shot QA")
    for ax in axes[1:]:
        ax.set_ylim(0, 1)
        ax.set_ylabel("share of input tokens cached")
    fig.suptitle("Prompt caches modelled on the providers' documented rules (LoCoMo, local server)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
