"""benchmarks/gateway_latency.py on a tiny run: the fixed-reply upstream in its own process, the gateway started
by its own CLI, every workload (the Claude Code body from the committed trace included) measured and written
through the harness. Not a timing assertion: speed lives in docs/results/gateway_latency.*."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from benchmarks.gateway_latency import WORKLOADS, main, summarise, upstream_process, workloads
from tests.support import missing


def _require_gateway() -> None:
    for module in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            missing(f"the gateway extra is not installed ({module})")


def test_the_fixed_upstream_answers_every_workload_in_its_protocol():
    with upstream_process() as upstream, httpx.Client() as client:
        for name, workload in workloads().items():
            response = client.post(upstream.url + workload.path, json=workload.body, headers=workload.headers)
            assert response.status_code == 200, name
            if workload.body.get("stream"):
                assert response.headers["content-type"] == "text/event-stream"
                last = "data: [DONE]" if workload.openai else "event: message_stop"
                assert last in response.text
            else:
                assert response.json()["choices"][0]["message"]["content"] == "OK."


def test_a_tiny_run_through_the_gateway_writes_its_results(tmp_path: Path):
    _require_gateway()
    argv = ["--requests", "20", "--warmup", "2", "--rounds", "2", "--arms", "direct,gateway", "--out", str(tmp_path)]
    payload = main(argv)
    assert payload["command"].startswith("python -m benchmarks.gateway_latency")
    assert set(payload["results"]) == set(WORKLOADS)  # the Claude Code trace is committed
    for per_arm in payload["results"].values():
        assert per_arm["direct"]["requests"] == per_arm["gateway"]["requests"] == 20
        added = per_arm["gateway"]["added_ms"]
        assert added["p50_rounds"]["rounds"] == 2 and added["p50"] is not None
        assert per_arm["gateway"].get("cpu_ms_per_request", 0) >= 0
    written = json.loads((tmp_path / "gateway_latency.json").read_text(encoding="utf-8"))
    assert written["results"] == payload["results"]
    assert "| messages-stream | gateway | 20 |" in (tmp_path / "gateway_latency.md").read_text(encoding="utf-8")


def test_added_latency_is_paired_by_request_and_cut_into_rounds():
    samples = {"direct": [0.001, 0.002, 0.003, 0.004], "gateway": [0.002, 0.004, 0.004, 0.008]}
    summary = summarise(samples, rounds=2)
    added = summary["gateway"]["added_ms"]
    assert added["p50"] == 1.5  # the added times are 1, 2, 1, 4 ms
    assert added["p50_rounds"] == {"median": 2.0, "min": 1.5, "max": 2.5, "rounds": 2}
    assert "added_ms" not in summary["direct"]
