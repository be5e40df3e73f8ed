"""The simulated engine through the engine protocol: prefix hits, eviction, priorities,
pins, the virtual clock and errors. Pools are tiny (16 blocks of 4 tokens) and counts exact."""

from __future__ import annotations

import asyncio
import time

import pytest

from kalypso.engine.blocks import hash_full_blocks
from kalypso.engine.protocol import (
    Engine,
    EngineError,
    GenerateResult,
    PromptTooLongError,
    RequestTimings,
)
from kalypso.engine.sim import BlockRemoved, BlockStored, KVEvent, SimEngine, SimOutputModel
from tests.sim.factories import make_engine, make_request, run


def test_sim_engine_satisfies_the_protocol() -> None:
    engine = SimEngine()
    assert isinstance(engine, Engine)
    assert engine.name == "sim:smollm2-cpu"
    assert engine.supports_pinning
    assert engine.capacity.block_size_tokens == 128


def test_second_request_hits_every_full_shared_block() -> None:
    async def scenario() -> tuple[GenerateResult, GenerateResult]:
        engine = make_engine()
        first = await engine.generate(make_request("a", range(18)))
        second = await engine.generate(make_request("b", [*range(16), 500, 501, 502]))
        return first, second

    first, second = run(scenario())
    assert first.cached_tokens == 0
    assert second.cached_tokens == 16
    assert second.prefill_tokens == 3


def test_fully_cached_prompt_still_computes_its_last_token() -> None:
    async def scenario() -> list[int]:
        engine = make_engine()
        await engine.generate(make_request("a", range(16)))
        cached = []
        for request_id, length in [("same", 16), ("one-more", 17), ("two-more", 18)]:
            result = await engine.generate(make_request(request_id, range(length)))
            cached.append(result.cached_tokens)
        return cached

    # 16 tokens: at most (16 - 1) // 4 = 3 blocks; 17 and 18 tokens: all 4 full blocks
    assert run(scenario()) == [12, 16, 16]


def test_generated_tokens_fill_cached_blocks() -> None:
    async def scenario() -> GenerateResult:
        engine = make_engine()
        first = await engine.generate(make_request("a", range(14), max_tokens=5))
        # computed: 14 prompt tokens + 4 outputs (the last output is never computed)
        follow_up = [*range(14), *first.output_token_ids[:2], 700]
        return await engine.generate(make_request("b", follow_up))

    assert run(scenario()).cached_tokens == 16


def test_first_prefix_is_evicted_tail_first_once_others_overflow_the_cache() -> None:
    events: list[KVEvent] = []
    hashes = hash_full_blocks(list(range(16)), 4)

    async def scenario() -> tuple[bool, bool, GenerateResult]:
        engine = make_engine(num_blocks=16, on_kv_event=events.append)
        await engine.generate(make_request("first", range(16)))  # blocks 0-3
        for k in range(3):  # 12 more blocks: the pool's never-used ones
            await engine.generate(
                make_request(f"other{k}", range(100 * (k + 1), 100 * (k + 1) + 16))
            )
        cached_before = all(engine.block_pool.get_cached_block(h) for h in hashes)
        await engine.generate(make_request("other3", range(400, 416)))
        cached_after = any(engine.block_pool.get_cached_block(h) for h in hashes)
        again = await engine.generate(make_request("again", range(16)))
        return cached_before, cached_after, again

    cached_before, cached_after, again = run(scenario())
    assert cached_before and not cached_after
    removed = [
        e.block_hash for e in events if isinstance(e, BlockRemoved) and e.block_hash in hashes
    ]
    assert removed == hashes[::-1]
    assert again.cached_tokens == 0


def test_kv_events_announce_stored_blocks() -> None:
    events: list[KVEvent] = []
    run(make_engine(on_kv_event=events.append).generate(make_request("a", range(10))))
    assert events == [BlockStored(h, i) for i, h in enumerate(hash_full_blocks(list(range(10)), 4))]


def test_max_tokens_eos_and_ignore_eos() -> None:
    async def scenario() -> tuple[SimEngine, list[GenerateResult]]:
        engine = make_engine(outputs=SimOutputModel(min_output_tokens=20, max_output_tokens=20))
        results = [
            await engine.generate(make_request("cut", range(8), 5, ignore_eos=False)),
            await engine.generate(make_request("full", range(8), 50, ignore_eos=False)),
            await engine.generate(make_request("forced", range(8), 30, ignore_eos=True)),
        ]
        return engine, results

    engine, (cut, full, forced) = run(scenario())
    eos = engine.tokenizer.eos_token_id
    assert (cut.output_tokens, cut.finish_reason) == (5, "length")
    assert (full.output_tokens, full.finish_reason) == (21, "stop")
    assert full.output_token_ids[-1] == eos and len(full.text.split()) == 20
    assert full.output_token_ids[:5] == cut.output_token_ids
    assert (forced.output_tokens, forced.finish_reason) == (30, "length")
    assert eos not in forced.output_token_ids


