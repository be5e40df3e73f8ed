"""The instance window under the workflow front end, on the simulator at the real runs'
size: Debate's next rounds and Trading's risk analysts find their conversations cached,
with the same outputs, and workflows without conversation groups run as before."""

from __future__ import annotations

import asyncio

import pytest

from kalypso import KVLedger, QueryError
from kalypso.core.instance_window import InstancePeak
from kalypso.core.policies import PlanInfo, Policy, PolicyError, RunInfo, TaskInfo, get_policy
from kalypso.core.policies.cache_aware import CacheAware
from kalypso.core.prompt import ChatLayout
from kalypso.engine.protocol import EngineCapacity, EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, WordTokenizer
from kalypso.workflow.library import workload
from kalypso.workflow.lower import lower
from kalypso.workflow.run import WorkflowResult, arun
from tests.workflow.real_size import run_days

RISK = ("risky", "safe", "neutral")


async def _run(name: str, num_blocks: int, policy: str) -> WorkflowResult:
    """The last day of workflow ``name`` (small), the earlier days run first."""
    results, _ = await run_days(name, num_blocks, policy=policy)
    return results[-1]


@pytest.mark.parametrize(("num_blocks", "unwindowed_prefill_tokens"), [(44, 5490), (96, 4850)])
async def test_debate_computes_its_minimum_prefill_with_the_window(
    num_blocks: int, unwindowed_prefill_tokens: int
) -> None:
    """Without the window the first rounds of many queries fill the cache, and the second
    rounds that wait their turn lose their conversations (the minimum is 4,242 tokens);
    with it (2 queries in flight on 44 blocks, 4 on 96) none is lost."""
    windowed = await _run("debate", num_blocks, "cache-aware")
    unwindowed = await _run("debate", num_blocks, "cache-aware:unbounded")
    assert windowed.outputs.equals(unwindowed.outputs)
    assert windowed.min_prefill_tokens == unwindowed.min_prefill_tokens == 4242
    assert windowed.prefill_tokens == 4242
    assert unwindowed.prefill_tokens == unwindowed_prefill_tokens


async def test_tradings_risk_analysts_keep_their_conversations_with_the_window() -> None:
    """Each trader's three risk analysts continue their own conversations and read each
    other's: one conversation group per trader and query, peaking at 30 blocks. With a
    window of 2 groups on 44 blocks, the second day computes 9,111 prefill tokens (the
    minimum is 8,791) against 10,199 without it, with the same outputs."""
    windowed = await _run("trading", 44, "cache-aware")
    unwindowed = await _run("trading", 44, "cache-aware:unbounded")
    assert windowed.outputs.equals(unwindowed.outputs)
    assert windowed.min_prefill_tokens == unwindowed.min_prefill_tokens == 8791
    assert (windowed.prefill_tokens, unwindowed.prefill_tokens) == (9111, 10199)


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        ("debate", [{f"agent{i}_r{r}" for i in range(3) for r in range(2)}]),
        (
            "trading",
            [
                {"bull_r0", "bull_r1", "bear_r0", "bear_r1"},
                *[{f"trader{t}_{who}_r{r}" for who in RISK for r in (0, 1)} for t in range(2)],
            ],
        ),
        ("reflect", [{"analyst", "extraction_critic", "calculation_critic", "final"}]),
        ("mapred", []),
    ],
)
def test_conversation_groups_tie_each_continuation_to_what_runs_beside_it(
    name: str, groups: list[set[str]]
) -> None:
    """A debate's rounds are one group. A trading day has the bull and bear rounds and one
    group per trader's risk analysts, not tied to the trader's decision they all read
    (it runs before them). Reflect's final answer continues the analysis after critics
    that read it: a group of a loose continuation, which ``tight_only`` leaves out."""
    graph = lower(list(workload(name, "small").workflows[-1:])).graph
    assert [set(g) for g in graph.conversation_groups()] == groups
    tight = [set(g) for g in graph.conversation_groups(tight_only=True)]
    assert tight == ([] if name == "reflect" else groups)


