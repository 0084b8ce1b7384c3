import asyncio
import json
import re
from dataclasses import asdict

import pytest

from cp_memory.agents import (
    AgentRouter,
    CallStats,
    ChainConfig,
    ChainOfAgents,
    ChainOfAgentsError,
    CoAQuery,
    CoAResult,
    Route,
    RouteReason,
    RouterStep,
    Segmenter,
    manager_prompt,
    worker_prompt,
)
from cp_memory.core.blocks import ContextBlock
from cp_memory.engine import EngineClient, EngineError

from .conftest import AsyncFakeEngine, FakeEngine


def doc(i, n_words=30):
    return ContextBlock(f"d{i}", " ".join(f"fact{i}" for _ in range(n_words)))


def words(text):
    return len(text.split())


def chain(n_workers=3, budget=60, policy="affinity", engine=FakeEngine, manager=None, **config):
    """A chain over ``n_workers`` fake engines; ``config``: :class:`ChainConfig` settings."""
    engines = [engine(f"w{i}") for i in range(n_workers)]
    router = AgentRouter(engines, policy=policy)
    coa = ChainOfAgents(
        router, config=ChainConfig(**config), segmenter=Segmenter(budget, token_len=words), manager=manager
    )
    return coa, engines


# ---------------------------------------------------------------------------------------------- prompts
def test_worker_prompt_puts_the_segment_first_then_previous_cu_then_question():
    p = worker_prompt("SEGMENT TEXT", "PREVIOUS CU", "Who?")
    assert p.startswith("SEGMENT TEXT\nHere is the summary of the previous source text: PREVIOUS CU\n")
    assert p.index("SEGMENT TEXT") < p.index("PREVIOUS CU") < p.index("Question: Who?")
    assert p.endswith("So please write the summary that can include the evidence for answering the Query:")
    assert "You need to read current source text and summary of previous source text (if any)" in p


def test_manager_prompt_is_the_papers():
    assert manager_prompt("CU", "Who?") == (
        "The following are given passages. However, the source text is too long and has been summarized. "
        "You need to answer based on the summary: CU\nQuestion: Who?\nAnswer:"
    )


def test_worker_template_must_start_with_the_segment():
    with pytest.raises(ValueError, match="reusable prefix"):
        ChainConfig(worker_template="Question: {question}\n{segment}\n{previous_cu}")


# ---------------------------------------------------------------------------------------------- config
def test_a_chain_config_holds_every_setting_with_one_default_each():
    cfg = ChainConfig()
    coa = ChainOfAgents(AgentRouter([FakeEngine()]))
    assert coa.config == cfg and coa.segmenter.budget_tokens == cfg.segment_tokens
    assert (cfg.worker_max_tokens, cfg.manager_max_tokens, cfg.manager_stop) == (128, 32, None)
    assert (cfg.chat, cfg.model_tails, cfg.manager_affinity) == (False, True, True)
    assert ChainConfig(manager_stop=["\n", "Q:"]).manager_stop == ("\n", "Q:")
    assert ChainConfig(manager_stop="\n").manager_stop == ("\n",)  # one stop sequence, not characters
    assert ChainConfig(manager_stop=[]).manager_stop is None


@pytest.mark.parametrize(
    "bad",
    [
        {"worker_max_tokens": 0},
        {"manager_max_tokens": -1},
        {"segment_tokens": 1.5},
        {"max_conversations": 0},
        {"worker_max_tokens": True},
    ],
)
def test_a_chain_config_rejects_bad_values_naming_the_setting(bad):
    (name,) = bad
    with pytest.raises(ValueError, match=name):
        ChainConfig(**bad)


def test_a_chain_config_rejects_a_non_config():
    with pytest.raises(TypeError, match="ChainConfig"):
        ChainOfAgents(AgentRouter([FakeEngine()]), config={"worker_max_tokens": 4})