def test_stop_string_cuts_the_output() -> None:
    async def scenario() -> tuple[GenerateResult, GenerateResult]:
        engine = make_engine()
        full = await engine.generate(make_request("full", range(8), 50, ignore_eos=False))
        stop = " " + full.text.split()[3]
        stopped = await engine.generate(
            make_request("stopped", range(8), 50, ignore_eos=False, stop=(stop,))
        )
        return full, stopped

    full, stopped = run(scenario())
    stop = " " + full.text.split()[3]
    assert stopped.finish_reason == "stop"
    assert stopped.text == full.text[: full.text.index(stop)]
    assert stopped.output_token_ids == full.output_token_ids[: stopped.output_tokens]


def test_yes_no_answers_through_the_engine() -> None:
    async def scenario() -> list[GenerateResult]:
        engine = make_engine(max_model_len_tokens=64)
        prompts = [
            engine.tokenizer.encode(f"Is item {i} red? Answer Yes or No.") for i in range(20)
        ]
        return [
            await engine.generate(make_request(f"q{i}", p, 4, ignore_eos=False))
            for i, p in enumerate(prompts)
        ]

    results = run(scenario())
    assert {r.text for r in results} == {"Yes", "No"}
    assert all(r.output_tokens == 2 and r.finish_reason == "stop" for r in results)
    assert [r.text for r in results] == [r.text for r in run(scenario())]


def test_waiting_requests_are_admitted_in_priority_then_arrival_order() -> None:
    async def scenario() -> list[GenerateResult]:
        engine = make_engine(max_num_seqs=1)
        blocker = make_request("blocker", range(4), max_tokens=20)
        others = [
            make_request(request_id, range(10 * k + 100, 10 * k + 104), 2, priority=priority)
            for k, (request_id, priority) in enumerate(
                [("a", 5), ("b", 1), ("c", 5), ("d", 0), ("e", 1)]
            )
        ]
        return await asyncio.gather(*(engine.generate(r) for r in [blocker, *others]))

    results = sorted(run(scenario()), key=lambda r: r.timings.scheduled_at_s)
    assert [r.request_id for r in results] == ["blocker", "d", "b", "e", "a", "c"]
    queued = [r.timings.queued_s for r in results]
    assert queued == sorted(queued) and len(set(queued)) == len(queued)


def test_preempted_request_is_recomputed_and_finishes_last() -> None:
    async def scenario() -> tuple[SimEngine, list[GenerateResult]]:
        engine = make_engine(num_blocks=4)
        results = await asyncio.gather(
            engine.generate(make_request("low", range(4), 8, priority=1)),
            engine.generate(make_request("high", range(50, 54), 8, priority=0)),
        )
        return engine, list(results)

    engine, (low, high) = run(scenario())
    assert engine.num_preemptions == 1
    assert run(engine.stats()).preemptions == 1  # what the bench records read
    assert low.output_tokens == high.output_tokens == 8
    assert high.timings.total_s < low.timings.total_s
    assert low.cached_tokens == 0  # reported at its first admission


def test_pin_keeps_a_prefix_cached_under_pressure_until_unpinned() -> None:
    async def scenario() -> tuple[float, int, int]:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("p", range(16), pin_key="k"))
        usage = (await engine.stats()).kv_usage_fraction
        for k in range(4):  # each takes 4 of the 4 unpinned blocks
            await engine.generate(make_request(f"o{k}", range(100 * (k + 1), 100 * (k + 1) + 16)))
        while_pinned = await engine.generate(make_request("p-again", range(16)))
        await engine.unpin("k")
        await engine.unpin("unknown")  # no-op
        for k in range(4, 6):
            await engine.generate(make_request(f"o{k}", range(100 * (k + 1), 100 * (k + 1) + 16)))
        after_unpin = await engine.generate(make_request("p-third", range(16)))
        return usage, while_pinned.cached_tokens, after_unpin.cached_tokens

    assert run(scenario()) == (0.5, 12, 0)


def test_request_that_cannot_fit_beside_pinned_blocks_fails_when_asked() -> None:
    async def scenario() -> GenerateResult:
        engine = make_engine(num_blocks=8, fail_when_pinned_out=True)
        await engine.generate(make_request("p", range(16), pin_key="k"))
        with pytest.raises(EngineError, match=r"'big'.*4 of the 8 blocks are pinned"):
            await engine.generate(make_request("big", range(200, 220)))
        await engine.unpin("k")
        return await engine.generate(make_request("big", range(200, 220)))

    assert run(scenario()).prompt_tokens == 20


