"""``cp-memory gateway --upstream URL [--port N] ...`` and ``python -m cp_memory.gateway ...``.

Prints one line, ``listening on http://127.0.0.1:PORT (...)``, once the socket is bound (``--port 0`` picks a
free port and this line names it), then serves until interrupted. Every default comes from
:class:`~cp_memory.gateway.config.GatewayConfig`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import SecretStr, ValidationError

from .config import STATE_STORE_ENV, GatewayConfig, Mem0Source, UpstreamKind
from .content.switches import DEFAULT_STEPS, ContentStep

__all__ = ["config_from", "console", "content_steps", "main", "parser"]

_FIELDS = GatewayConfig.model_fields


def _default(name: str) -> object:
    return _FIELDS[name].default


def content_steps(value: str) -> frozenset[ContentStep]:
    """``--content``: ``on`` (the default steps), ``off`` (none) or steps, comma-separated (``find,dedup``);
    every step but ``find`` needs ``find``. A bad value is an ``argparse`` error naming the choices."""
    words = [w.strip().lower() for w in value.split(",") if w.strip()]
    if words == ["on"]:
        return DEFAULT_STEPS
    if words == ["off"]:
        return frozenset()
    known = {s.value: s for s in ContentStep}
    unknown = [w for w in words if w not in known]
    if unknown or not words:
        choices = ", ".join(known)
        raise argparse.ArgumentTypeError(f"{value!r}: use on, off or steps from {choices} (comma-separated)")
    steps = frozenset(known[w] for w in words)
    if ContentStep.FIND not in steps:
        raise argparse.ArgumentTypeError(f"{value!r}: every content step needs 'find' (e.g. find,{words[0]})")
    return steps


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cp-memory gateway", description="cp_memory's cache-stable LLM gateway")
    p.add_argument("--upstream", required=True, help="base URL of the upstream (engine, OpenAI, Anthropic)")
    kinds = [k.value for k in UpstreamKind if k is not UpstreamKind.COMPATIBLE]
    p.add_argument("--upstream-kind", choices=kinds, default=UpstreamKind.AUTO.value)
    p.add_argument("--host", default=_default("host"), help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=_default("port"), help="0 picks a free port")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    p.add_argument("--gateway-key", default=None, help="clients must send it as X-CP-Gateway-Key (env CP_GATEWAY_KEY)")
    p.add_argument("--max-body-bytes", type=int, default=_default("max_body_bytes"))
    p.add_argument("--read-timeout", type=float, default=_default("read_timeout_s"), help="seconds")
    p.add_argument("--max-sessions", type=int, default=_default("max_sessions"))
    p.add_argument("--session-ttl", type=float, default=_default("session_ttl_s"), help="seconds")
    p.add_argument("--no-replay", action="store_true", help="forward history as the client sends it")
    p.add_argument(
        "--state-store",
        default=None,
        help="redis://host:6379/0: sessions shared by gateway replicas (env CP_GATEWAY_STATE_STORE; needs "
        "CP_GATEWAY_SECRET, the same on every replica)",
    )
    p.add_argument("--no-marks", action="store_true", help="Anthropic: never add cache_control marks")
    p.add_argument(
        "--openai-key-shards",
        type=int,
        default=_default("openai_key_shards"),
        help="OpenAI: prompt_cache_key values per tenant, each session keeping one (default 1; raise it past ~15 "
        "requests a minute per tenant and shared prefix)",
    )
    p.add_argument("--mem0", choices=[m.value for m in Mem0Source], default=Mem0Source.OFF.value, help="mem0 store")
    p.add_argument("--mem0-config", default=None, help="--mem0 config: a mem0 config JSON file")
    p.add_argument("--mem0-path", default=None, help="--mem0 embedded: its folder (default: in memory)")
    p.add_argument("--no-memories-add", action="store_true", help="--mem0: never add answered turns to mem0")
    p.add_argument(
        "--content",
        type=content_steps,
        default=DEFAULT_STEPS,
        metavar="on|off|STEPS",
        help="content rules on the new part of each request: on (find,align,dedup,chunks), off, or steps "
        "comma-separated from find, align, dedup, chunks, order-note (X-CP-Content narrows them per request)",
    )
    p.add_argument(
        "--tool-schema",
        choices=["on", "off"],
        default="on" if _default("tool_schema") else "off",
        help="drop JSON Schema's $schema from tool schemas (X-CP-Schema switches it per request)",
    )
    p.add_argument("--log-level", default="INFO")
    return p


def config_from(args: argparse.Namespace) -> GatewayConfig:
    key = SecretStr(args.gateway_key) if args.gateway_key else GatewayConfig.key_from_env()
    store = args.state_store or os.environ.get(STATE_STORE_ENV)
    return GatewayConfig(
        upstream=args.upstream,
        upstream_kind=UpstreamKind(args.upstream_kind),
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        gateway_key=key,
        secret=GatewayConfig.secret_from_env(),
        max_body_bytes=args.max_body_bytes,
        read_timeout_s=args.read_timeout,
        max_sessions=args.max_sessions,
        session_ttl_s=args.session_ttl,
        replay=not args.no_replay,
        add_marks=not args.no_marks,
        openai_key_shards=args.openai_key_shards,
        state_store=SecretStr(store) if store else None,
        mem0=Mem0Source(args.mem0),
        mem0_config=args.mem0_config,
        mem0_path=args.mem0_path,
        memories_add=not args.no_memories_add,
        content_steps=args.content,
        tool_schema=args.tool_schema == "on",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from(args)
    except ValidationError as exc:
        sys.stderr.write(f"cp-memory gateway: {exc}\n")
        return 2
    from .runner import serve  # uvicorn only once the arguments are good

    def announce(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        serve(config, announce=announce)
    except OSError as exc:
        sys.stderr.write(f"cp-memory gateway: cannot listen on {config.host}:{config.port}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def console(argv: Sequence[str] | None = None) -> int:
    """The ``cp-memory`` console script: ``cp-memory gateway ...`` (the one subcommand so far)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "gateway":
        sys.stderr.write("usage: cp-memory gateway --upstream URL [--port N] ... (cp-memory gateway --help)\n")
        return 2
    return main(args[1:])
