"""``--engine torch``: the same GGUF answered in-process by ``transformers`` on torch (CPU), greedy.

For quality only, where no llama-server is built yet (a fresh machine while ``scripts/setup.sh`` compiles
llama.cpp) and vLLM's CPU start-up takes longer than the run: the GGUF's config, tokenizer and chat template
are read by ``transformers`` and its tensors dequantized to float32 (``load_gguf_checkpoint``, as
:mod:`cp_memory.engine.hf_model` does for vLLM). No prefix cache, no timing: answers only. Results are labelled
``<model>@torch`` and never mixed with llama-server's (a dequantized model answers a little differently).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from benchmarks.common.reply import Reply
from benchmarks.locomo.engines import BenchEngine

logger = logging.getLogger(__name__)

__all__ = ["TorchEngine"]


class TorchEngine(BenchEngine):
    """A GGUF loaded into ``transformers`` (float32, CPU); ``chat`` applies the GGUF's chat template."""

    kind = "torch"
    measures_ttft = False

    def __init__(self, gguf: Path, *, threads: int | None = None) -> None:
        """``gguf``: a GGUF file, or a Hugging Face folder with tokenizer and weights."""
        super().__init__(gguf.name.removesuffix(".gguf"))
        self.gguf = gguf
        self.threads = threads
        self._model: Any = None
        self._tok: Any = None

    def start(self) -> None:
        if self._model is not None:
            return
        import importlib

        import torch

        transformers: Any = importlib.import_module("transformers")
        load_gguf_checkpoint: Any = importlib.import_module(
            "transformers.modeling_gguf_pytorch_utils"
        ).load_gguf_checkpoint
        if self.threads:
            torch.set_num_threads(self.threads)
        if self.gguf.is_dir():  # a Hugging Face folder (harness.resolve_model(name, "vllm"): no GGUF conversion)
            self._tok = transformers.AutoTokenizer.from_pretrained(str(self.gguf))
            model = transformers.AutoModelForCausalLM.from_pretrained(str(self.gguf), dtype=torch.float32)
            self._model = model
            self._model.eval()
            return
        folder, name = str(self.gguf.parent), self.gguf.name
        self._tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        loaded = load_gguf_checkpoint(
            str(self.gguf), return_tensors=True, model_to_load=model, torch_dtype=torch.float32
        )
        missing, unexpected = model.load_state_dict(loaded["tensors"], strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"{name}: weights missing {missing[:5]}, unexpected {unexpected[:5]}")
        if tied:
            model.tie_weights()
        self._model = model
        self._model.eval()
        logger.info("%s loaded into transformers (float32, %d threads)", name, torch.get_num_threads())

    def _flush(self) -> str:
        return "none (no prefix cache)"

    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        return self.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        import torch

        self.start()
        try:
            ids = self._tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
            ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
            with torch.inference_mode():
                out = self._model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    pad_token_id=self._tok.pad_token_id or self._tok.eos_token_id,
                )
            text = self._tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            return Reply(text, None, None, int(ids.shape[1]), 0)
        except Exception as exc:  # a failed request is a Reply with error, never an exception (BenchEngine)
            logger.debug("torch generate failed", exc_info=True)
            return Reply("", None, None, None, None, error=f"{type(exc).__name__}: {exc}")
