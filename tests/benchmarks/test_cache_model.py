"""benchmarks.common.cache_model: the project's own prefix-cache model, and its fit to llama-server.

The unit tests are small worked examples; the engine-marked tests replay prompt sequences on a real
llama-server (random-weight model, 1 slot, host prompt cache) and require the model's cached-token
count to equal the server's reported ``cached_tokens`` for every request.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.common.cache_model import (
    BlockPrefixCache,
    LlamaServerCache,
    Served,
    char_tokens,
    common_prefix,
    regex_tokens,
)
from tests.support import REQUIRE_ENGINE  # strict mode (CI): fail, never skip


# ------------------------------------------------------------------------------------------ block model
def test_block_cache_counts_full_shared_blocks_only() -> None:
    cache = BlockPrefixCache(capacity_tokens=None, block_size=4)
    assert cache.serve(list("abcdefghij")) == Served(0, 10)  # cold
    # the same first 8 tokens (two full blocks), then different: 8 cached
    assert cache.serve(list("abcdefghXY")) == Served(8, 10)
    # shares 6 tokens = one full block + half a block: only the full block counts
    assert cache.serve(list("abcdefZZZZ")) == Served(4, 10)
    assert cache.stats.requests == 3 and cache.stats.cached_tokens == 12 and cache.ratio == pytest.approx(0.4)


def test_block_is_keyed_by_its_prefix_not_only_its_tokens() -> None:
    cache = BlockPrefixCache(capacity_tokens=None, block_size=2)
    cache.serve(["A", "B", "C", "D"])
    # block (C, D) is cached, but after (A, B): at the front of a prompt it is a different block
    assert cache.serve(["C", "D", "A", "B"]).cached == 0


def test_per_token_radix_cache_leaves_one_token_to_compute() -> None:
    cache = BlockPrefixCache(capacity_tokens=None, block_size=1)
    cache.serve([1, 2, 3])
    assert cache.serve([1, 2, 3]) == Served(2, 3)  # identical prompt: the last token is recomputed
    assert cache.serve([1, 2, 3, 4]).cached == 3


def test_lru_evicts_the_tail_of_a_prompt_before_its_head() -> None:
    cache = BlockPrefixCache(capacity_tokens=4, block_size=1)
    cache.serve(["s", "a", "b", "c"])  # 4 blocks: full
    cache.serve(["s", "x"])  # evicts the oldest: c, the deepest of the first prompt
    assert cache.cached_blocks == 4
    assert cache.serve(["s", "a", "b", "z"]).cached == 3  # s, a, b survived
    assert cache.serve(["s", "x", "y"]).cached == 1  # x was the least recent block then


def test_generated_tokens_follow_the_prompt_but_never_match() -> None:
    cache = BlockPrefixCache(capacity_tokens=None, block_size=1)
    cache.serve([1, 2], generated=3)
    assert cache.cached_blocks == 5
    assert cache.serve([1, 2, 9]).cached == 2


def test_text_prompts_use_the_tokenizer() -> None:
    assert regex_tokens("[Doc 1] Alice, 2023.") == ["[", "Doc", "1", "]", "Alice", ",", "2023", "."]
    assert char_tokens("ab") == ["a", "b"]
    cache = BlockPrefixCache(capacity_tokens=None, block_size=1, tokenizer=char_tokens)
    cache.serve("hello world")
    assert cache.serve("hello there").cached == len("hello ")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="block_size"):
        BlockPrefixCache(block_size=0)
    with pytest.raises(ValueError, match="capacity_tokens"):
        BlockPrefixCache(capacity_tokens=8, block_size=16)
    with pytest.raises(ValueError, match="generated"):
        BlockPrefixCache().serve("x", generated=-1)
    with pytest.raises(TypeError, match="prompt"):
        BlockPrefixCache().serve(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tokenizer"):
        BlockPrefixCache(tokenizer="words")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slot_similarity"):
        LlamaServerCache(slot_similarity=2.0)


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix("abc", "abc") == 3


# ------------------------------------------------------------------------------------------ llama-server model
def test_llama_slot_keeps_only_its_last_prompt_without_host_cache() -> None:
    cache = LlamaServerCache(host_cache=False)
    a, b = list("aaaaaaaaaa"), list("bbbbbbbbbb")
    cache.serve(a)
    cache.serve(b)
    assert cache.serve(a + ["!"]).cached == 0  # the slot now holds b


def test_llama_host_cache_brings_back_an_earlier_prompt() -> None:
    cache = LlamaServerCache()
    a, b = list("aaaaaaaaaa"), list("bbbbbbbbbb")
    cache.serve(a)
    cache.serve(b)  # a is saved to the host cache, b computed
    assert cache.serve(a + ["!"]).cached == 10  # a is loaded back into the slot
    assert cache.serve(b + ["?"]).cached == 10  # and b from the host cache


def test_llama_keeps_the_slot_when_it_is_similar_enough() -> None:
    cache = LlamaServerCache()
    cache.serve(list("abcdefghij"))
    # shares 8 of 10 tokens (> 10 % of the request, keeps >= half the slot): no host-cache swap
    assert cache.serve(list("abcdefghXY")).cached == 8
    assert list(cache.states) == []
    # shares 4 of 10 (keeps < half of the slot): the slot is saved first, then reused as far as it matches
    assert cache.serve(list("abcdZZZZZZ")).cached == 4
    assert len(cache.states) == 1


def test_llama_load_needs_a_cached_prompt_better_on_both_counts() -> None:
    cache = LlamaServerCache()
    long_a = list("a" * 40)
    cache.serve(long_a)
    cache.serve(list("b" * 10))
    # shares 8 tokens with the 40-token prompt: keeps only 20 % of it (< 25 %): not loaded
    assert cache.serve(list("a" * 8) + list("c" * 8)).cached == 0


# ------------------------------------------------------------------------------------------ against llama-server
def _engine_or_skip() -> Any:
    from cp_memory.engine import find_llama_server, random_model_path

    try:
        find_llama_server()
        return random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        if REQUIRE_ENGINE:
            pytest.fail(f"CP_MEMORY_REQUIRE_ENGINE=1 but llama-server is absent: {exc}", pytrace=False)
        pytest.skip(f"llama-server or the random model absent: {exc}")


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from cp_memory.engine import LlamaServer

    model = _engine_or_skip()
    with LlamaServer(model, slots=1, ctx_size=4096, cache_ram_mib=256) as srv:
        yield srv


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = regex_tokens(
        "Alice Bob moved to Lisbon works as a nurse has cat named Miso likes hiking painted "
        "sunset lake visited Paris in May 2023 adopted dog plays guitar"
    )
    return [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "." for _ in range(n)]


def _prompts(seed: int = 0) -> list[str]:
    """Sequences that take every path of the policy: shared prefixes, a slot switch and switch back,
    an identical prompt, unrelated prompts, a prompt that keeps less than half of the slot."""
    facts = _sentences(24, seed)
    rng = random.Random(seed + 1)
    out = []
    for q in range(14):
        picked = rng.sample(range(len(facts)), 6)
        if q % 3 == 0:
            picked = sorted(picked)  # aligned-ish: shares a sorted prefix
        body = "\n".join(f"[Doc {i + 1}] {facts[j]}" for i, j in enumerate(picked))
        out.append(f"Memories:\n{body}\n\nQuestion: what happened {q}?\nAnswer:")
    out.insert(5, out[2])  # identical to an earlier prompt
    out.insert(9, "Unrelated warm-up request. Answer:")
    out.append(out[0] + " And more text after the first prompt.")
    return out


@pytest.mark.engine
@pytest.mark.parametrize("max_tokens", [1, 4])
def test_model_equals_llama_server_cached_tokens(server: Any, max_tokens: int) -> None:
    from cp_memory.engine import EngineClient

    server.restart()  # cold slot and host cache
    model = LlamaServerCache()
    radix = BlockPrefixCache(capacity_tokens=None, block_size=1)
    with EngineClient(server.base_url) as client:
        rows = []
        for prompt in _prompts():
            ids = client.tokenize(prompt)
            assert ids is not None
            reply = client.complete(prompt, max_tokens=max_tokens, temperature=0.0)
            assert reply.prompt_tokens == len(ids)
            predicted = model.serve(ids, generated=max_tokens - 1)
            upper = radix.serve(ids, generated=max_tokens - 1)
            rows.append((reply.cached_tokens, predicted.cached, upper.cached))
    assert [r[0] for r in rows] == [r[1] for r in rows], rows
    assert all(r[0] <= r[2] for r in rows)  # a radix cache would reuse at least as much
    assert sum(r[0] for r in rows) > 0


@pytest.mark.engine
def test_model_equals_llama_server_on_locomo_prompts(server: Any) -> None:
    """The benchmark's own prompt shapes: LoCoMo observations, TF-IDF top-12, baseline then aligned order,
    the warm-up prompt first, 8 generated tokens per answer."""
    from benchmarks.common.locomo import LocomoNotFound, load_locomo
    from benchmarks.index_workload import render
    from benchmarks.locomo.engines import WARMUP_PROMPT
    from benchmarks.retrieval import TfidfRetriever
    from cp_memory.core.index import ContextIndex
    from cp_memory.engine import EngineClient

    try:
        conv = load_locomo()[0]
    except LocomoNotFound as exc:
        pytest.skip(str(exc))
    texts = {o.id: o.text for o in conv.observations}
    ids = list(texts)
    retriever = TfidfRetriever([texts[i] for i in ids])
    questions = [q.question for q in conv.qa if q.category != 5][:6]
    for aligned in (False, True):
        server.restart()
        model = LlamaServerCache()
        index = ContextIndex()
        with EngineClient(server.base_url) as client:
            got, want = [], []
            for prompt in [WARMUP_PROMPT] + [
                render(index.insert(r).order if aligned else r, texts, r, q)
                for q in questions
                for r in [[ids[i] for i in retriever.search(q, 12)]]
            ]:
                ids_ = client.tokenize(prompt)
                assert ids_ is not None
                reply = client.complete(prompt, max_tokens=8, temperature=0.0)
                got.append(reply.cached_tokens)
                want.append(model.serve(ids_, generated=(reply.completion_tokens or 1) - 1).cached)
        assert got == want
        if aligned:
            assert sum(got) > 0
