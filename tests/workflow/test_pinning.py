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
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.workflow.library import workload
from kalypso.workflow.run import WorkflowResult, arun


async def _run(name: str, **options: object) -> tuple[list[WorkflowResult], int]:
    """Every day of workflow ``name`` (small) on one 44-block simulator (the real runs'
    KV size); returns the results and the blocks still pinned at the end."""
    engine = await open_engine(
        EngineSpec(
            kind="sim",
            sim_profile="smollm2-cpu-f32",
            sim_blocks=44,
            sim_block_size_tokens=32,
            sim_max_num_seqs=16,
        )
    )
    try:
        job = workload(name, "small")
        results = []
        for flow, inputs in zip(job.workflows, job.inputs, strict=True):
            run = arun(flow, engine, inputs, system_prompt="", **options)
            results.append(await asyncio.wait_for(run, timeout=120))
        return results, engine.block_pool.num_pinned_blocks  # type: ignore[attr-defined]
    finally:
        await engine.close()


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


async def test_debate_rounds_find_their_whole_first_round_with_explicit_pins() -> None:
    """Each first-round answer is held and pinned while the other agents' first rounds
    finish, so every second round finds its conversation cached: the minimum prefill on a
    44-block cache. Without holding it computed 5,490 tokens, 20 of 24 second rounds
    losing part of their first round (virtual pinning still does: LRU ages held blocks)."""
    pinned, _ = await _run("debate", policy="cache-aware", pinning="explicit")
    (result,) = pinned
    assert result.prefill_tokens == result.min_prefill_tokens == 4242
    for stats in result.operator_stats:
        assert stats.lost_prefixes == 0
    (virtual,), _ = await _run("debate", policy="cache-aware")
    assert virtual.prefill_tokens > virtual.min_prefill_tokens


def _record_holders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    holders: list[int] = []
    complete = MemoryManager.complete

    def recording(
        self: MemoryManager,
        task: TaskMemory,
        *,
        children: int,
        prefix_keys: tuple[int, ...] | None = None,
    ) -> list[TaskMemory]:
        if prefix_keys is not None:
            holders.append(children)
        return complete(self, task, children=children, prefix_keys=prefix_keys)

    monkeypatch.setattr(MemoryManager, "complete", recording)
    return holders


@pytest.mark.parametrize(
    ("name", "pinning", "held"),
    [
        ("debate", "explicit", 24),  # 8 queries x 3 agents, one continuation each
        ("debate", "virtual", 0),  # LRU would age them out: holding only costs memory
        ("reflect", "explicit", 0),  # its final answer waits on two critics not yet started
    ],
)
async def test_a_conversation_is_held_only_while_its_continuation_is_on_its_way(
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
