"""Chat-template control tokens made inert in retrieved text (memories, documents, summaries).

The public path, a re-export of :mod:`cp_memory.core.special_tokens` (the same objects): ``from
cp_memory.special_tokens import SpecialTokens`` is the documented import (docs/mem0.md) and the code lives
in the core (docs/ARCHITECTURE.md, "Public paths").
"""

from .core.special_tokens import *  # noqa: F403
from .core.special_tokens import __all__ as __all__
