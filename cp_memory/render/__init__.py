"""Cache-stable prompt rendering for aligned memories.

The public path, a re-export of :mod:`cp_memory.core.render` (the same objects): ``from cp_memory.render
import build_prompt`` is the documented import (README, docs/mem0.md) and the code lives in the core. A
package rather than ``render.py`` so that git follows ``render.py`` to ``core/render.py`` as a rename
(docs/ARCHITECTURE.md, "Public paths").
"""

from ..core.render import *  # noqa: F403
from ..core.render import __all__ as __all__
