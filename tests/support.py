"""What every test package shares: strict mode, skip-or-fail, the LoCoMo file, the llama-server binary.

Locally a missing prerequisite (the llama-server binary, the LoCoMo file, an optional extra) skips its tests
with the reason. In CI it must fail instead, so nothing is skipped silently: ``.ci/run`` sets
``CP_MEMORY_STRICT=1`` (``CP_MEMORY_REQUIRE_ENGINE=1``, its older name, means the same).

The LoCoMo file is found like the benchmarks find it (:func:`benchmarks.common.locomo.find_locomo`): the one
environment variable is ``CP_MEMORY_LOCOMO``, else ``../shared/data/locomo10.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

STRICT = any(os.environ.get(v, "") not in ("", "0") for v in ("CP_MEMORY_STRICT", "CP_MEMORY_REQUIRE_ENGINE"))
#: kept for the test modules that read it under its older name
REQUIRE_ENGINE = STRICT


def missing(reason: str) -> NoReturn:
    """Skip — or fail in strict mode (CI must not silently skip tests)."""
    if STRICT:
        pytest.fail(f"CP_MEMORY_STRICT=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_kv_events() -> None:
    """At a test module's top: skip the whole module (fail in strict mode) without the kv-events extra."""
    try:
        import msgspec  # noqa: F401
        import zmq  # noqa: F401
    except ImportError as exc:
        reason = f"the kv-events extra (pyzmq, msgspec) is not installed: {exc}"
        if STRICT:
            pytest.fail(f"CP_MEMORY_STRICT=1 but {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def locomo_file() -> Path:
    """The LoCoMo file, or skip/fail with where to get it."""
    from benchmarks.common.locomo import LocomoNotFound, find_locomo

    try:
        return find_locomo()
    except LocomoNotFound as exc:
        missing(str(exc))


def llama_server_binary() -> Path:
    """The llama-server binary scripts/setup.sh builds, or skip/fail."""
    from cp_memory.engine import find_llama_server

    try:
        return find_llama_server()
    except FileNotFoundError as exc:
        missing(f"llama-server binary absent: {exc}")


#: common words with stable tokenisation: random texts for engine tests whose prefixes must (not) match
WORDS = (
    "river stone garden letter window market doctor village summer winter music camera teacher bridge "
    "forest island paper school dinner travel family friend"
).split()


def random_text(seed: int, n_words: int) -> str:
    """``n_words`` of :data:`WORDS`, reproducible from ``seed``."""
    import random

    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))
