"""Explicit pinning under the workflow front end, on the simulator: the same outputs as
virtual pinning, no pin left in the engine, conversations held for the calls that
continue them, and the baselines that reserve no memory refused before anything runs."""

from __future__ import annotations

import asyncio

import pytest

from kalypso import KVLedger, QueryError
from kalypso import workflow as wf
from kalypso.core.errors import PlanError
from kalypso.core.memory import MemoryManager, TaskMemory
from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.workflow.library import workload
from kalypso.workflow.plan import WorkflowOptions
from kalypso.workflow.run import arun
from tests.workflow.real_size import run_days

_run = run_days


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("reflect", "cache-aware"),
        ("trading", "cache-aware"),
        ("debate", "cache-aware"),
        ("debate", "querywise"),
    ],
)
async def test_explicit_pins_give_the_same_outputs_and_are_all_released(
    name: str, policy: str
) -> None:
    virtual, _ = await _run(name, policy=policy)
    pinned, left_pinned_blocks = await _run(name, policy=policy, pinning="explicit")
    for one, other in zip(virtual, pinned, strict=True):
        assert one.outputs.equals(other.outputs)
    assert left_pinned_blocks == 0


@pytest.mark.parametrize("policy", ["all-ready", "lspf"])
async def test_baselines_that_reserve_nothing_refuse_explicit_pins(policy: str) -> None:
    """Before, all-ready and lspf with explicit pins pinned every parent until the run's
    end: Reflect deadlocked on a 44-block cache until its calls timed out, and Debate
    ended with 72 blocks still pinned."""
    with pytest.raises(PlanError, match="reserves none"):
        await _run("reflect", policy=policy, pinning="explicit")


@pytest.mark.parametrize(
    ("num_blocks", "virtual_prefill_tokens", "held_prefill_tokens"),
    [(44, 5490, 5394), (96, 4850, 4370)],
)
async def test_debate_rounds_find_more_of_their_first_round_when_it_is_held_softly(
    num_blocks: int, virtual_prefill_tokens: int, held_prefill_tokens: int
) -> None:
    """Each first-round answer is soft-pinned while the other agents' first rounds
    finish: under LRU alone (virtual pinning) other calls' blocks evict it first. The
    soft pins give way when a call cannot get its blocks, so holding never costs a call
    its place; on 44 blocks most of them must (the minimum is 4,242 tokens), on 96 few.
    Without the instance window, whose effect on the same loss
    ``tests/workflow/test_instance_window.py`` measures."""
    policy = "cache-aware:unbounded"
    (virtual,), _ = await _run("debate", num_blocks, policy=policy)
    (held,), left = await _run("debate", num_blocks, policy=policy, pinning="explicit")
    assert held.outputs.equals(virtual.outputs) and left == 0
    assert virtual.min_prefill_tokens == held.min_prefill_tokens == 4242
    assert virtual.prefill_tokens == virtual_prefill_tokens
    assert held.prefill_tokens == held_prefill_tokens


def _record_holders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    holders: list[int] = []
    complete = MemoryManager.complete

    def recording(
        self: MemoryManager,
        task: TaskMemory,
        *,
        children: int,
        reserve_prefix: bool = True,
    ) -> list[TaskMemory]:
        if not reserve_prefix and children:
            holders.append(children)
        return complete(self, task, children=children, reserve_prefix=reserve_prefix)

    monkeypatch.setattr(MemoryManager, "complete", recording)
    return holders


@pytest.mark.parametrize(
    ("name", "pinning", "held"),
    [
        ("debate", "explicit", 24),  # 8 queries x 3 agents, one continuation each
        ("debate", "virtual", 0),  # no soft pins without explicit pinning
        ("reflect", "explicit", 12),  # each query's first answer, revised after two critics
        ("mapred", "explicit", 0),  # no conversation continues
    ],
)
async def test_a_conversation_is_held_by_a_soft_pin_until_its_continuation_is_done(
    monkeypatch: pytest.MonkeyPatch, name: str, pinning: str, held: int
) -> None:
    holders = _record_holders(monkeypatch)
    await _run(name, policy="cache-aware", pinning=pinning)
    assert len(holders) == held and all(count == 1 for count in holders)


