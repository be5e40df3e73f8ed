"""The instance window under the workflow front end, on the simulator at the real runs'
size: Debate's next rounds find their conversations cached, with the same outputs, and
workflows without tight continuations run as before."""

from __future__ import annotations

import asyncio

import pytest

from kalypso import KVLedger, QueryError
from kalypso.core.instance_window import InstancePeak
from kalypso.core.policies import PlanInfo, PolicyError, RunInfo, TaskInfo, get_policy
from kalypso.core.prompt import ChatLayout
from kalypso.engine.protocol import EngineCapacity, EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, WordTokenizer
from kalypso.workflow.library import workload
from kalypso.workflow.lower import lower
from kalypso.workflow.run import WorkflowResult, arun
from tests.workflow.real_size import run_days


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


@pytest.mark.parametrize("name", ["mapred", "reflect", "iterative", "parallel", "trading"])
async def test_workflows_without_a_window_run_as_before(name: str) -> None:
    """No tight continuation (or, on Trading, an instance larger than the cache): the
    automatic window is none, and the run computes exactly what it did without it."""
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
        ("cache-aware:2", None, None, "instance window: 2 in flight (set)"),
        ("cache-aware", 44, 26, "2 in flight (an instance peaks at 26 blocks of the cache's 44)"),
        ("cache-aware", 44, 50, "none (an instance peaks at 50 blocks, more than the cache's 44"),
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


def test_reflect_has_no_window_its_final_answer_waits_on_the_critics() -> None:
    graph = lower(list(workload("reflect", "small").workflows)).graph
    chosen = get_policy("cache-aware")
    capacity = EngineCapacity(44, 32, 2048, 16)
    chosen.prepare(PlanInfo(graph, [(0,)], ChatLayout(WordTokenizer()), 32, capacity))
    assert "instance window: none (no tight continuation)" in chosen.explain()


@pytest.mark.parametrize("argument", ["0", "-1", "x", "2.5", ""])
def test_a_bad_window_is_refused(argument: str) -> None:
    with pytest.raises(PolicyError, match="window of at least 1"):
        get_policy(f"cache-aware:{argument}")


def test_the_gate_holds_new_queries_while_the_window_is_full() -> None:
    """An instance is in flight from its first call's start until it is finished; its
    later calls always pass, and a task that is not a call (a root) is never held."""
    graph = lower(list(workload("debate", "small").workflows)).graph
    policy = get_policy("cache-aware:2")
    policy.prepare(PlanInfo(graph, [(0,), (1,), (2,)], ChatLayout(WordTokenizer()), 32))

    def call(op: str, key: tuple[int, ...]) -> TaskInfo:
        return TaskInfo(0, 0, key, op)

    running = [call("agent0_r0", (0,)), call("agent1_r0", (1,))]
    full = RunInfo({}, frozenset(), running)
    assert not policy.gate(call("agent0_r0", (2,)), full)
    assert policy.gate(call("agent2_r0", (1,)), full)
    one_running = RunInfo({}, frozenset(), running[1:])
    assert policy.gate(call("agent0_r1", (0,)), one_running)  # (0,) is still in flight
    assert not policy.gate(call("agent0_r0", (2,)), one_running)
    assert policy.gate(TaskInfo(0, 0, (2,), "root"), full)
    assert policy.gate(call("agent0_r0", (2,)), RunInfo({}, frozenset({(0,)}), running[1:]))


def test_the_gate_never_holds_a_query_when_nothing_in_flight_is_running() -> None:
    """An instance that started and will never finish (its calls ended without an
    output) must not hold a place for good: with nothing of the window running, a new
    query passes."""
    graph = lower(list(workload("debate", "small").workflows)).graph
    policy = get_policy("cache-aware:1")
    policy.prepare(PlanInfo(graph, [(0,), (1,)], ChatLayout(WordTokenizer()), 32))
    started = RunInfo({}, frozenset(), [TaskInfo(0, 0, (0,), "agent0_r0")])
    assert not policy.gate(TaskInfo(1, 0, (1,), "agent0_r0"), started)
    assert policy.gate(TaskInfo(1, 0, (1,), "agent0_r0"), RunInfo({}, frozenset(), []))


class _Faulty(SimEngine):
    """Fails, or never answers, query 2's second round: a query that started only once
    the window of 2 had room again."""

    def __init__(self, fault: str) -> None:
        super().__init__("smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16)
        self.fault = fault

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        _, op, where, _ = request.request_id.split(":")
        if (op, where) == ("agent0_r1", "2") and self.fault != "none":
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
