"""What a store read returns: a value's token and bytes (:class:`Versioned`), the token of a value no store
wrote (:data:`MALFORMED`) and a fresh token per write (:func:`new_token`). Shared by the in-process store
(:mod:`.store`) and Redis (:mod:`.redis_store`), which :mod:`.store` opens by URL."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = ["MALFORMED", "Versioned", "new_token"]

#: the token a reader sees for a key that holds something this store did not write (another type, no token):
#: a write passing it as ``expected`` replaces that value
MALFORMED = "!malformed"


@dataclass(frozen=True)
class Versioned:
    """A read: ``token`` of the value ("" when the key is absent) and its bytes (None when absent, or when
    the key still holds the token the reader already has)."""

    token: str
    data: bytes | None

    @property
    def absent(self) -> bool:
        return self.token == ""


def new_token() -> str:
    return uuid.uuid4().hex