def test_the_old_keyword_arguments_still_work_with_a_deprecation_warning():
    router = AgentRouter([FakeEngine("w0")])
    with pytest.warns(DeprecationWarning, match=r"worker_max_tokens=.*config=ChainConfig"):
        old = ChainOfAgents(router, segment_tokens=500, worker_max_tokens=4, chat=True)
    assert old.config == ChainConfig(segment_tokens=500, worker_max_tokens=4, chat=True)
    assert old.segmenter.budget_tokens == 500
    base = ChainConfig(manager_max_tokens=8)
    with pytest.warns(DeprecationWarning):  # applied over the given config
        assert ChainOfAgents(router, config=base, chat=True).config == ChainConfig(manager_max_tokens=8, chat=True)
    with pytest.raises(TypeError, match="segment_budget"):
        ChainOfAgents(router, segment_budget=500)


def test_records_are_built_by_keyword():
    with pytest.raises(TypeError):
        Route(0, "w0", RouteReason.AFFINITY, "r", 1, 10, 10)
    with pytest.raises(TypeError):
        ChainConfig(1024)
    q = CoAQuery("q?", (doc(0),), tag=1)  # question and blocks by position, the rest by keyword
    assert (q.conversation_id, q.tag) == (None, 1)


def test_route_reasons_read_as_their_strings_in_results_and_json():
    coa, _ = chain(n_workers=2)
    coa.answer("q1 a?", [doc(0)])
    res = coa.answer("q2 b?", [doc(0)])
    call = res.worker_calls[0]
    assert call.route is RouteReason.AFFINITY and call.route == "affinity"
    assert (str(call.route), f"{call.route}") == ("affinity", "affinity")
    assert json.loads(json.dumps(asdict(call)))["route"] == "affinity"
    assert isinstance(call, CallStats) and res.manager_call.route in set(RouteReason)


def test_control_tokens_in_summaries_are_made_inert_along_the_chain():
    """A worker may copy a document's control-token text into its CU; the next worker and the manager get
    it as text. (The fake engine's CU carries the question's first word, here a ChatML token.)"""
    coa, engines = chain()
    res = coa.answer("<|im_end|>x what?", [doc(i) for i in range(5)])  # 3 workers, then the manager
    assert "<|im_end|>" in res.cus[0]
    prompts = [p for e in engines for p in e.prompts]
    manager = [p for p in prompts if p.startswith("The following")]
    workers = [p for p in prompts if p not in manager]
    later = [p.split("source text: ")[1].split("\nQuestion:")[0] for p in workers if "#1@" in p]
    assert later and all("<|im_end|>" not in cu and "< |im_end|>x#1@" in cu for cu in later)
    assert len(manager) == 1 and "summary: " in manager[0]
    assert "<|im_end|>" not in manager[0].split("summary: ")[1].split("\nQuestion:")[0]
    assert worker_prompt("S", "<|eot_id|>", "q").split("\n")[1].endswith("< |eot_id|>")
    assert manager_prompt("[INST] cu", "q").split("summary: ")[1].startswith("[ INST] cu")


# ---------------------------------------------------------------------------------------------- chain
def test_chain_passes_the_cu_along_and_the_manager_answers_from_the_last_one():
    coa, engines = chain()
    res = coa.answer("q1 what?", [doc(i) for i in range(5)])  # 150 words, budget 60 -> 3 segments
    assert isinstance(res, CoAResult)
    assert len(res.segments) == 3 and len(res.cus) == 3
    assert [c.role for c in res.calls] == ["worker"] * 3 + ["manager"]
    for i, cu in enumerate(res.cus, start=1):  # each CU extends the previous one
        assert re.search(r"q1#(\d+)@w\d$", cu).group(1) == str(i)
        if i > 1:
            assert cu.startswith(res.cus[i - 2] + " > ")
    assert res.answer == f"answer(q1) from [{res.cus[-1]}]"
    # every worker prompt starts with its segment text
    prompts = [p for e in engines for p in e.prompts if not p.startswith("The following")]
    seg_texts = [s.text for s in res.segments]
    assert sorted(p.split("\nHere is the summary")[0] for p in prompts) == sorted(seg_texts)
    wc = res.worker_calls[1]
    assert wc.worker_name == f"worker-{wc.worker}" and wc.block_ids == res.segments[1].ids
    assert wc.segment_tokens == res.segments[1].tokens and wc.ttft_s > 0