def test_a_conversation_group_is_one_inner_sequence() -> None:
    """Trading's risk analysts would otherwise form three sequences (their system prompts
    differ), and every query's first round would run before any query's second."""
    policy = _prepared("trading", "cache-aware", 2)
    assert isinstance(policy, CacheAware)
    for group in policy.groups:
        assert len({policy.sequence_of[op] for op in group}) == 1
    assert "  conversation group 0: bear_r0, bear_r1, bull_r0, bull_r1" in policy.explain()
    risk = {f"trader{t}_{who}_r{r}" for t in range(2) for who in RISK for r in (0, 1)}
    assert {
        op for op, s in policy.sequence_of.items() if s == policy.sequence_of["trader0_risky_r0"]
    } == risk


@pytest.mark.parametrize("name", ["mapred", "reflect", "iterative", "parallel"])
async def test_workflows_without_a_window_run_as_before(name: str) -> None:
    """No conversation group: the automatic window is none, and the run computes exactly
    what it did without it."""
    auto = await _run(name, 44, "cache-aware")
    off = await _run(name, 44, "cache-aware:unbounded")
    assert auto.outputs.equals(off.outputs)
    assert auto.prefill_tokens == off.prefill_tokens
    assert auto.llm_calls == off.llm_calls


async def test_a_window_of_one_runs_one_query_at_a_time_with_the_same_outputs() -> None:
    one = await _run("debate", 44, "cache-aware:1")
    auto = await _run("debate", 44, "cache-aware")
    assert one.outputs.equals(auto.outputs)
    assert one.prefill_tokens == one.min_prefill_tokens  # nothing is evicted


@pytest.mark.parametrize(
    ("policy", "capacity_blocks", "peak_blocks", "line"),
    [
        ("cache-aware:2", None, None, "instance window: 2 conversation groups in flight (set)"),
        ("cache-aware", 44, 26, "2 conversation groups in flight (a conversation group peaks"),
        ("cache-aware", 44, 50, "none (a conversation group peaks at 50 blocks, more than"),
        ("cache-aware", None, None, "instance window: none (sizes not measured)"),
        ("cache-aware:unbounded", 44, 26, "instance window: none (turned off)"),
    ],
)
def test_explain_states_the_window_and_why(
    policy: str, capacity_blocks: int | None, peak_blocks: int | None, line: str
) -> None:
    graph = lower(list(workload("debate", "small").workflows)).graph
    chosen = get_policy(policy)
    layout = ChatLayout(WordTokenizer())
    capacity = None if capacity_blocks is None else EngineCapacity(capacity_blocks, 32, 2048, 16)
    peak = None if peak_blocks is None else InstancePeak(peak_blocks, 3)
    chosen.prepare(PlanInfo(graph, [(0,)], layout, 32, capacity, peak))
    assert line in chosen.explain()


@pytest.mark.parametrize(
    ("policy", "line"),
    [
        ("cache-aware", "instance window: none (loose continuations only: a window breaks"),
        ("cache-aware:2", "instance window: 2 conversation groups in flight (set)"),
    ],
)
def test_reflect_is_windowed_only_when_a_window_is_set(policy: str, line: str) -> None:
    """Its final answer waits on critics that read the analysis: a loose continuation,
    windowed only on request, and its operators keep their level-major order."""
    graph = lower(list(workload("reflect", "small").workflows)).graph
    chosen = get_policy(policy)
    capacity = EngineCapacity(44, 32, 2048, 16)
    chosen.prepare(
        PlanInfo(graph, [(0,)], ChatLayout(WordTokenizer()), 32, capacity, InstancePeak(11, 1))
    )
    assert line in chosen.explain()
    assert isinstance(chosen, CacheAware)
    sequences = chosen.sequence_of
    assert sequences["analyst"] == sequences["final"] != sequences["extraction_critic"]


