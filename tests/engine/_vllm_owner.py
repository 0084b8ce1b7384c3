"""The owner of the test run's one vLLM server, run as ``python _vllm_owner.py MODEL_DIR [KEY=VALUE ...]``.

Starts a :class:`~cp_memory.engine.VLLMServer` (KV events on) with the keyword arguments given as
``key=value`` (ints where they parse), prints one JSON line — base URL, served model name, KV-event
endpoint, API key, block size asked for, the PIDs of the server's process group and its work directory — and
sleeps until the test run kills it. Owning the server in a separate process lets one test kill the
owner with SIGKILL and check that vLLM's processes and files go with it, without a second start-up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cp_memory.engine import VLLMServer


def group_pids(pgid: int) -> list[int]:
    """Every live process in process group ``pgid`` (the server, its engine core and worker)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return sorted(out)


def main() -> None:
    model = sys.argv[1]
    kwargs: dict[str, Any] = {}
    for arg in sys.argv[2:]:
        key, _, value = arg.partition("=")
        kwargs[key] = int(value) if value.lstrip("-").isdigit() else {"true": True, "false": False}.get(value, value)
    server = VLLMServer(model, kv_events=True, **kwargs).start()
    assert server.pid is not None
    info = {
        "base_url": server.base_url,
        "model": server.served_model_name,
        "kv_events": server.kv_events_endpoint,
        "kv_replay": server.kv_replay_endpoint,
        "pid": server.pid,
        "pids": group_pids(os.getpgid(server.pid)),
        "workdir": str(server.workdir()),
        "log": str(server.log_path),
        "api_key": server.api_key,  # the test run's own pipe: its clients must send it
    }
    print(json.dumps(info), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
