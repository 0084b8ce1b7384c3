"""The providers' cache models follow their documented rules, one test per rule (docs/hosted.md cites them).

Token ids are plain integers here: the models count tokens, they never tokenize.
"""

from __future__ import annotations

import pytest

from benchmarks.common.cache_model import AnthropicPromptCache, OpenAIPromptCache
from benchmarks.common.provider_cache import CacheBlock


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# ============================================================== OpenAI
class TestOpenAIRules:
    def test_caching_starts_at_1024_tokens(self):
        """ "Caching is enabled automatically for prompts that are 1024 tokens or longer."""
        cache = OpenAIPromptCache(machines=1)
        short = toks(1023)
        cache.serve(short, now=0)
        assert cache.serve(short, now=1).cached == 0
        long = toks(1024)
        cache.serve(long, now=2)
        assert cache.serve(long, now=3).cached == 1024

    def test_hits_grow_in_128_token_steps_after_the_first_1024(self):
        """ "After the first 1,024 tokens, cache hits occur for every 128 additional identical tokens.\""""
        cache = OpenAIPromptCache(machines=1)
        first = toks(1500)
        cache.serve(first, now=0)
        # shares 1200 tokens with the first prompt: the hit is 1152 = 1024 + 128, not 1200
        second = toks(1200) + toks(400, start=10_000)
        assert cache.serve(second, now=1).cached == 1152

    def test_a_single_token_changed_in_the_first_1024_is_a_miss(self):
        """ "A single character difference in the first 1,024 tokens results in a cache miss.\""""
        cache = OpenAIPromptCache(machines=1)
        prompt = toks(2000)
        cache.serve(prompt, now=0)
        changed = list(prompt)
        changed[500] = -1
        assert cache.serve(changed, now=1).cached == 0

    def test_routing_by_the_first_256_tokens_and_the_key(self):
        """Requests are routed by a hash of the prompt's first ~256 tokens combined with prompt_cache_key:
        the same prefix with the same key lands on the same machine; another key may land elsewhere."""
        cache = OpenAIPromptCache(machines=64)
        a = toks(256) + toks(2000, start=5000)
        b = toks(256) + toks(2000, start=9000)  # same first 256 tokens, different rest
        assert cache.route(a, "k1", 0)[0] == cache.route(b, "k1", 1)[0]
        machines = {cache.route(a, f"user-{i}", 2 + i)[0] for i in range(16)}
        assert len(machines) > 1

    def test_the_key_keeps_conversations_apart_from_other_traffic_on_the_same_prefix(self):
        """More than ~15 requests a minute for one prefix + key overflow to other machines and miss; with a
        key per user each user's rate stays low and keeps its machine."""
        shared_system = toks(1100)
        no_key = OpenAIPromptCache(machines=8)
        keyed = OpenAIPromptCache(machines=8)
        misses = {"none": 0, "keyed": 0}
        # 30 users, one request each every 10 s for two minutes: 180 requests/min on the same first 256 tokens
        for step in range(12):
            for user in range(30):
                prompt = shared_system + toks(600, start=100_000 * (user + 1))
                now = step * 10.0 + user * 0.3
                if step and no_key.serve(prompt, now=now).cached < 1536:
                    misses["none"] += 1
                elif not step:
                    no_key.serve(prompt, now=now)
                if step and keyed.serve(prompt, key=f"user-{user}", now=now).cached < 1536:
                    misses["keyed"] += 1
                elif not step:
                    keyed.serve(prompt, key=f"user-{user}", now=now)
        assert misses["keyed"] == 0
        assert misses["none"] > 100

    def test_overflow_past_15_requests_a_minute(self):
        cache = OpenAIPromptCache(machines=4)
        prompt = toks(1100)
        flags = [cache.serve(prompt, key="k", now=i * 1.0).overflow for i in range(20)]
        assert flags[:15] == [False] * 15 and all(flags[15:])
        # a minute later the rate is low again
        assert cache.serve(prompt, key="k", now=200.0).overflow is False

    def test_in_memory_retention_evicts_after_idle_minutes(self):
        """ "Caches are typically cleared within 5 to 10 minutes of inactivity": the model takes 5 minutes."""
        cache = OpenAIPromptCache(machines=1)
        prompt = toks(2048)
        cache.serve(prompt, now=0)
        assert cache.serve(prompt, now=299).cached == 2048  # used again: idle time restarts
        assert cache.serve(prompt, now=299 + 301).cached == 0

    def test_extended_retention_keeps_the_prefix_for_24_hours(self):
        """prompt_cache_retention="24h" keeps cached prefixes active up to 24 hours."""
        cache = OpenAIPromptCache(machines=1)
        prompt = toks(2048)
        cache.serve(prompt, retention="24h", now=0)
        assert cache.serve(prompt, retention="24h", now=3 * 3600).cached == 2048
        with pytest.raises(ValueError, match="prompt_cache_retention"):
            cache.serve(prompt, retention="forever", now=1)

    def test_gpt_5_6_reports_cache_writes(self):
        """From GPT-5.6 on, newly cached tokens are reported as cache_write_tokens (billed 1.25x)."""
        cache = OpenAIPromptCache(machines=1, report_writes=True)
        first = cache.serve(toks(1300), now=0)
        assert (first.cached, first.written) == (0, 1280)
        second = cache.serve(toks(1500), now=1)
        assert (second.cached, second.written) == (1280, 128)