async def test_a_window_set_on_reflect_at_paper_scale_computes_its_least_prefill() -> None:
    """Reflect at the Helium paper's scale under an H100's costs: without a window every
    query's analysis is evicted by the critics' calls before its final answer continues
    it; with 256 queries in flight (the engine's sequences) none is, with the same
    outputs (how much faster: docs/benchmarks.md)."""
    job = workload("reflect", "paper")
    runs = []
    for policy in ("cache-aware", "cache-aware:256"):
        engine = SimEngine("qwen3-8b-h100")
        try:
            runs.append(
                await arun(job.workflows[0], engine, job.inputs[0], policy=policy, progress=False)
            )
        finally:
            await engine.close()
    auto, windowed = runs
    assert windowed.outputs.equals(auto.outputs)
    assert windowed.min_prefill_tokens == auto.min_prefill_tokens == 520_579
    assert (auto.prefill_tokens, windowed.prefill_tokens) == (666_163, 520_579)


@pytest.mark.parametrize("argument", ["0", "-1", "x", "2.5", ""])
def test_a_bad_window_is_refused(argument: str) -> None:
    with pytest.raises(PolicyError, match="window of at least 1"):
        get_policy(f"cache-aware:{argument}")


@pytest.mark.parametrize("window", [0, -2, "on", 2.5, None])
def test_a_bad_window_is_refused_by_the_class_too(window: object) -> None:
    with pytest.raises(PolicyError, match="window of at least 1 group, 'auto' or 'off'"):
        CacheAware(window)  # type: ignore[arg-type]


def _prepared(name: str, policy_name: str, queries: int) -> Policy:
    graph = lower(list(workload(name, "small").workflows[-1:])).graph
    policy = get_policy(policy_name)
    keys = [(q,) for q in range(queries)]
    policy.prepare(PlanInfo(graph, keys, ChatLayout(WordTokenizer()), 32))
    return policy


def _call(op: str, key: tuple[int, ...]) -> TaskInfo:
    return TaskInfo(0, 0, key, op)


def test_the_gate_holds_new_queries_while_the_window_is_full() -> None:
    """A query's group is in flight from its first call's start until every call of the
    group has completed; its later calls always pass, and a task that is not a call (a
    root) is never held."""
    policy = _prepared("debate", "cache-aware:2", 3)
    running = [_call("agent0_r0", (0,)), _call("agent1_r0", (1,))]
    full = RunInfo({}, frozenset(), running)
    assert not policy.gate(_call("agent0_r0", (2,)), full)
    assert policy.gate(_call("agent2_r0", (1,)), full)
    one_running = RunInfo({}, frozenset(), running[1:])
    assert policy.gate(_call("agent0_r1", (0,)), one_running)  # (0,) is still in flight
    assert not policy.gate(_call("agent0_r0", (2,)), one_running)
    assert policy.gate(TaskInfo(0, 0, (2,), "root"), full)
    rounds = [f"agent{i}_r{r}" for i in range(3) for r in range(2)]
    most_done = {op: {(0,)} for op in rounds[:-1]}
    assert not policy.gate(_call("agent0_r0", (2,)), RunInfo(most_done, frozenset(), running[1:]))
    all_done = {op: {(0,)} for op in rounds}
    assert policy.gate(_call("agent0_r0", (2,)), RunInfo(all_done, frozenset(), running[1:]))


