"""Usage read from the upstream's answers, streamed or not, without changing a byte of them.

:class:`SSETap` is fed the stream's raw bytes as they pass through and parses Server-Sent Events
incrementally (``data:`` lines, ``\\n\\n`` or ``\\r\\n\\r\\n`` between events, ``event:`` names, comments), feeding
each JSON payload to :class:`cp_memory.providers.usage.UsageStream`, which merges every protocol's terminal
events: OpenAI Chat's last chunk (also one that still carries ``choices``), the Responses API's
``response.completed``, Anthropic's ``message_start`` + ``message_delta``. An event larger than the bound stops
the tap (the stream still passes through). :func:`body_usage` reads a non-streamed JSON answer.
"""

from __future__ import annotations

import json
import logging
import re

from ..providers.usage import CacheUsage, UsageStream, read_usage

__all__ = ["SSETap", "body_usage"]

logger = logging.getLogger(__name__)

_SEPARATOR = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def body_usage(data: bytes) -> CacheUsage:
    """The usage of a non-streamed JSON answer (zeros for anything else)."""
    try:
        return read_usage(json.loads(data))
    except ValueError:
        return CacheUsage()


class SSETap:
    """Feed raw stream bytes (:meth:`feed`), read :attr:`usage` at any time. Never raises."""

    def __init__(self, max_event_bytes: int) -> None:
        self._buffer = b""
        self._max = max_event_bytes
        self._stream = UsageStream()
        self.events = 0
        self.stopped = False

    def feed(self, data: bytes) -> None:
        if self.stopped or not data:
            return
        self._buffer += data
        while True:
            found = _SEPARATOR.search(self._buffer)
            if found is None:
                break
            event, self._buffer = self._buffer[: found.start()], self._buffer[found.end() :]
            self._event(event)
        if len(self._buffer) > self._max:
            logger.warning("a stream event exceeds %d bytes: usage of this answer is not read", self._max)
            self.stopped, self._buffer = True, b""

    def close(self) -> None:
        """The stream ended: a last event without its blank line still counts."""
        if self._buffer.strip() and not self.stopped:
            self._event(self._buffer)
        self._buffer = b""

    def _event(self, raw: bytes) -> None:
        lines = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        data = b"\n".join(line[5:].lstrip(b" ") if line.startswith(b"data:") else b"" for line in lines)
        data = data.strip()
        if not data or data == b"[DONE]":
            return
        try:
            payload = json.loads(data)
        except ValueError:
            return
        self.events += 1
        self._stream.feed(payload)

    @property
    def usage(self) -> CacheUsage:
        return self._stream.usage
