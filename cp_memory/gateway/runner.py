"""Serving the app with uvicorn: bind first (so ``port=0`` picks a free port), say where, then serve.

The server's bounds come from :class:`~cp_memory.gateway.config.GatewayConfig`: keep-alive / header wait
(``header_timeout_s``), concurrent requests (``max_concurrency``; more get 503). A non-loopback address needs
``allow_remote`` and is logged as a warning without a gateway key.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import uvicorn

from .app import build_app
from .config import GatewayConfig, is_loopback
from .detect import detect_kind

__all__ = ["bind", "serve"]

logger = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port=0``: a free one, read it from ``getsockname()``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (proto 0 does not), and
    # without it every response waits out Nagle + the client's delayed ACK (~40 ms a request)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(config: GatewayConfig, *, announce: Callable[[str], None] | None = None) -> None:
    """Run the gateway until interrupted; ``announce`` gets the ``listening on http://HOST:PORT`` line."""
    if not is_loopback(config.host) and config.gateway_key is None:
        logger.warning(
            "gateway: serving %s without a gateway key: anyone who reaches it can use the upstream with their own "
            "key (set --gateway-key or CP_GATEWAY_KEY)",
            config.host,
        )
    kind = detect_kind(config)
    app = build_app(config, kind)
    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    shown = f"[{config.host}]" if ":" in config.host else config.host
    line = f"listening on http://{shown}:{port} (upstream {config.upstream_base}, {kind.value})"
    logger.info("gateway: %s", line)
    if announce is not None:
        announce(line)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            timeout_keep_alive=int(config.header_timeout_s),
            limit_concurrency=config.max_concurrency,
            access_log=False,
        )
    )
    server.run(sockets=[sock])