def test_recurring_documents_return_to_their_worker_and_hit_its_cache():
    coa, _ = chain(n_workers=3)
    docs = [doc(i) for i in range(6)]
    first = coa.answer("q1 first?", docs)
    second = coa.answer("q2 second?", list(reversed(docs)))
    seg_worker = {c.block_ids: c.worker for c in first.worker_calls}
    for c in second.worker_calls:
        assert c.route is RouteReason.AFFINITY
        assert seg_worker[c.block_ids] == c.worker  # same segment, same worker
        assert c.predicted_cached_tokens == c.segment_tokens
        assert c.cached_tokens >= c.segment_tokens  # the fake engine saw the same prefix
    assert first.cached_tokens < second.cached_tokens


def test_round_robin_baseline_scatters_recurring_segments():
    coa, _ = chain(n_workers=2, policy="round_robin")
    docs = [doc(i) for i in range(4)]  # 2 segments + manager = 3 calls per question
    first = coa.answer("q1 a?", docs)
    second = coa.answer("q2 b?", docs)
    moved = [a.worker != b.worker for a, b in zip(first.worker_calls, second.worker_calls)]
    assert all(moved)


def test_concurrent_questions_do_not_mix_cus():
    coa, _ = chain(n_workers=3, engine=lambda name: FakeEngine(name, delay=0.002))
    shared = [doc(i) for i in range(4)]
    queries = [CoAQuery(f"q{i} about?", tuple(shared[i % 2 :] + [doc(10 + i)]), tag=i) for i in range(12)]
    results = coa.answer_many(queries, max_concurrency=6)
    assert all(isinstance(r, CoAResult) for r in results)
    for i, r in enumerate(results):
        assert r.tag == i and r.question == f"q{i} about?"
        tags = re.findall(r"(q\d+)#", " ".join(r.cus))
        assert set(tags) == {f"q{i}"}, tags  # only this question's CUs
        assert r.cus[-1].count(">") == len(r.segments)
        assert r.answer.startswith(f"answer(q{i})")
    assert coa.router.loads() == (0, 0, 0)


async def test_async_chain_and_concurrent_async_questions():
    coa, _ = chain(n_workers=2, engine=AsyncFakeEngine)
    res = await coa.aanswer("q0 x?", [doc(i) for i in range(3)])
    assert res.answer.startswith("answer(q0)") and len(res.cus) == len(res.segments)
    queries = [CoAQuery(f"q{i} y?", (doc(i), doc(i + 1), doc(i + 2))) for i in range(8)]
    results = await coa.aanswer_many(queries, max_concurrency=4)
    for i, r in enumerate(results):
        assert isinstance(r, CoAResult)
        assert set(re.findall(r"(q\d+)#", " ".join(r.cus))) == {f"q{i}"}
    assert coa.router.loads() == (0, 0)


def test_sync_and_async_clients_are_not_mixed_up():
    coa, _ = chain(n_workers=1, engine=AsyncFakeEngine)
    with pytest.raises(ChainOfAgentsError, match="async client"):
        coa.answer("q0 x?", [doc(0)])
    coa2, _ = chain(n_workers=1)
    with pytest.raises(ChainOfAgentsError, match="sync client"):
        asyncio.run(coa2.aanswer("q0 x?", [doc(0)]))


def test_dedicated_manager_client():
    manager = FakeEngine("boss")
    coa, engines = chain(n_workers=2, manager=manager)
    res = coa.answer("q3 z?", [doc(1)])
    assert res.manager_call.route is RouteReason.DEDICATED and res.manager_call.worker == -1
    assert res.manager_call.route == "dedicated"
    assert len(manager.prompts) == 1 and all(not p.startswith("The following") for e in engines for p in e.prompts)


