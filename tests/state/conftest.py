"""A private redis-server per test module (tests/redis_server.py), and a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_server import RedisServer, running_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    folder: Path = tmp_path_factory.mktemp("redis")
    with running_redis(folder) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url
