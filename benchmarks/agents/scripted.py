"""The scripted model server: a stand-in for a model API that plays a scripted task with tool calls, so a real
agent harness runs its real tools in a scratch folder and sends its real follow-up requests.

It speaks the three wire protocols the gateway does, streamed (SSE) and not: Anthropic Messages (``POST
/v1/messages``, ``?beta=true`` too: Claude Code; and ``/v1/messages/count_tokens``), OpenAI Responses (``POST
/v1/responses``: Codex) and Chat Completions (``POST /v1/chat/completions``); :mod:`benchmarks.agents.wire`
writes a turn in each.

The task is found by the tag in the prompt (:func:`benchmarks.agents.tasks.find_task`); the step played is the
number of tool results in the request, so the server keeps no state: the same task gives the same traffic and any
number of sessions may run at once. Every request (headers scrubbed, body, the reply, when it arrived and when its
reply was written) goes to the trace (:class:`benchmarks.agents.trace.TraceWriter`); a generation request may be
answered after a fixed delay (``answer_delay``: a model's modelled time to answer). A request with no task tag or
no usable tool gets a short text answer. Token counts are modelled (a byte count / 4), labelled so in nothing else
than this docstring: nothing here measures a model.

``python -m benchmarks.agents.scripted --port 0 --trace FILE`` runs it alone (it logs its URL).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.agents.tasks import Intent, Step, Task, TurnTag, find_turn
from benchmarks.agents.trace import TraceWriter, scrub_headers
from benchmarks.agents.wire import CREATED, Events, Protocol, ToolCall, Turn, encode, sse

__all__ = ["ScriptedServer", "plan", "reply"]

log = logging.getLogger(__name__)


# --- planning: which tool call the current step becomes --------------------------------------------------


def _tool_names(protocol: Protocol, body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if protocol is Protocol.CHAT else None
        name = (fn or {}).get("name") if isinstance(fn, dict) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


def _items(protocol: Protocol, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation's items in order: Responses ``input`` items, else ``messages``."""
    raw = body.get("input") if protocol is Protocol.RESPONSES else body.get("messages")
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return [i for i in raw or [] if isinstance(i, dict)]


def _results_in(protocol: Protocol, item: dict[str, Any]) -> int:
    """How many tool results one conversation item carries."""
    if protocol is Protocol.RESPONSES:
        return int(str(item.get("type", "")).endswith("call_output"))
    if protocol is Protocol.CHAT:
        return int(item.get("role") == "tool")
    content = item.get("content")
    if item.get("role") != "user" or not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")


def _tool_results(protocol: Protocol, body: dict[str, Any]) -> int:
    return sum(_results_in(protocol, i) for i in _items(protocol, body))


def _position(protocol: Protocol, body: dict[str, Any], tasks: Mapping[str, Task] | None) -> tuple[TurnTag, int] | None:
    """The turn the newest tagged user message names and the tool results after it (None: no tag anywhere). A
    tag inside a tool result (a file that quotes one) names nothing."""
    found: TurnTag | None = None
    done = 0
    for item in _items(protocol, body):
        results = _results_in(protocol, item)
        done += results
        if results == 0 and item.get("role") in ("user", None):
            tag = find_turn(json.dumps(item.get("content"), ensure_ascii=False), tasks)
            if tag is not None:
                found, done = tag, 0
    if found is None:  # the tag outside the messages (a system prompt): the whole conversation is one turn
        tag = find_turn(json.dumps(body, ensure_ascii=False), tasks)
        return None if tag is None else (tag, _tool_results(protocol, body))
    return found, done


def _shell_command(step: Step) -> str:
    if step.intent is Intent.READ:
        if step.offset is None and step.limit is None:
            return f"cat {step.arg}"
        first = step.offset or 1
        last = f"{first + step.limit - 1}" if step.limit is not None else "$"
        return f"sed -n '{first},{last}p' {step.arg}"
    if step.intent is Intent.GREP:
        return f"grep -rn '{step.arg}' ."
    return step.arg


