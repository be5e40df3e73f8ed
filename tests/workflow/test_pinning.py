"""Explicit pinning under the workflow front end, on the simulator: the same outputs as
virtual pinning, no pin left in the engine, and the baselines that reserve no memory
refused before anything runs."""

from __future__ import annotations

import asyncio

import pytest

from kalypso.core.errors import PlanError
from kalypso.engine.open import EngineSpec, open_engine
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
    [("reflect", "cache-aware"), ("trading", "cache-aware"), ("debate", "querywise")],
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
