"""``kv_overcommit``: a run's own ledger of more blocks than the engine's cache, on the
simulator at the real runs' size (44 blocks of 32 tokens, 16 sequences). More calls run
at once, the engine preempts to make room, and the outputs do not change."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from kalypso.engine.open import EngineSpec, open_engine
from kalypso.workflow.library import workload
from kalypso.workflow.run import arun

NUM_BLOCKS = 44


async def _iterative(kv_overcommit: float) -> tuple[pd.DataFrame, int, int, int]:
    """Iterative (small) on a fresh simulator: outputs, the ledger's peak, the engine's
    preemptions, the prefill tokens computed."""
    engine = await open_engine(
        EngineSpec(
            kind="sim",
            sim_profile="smollm2-cpu-f32",
            sim_blocks=NUM_BLOCKS,
            sim_block_size_tokens=32,
            sim_max_num_seqs=16,
        )
    )
    try:
        job = workload("iterative", "small")
        (flow,), (inputs,) = job.workflows, job.inputs
        run = arun(flow, engine, inputs, system_prompt="", kv_overcommit=kv_overcommit)
        result = await asyncio.wait_for(run, timeout=120)
        stats = await engine.stats()
        return (
            result.outputs,
            result.report.peak_reserved_blocks,
            stats.preemptions,
            result.prefill_tokens,
        )
    finally:
        await engine.close()


async def test_an_overcommitted_ledger_admits_beyond_the_cache_with_the_same_outputs() -> None:
    exact, exact_peak, exact_preempted, exact_prefill = await _iterative(1.0)
    over, over_peak, over_preempted, over_prefill = await _iterative(1.25)
    assert exact_peak <= NUM_BLOCKS and exact_preempted == 0
    assert NUM_BLOCKS < over_peak <= int(1.25 * NUM_BLOCKS)
    assert (exact_peak, over_peak) == (43, 51)
    # the engine preempts to make room; the prefill moves with the order calls ran in
    assert (exact_preempted, over_preempted) == (0, 2)
    assert (exact_prefill, over_prefill) == (16212, 16180)
    assert over.equals(exact)


@pytest.mark.parametrize("kv_overcommit", [0.99, 4.01])
async def test_overcommit_out_of_range_is_refused_before_any_call(kv_overcommit: float) -> None:
    from kalypso.core.errors import PlanError

    with pytest.raises(PlanError, match="kv_overcommit must be in"):
        await _iterative(kv_overcommit)
