"""The simulator's what-if admission that knows output lengths: it never admits what it
would have to preempt, admits what fits at every future step, and changes no answer."""

from __future__ import annotations

import asyncio

import pytest

from kalypso.engine.sim import SimOutputModel
from kalypso.engine.sim.admission import Growth, fits_at_every_step
from kalypso.engine.sim.block_pool import BlockPool
from kalypso.engine.sim.kv_cache_manager import KVCacheManager
from kalypso.engine.sim.scheduler import Scheduler, SchedulerConfig
from tests.sim.factories import make_engine, make_request
from tests.sim.test_sim_scheduler import make_sim_request, step


def known_lengths(num_blocks: int) -> Scheduler:
    config = SchedulerConfig(admission="known-lengths")
    return Scheduler(KVCacheManager(BlockPool(num_blocks), 4), config)


def test_a_request_that_would_be_preempted_waits_instead() -> None:
    """vLLM admits both and preempts the second at its sixth step (see
    test_equal_priorities_preempt_the_latest_arrival); knowing that each needs 3 of the 4
    blocks at its end, the second waits until the first's last step, which needs no new
    block, and starts beside it in the block that step leaves free."""
    scheduler = known_lengths(num_blocks=4)
    scheduler.add_request(make_sim_request("first", range(4), 8))
    scheduler.add_request(make_sim_request("second", range(100, 104), 8))
    plans = []
    while scheduler.has_work:
        plans.append(step(scheduler))
    assert [p.num_scheduled_tokens for p in plans] == [
        {"first": 4}, *[{"first": 1}] * 6, {"first": 1, "second": 4}, *[{"second": 1}] * 7,
    ]  # fmt: skip
    assert scheduler.num_preemptions == 0


def test_requests_that_fit_together_at_every_step_start_together() -> None:
    scheduler = known_lengths(num_blocks=6)
    scheduler.add_request(make_sim_request("first", range(4), 8))
    scheduler.add_request(make_sim_request("second", range(100, 104), 8))
    assert step(scheduler).num_scheduled_tokens == {"first": 4, "second": 4}


def test_the_peak_counts_what_ends_before_it() -> None:
    """A running request ending at step 3 gives back its 2 blocks: a candidate whose own
    need peaks later fits although the two together would not fit at once."""
    running = Growth(tokens=5, held_blocks=2, remaining_tokens=3, end_steps=3, freed_blocks=2)
    late = Growth(tokens=4, held_blocks=0, remaining_tokens=8, end_steps=8, freed_blocks=0)
    # at step 2 the running one needs 0 more (7 tokens in 2 blocks), the candidate 2;
    # from step 3 the running one's 2 blocks are back, and the candidate needs 3 at most
    assert running.need_blocks(2, 4) == 0 and running.need_blocks(3, 4) == -2
    assert late.need_blocks(7, 4) == 3
    assert fits_at_every_step([running], late, free_blocks=2, block_size_tokens=4)
    assert not fits_at_every_step([running], late, free_blocks=1, block_size_tokens=4)
    stays = Growth(tokens=5, held_blocks=2, remaining_tokens=9, end_steps=9, freed_blocks=2)
    assert not fits_at_every_step([stays], late, free_blocks=2, block_size_tokens=4)


def test_an_unknown_admission_is_refused() -> None:
    with pytest.raises(ValueError, match="admission must be one of"):
        SchedulerConfig(admission="oracle")


def test_the_answers_are_vllms_and_nothing_is_preempted() -> None:
    """Twelve requests of 20 output tokens on 24 blocks: vLLM's admission preempts, the
    known lengths' does not, and every answer is the same."""

    async def run(admission: str) -> tuple[list[tuple[int, ...]], int]:
        engine = make_engine(
            num_blocks=24,
            admission=admission,
            outputs=SimOutputModel(min_output_tokens=20, max_output_tokens=20),
        )
        try:
            results = await asyncio.gather(
                *(
                    engine.generate(make_request(f"r{i}", range(10 * i, 10 * i + 6), 20))
                    for i in range(12)
                )
            )
            return [r.output_token_ids for r in results], (await engine.stats()).preemptions
        finally:
            await engine.close()

    vllm_outputs, vllm_preemptions = asyncio.run(run("vllm"))
    known_outputs, known_preemptions = asyncio.run(run("known-lengths"))
    assert known_outputs == vllm_outputs
    assert vllm_preemptions > 0 and known_preemptions == 0