def test_chat_mode_sends_each_prompt_as_one_user_message():
    coa, engines = chain(n_workers=1, chat=True)
    res = coa.answer("q5 chat?", [doc(0), doc(1)])
    assert res.answer.startswith("answer(q5)")
    assert engines[0].chat_calls == len(res.calls)


# ---------------------------------------------------------------------------------------------- failures
def test_engine_failure_retries_then_fails_only_that_question(failing_url):
    url, seen = failing_url
    good = FakeEngine("good")
    bad = EngineClient(url, max_retries=2, retry_wait_s=0.001, retry_wait_max_s=0.002, timeout=5)
    router = AgentRouter([good, bad], policy="round_robin")
    coa = ChainOfAgents(router, segmenter=Segmenter(100, token_len=words), manager=FakeEngine("boss"))
    queries = [CoAQuery(f"q{i} ?", (doc(i),), tag=i) for i in range(4)]  # one worker call each
    results = coa.answer_many(queries, max_concurrency=1)
    ok = [r for r in results if isinstance(r, CoAResult)]
    failed = [r for r in results if isinstance(r, ChainOfAgentsError)]
    assert [r.tag for r in ok] == [0, 2] and [e.tag for e in failed] == [1, 3]
    for e in failed:
        assert e.worker_name == "worker-1" and e.role == "worker" and e.step == 0
        assert isinstance(e.__cause__, EngineError)
        assert "injected failure" in str(e) and "worker step 1/1" in str(e) and e.question in str(e)
    assert len(seen) == 2 * 3  # each failing call: 1 attempt + 2 retries
    assert router.loads() == (0, 0)
    assert router.stats().workers[1].failed == 2 and len(router.index(1)) == 0
    bad.close()


async def test_async_failure_is_reported_for_its_question_only():
    class Broken(AsyncFakeEngine):
        async def complete(self, prompt, **kw):
            raise EngineError("engine down after 3 attempt(s)")

    router = AgentRouter([AsyncFakeEngine("ok"), Broken("broken")], policy="round_robin")
    coa = ChainOfAgents(router, segmenter=Segmenter(100, token_len=words), manager=AsyncFakeEngine("boss"))
    results = await coa.aanswer_many([CoAQuery(f"q{i} ?", (doc(i),)) for i in range(4)], max_concurrency=1)
    assert [type(r).__name__ for r in results] == ["CoAResult", "ChainOfAgentsError"] * 2
    assert router.loads() == (0, 0)


# ---------------------------------------------------------------------------------------------- multi-turn
def test_multi_turn_dedup_replaces_processed_documents_with_location_annotations():
    coa, engines = chain(n_workers=2, budget=1000)
    a, b, c, d = (doc(i) for i in range(4))
    t1 = coa.answer("q1 first?", [a, b, c], conversation_id="conv")
    assert t1.turn == 1 and t1.duplicates == () and t1.annotations == ()
    t2 = coa.answer("q2 second?", [b, d], conversation_id="conv")
    assert t2.turn == 2 and t2.duplicates == ("d1",)
    assert t2.annotations == ("Please refer to [Doc d1] in the previous conversation (turn 1).",)
    assert [s.ids for s in t2.segments] == [("d3",)]  # only the new document is sent
    prompt = next(p for e in engines for p in e.prompts if "q2 second?" in p and p.startswith("[Doc d3]"))
    previous = prompt.split("Here is the summary of the previous source text: ")[1].split("\nQuestion:")[0]
    assert f"Summary of the previous conversation (turn 1): {t1.cus[-1]}" in previous
    assert "Please refer to [Doc d1] in the previous conversation (turn 1)." in previous
    assert b.text not in prompt
    # everything already seen: no worker runs, the manager answers from the earlier turns' summaries
    t3 = coa.answer("q3 third?", [a, d], conversation_id="conv")
    assert t3.segments == () and t3.cus == () and len(t3.calls) == 1
    assert "(turn 1)" in t3.answer and "(turn 2)" in t3.answer
    # another conversation is independent
    other = coa.answer("q9 other?", [a], conversation_id="other")
    assert other.turn == 1 and other.duplicates == ()
    assert coa.forget("conv") is True and coa.forget("conv") is False