def test_the_gate_counts_groups_and_never_holds_calls_outside_them() -> None:
    """Trading: each trader's risk analysts of each query are a group. Two groups of
    query 0 fill a window of 2: a third group waits, whoever's it is, while the calls
    outside the groups (a trader's decision, the judge) and the groups' own later calls
    pass."""
    policy = _prepared("trading", "cache-aware:2", 3)
    running = [_call("trader0_risky_r0", (0,)), _call("trader1_safe_r0", (0,))]
    full = RunInfo({}, frozenset(), running)
    assert not policy.gate(_call("trader0_risky_r0", (1,)), full)
    assert not policy.gate(_call("bull_r0", (0,)), full)
    assert policy.gate(_call("trader0_neutral_r0", (0,)), full)
    assert policy.gate(_call("trader1_risky_r1", (0,)), full)
    assert policy.gate(_call("trader0", (1,)), full)
    assert policy.gate(_call("trader0_judge", (1,)), full)
    trader1 = {f"trader1_{who}_r{r}" for who in RISK for r in (0, 1)}
    done = RunInfo({op: {(0,)} for op in trader1}, frozenset(), running[:1])
    assert policy.gate(_call("trader0_risky_r0", (1,)), done)


def test_the_gate_never_holds_a_query_when_nothing_in_flight_is_running() -> None:
    """A group that started and will never finish (its calls ended without an output)
    must not hold a place for good: with nothing of the window running, a new query
    passes."""
    policy = _prepared("debate", "cache-aware:1", 2)
    started = RunInfo({}, frozenset(), [_call("agent0_r0", (0,))])
    assert not policy.gate(_call("agent0_r0", (1,)), started)
    assert policy.gate(_call("agent0_r0", (1,)), RunInfo({}, frozenset(), []))


class _Faulty(SimEngine):
    """Fails, or never answers, the call ``site`` (by default query 2's second round in
    Debate: a query that started only once the window of 2 had room again)."""

    def __init__(self, fault: str, site: tuple[str, str] = ("agent0_r1", "2")) -> None:
        super().__init__("smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16)
        self.fault = fault
        self.site = site

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        _, op, where, _ = request.request_id.split(":")
        if (op, where) == self.site and self.fault != "none":
            if self.fault == "hang":
                await asyncio.sleep(3600)
            raise EngineError("injected failure")
        return await super().generate(request)


async def _assert_released(engine: SimEngine, ledger: KVLedger) -> None:
    assert ledger.reserved_blocks == 0 and ledger.running_tasks == 0
    assert ledger.owners == frozenset()
    stats = await engine.stats()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)


@pytest.mark.parametrize("fault", ["fail", "hang"])
async def test_a_windowed_run_that_fails_or_hangs_releases_everything(fault: str) -> None:
    """The window holds nothing itself: a call that fails, or outlives its timeout, fails
    the run with the site named, and the ledger and the engine are left empty; the same
    engine then runs Debate again with the same outputs as a fresh one."""
    engine = _Faulty(fault)
    ledger = KVLedger(engine.capacity.num_blocks)
    job = workload("debate", "small")
    try:
        with pytest.raises(QueryError) as failure:
            await asyncio.wait_for(
                arun(
                    job.workflows[0],
                    engine,
                    job.inputs[0],
                    ledger=ledger,
                    system_prompt="",
                    call_timeout_s=5.0,
                ),
                120,
            )
        assert (failure.value.op_id, failure.value.key) == ("agent0_r1", (2,))
        await _assert_released(engine, ledger)
        engine.fault = "none"
        again = await arun(job.workflows[0], engine, job.inputs[0], system_prompt="")
        fresh = await _run("debate", 44, "cache-aware")
        assert again.outputs.equals(fresh.outputs)
    finally:
        await engine.close()


async def test_a_trading_risk_round_that_fails_releases_everything() -> None:
    """Trading's window holds groups, not queries: the first query's risk analyst's
    second round failing (the first group to reach its next round) fails the run with
    its site named, leaves the ledger and the engine empty, and the same engine then
    runs the day with the same outputs as a fresh one."""
    engine = _Faulty("fail", ("trader0_risky_r1", "0"))
    ledger = KVLedger(engine.capacity.num_blocks)
    job = workload("trading", "small")
    flow, inputs = job.workflows[-1], job.inputs[-1]
    try:
        with pytest.raises(QueryError) as failure:
            await asyncio.wait_for(arun(flow, engine, inputs, ledger=ledger, system_prompt=""), 120)
        assert (failure.value.op_id, failure.value.key) == ("trader0_risky_r1", (0,))
        await _assert_released(engine, ledger)
        engine.fault = "none"
        again = await arun(flow, engine, inputs, system_prompt="")
        fresh_engine = SimEngine(
            "smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16
        )
        try:
            fresh = await arun(flow, fresh_engine, inputs, system_prompt="")
        finally:
            await fresh_engine.close()
        assert again.outputs.equals(fresh.outputs)
    finally:
        await engine.close()


