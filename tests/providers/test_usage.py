"""One CacheUsage from every provider's response shape, streamed or not, with the SDKs' own types where
they are installed; odd input gives zeros, never an exception; the savings account prices it."""

from __future__ import annotations

import logging
import math

import pytest

from cp_memory.providers import CacheUsage, PriceRatios, SavingsAccount, UsageStream, read_usage


# ------------------------------------------------------------------ OpenAI
def test_openai_chat_completion_counts_cached_tokens_inside_prompt_tokens():
    openai = pytest.importorskip("openai")
    completion = openai.types.chat.ChatCompletion.model_validate(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-5-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
            "usage": {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920},
            },
        }
    )
    u = read_usage(completion)
    assert (u.provider, u.model) == ("openai", "gpt-5-mini")
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (2006, 1920, 0, 86)
    assert u.output_tokens == 300


def test_openai_gpt_5_6_cache_write_tokens():
    u = read_usage(
        {
            "prompt_tokens": 3000,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 1920},
        }
    )
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (1024, 1920, 56)


def test_openai_chat_stream_usage_arrives_in_the_last_chunk():
    openai = pytest.importorskip("openai")
    Chunk = openai.types.chat.ChatCompletionChunk
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-5-mini"}
    chunks = [
        Chunk.model_validate({**base, "choices": [{"index": 0, "delta": {"content": "he"}}]}),
        Chunk.model_validate({**base, "choices": [{"index": 0, "delta": {"content": "llo"}, "finish_reason": "stop"}]}),
        Chunk.model_validate(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": 1500,
                    "completion_tokens": 2,
                    "total_tokens": 1502,
                    "prompt_tokens_details": {"cached_tokens": 1408},
                },
            }
        ),
    ]
    stream = UsageStream()
    assert [c.id for c in stream.wrap(chunks)] == ["c", "c", "c"]
    assert (stream.usage.input_tokens, stream.usage.cache_read_tokens, stream.usage.model) == (1500, 1408, "gpt-5-mini")


def test_openai_responses_api_usage_and_its_completed_event():
    openai = pytest.importorskip("openai")
    usage = openai.types.responses.ResponseUsage.model_validate(
        {
            "input_tokens": 1800,
            "input_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 0},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 1840,
        }
    )
    u = read_usage(usage)
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) == ("openai", 1800, 1536, 40)
    stream = UsageStream()
    stream.feed({"type": "response.created", "response": {"id": "r", "usage": None}})
    stream.feed({"type": "response.output_text.delta", "delta": "x"})
    stream.feed({"type": "response.completed", "response": {"id": "r", "model": "gpt-5", "usage": usage.model_dump()}})
    assert (stream.usage.cache_read_tokens, stream.usage.model) == (1536, "gpt-5")


# ------------------------------------------------------------------ Anthropic
def test_anthropic_message_input_tokens_are_only_the_uncached_part():
    anthropic = pytest.importorskip("anthropic")
    message = anthropic.types.Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 50,
                "cache_read_input_tokens": 1800,
                "cache_creation_input_tokens": 300,
                "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                "output_tokens": 12,
            },
        }
    )
    u = read_usage(message)
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == ("anthropic", 2150, 1800, 300)
    assert (u.uncached_tokens, u.cache_write_1h_tokens, u.output_tokens) == (50, 200, 12)


def test_anthropic_stream_message_start_then_cumulative_message_delta():
    anthropic = pytest.importorskip("anthropic")
    start = anthropic.types.RawMessageStartEvent.model_validate(
        {
            "type": "message_start",
            "message": {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "usage": {
                    "input_tokens": 20,
                    "cache_read_input_tokens": 1500,
                    "cache_creation_input_tokens": 0,
                    "output_tokens": 1,
                },
            },
        }
    )
    delta = anthropic.types.RawMessageDeltaEvent.model_validate(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 37}}
    )
    stream = UsageStream()
    for event in (start, {"type": "content_block_delta", "delta": {"text": "x"}}, delta):
        stream.feed(event)
    u = stream.usage
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) == ("anthropic", 1520, 1500, 37)


# ------------------------------------------------------------------ Gemini, DeepSeek, engines, LangChain
def test_gemini_usage_metadata_both_spellings():
    sdk = {
        "usage_metadata": {"prompt_token_count": 4200, "cached_content_token_count": 4096, "candidates_token_count": 9}
    }
    rest = {"usageMetadata": {"promptTokenCount": 4200, "cachedContentTokenCount": 4096, "candidatesTokenCount": 9}}
    for shape in (sdk, rest):
        u = read_usage(shape)
        assert (u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) == ("gemini", 4200, 4096, 9)