def test_without_conversation_nothing_is_deduplicated():
    coa, _ = chain(n_workers=1, budget=1000)
    coa.answer("q1 x?", [doc(0)])
    res = coa.answer("q2 y?", [doc(0)])
    assert res.turn is None and res.duplicates == () and len(res.segments) == 1


# ---------------------------------------------------------------------------------------------- one flow
def test_the_chain_is_one_io_free_flow_that_yields_its_engine_calls():
    """plan -> requests -> result: the flow sends nothing itself; whoever drives it does the I/O, the
    router's steps included (route before each call, release after it)."""
    coa, engines = chain(n_workers=2)
    plan = coa.plan("q7 by hand?", [doc(0), doc(1), doc(2)])  # 90 words, budget 60 -> 2 segments
    flow = coa.flow(plan)
    seen, steps = [], []
    step = next(flow)
    with pytest.raises(StopIteration) as done:
        while True:
            if isinstance(step, RouterStep):
                in_flight = 0 if step.method == "route" else 1  # routed: in flight until released
                assert step.router is coa.router and sum(coa.router.loads()) == in_flight
                steps.append(step.method)
                step = flow.send(step.sync_method()(step.payload, **step.kwargs))
                continue
            seen.append(step)
            assert coa.router.loads()[seen[-1].client is engines[1]] == 1  # routed, in flight
            step = flow.send(step.client.complete(step.payload, **step.kwargs))
    result = done.value.value
    assert isinstance(result, CoAResult) and result.answer.startswith("answer(q7)")
    assert [c.method for c in seen] == ["complete"] * 3
    assert steps == ["route", "release"] * 3
    assert [c.payload.split("\n")[0] for c in seen[:2]] == [s.text.split("\n")[0] for s in plan.segments]
    assert seen[2].payload.startswith("The following are given passages.")
    assert sorted(p for e in engines for p in e.prompts) == sorted(c.payload for c in seen)  # no other I/O
    assert coa.router.loads() == (0, 0)


async def test_sync_and_async_drivers_send_the_same_requests():
    docs = [doc(i) for i in range(5)]
    sync_coa, sync_engines = chain(n_workers=2)
    async_coa, async_engines = chain(n_workers=2, engine=AsyncFakeEngine)
    a = sync_coa.answer("q1 same?", docs, conversation_id="c")
    b = await async_coa.aanswer("q1 same?", docs, conversation_id="c")
    assert (a.answer, a.cus, a.turn) == (b.answer, b.cus, b.turn)
    assert [e.prompts for e in sync_engines] == [e.prompts for e in async_engines]


class Hanging(AsyncFakeEngine):
    """An async engine whose answer never comes; ``entered`` is set once a call reaches it."""

    def __init__(self, name):
        super().__init__(name)
        self.entered = asyncio.Event()

    async def complete(self, prompt, **kw):
        self.entered.set()
        await asyncio.Event().wait()


async def test_a_cancelled_async_chain_frees_its_worker():
    coa, (engine,) = chain(n_workers=1, engine=Hanging)
    task = asyncio.create_task(coa.aanswer("q1 slow?", [doc(0)]))
    await engine.entered.wait()
    assert coa.router.loads() == (1,)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert coa.router.loads() == (0,) and len(coa.router.index(0)) == 0


# ---------------------------------------------------------------------------------------------- failed turns
class Flaky(FakeEngine):
    """Fails its next ``failures`` calls (an engine error after the client's retries), then serves."""

    def __init__(self, name, failures=1):
        super().__init__(name)
        self.failures = failures

    def complete(self, prompt, **kw):
        if self.failures > 0:
            self.failures -= 1
            raise EngineError("engine down after 3 attempt(s)")
        return super().complete(prompt, **kw)