async def test_a_cancelled_windowed_run_releases_everything() -> None:
    """Cancelled while queries wait behind the full window: nothing stays reserved."""
    engine = SimEngine("smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16)
    ledger = KVLedger(engine.capacity.num_blocks)
    job = workload("debate", "small")
    run = asyncio.ensure_future(
        arun(job.workflows[0], engine, job.inputs[0], ledger=ledger, system_prompt="")
    )
    try:
        for _ in range(100_000):  # bounded: the simulator needs no wall time
            if ledger.running_tasks >= 4 or run.done():
                break
            await asyncio.sleep(0)
        assert not run.done() and ledger.running_tasks >= 4, "cancel mid-run"
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await _assert_released(engine, ledger)
    finally:
        await engine.close()


@pytest.mark.parametrize(
    ("profile", "groups", "chosen"),
    [
        # 2 CPU cores: a prefill token costs 5.8 ms, so the 608 tokens a window of 4
        # saves (3.5 s) outweigh running 12 calls at once instead of 16
        ("smollm2-cpu-f32", 4, "-> window of 4 groups: 37.92 s"),
        # one H100: they cost 20 ms, less than the narrower batch's steps
        ("qwen3-8b-h100", None, "-> no window: 0.74 s"),
    ],
)
async def test_the_window_opens_when_the_prefill_it_saves_is_worth_more_than_batching(
    profile: str, groups: int | None, chosen: str
) -> None:
    """The same Debate and the same cache (96 blocks of 32 tokens, 16 sequences) under
    two engines' step costs: the window is weighed by predicted time, and explain() says
    so, with the model, each option and its prediction. (On the simulator the window of
    4 takes 34.21 s against 36.36 s without, on the CPU's costs.)"""
    from kalypso.workflow.plan import plan

    engine = SimEngine(profile, num_blocks=96, block_size_tokens=32, max_num_seqs=16)
    try:
        job = workload("debate", "small")
        planned = plan(list(job.workflows), engine, job.inputs[0], system_prompt="")
    finally:
        await engine.close()
    assert planned.policy.window.groups == groups  # type: ignore[attr-defined]
    text = planned.explain()
    assert f"by predicted time on {engine.cost_model.explain()}" in text
    assert chosen in text
    assert text.count(" groups in flight, ") == 2  # both options, with their evictions


@pytest.mark.parametrize(("policy", "held"), [("cache-aware", 1), ("cache-aware:4", 2)])
def test_a_set_window_holds_loose_groups_too_the_automatic_one_tight_groups_only(
    policy: str, held: int
) -> None:
    """Debate and Reflect submitted together: the automatic window weighs and holds
    Debate's rounds only, as it did before loose groups existed; a set one holds both."""
    flows = [workload(name, "small").workflows[0] for name in ("debate", "reflect")]
    graph = lower(flows).graph
    chosen = get_policy(policy)
    capacity = EngineCapacity(44, 32, 2048, 16)
    chosen.prepare(
        PlanInfo(graph, [(0,)], ChatLayout(WordTokenizer()), 32, capacity, InstancePeak(26, 3))
    )
    assert isinstance(chosen, CacheAware)
    assert len(chosen.groups) == held
    assert ("analyst" in chosen.group_of_op) == (held == 2)
    assert chosen.window.groups is not None