def test_pinned_out_request_waits_like_vllm_until_unpinned() -> None:
    """The deadlock shape the scheduler detects: waiting requests and none running."""

    async def scenario() -> tuple[int, int, int, GenerateResult, int]:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("p", range(16), pin_key="k"))
        big = asyncio.ensure_future(engine.generate(make_request("big", range(200, 220))))
        for _ in range(50):
            await asyncio.sleep(0)
        stats = await engine.stats()
        stalled = await engine.stalled_requests()
        assert not big.done()
        await engine.unpin_all()
        result = await big
        return (
            stats.waiting_requests,
            stats.running_requests,
            stalled,
            result,
            await engine.stalled_requests(),
        )

    waiting, running, stalled, result, stalled_after = run(scenario())
    assert (waiting, running, stalled, stalled_after) == (1, 0, 1, 0)
    assert result.prompt_tokens == 20


def test_pin_blocks_pins_only_the_leading_blocks() -> None:
    async def scenario() -> tuple[int, int]:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("p", range(16), pin_key="k", pin_blocks=2))
        pinned = engine.block_pool.num_pinned_blocks
        for k in range(4):  # each takes 4 of the 6 unpinned blocks, evicting the rest
            await engine.generate(make_request(f"o{k}", range(100 * (k + 1), 100 * (k + 1) + 16)))
        return pinned, (await engine.generate(make_request("p-again", range(16)))).cached_tokens

    assert run(scenario()) == (2, 8)


def test_soft_pin_outlives_lru_eviction_while_others_fit() -> None:
    """Beside a soft pin, requests that fit in the free blocks evict everything else
    first; the pin stays, as a hard one would."""

    async def scenario() -> tuple[int, int]:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("p", range(16), pin_key="k", pin_soft=True))
        for k in range(4):
            await engine.generate(make_request(f"o{k}", range(100 * (k + 1), 100 * (k + 1) + 16)))
        again = await engine.generate(make_request("p-again", range(16)))
        return again.cached_tokens, engine.block_pool.num_soft_released_blocks

    assert run(scenario()) == (12, 0)


def test_soft_pins_give_way_newest_first_to_a_request_that_needs_their_blocks() -> None:
    """Where a hard pin makes the request wait (the test above), soft pins are released,
    newest first and only as many as needed, and the request runs."""

    async def scenario() -> tuple[int, int, int, list[str]]:
        engine = make_engine(num_blocks=8)
        await engine.generate(make_request("a", range(8), pin_key="old", pin_soft=True))
        await engine.generate(make_request("b", range(50, 58), pin_key="new", pin_soft=True))
        big = await engine.generate(make_request("big", range(200, 220)))  # needs 5 blocks
        oldest = await engine.generate(make_request("a-again", range(8)))
        return (
            big.prompt_tokens,
            engine.block_pool.num_soft_released_blocks,
            oldest.cached_tokens,
            engine.block_pool.pin_keys(),
        )

    assert run(scenario()) == (20, 2, 4, ["old"])


def test_virtual_clock_is_the_sum_of_step_costs() -> None:
    # unit profile: 1 s per step + 0.5 s per prefill token + 0.25 s per decoding request.
    # Steps (budget 6): {a:5, b:1} = 4.0 s; {a:1 decode, b:4, c:1} = 3.75 s;
    # {b:1 decode, c:4} = 3.25 s; {c:1 decode} = 1.25 s.
    async def scenario() -> tuple[SimEngine, list[GenerateResult]]:
        engine = make_engine(max_num_batched_tokens=6)
        requests = [make_request(r, range(10 * k, 10 * k + 5), 2) for k, r in enumerate("abc")]
        results = await asyncio.gather(*(engine.generate(r) for r in requests))
        return engine, list(results)

    engine, (a, b, c) = run(scenario())
    assert engine.now_s == 12.25
    assert engine.num_steps == 4
    assert a.timings == RequestTimings(0.0, 4.0, 7.75, scheduled_at_s=0.0)
    assert b.timings == RequestTimings(0.0, 7.75, 11.0, scheduled_at_s=0.0)
    assert c.timings == RequestTimings(4.0, 11.0, 12.25, scheduled_at_s=4.0)


def test_stats_and_reset_prefix_cache() -> None:
    async def scenario() -> tuple[list[int], float]:
        engine = make_engine()
        cached = [(await engine.generate(make_request("a", range(18)))).cached_tokens]
        cached.append((await engine.generate(make_request("b", range(18)))).cached_tokens)
        await engine.reset_prefix_cache()
        cached.append((await engine.generate(make_request("c", range(18)))).cached_tokens)
        stats = await engine.stats()
        assert (stats.running_requests, stats.waiting_requests) == (0, 0)
        assert stats.prefix_cache_queries_tokens == 3 * 18
        assert stats.prefix_cache_hits_tokens == 16
        return cached, stats.kv_usage_fraction

    assert run(scenario()) == ([0, 16, 0], 0.0)


