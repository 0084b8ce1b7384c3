"""Optional LLM judge (``--judge-url``): an OpenAI-compatible chat model grades each answer 0 / 0.5 / 1.

The paper graded with GPT-4.1; any capable model behind an OpenAI-compatible endpoint works (a local
SGLang/vLLM/llama.cpp server, or a hosted API with ``--judge-api-key``). Judging runs after all modes
are measured, so its requests never share the measured engine's cache or time.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)

__all__ = ["JUDGE_SYSTEM", "Judge", "parse_score"]

JUDGE_SYSTEM = (
    "You are an answer evaluator. Given a question, a predicted answer and the ground-truth answer, judge "
    "whether the prediction is correct.\n"
    'Output JSON only: {"score": <0, 0.5 or 1>, "reason": "<brief reason>"}\n'
    "Score 1 = fully correct, 0.5 = partially correct, 0 = wrong. Be lenient with phrasing differences if "
    "the meaning matches (dates in another format are fine)."
)

_NUMBER = re.compile(r"\"?score\"?\s*[:=]\s*([01](?:\.\d+)?)|^\s*([01](?:\.\d+)?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_score(text: str) -> float | None:
    """The score in a judge reply (JSON ``{"score": x}``, possibly fenced, or a bare number), in [0, 1]."""
    cleaned = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
    cleaned = re.sub(r"^```(?:json)?\s*|\s*```$", "", cleaned)
    try:
        data = json.loads(cleaned)
        if isinstance(data, dict) and isinstance(data.get("score"), (int, float)):
            return min(1.0, max(0.0, float(data["score"])))
    except ValueError:
        pass
    m = _NUMBER.search(cleaned)
    if m:
        return min(1.0, max(0.0, float(m.group(1) or m.group(2))))
    return None


class Judge:
    """Grades (question, prediction, gold) triples with a chat model."""

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None, max_tokens: int = 96) -> None:
        from cp_memory.engine import EngineClient

        self.client = EngineClient(url, model=model, api_key=api_key, send_request_id=False, timeout=300.0)
        self.model = model
        self.max_tokens = max_tokens

    def score(self, question: str, prediction: str, gold: str) -> float | None:
        from cp_memory.engine import EngineError

        messages = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Question: {question}\nPredicted: {prediction}\nGround truth: {gold}"},
        ]
        try:
            reply = self.client.chat(messages, max_tokens=self.max_tokens, temperature=0.0)
        except EngineError as exc:
            logger.warning("judge request failed: %s", exc)
            return None
        score = parse_score(reply.text)
        if score is None:
            logger.warning("judge reply without a score: %r", reply.text[:200])
        return score

    def score_many(
        self, items: Sequence[tuple[str, str, str]], tick: Callable[[], None] | None = None
    ) -> list[float | None]:
        """Scores in order; identical triples are judged once."""
        memo: dict[tuple[str, str, str], float | None] = {}
        out = []
        for item in items:
            if item not in memo:
                memo[item] = self.score(*item) if item[1].strip() else 0.0
            out.append(memo[item])
            if tick is not None:
                tick()
        return out

    def close(self) -> None:
        self.client.close()