class AsyncFlaky(AsyncFakeEngine):
    def __init__(self, name, failures=1):
        super().__init__(name)
        self.failures = failures

    async def complete(self, prompt, **kw):
        if self.failures > 0:
            self.failures -= 1
            raise EngineError("engine down after 3 attempt(s)")
        return await super().complete(prompt, **kw)


def test_a_failed_turn_is_rolled_back_so_the_retry_sends_the_documents_again():
    """The failed turn's documents were never read by a model; the retry must send them,
    not "Please refer to [Doc d0] in the previous conversation" pointers to a turn that never happened."""
    engine = Flaky("w0", failures=1)
    coa = ChainOfAgents(AgentRouter([engine]), segmenter=Segmenter(1000, token_len=words))
    a, b = doc(0), doc(1)
    with pytest.raises(ChainOfAgentsError):
        coa.answer("q1 first?", [a, b], conversation_id="conv")
    assert coa.dedup.sent_count("conv") == 0  # nothing counts as sent
    retry = coa.answer("q1 first?", [a, b], conversation_id="conv")
    assert retry.turn == 1 and retry.duplicates == () and retry.annotations == ()
    assert [s.ids for s in retry.segments] == [("d0", "d1")]
    worker_prompt_sent = engine.prompts[0]
    assert a.text in worker_prompt_sent and b.text in worker_prompt_sent
    assert "Please refer to" not in worker_prompt_sent
    # the successful turn is committed: the next turn points to it, with its CU
    t2 = coa.answer("q2 again?", [a], conversation_id="conv")
    assert t2.turn == 2 and t2.duplicates == ("d0",) and t2.segments == ()
    assert f"Summary of the previous conversation (turn 1): {retry.cus[-1]}" in engine.prompts[-1]


def test_a_failed_manager_call_rolls_the_turn_back_too():
    boss = Flaky("boss", failures=1)
    coa = ChainOfAgents(AgentRouter([FakeEngine("w0")]), segmenter=Segmenter(1000, token_len=words), manager=boss)
    with pytest.raises(ChainOfAgentsError, match="manager"):
        coa.answer("q1 x?", [doc(0)], conversation_id="c")
    res = coa.answer("q1 x?", [doc(0)], conversation_id="c")
    assert res.turn == 1 and [s.ids for s in res.segments] == [("d0",)]


async def test_async_failed_turn_is_rolled_back():
    engine = AsyncFlaky("w0", failures=1)
    coa = ChainOfAgents(AgentRouter([engine]), segmenter=Segmenter(1000, token_len=words))
    with pytest.raises(ChainOfAgentsError):
        await coa.aanswer("q1 first?", [doc(0)], conversation_id="conv")
    retry = await coa.aanswer("q1 first?", [doc(0)], conversation_id="conv")
    assert retry.turn == 1 and retry.duplicates == () and doc(0).text in engine.prompts[0]


async def test_a_cancelled_turn_is_rolled_back():
    coa, (engine,) = chain(n_workers=1, engine=Hanging)
    task = asyncio.create_task(coa.aanswer("q1 slow?", [doc(0)], conversation_id="c"))
    await engine.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert coa.dedup.sent_count("c") == 0


def test_an_edited_document_goes_back_to_the_worker_holding_its_old_version():
    """A grown or edited document (same id, new text) is new content to the cache model, but its old
    version's prefix is still in that worker's engine: the home rule sends it there."""
    coa, _ = chain(n_workers=3, budget=1000)
    for i in range(3):  # three documents over three workers
        coa.answer(f"q{i} a?", [doc(i)])
    first = coa.answer("q9 b?", [doc(1)]).worker_calls[0]
    grown = ContextBlock("d1", doc(1).text + " and one more fact")
    call = coa.answer("q10 c?", [grown]).worker_calls[0]
    assert call.route is RouteReason.HOME and call.worker == first.worker
    assert call.cached_tokens >= words(doc(1).text)  # the engine reused the old text's prefix
