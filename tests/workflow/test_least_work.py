"""A workflow run counts what any schedule of its calls must compute (the longest chain's
tokens, the decode tokens and their pairs), exactly, on the simulator at the real runs'
size; the result cache's answers count as nothing computed."""

from __future__ import annotations

import asyncio

from kalypso.core.result_cache import PromptResultCache
from kalypso.engine.open import open_engine
from kalypso.workflow.library import workload
from kalypso.workflow.plan import WorkflowOptions
from kalypso.workflow.run import WorkflowResult, arun
from tests.workflow.real_size import real_size_sim

SIM = real_size_sim()


async def _days(name: str, policy: str) -> list[WorkflowResult]:
    """Every day of the small ``name`` on a fresh simulator, one result cache across days."""
    job = workload(name, "small")
    engine = await open_engine(SIM)
    cache = PromptResultCache(engine.name)
    try:
        return [
            await asyncio.wait_for(
                arun(flow, engine, inputs, system_prompt="", policy=policy, cache=cache), 120
            )
            for flow, inputs in zip(job.workflows, job.inputs, strict=True)
        ]
    finally:
        await engine.close()


async def test_the_counts_are_exact_and_the_same_under_every_policy() -> None:
    # Iterative: six chunks summarised in a chain; MapRed: experts, then a reduce
    for name, chain_tokens, block_steps, decode_steps in (
        ("iterative", 163, 13_085, 289),
        ("mapred", 48, 4_250, 75),
    ):
        counts = set()
        for policy in ("cache-aware", "all-ready", "querywise"):
            (result,) = await _days(name, policy)
            assert result.cache is not None and result.cache.hits == 0
            # no result-cache answer: every request but its last token was fed back
            assert result.decode_tokens == result.output_tokens - result.requests
            counts.add(
                (
                    result.longest_chain_tokens,
                    result.held_block_steps,
                    result.least_decode_steps,
                    result.decode_tokens,
                    result.decode_attention_pairs,
                )
            )
        assert len(counts) == 1, counts  # the work does not depend on the schedule
        assert next(iter(counts))[:3] == (chain_tokens, block_steps, decode_steps)


async def test_calls_the_result_cache_answers_count_no_decode() -> None:
    first, second = await _days("trading", "cache-aware")
    assert second.cache is not None and second.cache.hits > 0  # day 2 repeats day 1's calls
    assert first.decode_tokens == first.output_tokens - first.requests
    assert second.decode_tokens < second.output_tokens - second.requests
    # day 2 alone, nothing answered from day 1: every call is the engine's
    job = workload("trading", "small")
    engine = await open_engine(SIM)
    try:
        alone = await arun(
            job.workflows[-1],
            engine,
            job.inputs[-1],
            system_prompt="",
            workflow_options=WorkflowOptions(result_cache=False),
        )
    finally:
        await engine.close()
    assert alone.decode_tokens == alone.output_tokens - alone.requests
    assert (first.longest_chain_tokens, second.longest_chain_tokens) == (233, 240)
    assert alone.longest_chain_tokens >= second.longest_chain_tokens
    assert alone.decode_tokens > second.decode_tokens
