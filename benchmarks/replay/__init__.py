"""Replay an exported LoCoMo prompt sequence against any OpenAI-compatible engine (standard library only).

``python -m benchmarks.replay FILE --engine-url URL`` or ``--llama-server BIN --model GGUF``; the file comes
from ``python -m benchmarks.locomo ... --export-prompts FILE``. See docs/replay.md.
"""

from __future__ import annotations