class FailingSim(SimEngine):
    """Fails the second round of query 3's first agent."""

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if "a0_r1:3" in request.request_id:
            raise EngineError("injected failure")
        return await super().generate(request)


async def test_a_failed_run_releases_held_and_pinned_conversations() -> None:
    question = wf.input("question")
    convs = [wf.chat(wf.user(question, f" Answer as agent {i}.")) for i in range(2)]
    first = [wf.llm(c, max_tokens=8, name=f"a{i}_r0") for i, c in enumerate(convs)]
    second = [
        wf.llm(conv.then(mine).user("The other said: ", other), max_tokens=8, name=f"a{i}_r1")
        for i, (conv, mine, other) in enumerate(zip(convs, first, first[::-1], strict=True))
    ]
    flow = wf.Workflow({f"agent{i}": a for i, a in enumerate(second)})
    engine = FailingSim(num_blocks=64, block_size_tokens=16)
    ledger = KVLedger(engine.capacity.num_blocks)
    with pytest.MonkeyPatch.context() as patch:
        holders = _record_holders(patch)
        with pytest.raises(QueryError) as failure:
            questions = {"question": [f"What is {i} plus {i}?" for i in range(6)]}
            await arun(
                flow, engine, questions, ledger=ledger, policy="cache-aware", pinning="explicit"
            )
    assert failure.value.op_id == "a0_r1" and failure.value.key == (3,)
    assert holders, "some first round was held when the run failed"
    assert ledger.reserved_blocks == 0 and ledger.owners == frozenset()
    assert engine.block_pool.num_pinned_blocks == 0
    await engine.close()


async def test_a_cancelled_run_releases_held_and_pinned_conversations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holders = _record_holders(monkeypatch)
    engine = SimEngine(num_blocks=44, block_size_tokens=32)
    ledger = KVLedger(engine.capacity.num_blocks)
    job = workload("debate", "small")
    run = asyncio.ensure_future(
        arun(
            job.workflows[0],
            engine,
            job.inputs[0],
            ledger=ledger,
            policy="cache-aware",
            pinning="explicit",
            system_prompt="",
        )
    )
    for _ in range(100_000):  # bounded: the simulator needs no wall time
        if holders or run.done():
            break
        await asyncio.sleep(0)
    assert holders and not run.done(), "cancel while a first round is held"
    assert ledger.reserved_blocks > 0 and engine.block_pool.num_pinned_blocks > 0
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert ledger.reserved_blocks == 0 and ledger.owners == frozenset()
    assert engine.block_pool.num_pinned_blocks == 0
    await engine.close()


class RecordingSim(SimEngine):
    """Records every request it is sent."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        return await super().generate(request)


@pytest.mark.parametrize("pinning", ["virtual", "explicit"])
async def test_only_warm_ups_and_continued_calls_are_soft_pinned_and_all_pins_released(
    pinning: str,
) -> None:
    """Under explicit pinning the warm-ups and the 24 first rounds (the calls a second
    round continues) carry soft pins, and no other call pins anything; under virtual
    pinning nothing does. Nothing is pinned after the run."""
    engine = RecordingSim(num_blocks=88, block_size_tokens=16)
    job = workload("debate", "small")
    result = await arun(
        job.workflows[0],
        engine,
        job.inputs[0],
        policy="cache-aware",
        pinning=pinning,
        workflow_options=WorkflowOptions(warm_min_tokens=16),
    )
    warm = [r for r in engine.requests if ":warm:" in r.request_id]
    assert result.warm is not None and result.warm.prefixes == len(warm) > 0
    pinned = pinning == "explicit"
    assert all((r.pin_key is not None, r.pin_soft) == (pinned, pinned) for r in warm)
    calls = [r for r in engine.requests if ":warm:" not in r.request_id]
    soft = [r for r in calls if r.pin_key is not None and r.pin_soft and r.pin_blocks is None]
    assert len(soft) == (24 if pinned else 0)
    first_rounds = {f"agent{i}_r0" for i in range(3)} if pinned else set()
    assert {r.request_id.split(":")[1] for r in soft} == first_rounds
    assert sum(r.pin_key is not None for r in calls) == len(soft)
    assert engine.block_pool.num_pinned_blocks == 0
    await engine.close()