def _arguments(step: Step, folder: Path, tools: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """The harness tool (of ``tools``) that carries out ``step`` and its arguments, or None."""
    part = {k: v for k, v in (("offset", step.offset), ("limit", step.limit)) if v is not None}
    if step.intent is Intent.READ and "Read" in tools:  # Claude Code
        return "Read", {"file_path": str(folder / step.arg), **part}
    if step.intent is Intent.READ and "read" in tools:  # OpenClaw
        return "read", {"path": str(folder / step.arg), **part}
    if step.intent is Intent.GREP and "Grep" in tools:
        return "Grep", {"pattern": step.arg, "path": str(folder), "output_mode": "content", "-n": True}
    if "Bash" in tools:  # Claude Code 2.1.x defers Grep behind ToolSearch: grep through Bash
        return "Bash", {"command": _shell_command(step), "description": step.say or "Run the command"}
    command = _shell_command(step)
    if "exec_command" in tools:  # Codex's unified exec tool
        return "exec_command", {"cmd": command, "workdir": str(folder)}
    if "shell_command" in tools:
        return "shell_command", {"command": command, "workdir": str(folder)}
    if "shell" in tools:
        return "shell", {"command": ["bash", "-lc", command], "workdir": str(folder)}
    if "exec" in tools:  # OpenClaw
        return "exec", {"command": command, "workdir": str(folder), "title": step.say or "Run the command"}
    return None


def _thinks(protocol: Protocol, body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return protocol is Protocol.ANTHROPIC and isinstance(thinking, dict) and thinking.get("type") != "disabled"


def plan(protocol: Protocol, body: dict[str, Any], tasks: Mapping[str, Task] | None = None) -> Turn:
    """The scripted turn answering ``body``: the current step's tool call, or the answer (deterministic).
    ``tasks``: the tasks by name (default :data:`benchmarks.agents.tasks.TASKS`)."""
    serial = json.dumps(body, ensure_ascii=False)
    tokens = max(1, len(serial.encode()) // 4)
    found = _position(protocol, body, tasks)
    if found is None:
        return Turn("OK.", input_tokens=tokens, key="untagged")
    tag, done = found
    task, folder, turn = tag.task, tag.folder, tag.task.turns[tag.turn]
    step = turn.step(done)
    key = f"{task.name}{done:02d}" if len(task.turns) == 1 else f"{task.name}-t{tag.turn + 1:02d}s{done:02d}"
    what = f"Step {done + 1} of the {task.name} task" + (f", turn {tag.turn + 1}" if len(task.turns) > 1 else "")
    thinking = f"{what}: {step.intent.value}." if _thinks(protocol, body) else None
    if step.intent is Intent.ANSWER:
        return Turn(step.arg, thinking=thinking, input_tokens=tokens, key=key)
    chosen = _arguments(step, folder, _tool_names(protocol, body))
    if chosen is None:
        return Turn(turn.steps[-1].arg, thinking=thinking, input_tokens=tokens, key=key)
    call_id = {Protocol.ANTHROPIC: "toolu_", Protocol.RESPONSES: "call_", Protocol.CHAT: "call_"}[protocol] + key
    return Turn(step.say, ToolCall(call_id, chosen[0], chosen[1]), thinking=thinking, input_tokens=tokens, key=key)


def reply(
    protocol: Protocol, body: dict[str, Any], tasks: Mapping[str, Task] | None = None
) -> tuple[dict[str, Any], Events]:
    """The whole reply to ``body`` and the same reply as SSE events (``data: [DONE]`` not included)."""
    return encode(protocol, plan(protocol, body, tasks), body)


# --- the server ------------------------------------------------------------------------------------------


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"_raw": raw.decode("utf-8", "replace")}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        owner = self.server.owner
        arrived = owner.clock()
        path = self.path.split("?", 1)[0].rstrip("/")
        payload: dict[str, Any] = (
            {
                "object": "list",
                "data": [{"id": "scripted", "object": "model", "created": CREATED, "owned_by": "cp_memory"}],
            }
            if path.endswith("/models")
            else {"error": {"type": "not_found_error", "message": f"no route {path}"}}
        )
        record = owner.record(self, "GET", None, payload, arrived=arrived)
        self._answer(record, 200 if path.endswith("/models") else 404, payload)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        owner = self.server.owner
        arrived = owner.clock()
        body = _parse(self.rfile.read(int(self.headers.get("content-length") or 0)))
        protocol = Protocol.of(self.path)
        if self.path.split("?", 1)[0].rstrip("/").endswith("/count_tokens"):
            payload: dict[str, Any] = {"input_tokens": max(1, len(json.dumps(body).encode()) // 4)}
            record = owner.record(self, "POST", body, payload, arrived=arrived)
            self._answer(record, 200, payload)
            return
        if protocol is None or not isinstance(body, dict) or "_raw" in body:
            payload = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": f"cannot serve {self.path}"},
            }
            record = owner.record(self, "POST", body, payload, arrived=arrived)
            self._answer(record, 404 if protocol is None else 400, payload)
            return
        whole, events = reply(protocol, body, owner.tasks)
        record = owner.record(self, "POST", body, whole, protocol, arrived=arrived)
        try:
            owner.before_answer()
            if body.get("stream"):
                self._stream(protocol, events)
            else:
                self._json(200, whole)
        finally:
            owner.answered(record)

    def _answer(self, record: dict[str, Any], status: int, payload: Any) -> None:
        try:
            self._json(status, payload)
        finally:
            self.server.owner.answered(record)

    def _stream(self, protocol: Protocol, events: Events) -> None:
        """``events`` as SSE, event by event, the connection closed at the end (HTTP/1.1 without a length)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in events:
            self.wfile.write(sse([event]))
            self.wfile.flush()
        if protocol is Protocol.CHAT:
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer


class ScriptedServer:
    """``with ScriptedServer(trace=path) as s: ... base_url=s.url ...``; ``s.records`` holds every request.

    Binds 127.0.0.1 (``port`` 0: any free port). ``on_request`` (optional) sees each record as it is made (at
    its arrival, before ``t_answered`` is known). ``answer_delay`` seconds pass between a generation request's
    arrival and its reply (a model's modelled time to answer; 0: at once), so sessions that run at once overlap
    in flight as they would against a real model. Each record carries ``t_sent`` and ``t_answered``
    (:mod:`benchmarks.agents.trace`), seconds since :meth:`start` on the monotonic clock. ``tasks``: the tasks the
    tags may name, by name (default :data:`benchmarks.agents.tasks.TASKS`; a document suite passes its own)."""

    def __init__(
        self,
        *,
        trace: str | Path | None = None,
        port: int = 0,
        on_request: Callable[[dict[str, Any]], None] | None = None,
        answer_delay: float = 0.0,
        tasks: Mapping[str, Task] | None = None,
    ) -> None:
        if answer_delay < 0:
            raise ValueError(f"answer_delay must be >= 0 seconds, got {answer_delay}")
        self.port = port
        self.answer_delay = answer_delay
        self.tasks = tasks
        self.records: list[dict[str, Any]] = []
        self._trace = TraceWriter(trace) if trace is not None else None
        self._on_request = on_request
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no ``/v1``: clients add their own paths)."""
        if self._httpd is None:
            raise RuntimeError("the scripted server is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def clock(self) -> float:
        """Seconds since the server started (monotonic), rounded to 0.1 ms."""
        return round(time.monotonic() - self._started, 4)

    def before_answer(self) -> None:
        """Wait ``answer_delay`` seconds (the modelled model's time to answer)."""
        if self.answer_delay > 0:
            time.sleep(self.answer_delay)

    def record(
        self,
        handler: BaseHTTPRequestHandler,
        method: str,
        body: Any,
        whole: Any,
        protocol: Protocol | None = None,
        *,
        arrived: float | None = None,
    ) -> dict[str, Any]:
        """Keep a request that arrived at ``arrived`` (default: now); returns its record, which
        :meth:`answered` completes."""
        record = {
            "method": method,
            "path": handler.path,
            "protocol": protocol.value if protocol else None,
            "headers": scrub_headers(handler.headers.items()),
            "body": body,
            "reply": whole,
            "t_sent": self.clock() if arrived is None else arrived,
            "t_answered": None,
        }
        with self._lock:
            seq = self._trace.begin() if self._trace else len(self.records)
            record = {"seq": seq, **record}
            self.records.append(record)
        if self._on_request is not None:
            self._on_request(record)
        return record

    def answered(self, record: dict[str, Any]) -> None:
        """The reply to ``record`` is written: its ``t_answered`` is now, and it goes to the trace."""
        record["t_answered"] = self.clock()
        if self._trace is not None:
            self._trace.finish(int(record["seq"]), {k: v for k, v in record.items() if k != "seq"})

    def start(self) -> ScriptedServer:
        self._started = time.monotonic()
        self._httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-server", daemon=True)
        self._thread.start()
        log.info("scripted model server on %s", self.url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._trace is not None:
            self._trace.close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m benchmarks.agents.scripted [--port N] [--trace FILE]``: serve until interrupted."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agents.scripted", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one; logged)")
    ap.add_argument("--trace", default=None, help="JSONL trace file of every request (keys scrubbed)")
    ap.add_argument("--answer-delay", type=float, default=0.0, help="seconds before each generation reply (0)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = ScriptedServer(trace=args.trace, port=args.port, answer_delay=args.answer_delay).start()
    print(f"listening on {server.url}", flush=True)  # noqa: T201 (a CLI's one line of output)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