def test_deepseek_hit_and_miss_tokens():
    u = read_usage(
        {
            "usage": {
                "prompt_tokens": 1300,
                "completion_tokens": 4,
                "prompt_cache_hit_tokens": 1280,
                "prompt_cache_miss_tokens": 20,
            }
        }
    )
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.uncached_tokens) == ("deepseek", 1300, 1280, 20)


def test_self_hosted_engine_completion_result():
    from cp_memory.engine.sse import CompletionResult

    fields = CompletionResult.__dataclass_fields__
    values = {name: None for name in fields}
    values.update(text="x", prompt_tokens=900, cached_tokens=700, completion_tokens=3)
    u = read_usage(CompletionResult(**values))
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) == ("engine", 900, 700, 3)


def test_langchain_usage_metadata():
    u = read_usage(
        {
            "input_tokens": 2100,
            "output_tokens": 5,
            "total_tokens": 2105,
            "input_token_details": {"cache_read": 1800, "cache_creation": 200},
        }
    )
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (2100, 1800, 200, 100)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "odd",
    [
        None,
        3,
        "usage",
        object(),
        {},
        {"usage": None},
        {"usage": {"prompt_tokens": "many"}},
        {"usage": {"prompt_tokens": -5, "prompt_tokens_details": {"cached_tokens": 9}}},
        {"usage": {"cache_read_input_tokens": [1]}},
        [1, 2],
    ],
)
def test_missing_or_odd_fields_give_zeros_and_a_debug_line(odd, caplog):
    caplog.set_level(logging.DEBUG, logger="cp_memory.providers.usage")
    u = read_usage(odd)
    assert u.uncached_tokens >= 0 and u.output_tokens == 0
    assert u.input_tokens in (0, 9)


def test_an_sdk_object_that_fails_to_dump_is_read_from_its_attributes():
    class Broken:
        def __init__(self):
            self.usage = {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}

        def model_dump(self):
            raise RuntimeError("boom")

    assert read_usage(Broken()).input_tokens == 10


# ------------------------------------------------------------------ the account
def test_anthropic_costs_at_list_price_ratios():
    """Reads 0.1x, 5-minute writes 1.25x, 1-hour writes 2x of an uncached input token."""
    account = SavingsAccount()
    account.add(CacheUsage("anthropic", 1000, cache_read_tokens=0, cache_write_tokens=1000, model="claude-sonnet-4-5"))
    account.add(CacheUsage("anthropic", 1000, cache_read_tokens=1000, model="claude-sonnet-4-5"))
    account.add(CacheUsage("anthropic", 100, cache_write_tokens=100, cache_write_1h_tokens=100))
    s = account.summary()
    assert s.cost == pytest.approx(1250 + 100 + 200)
    assert s.without_cache == 2100
    assert s.saved == pytest.approx(2100 - 1550)


def test_openai_prices_by_family_and_configured_dollars():
    account = SavingsAccount({"my-model": PriceRatios(read=0.25, input_per_mtok=2.0)})
    account.add(
        {"model": "gpt-5-mini", "usage": {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1000}}}
    )
    assert account.summary().cost == pytest.approx(1000 + 100)
    dollars = SavingsAccount({"my-model": PriceRatios(read=0.25, input_per_mtok=2.0)})
    dollars.add({"prompt_tokens": 1_000_000, "prompt_tokens_details": {"cached_tokens": 1_000_000}}, model="my-model")
    assert dollars.summary().cost_usd == pytest.approx(0.5)
    assert dollars.summary().without_cache_usd == pytest.approx(2.0)


@pytest.mark.parametrize("bad", [-0.5, True, math.nan, math.inf, "0.1", None])
def test_a_price_is_a_finite_number_of_at_least_zero(bad):
    with pytest.raises(ValueError, match=r"PriceRatios.read must be a number >= 0, got "):
        PriceRatios(read=bad)
    with pytest.raises(ValueError, match=r"PriceRatios.write_1h must be a number >= 0, got "):
        PriceRatios(read=0.1, write_1h=bad)
    if bad is not None:  # None: no list price
        with pytest.raises(ValueError, match=r"PriceRatios.input_per_mtok must be a number >= 0, got "):
            PriceRatios(read=0.1, input_per_mtok=bad)
    assert PriceRatios(read=0, input_per_mtok=None).read == 0


def test_unknown_openai_model_warns_once_and_uses_the_smallest_discount(caplog):
    account = SavingsAccount()
    with caplog.at_level(logging.WARNING, logger="cp_memory.providers.account"):
        for _ in range(3):
            account.add(
                {
                    "model": "my-finetune",
                    "usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 100}},
                }
            )
    assert sum("no price ratios known" in r.message for r in caplog.records) == 1
    assert account.summary().cost == pytest.approx(3 * 50)


