"""An engine owner for the kill-the-owner tests, run as ``python _owner.py KIND THREAD [MODEL]``.

Starts a server (``llama``: LlamaServer on MODEL; ``group``: :class:`GroupEngine`, a fake
multi-process engine whose two processes both ignore SIGTERM) from the main thread or from a
worker thread (no ``setpriv --pdeathsig`` there: only the watchdog protects), prints one JSON line
with the PIDs and the work directory, then sleeps until the test kills it with SIGKILL.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from cp_memory.engine import LlamaServer
from cp_memory.engine._server import ManagedServer

GROUP_ENGINE = r"""
import os, signal, subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.getpid()} {child.pid}".encode()
        self.send_response(200); self.send_header("content-length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


class GroupEngine(ManagedServer):
    """Two processes in one group, both deaf to SIGTERM: only SIGKILL to the group stops them."""

    engine_name = "group-engine"
    kill_stragglers = True

    def command(self, port: int) -> list[str]:
        self.workdir()  # like llama-server's slot directory
        return [sys.executable, "-c", GROUP_ENGINE, str(port)]


def _start(kind: str, model: str | None) -> dict[str, Any]:
    server: ManagedServer
    if kind == "llama":
        assert model is not None
        server = LlamaServer(model, ctx_size=512, cache_ram_mib=0, stop_timeout=2.0)
    else:
        server = GroupEngine(stop_timeout=1.0)
    server.start()
    info: dict[str, Any] = {"pid": server.pid, "workdir": str(server.workdir())}
    if isinstance(server, GroupEngine):
        import httpx

        leader, child = httpx.get(server.base_url + "/health").text.split()
        info["pids"] = [int(leader), int(child)]
    info["server"] = server  # keep it referenced: no finalizer may run before the kill
    return info


def main() -> None:
    kind, where = sys.argv[1], sys.argv[2]
    model = sys.argv[3] if len(sys.argv) > 3 else None
    box: dict[str, Any] = {}
    if where == "main":
        box = _start(kind, model)
    else:
        worker = threading.Thread(target=lambda: box.update(_start(kind, model)))
        worker.start()
        worker.join()  # the starting thread is gone: a pdeathsig would have fired by now
    print(json.dumps({k: v for k, v in box.items() if k != "server"}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