# ============================================================== Anthropic
def blocks(sizes, marks=None, start=0):
    marks = marks or {}
    out, offset = [], start
    for i, n in enumerate(sizes):
        out.append(CacheBlock(toks(n, offset), marks.get(i)))
        offset += n
    return out


class TestAnthropicRules:
    def test_a_prefix_below_the_minimum_is_not_cached_and_no_error_is_returned(self):
        cache = AnthropicPromptCache(min_tokens=1024)
        short = blocks([1000, 50], {0: "5m"})
        first = cache.serve(short, now=0)
        assert (first.read, first.written, first.uncached) == (0, 0, 1050)
        assert cache.serve(short, now=1).read == 0

    def test_the_prefix_up_to_a_breakpoint_is_written_then_read(self):
        cache = AnthropicPromptCache(min_tokens=1024)
        req = blocks([1500, 200], {0: "5m"})
        first = cache.serve(req, now=0)
        assert (first.read, first.written, first.uncached) == (0, 1500, 200)
        again = cache.serve(blocks([1500, 300], {0: "5m"}), now=10)
        assert (again.read, again.written, again.uncached) == (1500, 0, 300)

    def test_at_most_four_breakpoints(self):
        cache = AnthropicPromptCache(min_tokens=1)
        with pytest.raises(ValueError, match="maximum of 4"):
            cache.serve(blocks([10] * 5, {i: "5m" for i in range(5)}), now=0)
        with pytest.raises(ValueError, match="maximum of 4"):  # the automatic one counts
            cache.serve(blocks([10] * 5, {i: "5m" for i in range(4)}), automatic="5m", now=0)

    def test_a_breakpoint_looks_back_20_blocks_for_an_earlier_entry(self):
        base = [100] + [10] * 40
        for bp, read in ((25, 100 + 5 * 10), (26, 0)):
            cache = AnthropicPromptCache(min_tokens=100)
            cache.serve(blocks(base, {0: "5m", 5: "5m"}), now=0)  # entries at blocks 0 and 5
            served = cache.serve(blocks(base, {bp: "5m"}), now=1)
            # 20 blocks after block 5 it is found; 21 blocks after, neither entry is in reach
            assert served.read == read
            assert served.written == 100 + bp * 10 - read

    def test_5_minute_ttl_refreshed_on_every_hit(self):
        cache = AnthropicPromptCache(min_tokens=100)
        req = blocks([200, 10], {0: "5m"})
        cache.serve(req, now=0)
        assert cache.serve(req, now=290).read == 200  # hit at 4:50 refreshes it
        assert cache.serve(req, now=580).read == 200  # still alive 9:40 after the write
        assert cache.serve(req, now=580 + 301).read == 0

    def test_1_hour_ttl_and_its_write_price_bucket(self):
        cache = AnthropicPromptCache(min_tokens=100)
        req = blocks([200, 50, 10], {0: "1h", 1: "5m"})
        first = cache.serve(req, now=0)
        assert (first.written, first.written_1h) == (250, 200)
        assert cache.serve(blocks([200, 60], {0: "1h"}), now=1800).read == 200

    def test_longer_ttls_must_come_first(self):
        cache = AnthropicPromptCache(min_tokens=1)
        with pytest.raises(ValueError, match="1h must not come after"):
            cache.serve(blocks([10, 10], {0: "5m", 1: "1h"}), now=0)

    def test_automatic_mode_moves_the_breakpoint_to_the_last_block(self):
        """A top-level cache_control caches everything up to the last block; as the conversation grows the
        next request reads what the previous one wrote."""
        cache = AnthropicPromptCache(min_tokens=100)
        turn1 = blocks([150, 20])
        assert cache.serve(turn1, automatic="5m", now=0).written == 170
        turn2 = blocks([150, 20, 30, 40])
        served = cache.serve(turn2, automatic="5m", now=5)
        assert (served.read, served.written) == (170, 70)

    def test_changing_a_block_invalidates_its_entry_and_every_later_one(self):
        """Prefixes are cumulative: a change in the system (or a tool) misses every breakpoint after it."""
        cache = AnthropicPromptCache(min_tokens=100)
        cache.serve(blocks([150, 50, 50], {0: "5m", 2: "5m"}), now=0)
        other_system = [CacheBlock(toks(150, 7000), "5m")] + blocks([50, 50], {1: "5m"}, start=150)
        assert cache.serve(other_system, now=1).read == 0

    def test_bad_input(self):
        with pytest.raises(ValueError):
            CacheBlock(toks(3), "2h")
        with pytest.raises(TypeError):
            CacheBlock("text")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            AnthropicPromptCache(min_tokens=0)
