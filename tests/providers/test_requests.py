"""Provider-aware requests from cp_memory's layout: Anthropic breakpoints where the cached prefix ends, OpenAI
keys per scope; bad input fails clearly or degrades as documented."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.common.provider_cache import AnthropicPromptCache, CacheBlock
from cp_memory.core.render import render_context
from cp_memory.integrations.chat import user_content
from cp_memory.providers import Counting, PromptCacheKeys, anthropic_request, openai_request
from cp_memory.providers.anthropic import block_texts

WORDS = Counting("words", lambda text: len(text.split()))  # 1 token per word: readable arithmetic
SYSTEM = "word " * 1100  # 1,100 tokens: above Claude Sonnet 4.5's 1,024 minimum


def response(texts: list[str], *, prefix_len: int = 0, conversation: str | None = None, turn: int | None = None):
    """A ContextPilotMemory.search response showing ``texts`` (one line each, as the pipeline renders them),
    as it arrives from another process: plain JSON, its prompt contract rebuilt from the fields."""
    texts = [t.strip() for t in texts]
    blocks = [{"label": f"[Doc {i}]", "id": f"m{i}", "text": t, "extra": False} for i, t in enumerate(texts, 1)]
    order = "Order: [Doc 1] first" if len(texts) > 1 else ""
    context = render_context(texts, order_annotation=order or None)
    return {
        "results": [{"id": b["id"], "memory": b["text"]} for b in blocks],
        "context_pilot": {
            "scope": "user_id=alice",
            "conversation_id": conversation,
            "turn": turn,
            "blocks": blocks,
            "context": context,
            "order_annotation": order,
            "prefix_len": prefix_len,
        },
    }


def marks(req) -> list[tuple[str, int]]:
    return [(b.where, b.block) for b in req.breakpoints]


def cache_blocks(req) -> list[CacheBlock]:
    k = req.kwargs()
    return [
        CacheBlock(tuple(text.split()), ttl)
        for text, ttl in block_texts(k.get("tools", []), k.get("system", []), k["messages"])
    ]


# ------------------------------------------------------------------ Anthropic
class TestAnthropicBreakpoints:
    def test_one_shot_question_marks_the_stable_prefix_the_aligned_prefix_and_the_memories(self):
        docs = [f"memory {i} " * 10 for i in range(6)]
        req = anthropic_request(
            "Where?", response(docs, prefix_len=3), model="claude-sonnet-4-5", system=SYSTEM, counting=WORDS
        )
        # blocks: 0 = system, 1..6 = one per memory line, 7 = annotations + question
        assert marks(req) == [("stable", 0), ("aligned", 3), ("turn", 6)]
        content = req.kwargs()["messages"][-1]["content"]
        assert "".join(b["text"] for b in content) == user_content("Where?", response(docs))  # same bytes
        assert content[-1]["text"].endswith("Question: Where?") and "cache_control" not in content[-1]

    def test_aligned_questions_read_the_prefix_an_earlier_question_wrote(self):
        """An entry exists only where an earlier request put a breakpoint: the first question writes its
        memory lines' end; the second shares 4 of them, misses them and writes at its aligned prefix; the
        third, aligned on the same 4, reads system + those 4 lines."""
        cache = AnthropicPromptCache(min_tokens=1024)
        shared = [f"shared {i} " * 10 for i in range(4)]
        reads = []
        for own, prefix in ((["own a " * 10], 0), (["own b " * 10, "own c " * 10], 4), (["own d " * 10], 4)):
            req = anthropic_request(
                "Q?",
                response(shared + own, prefix_len=prefix),
                model="claude-sonnet-4-5",
                system=SYSTEM,
                counting=WORDS,
            )
            reads.append(cache.serve(cache_blocks(req), now=len(reads)).read)
        assert reads[0] == 0 and reads[1] == 1100
        assert reads[2] == 1100 + 1 + 4 * 22  # system, "Context:", four shared lines ("[Doc i]" + 20 words)

    def test_spare_breakpoints_anchor_every_20_memory_lines_above_the_aligned_prefix(self):
        docs = [f"m{i} " * 5 for i in range(70)]
        first = anthropic_request("Q?", response(docs), model="claude-sonnet-4-5", system=SYSTEM, counting=WORDS)
        assert marks(first) == [("stable", 0), ("anchor", 20), ("anchor", 40), ("turn", 70)]
        later = anthropic_request(
            "Q?", response(docs, prefix_len=10), model="claude-sonnet-4-5", system=SYSTEM, counting=WORDS
        )
        assert marks(later) == [("stable", 0), ("aligned", 10), ("anchor", 30), ("turn", 70)]

    def test_chat_turn_moving_breakpoint_reads_last_turn_and_writes_this_one(self):
        cache = AnthropicPromptCache(min_tokens=1024)
        history: list[dict[str, Any]] = []
        reads = []
        for t in range(1, 5):
            r = response([f"turn {t} fact " * 8], conversation="chat-1", turn=t)
            req = anthropic_request(
                f"Question {t}?", r, model="claude-sonnet-4-5", system=SYSTEM, history=history, counting=WORDS
            )
            assert [w for w, _ in marks(req)] == ["stable", "turn"]
            served = cache.serve(cache_blocks(req), now=t * 20)
            reads.append(served.read)
            history = history + [
                {"role": "user", "content": user_content(f"Question {t}?", r)},
                {"role": "assistant", "content": f"answer {t} " * 30},
            ]
        assert reads[0] == 0
        assert all(later > earlier for earlier, later in zip(reads[1:], reads[2:]))
        # from turn 2 on everything but the last answer and the new message was read
        assert reads[1] > 1100

    def test_late_layout_marks_the_end_of_the_history_not_the_new_message(self):
        history = [{"role": "user", "content": "plain question"}, {"role": "assistant", "content": "an answer"}]
        req = anthropic_request(
            "Next?", response(["fact " * 5]), model="claude-sonnet-4-5", system=SYSTEM, history=history, counting=WORDS
        )
        assert marks(req) == [("stable", 0), ("history", 2)]

    def test_a_long_tool_using_turn_gets_a_breakpoint_within_the_20_block_lookback(self):
        """The previous request ended at the last user block of the history; 30 assistant blocks later a
        breakpoint at the end of the history would look back too short: it goes 20 blocks after that end."""
        history = [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": [{"type": "text", "text": f"step {i}"} for i in range(30)]},
        ]
        req = anthropic_request(
            "Next?",
            response(["fact " * 5], conversation="c", turn=2),
            model="claude-sonnet-4-5",
            system=SYSTEM,
            history=history,
            counting=WORDS,
        )
        where = dict((w, b) for w, b in marks(req))
        assert where["history"] - 1 == 20  # block 1 is the last user block of the history

    def test_the_callers_breakpoints_are_counted_never_removed(self):
        system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
        tools = [
            {
                "name": f"t{i}",
                "description": "d",
                "input_schema": {"type": "object"},
                **({"cache_control": {"type": "ephemeral"}} if i == 1 else {}),
            }
            for i in range(2)
        ]
        with pytest.raises(ValueError, match="1h cache_control breakpoint"):
            # the caller's 5m tool mark comes before its 1h system mark: Anthropic would reject it
            anthropic_request(
                "Q?", response(["a " * 10] * 3), model="claude-sonnet-4-5", system=system, tools=tools, counting=WORDS
            )
        tools[1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        req = anthropic_request(
            "Q?",
            response(["a " * 10, "b " * 10, "c " * 10], prefix_len=1),
            model="claude-sonnet-4-5",
            system=system,
            tools=tools,
            counting=WORDS,
        )
        assert [w for w, _ in marks(req)] == ["caller", "caller", "aligned", "turn"]
        assert req.kwargs()["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        assert sum(1 for _, ttl in block_texts(req.tools, req.system, req.messages) if ttl) == 4

    def test_more_than_four_breakpoints_is_a_clear_error(self):
        with pytest.raises(ValueError, match="at most 4"):
            anthropic_request("Q?", response(["a"]), model="claude-sonnet-4-5", max_breakpoints=5)
        tools = [{"name": f"t{i}", "input_schema": {}, "cache_control": {"type": "ephemeral"}} for i in range(5)]
        with pytest.raises(ValueError, match="already carries 5"):
            anthropic_request("Q?", response(["a"]), model="claude-sonnet-4-5", tools=tools)

    def test_never_below_the_models_minimum(self):
        short_system = "word " * 300
        req = anthropic_request(
            "Q?",
            response(["fact " * 10] * 3, prefix_len=1),
            model="claude-haiku-4-5",
            system=short_system,
            counting=WORDS,
        )
        assert req.min_tokens == 4096 and req.breakpoints == ()
        assert any("below the minimum 4096" in s for s in req.skipped)

    def test_an_unknown_model_gets_the_conservative_minimum_and_a_warning(self, caplog):
        with caplog.at_level(logging.WARNING, logger="cp_memory.providers.anthropic"):
            req = anthropic_request("Q?", response(["fact"]), model="claude-future-9", system=SYSTEM, counting=WORDS)
        assert req.min_tokens == 4096
        assert "unknown Anthropic model" in caplog.text
        assert req.breakpoints == ()  # 1,100 tokens < 4,096: nothing placed, nothing broken

    def test_the_estimate_needs_a_margin_over_the_minimum(self):
        est = Counting("estimate", lambda text: len(text) // 4, margin=1.25)
        assert not est.reaches(1100, 1024) and est.reaches(1280, 1024)

    @pytest.mark.parametrize("margin", [True, 0.9, math.inf, math.nan, "1.25", None])
    def test_a_margin_is_a_finite_number_of_at_least_one(self, margin):
        with pytest.raises(ValueError, match=r"Counting.margin must be a number >= 1.0, got "):
            Counting("estimate", lambda text: len(text) // 4, margin=margin)

    @pytest.mark.parametrize("layout", ["early", "", "LATE", True])
    def test_an_unknown_layout_is_refused_with_the_choices(self, layout):
        with pytest.raises(ValueError, match=r"layout must be one of \('append', 'late', 'oneshot'\), got "):
            anthropic_request("Q?", response(["a"]), model="claude-sonnet-4-5", layout=layout)

    def test_ttl_option(self):
        req = anthropic_request(
            "Q?", response(["a " * 10] * 2), model="claude-sonnet-4-5", system=SYSTEM, stable_ttl="1h", counting=WORDS
        )
        assert req.kwargs()["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        with pytest.raises(ValueError, match="longer TTLs"):
            anthropic_request("Q?", response(["a"]), model="claude-sonnet-4-5", ttl="1h", stable_ttl="5m")
        with pytest.raises(ValueError, match="ttl must be one of"):
            anthropic_request("Q?", response(["a"]), model="claude-sonnet-4-5", ttl="10m")

    def test_history_is_copied_not_changed(self):
        history = [{"role": "user", "content": "q1 " * 600}, {"role": "assistant", "content": "a1 " * 600}]
        before = [dict(m) for m in history]
        anthropic_request(
            "Q?", response(["a"]), model="claude-sonnet-4-5", system=SYSTEM, history=history, counting=WORDS
        )
        assert history == before

    def test_a_plain_mem0_response_is_one_uncut_message(self):
        plain = {"results": [{"id": "1", "memory": "Alice has a cat."}]}
        req = anthropic_request("Q?", plain, model="claude-sonnet-4-5", system=SYSTEM, counting=WORDS)
        assert len(req.messages[-1]["content"]) == 1
        assert req.messages[-1]["content"][0]["text"] == user_content("Q?", plain)


# ------------------------------------------------------------------ OpenAI
class TestOpenAIKeys:
    def test_the_key_is_a_keyed_hash_of_the_full_scope(self):
        keys = PromptCacheKeys("application-secret-0001")
        alice = keys.key({"user_id": "alice"})
        assert alice == keys.key({"user_id": "alice"})
        assert "alice" not in alice and alice.startswith("cp-") and len(alice) == 35
        assert keys.key({"user_id": "alice", "agent_id": "bot"}) != alice
        assert keys.key({"user_id": "alice", "metadata": {"topic": "food"}}) != alice  # every filter counts
        assert PromptCacheKeys("another-secret-00002").key({"user_id": "alice"}) != alice
        assert "secret" not in repr(keys)

    def test_a_short_secret_is_refused(self):
        with pytest.raises(ValueError, match="16 bytes"):
            PromptCacheKeys("short")

    def test_request_kwargs_chat_and_responses(self):
        keys = PromptCacheKeys("application-secret-0001")
        r = response(["fact one", "fact two"])
        chat = openai_request("Q?", r, system="stable", keys=keys, retention="24h")
        assert chat["messages"][0] == {"role": "system", "content": "stable"}
        assert chat["messages"][-1]["content"] == user_content("Q?", r)
        assert chat["prompt_cache_key"] == keys.key("user_id=alice")
        assert chat["prompt_cache_retention"] == "24h"
        responses = openai_request("Q?", r, system="stable", api="responses")
        assert "input" in responses and "prompt_cache_key" not in responses
        with pytest.raises(ValueError, match="retention"):
            openai_request("Q?", r, retention="1h")
        with pytest.raises(ValueError, match=r"api must be one of \('chat', 'responses'\), got 'completions'"):
            openai_request("Q?", r, api="completions")


# ------------------------------------------------------------------ on the real embedded mem0
@pytest.fixture(scope="module")
def cp_memory_store() -> Iterator[Any]:
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    memory = default_memory()
    facts = [f"Alice fact number {i}: she likes item {i} and visits place {i}." for i in range(12)]
    memory.add([{"role": "user", "content": f} for f in facts], user_id="alice", infer=False)
    yield ContextPilotMemory(memory)
    memory.close()


@pytest.mark.mem0
def test_a_real_search_response_is_cut_at_its_memory_lines(cp_memory_store):
    first = cp_memory_store.search("What does Alice like?", filters={"user_id": "alice"}, top_k=6)
    second = cp_memory_store.search("Which places does Alice visit?", filters={"user_id": "alice"}, top_k=6)
    for q, r in (("What does Alice like?", first), ("Which places does Alice visit?", second)):
        req = anthropic_request(q, r, model="claude-sonnet-4-5", system=SYSTEM, counting=WORDS)
        content = req.messages[-1]["content"]
        assert "".join(b["text"] for b in content) == user_content(q, r)
        assert len(content) == len(r["context_pilot"]["blocks"]) + 1
    shared = second["context_pilot"]["prefix_len"]
    assert shared > 0  # the index aligned the second question with the first
    keys = PromptCacheKeys("application-secret-0001")
    assert openai_request("q", second, keys=keys)["prompt_cache_key"] == keys.key({"user_id": "alice"})


# ------------------------------------------------------------------ hostile inputs (issue 28 items 5, 10)
def test_the_default_counter_counts_whatever_the_api_accepts():
    pytest.importorskip("bpe_openai")
    from cp_memory.providers import default_counting

    counting = default_counting()
    assert counting.name == "o200k_base"
    assert counting.tokens("a" * 1_000_000) > 0  # bpe-openai refuses 1,000,000 characters
    words = "hello world " * 150_000  # 300,001 tokens: over bpe-openai's 200,000-token chunk limit
    assert counting.tokens(words) == 300_001  # "hello", " world", " hello", ..., the last " "
    import bpe_openai

    text = "The quick brown fox jumps over the lazy dog.\n" * 3000  # 135,000 chars: cut twice, at whitespace
    assert counting.tokens(text) == len(bpe_openai.get_encoding("o200k_base").encode_ordinary(text))


def test_the_default_counter_remembers_long_texts_and_counts_them_the_same(monkeypatch):
    """A gateway counts the same system prompt on every request: the second count of a long text is a memo
    lookup, never a different number; short texts are not remembered."""
    pytest.importorskip("bpe_openai")
    from cp_memory.providers import tokens

    counting = tokens.default_counting()
    system = "You are a careful assistant. Follow the rules below.\n" * 40
    first = counting.tokens(system)
    calls = []
    real = tokens._count_piece
    monkeypatch.setattr(tokens, "_count_piece", lambda enc, piece: calls.append(piece) or real(enc, piece))
    assert counting.tokens(system) == first and calls == []  # remembered by its digest
    assert counting.tokens(system + "again") > first and len(calls) == 1  # another text is counted afresh
    assert counting.tokens("short") == counting.tokens("short") and len(calls) == 3  # short: never remembered


def test_a_tool_use_input_with_int_and_str_keys_is_counted():
    tool_use = {"type": "tool_use", "id": "t1", "name": "lookup", "input": {1: "one", "two": 2}}
    history = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [tool_use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]},
    ]
    req = anthropic_request(
        "Where?", response(["memory one"]), model="claude-sonnet-4-5", system=SYSTEM, history=history, counting=WORDS
    )  # raised TypeError: '<' not supported between instances of 'str' and 'int'
    assert req.kwargs()["messages"][1]["content"][0]["input"] == {1: "one", "two": 2}


def test_a_scope_string_that_spells_another_scope_gets_its_own_key():
    keys = PromptCacheKeys("application-secret-0001")
    forged = keys.key({"user_id": "alice&agent_id=support"})
    pair = keys.key({"user_id": "alice", "agent_id": "support"})
    assert forged != pair  # both scopes were shown as "user_id=alice&agent_id=support"
    forged_response = response(["m"])
    forged_response["context_pilot"]["scope"] = "user_id=alice%26agent_id=support"  # what a search now shows
    assert openai_request("q", forged_response, keys=keys)["prompt_cache_key"] == forged
    assert keys.key("not a scope string") != keys.key({"user_id": "not a scope string"})
