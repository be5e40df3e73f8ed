"""Property test: random prompts, limits, priorities, pins and arrival times on random tiny
pools. Every request ends exactly once (a result, or an EngineError it can be blamed for),
and the block bookkeeping is consistent: only pins hold blocks once all is done."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimOutputModel
from tests.sim.factories import make_engine

PIN_KEYS = ("a", "b")


@dataclass(frozen=True)
class Workload:
    block_size_tokens: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    requests: list[tuple[GenerateRequest, int]]
    """Each request with the event-loop turns to wait before submitting it."""


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    prefixes = draw(st.lists(st.lists(st.integers(0, 5), max_size=12), min_size=2, max_size=2))
    specs = draw(
        st.lists(
            st.tuples(
                st.integers(0, 1),  # which shared prefix
                st.lists(st.integers(0, 5), min_size=1, max_size=8),  # own suffix
                st.integers(1, 6),  # max_tokens
                st.integers(0, 2),  # priority
                st.sampled_from([None, None, *PIN_KEYS]),
                st.booleans(),  # ignore_eos
                st.integers(0, 40),  # event-loop turns before submitting
            ),
            min_size=1,
            max_size=12,
        )
    )
    requests = [
        (
            GenerateRequest(
                f"r{i}",
                tuple(prefixes[p] + suffix),
                max_tokens,
                priority=priority,
                pin_key=pin_key,
                ignore_eos=ignore_eos,
            ),
            delay,
        )
        for i, (p, suffix, max_tokens, priority, pin_key, ignore_eos, delay) in enumerate(specs)
    ]
    return Workload(
        block_size_tokens=draw(st.sampled_from([1, 2, 4])),
        num_blocks=draw(st.integers(2, 24)),
        max_num_seqs=draw(st.integers(1, 4)),
        max_num_batched_tokens=draw(st.integers(1, 16)),
        requests=requests,
    )


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_every_request_ends_once_and_blocks_are_released(workload: Workload) -> None:
    outputs = SimOutputModel(min_output_tokens=1, max_output_tokens=6)
    engine = make_engine(
        num_blocks=workload.num_blocks,
        block_size_tokens=workload.block_size_tokens,
        max_model_len_tokens=1000,
        max_num_seqs=workload.max_num_seqs,
        max_num_batched_tokens=workload.max_num_batched_tokens,
        outputs=outputs,
        fail_when_pinned_out=True,  # without it, a request pinned out waits (as in vLLM)
    )
    pool = engine.block_pool

    async def submit(request: GenerateRequest, delay: int) -> GenerateResult:
        for _ in range(delay):
            await asyncio.sleep(0)
        return await engine.generate(request)

    async def scenario() -> list[GenerateResult | BaseException]:
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(submit(r, d) for r, d in workload.requests), return_exceptions=True),
            timeout=30,
        )
        stats = await engine.stats()
        assert (stats.running_requests, stats.waiting_requests) == (0, 0)
        pool.check_invariants()
        ref_counts = [pool.block(i).ref_count for i in range(pool.num_blocks)]
        assert sum(ref_counts) == pool.num_pinned_blocks  # one reference per pinning
        for key in PIN_KEYS:
            await engine.unpin(key)
        pool.check_invariants()
        assert pool.num_free_blocks == pool.num_blocks
        await engine.close()
        return list(outcomes)

    outcomes = asyncio.run(scenario())
    block_size = workload.block_size_tokens
    any_pins = any(r.pin_key for r, _ in workload.requests)
    for (request, _), outcome in zip(workload.requests, outcomes, strict=True):
        prompt_len = len(request.prompt_token_ids)
        too_big = -(-(prompt_len + request.max_tokens - 1) // block_size) > workload.num_blocks
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, EngineError), outcome
            assert too_big or (any_pins and "pinned" in str(outcome)), outcome
            continue
        assert not too_big
        expected = outputs.complete(
            request.prompt_token_ids,
            max_tokens=request.max_tokens,
            tokenizer=engine.tokenizer,
            ignore_eos=request.ignore_eos,
        )
        assert outcome.request_id == request.request_id
        assert (outcome.output_token_ids, outcome.finish_reason) == (
            expected.token_ids,
            expected.finish_reason,
        )
        assert outcome.cached_tokens % block_size == 0
        assert 0 <= outcome.cached_tokens <= prompt_len - 1
        timings = outcome.timings
        assert 0 <= timings.queued_s < timings.first_token_s <= timings.total_s
