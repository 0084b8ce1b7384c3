"""Keep secrets out of logs, reprs and error messages.

A command-line flag carries a secret when its name ends in ``key``, ``api-key``, ``token``,
``secret``, ``password`` or ``passwd`` (optionally followed by ``-file``: the path is withheld
too), e.g. ``--api-key``, ``--api-key-file``, ``--hf-token``, ``--admin-api-key``,
``--ssl-key-file``, or is one of the short forms in :data:`SECRET_SHORT_FLAGS` (llama.cpp's
``-hft``). Its value (``--api-key VALUE`` or ``--api-key=VALUE``) is shown as ``***``; the values
found are also scrubbed from any other text quoted (a server log tail that echoes its arguments,
as SGLang's does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["MASK", "SECRET_SHORT_FLAGS", "is_secret_flag", "redact_args", "scrub", "secret_values"]

MASK = "***"
SECRET_SHORT_FLAGS = frozenset({"-hft"})
_SECRET_NAME = re.compile(r"(^|[-_])(key|api[-_]?key|token|secret|password|passwd)([-_]file)?$", re.IGNORECASE)
#: shorter values are not scrubbed from free text (too likely to match innocent words)
_MIN_SCRUB_LEN = 4


def is_secret_flag(flag: str) -> bool:
    """Whether the value of command-line flag ``flag`` (``--name`` or ``-x``) is a secret."""
    if flag in SECRET_SHORT_FLAGS:
        return True
    return flag.startswith("--") and _SECRET_NAME.search(flag[2:]) is not None


def _split(args: Sequence[str]) -> Iterable[tuple[int, str, str | None]]:
    """(index, text, secret) per argument, ``secret`` being the value to hide in it, if any."""
    hide_next = False
    for i, arg in enumerate(args):
        if hide_next and not arg.startswith("--"):
            hide_next = False
            yield i, MASK, arg
            continue
        hide_next = False
        flag, eq, value = arg.partition("=")
        if is_secret_flag(flag):
            if eq:
                yield i, f"{flag}={MASK}", value
                continue
            hide_next = True
        yield i, arg, None


def redact_args(args: Sequence[str]) -> list[str]:
    """``args`` with every secret flag value replaced by ``***``."""
    return [text for _, text, _ in _split(args)]


def secret_values(args: Sequence[str]) -> list[str]:
    """The secret values in ``args`` (to :func:`scrub` from other text)."""
    return [secret for _, _, secret in _split(args) if secret]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret (of 4 characters or more) masked."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SCRUB_LEN:
            text = text.replace(secret, MASK)
    return text
