"""Secrets never reach a log line, a repr or an error message: API keys and tokens
given to a server on its command line, and the API key / URL password of a client."""

from __future__ import annotations

import base64
import logging
import sys
from pathlib import Path

import pytest

from cp_memory.engine import EngineClient, EngineStatusError, LlamaServer
from cp_memory.engine._server import ManagedServer, ServerStartError
from cp_memory.engine.redact import redact_args, scrub, secret_values

from .conftest import FakeEngine, FakeRequest, MakeClient

SECRETS = ["sk-live-0123456789", "hf_tokenABCDEF", "hf_shortflagXYZ", "/run/secrets/engine.key", "adm-9876543210"]
ARGS = [
    "--api-key",
    SECRETS[0],
    f"--hf-token={SECRETS[1]}",
    "-hft",
    SECRETS[2],
    "--api-key-file",
    SECRETS[3],
    "--admin-api-key",
    SECRETS[4],
    "--cors-credentials",
    "--port",
    "8080",
    "--tokenizer-path",
    "/models/tok",
]

# an engine that prints its argv at start-up, as SGLang prints its server_args
ECHO_ENGINE = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
print("server_args:", sys.argv, flush=True)
if "--fail" in sys.argv:
    sys.exit("bad arguments: " + " ".join(sys.argv))
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


class EchoEngine(ManagedServer):
    engine_name = "echo-engine"

    def __init__(self, *args: str, **kw: object) -> None:
        super().__init__(stop_timeout=2.0, **kw)  # type: ignore[arg-type]
        self.extra_args = args

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", ECHO_ENGINE, str(port), *self.extra_args]


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (secret, text)


def test_redact_args() -> None:
    assert redact_args(ARGS) == [
        "--api-key",
        "***",
        "--hf-token=***",
        "-hft",
        "***",
        "--api-key-file",
        "***",
        "--admin-api-key",
        "***",
        "--cors-credentials",
        "--port",
        "8080",
        "--tokenizer-path",
        "/models/tok",
    ]
    assert secret_values(ARGS) == SECRETS
    assert scrub(f"key={SECRETS[0]} ok", SECRETS) == "key=*** ok"
    assert scrub("a short one: abc", ["abc"]) == "a short one: abc"  # too short to scrub blindly


def test_server_secrets_stay_out_of_logs_repr_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        server = EchoEngine(*ARGS)
        with server:
            assert "server_args" in server.log_tail()  # the log is quoted, masked
            assert_no_secret(server.log_tail())
            assert_no_secret(repr(server))
        with pytest.raises(ServerStartError) as info:
            EchoEngine(*ARGS, "--fail").start()
    assert "starting echo-engine" in caplog.text and "--api-key ***" in caplog.text
    assert "bad arguments" in str(info.value) and "***" in str(info.value)
    assert_no_secret(str(info.value))
    assert_no_secret(caplog.text)


def test_client_key_stays_out_of_logs_repr_and_errors(
    make_client: MakeClient, fake_engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The server echoes the Authorization header in its error bodies: 503 (retried, so logged
    by tenacity) and 401; neither message nor log carries the key."""

    def echo(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        auth = req.headers.get("Authorization", "")
        status = 503 if len(fake_engine.requests) == 1 else 401
        return status, {}, f'{{"error": {{"message": "bad credentials: {auth}"}}}}'.encode()

    fake_engine.responder = echo
    with (
        caplog.at_level(logging.DEBUG),
        make_client(fake_engine.url, api_key=SECRETS[0]) as client,
        pytest.raises(EngineStatusError) as info,
    ):
        client.complete("p")
    assert fake_engine.requests[0].headers["Authorization"] == f"Bearer {SECRETS[0]}"
    assert info.value.status == 401 and "bad credentials: Bearer ***" in str(info.value)
    assert "Retrying" in caplog.text and "Bearer ***" in caplog.text
    assert_no_secret(str(info.value))
    assert_no_secret(caplog.text)
    plain = EngineClient(fake_engine.url, api_key=SECRETS[0])
    assert "api_key='***'" in repr(plain) and "headers" not in repr(plain._config)
    assert_no_secret(repr(plain) + repr(plain._config))
    plain.close()


def test_url_password_becomes_basic_auth_and_is_never_shown(
    fake_engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    fake_engine.responder = lambda req: (500, {}, b"boom")
    url = fake_engine.url.replace("http://", f"http://bob:{SECRETS[4]}@")
    with (
        caplog.at_level(logging.DEBUG),
        EngineClient(url, max_retries=1, retry_wait_s=0.01) as client,
        pytest.raises(EngineStatusError) as info,
    ):
        client.complete("p")
    sent = fake_engine.requests[0].headers["Authorization"]
    assert base64.b64decode(sent.split()[1]).decode() == f"bob:{SECRETS[4]}"
    assert client.base_url == fake_engine.url
    assert_no_secret(str(info.value) + caplog.text + repr(client))


@pytest.mark.engine
def test_llama_server_api_key(random_model: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real llama-server started with ``--api-key``: the key works, and is nowhere in the logs."""
    with (
        caplog.at_level(logging.DEBUG),
        LlamaServer(random_model, ctx_size=512, cache_ram_mib=0, extra_args=["--api-key", SECRETS[0]]) as server,
    ):
        with EngineClient(server.base_url, api_key=SECRETS[0]) as client:
            assert client.complete("Hello", max_tokens=2).finish_reason
        with EngineClient(server.base_url) as client, pytest.raises(EngineStatusError) as info:
            client.complete("Hello", max_tokens=2)
        assert info.value.status == 401
        assert_no_secret(server.log_tail() + repr(server))
    assert "--api-key ***" in caplog.text
    assert_no_secret(caplog.text)
