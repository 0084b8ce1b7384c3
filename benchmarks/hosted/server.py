"""A local stand-in for the OpenAI and Anthropic APIs (127.0.0.1 only) that applies the providers' documented
cache rules (:mod:`benchmarks.common.provider_cache`) and answers in their shapes, streamed or not.

``POST /v1/chat/completions`` (OpenAI Chat Completions, ``stream`` + ``stream_options.include_usage``),
``POST /v1/responses`` (OpenAI Responses, as Codex speaks it: SSE ``response.created`` ... ``response.completed``
with the usage, ``input_tokens_details.cached_tokens``; the same OpenAI cache rules as Chat: 1,024-token
minimum, 128-token increments, routed by ``prompt_cache_key``) and ``POST /v1/messages`` (Anthropic Messages,
SSE ``message_start`` ... ``message_delta`` ... ``message_stop``). The official SDKs talk to it unchanged
(``base_url=server.url``), so their request building, streaming and usage types are the real ones. Prompts
are tokenized with ``o200k_base`` (``bpe-openai``; a word/punctuation split without it): OpenAI's prompt is
every tool definition, then the Responses ``instructions``, then every message or input item (a role or item
type token + its text: a function call's name and arguments, a call output's text); Anthropic's blocks are the
tools, the system blocks and each message's content blocks, in that order.

Time is simulated: each request advances the clock by ``step_s`` seconds, so TTLs and request rates are
deterministic. Each value of the ``x-bench-run`` header gets its own caches (arms never share a cache). The
answer is a fixed short text: the benchmark measures prompts, not answers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from benchmarks.common.cache_model import regex_tokens
from benchmarks.common.provider_cache import AnthropicPromptCache, CacheBlock, OpenAIPromptCache
from cp_memory.providers.anthropic import block_texts
from cp_memory.providers.rules import anthropic_min_tokens

__all__ = ["ANSWER", "ProviderServer", "default_tokenizer"]

ANSWER = "Noted."
#: (SSE event name or None, data) of a streamed answer
Events = list[tuple[str | None, Any]]


def default_tokenizer() -> Callable[[str], Sequence[Hashable]]:
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding("o200k_base")
        return lambda text: enc.encode_ordinary(text)
    except ImportError:
        return regex_tokens


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else "" for p in content)
    return ""


class ProviderServer:
    """``with ProviderServer() as s: OpenAI(base_url=s.url + "/v1")``; ``s.log`` lists every request."""

    def __init__(self, *, step_s: float = 15.0, machines: int = 8, tokenizer: Any = None) -> None:
        self.step_s = step_s
        self.machines = machines
        self.tokenize = tokenizer or default_tokenizer()
        self.now = 0.0
        self.lock = threading.Lock()
        self.openai: dict[str, OpenAIPromptCache] = {}
        self.anthropic: dict[tuple[str, str], AnthropicPromptCache] = {}
        self.log: list[dict[str, Any]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ProviderServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                run, path = self.headers.get("x-bench-run") or "default", self.path.split("?")[0].rstrip("/")
                openai = path.endswith("/chat/completions")
                route = server.route(path)
                if route is None:
                    self.send_error(404)
                    return
                try:
                    events, payload = route(body, run)
                except ValueError as exc:  # what the real API rejects with a 400
                    self._json(400, {"error": {"type": "invalid_request_error", "message": str(exc)}})
                    return
                if not body.get("stream"):
                    self._json(200, payload)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for name, event in events:
                    self.wfile.write(((f"event: {name}\n" if name else "") + f"data: {json.dumps(event)}\n\n").encode())
                if openai:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def route(self, path: str) -> Callable[[dict[str, Any], str], tuple[Events, dict[str, Any]]] | None:
        """The handler of a request path (None: not served)."""
        for suffix, handler in (("/chat/completions", self.chat), ("/responses", self.responses)):
            if path.endswith(suffix):
                return handler
        return self.messages if path.endswith("/messages") else None

    def _tick(self) -> float:
        self.now += self.step_s
        return self.now

    # ------------------------------------------------------------------ OpenAI
    def openai_tokens(self, body: dict[str, Any]) -> list[Hashable]:
        tokens: list[Hashable] = []
        for tool in body.get("tools") or []:
            tokens += list(self.tokenize(json.dumps(tool, sort_keys=True)))
        if isinstance(body.get("instructions"), str):
            tokens += ["<|system|>", *self.tokenize(body["instructions"])]
        items = body.get("messages") or body.get("input") or []
        for m in [{"role": "user", "content": items}] if isinstance(items, str) else items:
            tag, text = _item_text(m)
            tokens.append(f"<|{tag}|>")
            tokens += list(self.tokenize(text))
        return tokens

    def _serve_openai(self, body: dict[str, Any], run: str) -> tuple[float, Any]:
        with self.lock:
            now = self._tick()
            cache = self.openai.setdefault(run, OpenAIPromptCache(machines=self.machines))
            tokens = self.openai_tokens(body)
            served = cache.serve(
                tokens, key=body.get("prompt_cache_key"), retention=body.get("prompt_cache_retention"), now=now
            )
            self.log.append({"api": "openai", "run": run, "now": now, **asdict(served)})
        return now, served

    def chat(self, body: dict[str, Any], run: str) -> tuple[Events, dict[str, Any]]:
        now, served = self._serve_openai(body, run)
        out = len(self.tokenize(ANSWER))
        usage = {
            "prompt_tokens": served.prompt,
            "completion_tokens": out,
            "total_tokens": served.prompt + out,
            "prompt_tokens_details": {"cached_tokens": served.cached, "audio_tokens": 0},
        }
        head = {"id": f"chatcmpl-{len(self.log)}", "created": int(now), "model": body.get("model", "model")}
        payload = {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
            "usage": usage,
        }
        chunk = {**head, "object": "chat.completion.chunk"}
        events: Events = [
            (None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER}}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**chunk, "choices": [], "usage": usage}))
        return events, payload

    def responses(self, body: dict[str, Any], run: str) -> tuple[Events, dict[str, Any]]:
        """OpenAI Responses: the Chat cache rules; the usage as ``input_tokens`` / ``input_tokens_details``."""
        now, served = self._serve_openai(body, run)
        out = len(self.tokenize(ANSWER))
        usage = {
            "input_tokens": served.prompt,
            "input_tokens_details": {"cached_tokens": served.cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": served.prompt + out,
        }
        n = len(self.log)
        part = {"type": "output_text", "text": ANSWER, "annotations": []}
        item = {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant", "content": [part]}
        payload = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(now),
            "status": "completed",
            "model": body.get("model", "model"),
            "output": [item],
            "usage": usage,
        }
        return _responses_events(payload, item), payload

    # ------------------------------------------------------------------ Anthropic
    def anthropic_blocks(self, body: dict[str, Any]) -> list[CacheBlock]:
        system = body.get("system") or []
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        messages = body.get("messages") or []
        texts = block_texts(body.get("tools") or [], system, messages)
        roles: list[str | None] = [None] * (len(texts) - sum(len(_blocks(m)) for m in messages))
        for m in messages:
            roles += [m.get("role")] + [None] * (len(_blocks(m)) - 1)
        out = []
        for (text, ttl), role in zip(texts, roles):
            tokens = ([f"<|{role}|>"] if role else []) + list(self.tokenize(text))
            out.append(CacheBlock(tokens, ttl))
        return out

    def messages(self, body: dict[str, Any], run: str) -> tuple[Events, dict[str, Any]]:
        model = str(body.get("model", "claude"))
        auto = body.get("cache_control")
        automatic = (auto.get("ttl", "5m") if isinstance(auto, dict) else None) or None
        with self.lock:
            now = self._tick()
            cache = self.anthropic.setdefault((run, model), AnthropicPromptCache(anthropic_min_tokens(model)[0]))
            served = cache.serve(self.anthropic_blocks(body), automatic=automatic, now=now)
            self.log.append({"api": "anthropic", "run": run, "now": now, **asdict(served)})
        out = len(self.tokenize(ANSWER))
        usage = {
            "input_tokens": served.uncached,
            "cache_read_input_tokens": served.read,
            "cache_creation_input_tokens": served.written,
            "cache_creation": {
                "ephemeral_5m_input_tokens": served.written - served.written_1h,
                "ephemeral_1h_input_tokens": served.written_1h,
            },
            "output_tokens": out,
        }
        message = {"id": f"msg_{len(self.log)}", "type": "message", "role": "assistant", "model": model}
        payload = {
            **message,
            "content": [{"type": "text", "text": ANSWER}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        return _anthropic_events(message, usage, out), payload


def _item_text(item: Any) -> tuple[str, str]:
    """A Chat message's or a Responses input item's (tag, text) for the prompt's tokens."""
    if not isinstance(item, dict):
        return "user", str(item)
    kind = item.get("type")
    if kind == "function_call":
        return "function_call", f"{item.get('name', '')}{item.get('arguments', '')}"
    if kind == "function_call_output":
        output = item.get("output")
        return "function_call_output", output if isinstance(output, str) else _text_of(output)
    if kind == "reasoning":
        return "reasoning", _text_of(item.get("summary"))
    return str(item.get("role")), _text_of(item.get("content"))


def _responses_events(response: dict[str, Any], item: dict[str, Any]) -> Events:
    """A streamed Responses answer (one text message), each event named and numbered as OpenAI sends them."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    base = {"output_index": 0, "item_id": item["id"]}
    part = item["content"][0]
    raw: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **base, "content_index": 0, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **base, "content_index": 0, "delta": part["text"]},
        {"type": "response.output_text.done", **base, "content_index": 0, "text": part["text"]},
        {"type": "response.content_part.done", **base, "content_index": 0, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return [(str(e["type"]), {**e, "sequence_number": n}) for n, e in enumerate(raw)]


def _event(name: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return name, {"type": name, **fields}


def _anthropic_events(message: dict[str, Any], usage: dict[str, Any], out: int) -> Events:
    """A streamed Anthropic answer: message_start (the usage of the prompt), one text block, message_delta."""
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    return [
        _event("message_start", message=start),
        _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _event("content_block_delta", index=0, delta={"type": "text_delta", "text": ANSWER}),
        _event("content_block_stop", index=0),
        _event("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None}, usage={"output_tokens": out}),
        _event("message_stop"),
    ]


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content", "")
    return content if isinstance(content, list) else [content]
