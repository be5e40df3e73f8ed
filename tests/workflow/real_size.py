"""The simulator at the real CPU runs' size (blocks of 32 tokens, 16 sequences, the
float32 SmolLM2 profile), and the library workflows run on it, for the workflow tests."""

from __future__ import annotations

import asyncio

from kalypso.engine.open import EngineSpec, open_engine
from kalypso.workflow.library import workload
from kalypso.workflow.run import WorkflowResult, arun

REAL_RUN_BLOCKS = 44
"""The real runs' KV cache: 1,408 tokens."""


def real_size_sim(num_blocks: int = REAL_RUN_BLOCKS) -> EngineSpec:
    """A simulator of ``num_blocks`` blocks, otherwise as the real runs' engine."""
    return EngineSpec(
        kind="sim",
        sim_profile="smollm2-cpu-f32",
        sim_blocks=num_blocks,
        sim_block_size_tokens=32,
        sim_max_num_seqs=16,
    )


async def run_days(
    name: str, num_blocks: int = REAL_RUN_BLOCKS, **options: object
) -> tuple[list[WorkflowResult], int]:
    """Every day of workflow ``name`` (small) on one fresh simulator, each within 120 s;
    returns the results and the blocks still pinned in the engine at the end."""
    engine = await open_engine(real_size_sim(num_blocks))
    try:
        job = workload(name, "small")
        results = []
        for flow, inputs in zip(job.workflows, job.inputs, strict=True):
            run = arun(flow, engine, inputs, system_prompt="", **options)
            results.append(await asyncio.wait_for(run, timeout=120))
        return results, engine.block_pool.num_pinned_blocks  # type: ignore[attr-defined]
    finally:
        await engine.close()