def test_providers_without_documented_prices_count_tokens_only():
    account = SavingsAccount()
    account.add({"usage_metadata": {"prompt_token_count": 5000, "cached_content_token_count": 4096}})
    s = account.summary()
    assert (s.cache_read_tokens, s.unpriced_calls, s.cost, s.cost_usd) == (4096, 1, 0.0, None)


def test_the_account_logs_at_info_on_request(caplog):
    account = SavingsAccount(log_every=2)
    with caplog.at_level(logging.INFO, logger="cp_memory.providers.account"):
        account.add(CacheUsage("anthropic", 100, cache_read_tokens=100))
        assert not caplog.records
        account.add(CacheUsage("anthropic", 100, cache_read_tokens=100))
        assert "2 calls" in caplog.records[-1].message
        account.log()
    assert len(caplog.records) == 2


# ------------------------------------------------------------------ the wrapper's account
@pytest.fixture
def alice_turn():
    """A fresh embedded mem0 holding one memory of Alice, wrapped; turn 1 of chat c1 searched, not committed."""
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    memory = default_memory()
    try:
        memory.add([{"role": "user", "content": "Alice has a cat named Miso."}], user_id="alice", infer=False)
        cp = ContextPilotMemory(memory)
        yield cp, cp.search("pets?", filters={"user_id": "alice"}, conversation_id="c1")
    finally:
        memory.close()


@pytest.mark.mem0
def test_commit_with_usage_feeds_the_wrappers_savings(caplog, alice_turn):
    cp, r = alice_turn
    reply = {
        "model": "claude-sonnet-4-5",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 1990,
            "cache_creation_input_tokens": 0,
            "output_tokens": 3,
        },
    }
    assert cp.commit(r, usage=reply) == 1
    cp.commit(cp.search("cat?", filters={"user_id": "alice"}, conversation_id="c1"), usage={"odd": True})
    s = cp.savings()
    assert (s.calls, s.input_tokens, s.cache_read_tokens) == (2, 2000, 1990)
    assert s.cost == pytest.approx(10 + 199)
    with caplog.at_level(logging.INFO, logger="cp_memory.providers.account"):
        cp.savings(log=True)
    assert "1990 read" in caplog.text
    assert cp.savings_account is cp.savings_account


# ------------------------------------------------------------------ hostile counts (issue 28 item 6)
HUGE = 10**400  # a 401-digit token count: float(HUGE) raises OverflowError


def test_a_400_digit_count_is_clamped_logged_and_never_raises(caplog):
    from cp_memory.providers.usage import MAX_USAGE_TOKENS

    reply = {
        "model": "gpt-5",
        "usage": {"prompt_tokens": HUGE, "completion_tokens": HUGE, "prompt_tokens_details": {"cached_tokens": HUGE}},
    }
    with caplog.at_level(logging.WARNING, logger="cp_memory.providers"):
        u = read_usage(reply)
        account = SavingsAccount({"gpt-5": PriceRatios(read=0.1, input_per_mtok=1.25)})
        account.add(reply)
        account.add(CacheUsage("anthropic", HUGE, cache_read_tokens=HUGE, output_tokens=-5))  # built by hand
        account.add(CacheUsage("anthropic", 1e300))  # an integral float past every int64 as well
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (MAX_USAGE_TOKENS,) * 3
    s = account.summary()
    assert s.calls == 3 and s.input_tokens == 3 * MAX_USAGE_TOKENS and s.output_tokens == MAX_USAGE_TOKENS
    assert math.isfinite(s.cost) and s.line()  # the float arithmetic of costs stays finite
    assert "clamped" in caplog.text and len(caplog.text) < 2000  # the number itself is not printed


def test_a_hostile_stream_grows_usage_by_at_most_the_bound_per_field():
    from cp_memory.providers.usage import MAX_USAGE_TOKENS

    stream = UsageStream(provider="anthropic")
    events = [{"type": "message_start", "message": {"usage": {"input_tokens": 1, "cache_read_input_tokens": 0}}}]
    delta = {"input_tokens": None, "cache_read_input_tokens": None, "cache_creation_input_tokens": None}
    events += [{"type": "message_delta", "usage": {**delta, "output_tokens": 10 ** (20 + i)}} for i in range(500)]
    for _ in stream.wrap(events):
        pass
    assert stream.usage.output_tokens == MAX_USAGE_TOKENS and stream.usage.input_tokens == 1


@pytest.mark.mem0
def test_commit_with_a_400_digit_usage_commits_and_does_not_raise(caplog, alice_turn):
    cp, r = alice_turn
    hostile = {"model": "claude-sonnet-4-5", "usage": {"input_tokens": HUGE, "cache_read_input_tokens": HUGE}}
    assert cp.commit(r, usage=hostile) == 1  # raised OverflowError after committing the turn
    assert cp.savings().calls == 1