def test_prompt_too_long_is_rejected_before_queueing() -> None:
    async def scenario() -> None:
        engine = make_engine(max_model_len_tokens=32)
        with pytest.raises(PromptTooLongError, match="'long'"):
            await engine.generate(make_request("long", range(30), max_tokens=3))
        stats = await engine.stats()
        assert (stats.running_requests, stats.waiting_requests) == (0, 0)

    run(scenario())


def test_request_larger_than_the_pool_is_rejected() -> None:
    async def scenario() -> GenerateResult:
        engine = make_engine(num_blocks=4)  # 16 tokens
        with pytest.raises(EngineError, match=r"'big'.*needs 5 KV blocks.*pool of 4"):
            await engine.generate(make_request("big", range(16), max_tokens=2))
        return await engine.generate(make_request("fits", range(16), max_tokens=1))

    assert run(scenario()).output_tokens == 1


def test_close_fails_pending_requests_and_is_idempotent() -> None:
    async def scenario() -> list[BaseException | GenerateResult]:
        engine = make_engine(max_num_seqs=1)
        tasks = [
            asyncio.create_task(
                engine.generate(make_request(f"r{i}", range(10 * i, 10 * i + 4), 50))
            )
            for i in range(3)
        ]
        await asyncio.sleep(0)
        await engine.close()
        await engine.close()
        with pytest.raises(EngineError, match="closed"):
            await engine.generate(make_request("late", range(4)))
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = run(scenario())
    assert all(isinstance(o, EngineError) and "closed" in str(o) for o in outcomes)


def test_cancelled_request_is_aborted_and_frees_its_blocks() -> None:
    async def scenario() -> None:
        engine = make_engine(max_num_seqs=1)
        slow = asyncio.create_task(engine.generate(make_request("slow", range(4), 50)))
        other = asyncio.create_task(engine.generate(make_request("other", range(8, 12), 2)))
        while engine.num_steps < 3:
            await asyncio.sleep(0)
        slow.cancel()
        assert (await other).output_tokens == 2
        stats = await engine.stats()
        assert (stats.running_requests, stats.waiting_requests) == (0, 0)
        assert stats.kv_usage_fraction == 0.0
        assert slow.cancelled()

    run(scenario())


def test_same_program_gives_the_same_results() -> None:
    async def scenario() -> tuple[float, list[GenerateResult]]:
        engine = make_engine(num_blocks=12, max_num_seqs=3, max_num_batched_tokens=8)
        requests = [
            make_request(
                f"r{i}",
                [*range(8), *range(20 * i, 20 * i + 3 + i)],
                1 + i % 4,
                priority=i % 3,
                ignore_eos=False,
            )
            for i in range(10)
        ]
        results = await asyncio.gather(*(engine.generate(r) for r in requests))
        return engine.now_s, list(results)

    assert run(scenario()) == run(scenario())


async def test_a_continued_request_goes_on_with_the_uninterrupted_output() -> None:
    """A request whose prompt is an earlier one's prompt plus the tokens it generated
    before stopping at max_tokens gets the rest of that output (as a model decoding
    greedily would), however the output is split."""
    engine = SimEngine(
        num_blocks=64,
        block_size_tokens=16,
        outputs=SimOutputModel(min_output_tokens=40, max_output_tokens=40),
    )
    prompt = tuple(engine.tokenizer.encode("Describe the thing in detail."))

    async def ask(ids: tuple[int, ...], max_tokens: int, n: int) -> tuple[int, ...]:
        request = make_request(f"r{n}", ids, max_tokens=max_tokens, ignore_eos=False)
        return (await engine.generate(request)).output_token_ids

    whole = await ask(prompt, 64, 0)
    head = await ask(prompt, 16, 1)
    middle = await ask(prompt + head, 8, 2)
    rest = await ask(prompt + head + middle, 40, 3)
    assert head + middle + rest == whole
    await engine.close()


def test_the_clock_stands_still_while_the_host_works() -> None:
    """While a caller holds ``host_work`` (a Python step in a thread), no step runs and the
    virtual clock does not move; the request goes on once it is released."""

    async def scenario() -> tuple[float, int, float, int, GenerateResult]:
        engine = make_engine()
        with engine.host_work():
            assert engine.host_work_held == 1
            pending = asyncio.create_task(engine.generate(make_request("a", range(6), 5)))
            await asyncio.to_thread(time.sleep, 0.05)
            for _ in range(50):
                await asyncio.sleep(0)
            held_at = (engine.now_s, engine.num_steps)
        result = await pending
        return (*held_at, engine.now_s, engine.num_steps, result)

    held_s, held_steps, end_s, steps, result = run(scenario())
    assert (held_s, held_steps) == (0.0, 0)
    assert steps == 5 and end_s > 0 and result.output_tokens == 5
