"""Explicit pinning on stock vLLM through Kalypso's scheduler subclass
(:mod:`kalypso.engine.vllm_pinning`), in-process and over HTTP, on CPU with the bundled
model and the conformance suite's tiny KV cache (16 blocks of 128 tokens).

One engine at a time: the fixture is module-scoped and parametrized, so pytest runs every
test of one backend before starting the next. A few tests of the scheduler's own rules run
in-process only (``in_process_only``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable

import pytest

from kalypso.engine.protocol import (
    EngineError,
    EngineStats,
    EngineTimeoutError,
    GenerateRequest,
    UnsupportedFeatureError,
)
from kalypso.engine.vllm_http import HTTPVLLMEngine
from kalypso.engine.vllm_local import LocalVLLMEngine
from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS, parse_control_stop_reason
from kalypso.engine.vllm_settings import VLLMSettings
from tests.conftest import conformance_vllm_settings, poll_stats_until

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

PinningEngine = LocalVLLMEngine | HTTPVLLMEngine
START_RETRY_DELAY_S = 60.0

in_process_only = pytest.mark.parametrize("engine", ["vllm-local"], indirect=True)
"""For a test of the scheduler's own rule (what is evicted, how many blocks a pin holds),
which reaches it the same way in-process and over HTTP: the HTTP engine's part (pin keys
and their options sent with requests, the control requests, the stats) is tested by the
others, on both."""


def _pinning_settings() -> VLLMSettings:
    return dataclasses.replace(conformance_vllm_settings(), scheduler_cls=PINNING_SCHEDULER_CLS)


@pytest.fixture(scope="module", params=["vllm-local", "vllm-http"])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[PinningEngine]:
    """A vLLM engine running the pinning scheduler (a start that fails, for example
    because someone else's vLLM holds the machine, is retried once a minute later)."""
    from kalypso.engine.vllm_server import VLLMServer

    settings = _pinning_settings()
    if request.param == "vllm-local":
        try:
            local = await LocalVLLMEngine.start(settings)
        except EngineError:
            await asyncio.sleep(START_RETRY_DELAY_S)
            local = await LocalVLLMEngine.start(settings)
        try:
            yield local
        finally:
            await local.close()
        return
    try:
        server = VLLMServer.start(settings, admin_endpoints=True)
    except EngineError:
        await asyncio.sleep(START_RETRY_DELAY_S)
        server = VLLMServer.start(settings, admin_endpoints=True)
    try:
        http = await HTTPVLLMEngine.connect(server.base_url, pinning=True)
        try:
            yield http
        finally:
            await http.close()
    finally:
        server.stop()


@pytest.fixture
async def clean(engine: PinningEngine) -> PinningEngine:
    """The engine with no pin and an empty prefix cache."""
    await engine.unpin_all()
    await engine.reset_prefix_cache()
    return engine


def _tokens(engine: PinningEngine, seed: int, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` token ids of varied text (distinct per seed)."""
    rng = random.Random(seed)
    vocab = ["alpha", "battery", "clause", "delta", "engine", "forest", "garden", "harbor"]
    ids: list[int] = []
    words = 2 * n_tokens
    while len(ids) < n_tokens:
        text = f"[{seed}] " + " ".join(rng.choice(vocab) for _ in range(words))
        ids = engine.tokenizer.encode(text)
        words *= 2
    return ids[:n_tokens]


async def _overflow(engine: PinningEngine, first_seed: int) -> None:
    """Distinct prompts that together need more blocks than the cache has (as in the
    conformance suite's LRU test)."""
    capacity = engine.capacity
    block = capacity.block_size_tokens
    filler_tokens = (capacity.max_model_len_tokens // 2 // block) * block
    needed = capacity.total_tokens + 2 * block
    seed = first_seed
    while needed > 0:
        filler = tuple(_tokens(engine, seed, filler_tokens))
        await engine.generate(GenerateRequest(f"filler{seed}", filler, 2))
        needed -= filler_tokens
        seed += 1


async def _cached(engine: PinningEngine, prefix: list[int], seed: int) -> int:
    """Prefix-cache hit tokens of a fresh prompt that starts with ``prefix``."""
    prompt = tuple([*prefix, *_tokens(engine, seed, 8)])
    return (await engine.generate(GenerateRequest(f"probe{seed}", prompt, 2))).cached_tokens


async def _wait_stats(
    engine: PinningEngine, condition: Callable[[EngineStats], bool], timeout_s: float = 10.0
) -> tuple[EngineStats, float]:
    """Poll the stats until ``condition`` holds; returns them and the seconds it took."""
    start = time.monotonic()
    while True:
        stats = await engine.stats()
        elapsed = time.monotonic() - start
        if condition(stats) or elapsed > timeout_s:
            return stats, elapsed
        await asyncio.sleep(0.005)


@in_process_only
async def test_unpinned_prefix_is_evicted_by_overflow(clean: PinningEngine) -> None:
    block = clean.capacity.block_size_tokens
    prefix = _tokens(clean, 10, 4 * block)
    assert await _cached(clean, prefix, 11) == 0
    await _overflow(clean, 100)
    assert await _cached(clean, prefix, 12) == 0


async def test_pinned_prefix_survives_overflow_until_unpinned(clean: PinningEngine) -> None:
    engine = clean
    assert engine.supports_pinning
    block = engine.capacity.block_size_tokens
    prefix = _tokens(engine, 20, 4 * block)
    victim = tuple([*prefix, *_tokens(engine, 21, 8)])
    await engine.generate(GenerateRequest("victim", victim, 2, pin_key="doc-20"))
    await _overflow(engine, 200)
    assert await _cached(engine, prefix, 22) == 4 * block

    await engine.unpin("doc-20")
    await engine.unpin("doc-20")  # released already: a no-op
    await engine.unpin("never-pinned")
    assert await _cached(engine, prefix, 23) == 4 * block  # unpinned blocks stay cached
    await _overflow(engine, 300)
    assert await _cached(engine, prefix, 24) == 0


@in_process_only
async def test_pin_blocks_pins_only_the_leading_blocks(clean: PinningEngine) -> None:
    engine = clean
    block = engine.capacity.block_size_tokens
    prefix = _tokens(engine, 400, 4 * block)
    prompt = tuple([*prefix, *_tokens(engine, 401, 8)])
    await engine.generate(GenerateRequest("partly", prompt, 2, pin_key="part", pin_blocks=2))
    await _overflow(engine, 410)
    assert await _cached(engine, prefix, 402) == 2 * block
    await engine.unpin("part")


@in_process_only
async def test_soft_pin_outlives_lru_eviction_and_gives_way_to_a_request_needing_its_blocks(
    clean: PinningEngine,
) -> None:
    """A soft pin keeps its blocks while other requests fit beside it (unlike no pin:
    test_unpinned_prefix_is_evicted_by_overflow); when a request cannot get its blocks,
    soft pins are released, newest first, and the request runs (unlike hard pins:
    test_cache_full_of_pins_shows_waiting_without_running_until_unpin_all)."""
    engine = clean
    block = engine.capacity.block_size_tokens
    prefixes = [_tokens(engine, 420 + i, 4 * block) for i in range(3)]
    for i, prefix in enumerate(prefixes):  # 12 of the 15 usable blocks, softly
        prompt = tuple([*prefix, *_tokens(engine, 430 + i, 8)])
        await engine.generate(
            GenerateRequest(f"soft{i}", prompt, 2, pin_key=f"s{i}", pin_soft=True)
        )
    big = tuple(_tokens(engine, 440, 7 * block))  # needs 8 blocks: two pins must go
    result = await asyncio.wait_for(engine.generate(GenerateRequest("big", big, 2)), timeout=120)
    assert result.finish_reason in ("stop", "length")
    assert await _cached(engine, prefixes[0], 450) == 4 * block  # the oldest stayed
    await _overflow(engine, 460)  # each filler fits beside the one pin left
    assert await _cached(engine, prefixes[0], 451) == 4 * block
    await engine.unpin("s0")


async def test_request_ended_by_a_stop_string_is_pinned(clean: PinningEngine) -> None:
    """vLLM's frontend detects stop strings and aborts the request in the engine core;
    the pin must survive that abort."""
    engine = clean
    block = engine.capacity.block_size_tokens
    prefix = _tokens(engine, 25, 4 * block)
    prompt = tuple([*prefix, *_tokens(engine, 26, 8)])
    free_run = await engine.generate(GenerateRequest("free", prompt, 16, ignore_eos=True))
    words = free_run.text.split()
    if len(words) < 2:
        pytest.skip(f"the model's output {free_run.text!r} has no word to stop at")
    stop = words[1]
    stopped = await engine.generate(
        GenerateRequest("stopped", prompt, 16, ignore_eos=True, stop=(stop,), pin_key="s")
    )
    assert stopped.finish_reason == "stop" and stopped.output_tokens < 16
    await _overflow(engine, 250)
    assert await _cached(engine, prefix, 27) == 4 * block
    await engine.unpin("s")


async def test_control_requests_add_no_phase_time(clean: PinningEngine) -> None:
    """Control requests finish without being scheduled; vLLM's frontend would count the
    whole monotonic clock (hours) as the prefill time of each unless told when it was
    scheduled, and the engines' phase times (``stats().prefill_time_s``) would be
    meaningless for any run with explicit pinning."""
    engine = clean
    before = await engine.stats()
    started = time.monotonic()
    for key in ("x", "y", "z"):
        await engine.unpin(key)
    await engine.unpin_all()
    prompt = tuple(_tokens(engine, 70, 40))
    await engine.generate(GenerateRequest("after-controls", prompt, 2))
    after, _ = await _wait_stats(engine, lambda s: s.prefill_time_s > before.prefill_time_s)
    elapsed_s = time.monotonic() - started
    assert 0 < after.prefill_time_s - before.prefill_time_s <= elapsed_s
    assert 0 <= after.decode_time_s - before.decode_time_s <= elapsed_s


async def test_unpin_all_releases_every_key(clean: PinningEngine) -> None:
    engine = clean
    block = engine.capacity.block_size_tokens
    # three 2-block prefixes, two pinned under one key: 6 of the 16 blocks stay pinned
    prefixes = [_tokens(engine, 30 + i, 2 * block) for i in range(3)]
    for i, (prefix, key) in enumerate(zip(prefixes, ["a", "a", "b"], strict=True)):
        prompt = tuple([*prefix, *_tokens(engine, 40 + i, 8)])
        await engine.generate(GenerateRequest(f"pinned{i}", prompt, 2, pin_key=key))
    await _overflow(engine, 400)
    assert [await _cached(engine, p, 50 + i) for i, p in enumerate(prefixes)] == [2 * block] * 3

    await engine.unpin_all()
    await _overflow(engine, 500)
    assert [await _cached(engine, p, 60 + i) for i, p in enumerate(prefixes)] == [0, 0, 0]


async def test_one_key_releases_all_its_requests_together(clean: PinningEngine) -> None:
    engine = clean
    block = engine.capacity.block_size_tokens
    prefixes = [_tokens(engine, 70 + i, 2 * block) for i in range(3)]
    for i, (prefix, key) in enumerate(zip(prefixes, ["a", "a", "b"], strict=True)):
        prompt = tuple([*prefix, *_tokens(engine, 80 + i, 8)])
        await engine.generate(GenerateRequest(f"pinned{i}", prompt, 2, pin_key=key))
    await engine.unpin("a")
    await _overflow(engine, 600)
    assert [await _cached(engine, p, 90 + i) for i, p in enumerate(prefixes)] == [0, 0, 2 * block]


async def test_kv_usage_counts_pinned_blocks(clean: PinningEngine) -> None:
    engine = clean
    block = engine.capacity.block_size_tokens
    # vLLM reports usage over the blocks requests can hold, which capacity counts
    usable_blocks = engine.capacity.num_blocks
    prompt = tuple([*_tokens(engine, 110, 4 * block), *_tokens(engine, 111, 8)])
    await engine.generate(GenerateRequest("pinned", prompt, 2, pin_key="usage"))
    pinned, _ = await _wait_stats(engine, lambda s: s.kv_usage_fraction > 0)
    assert pinned.kv_usage_fraction == pytest.approx(4 / usable_blocks)
    assert pinned.running_requests == 0 and pinned.waiting_requests == 0
    await engine.unpin("usage")
    released, _ = await _wait_stats(engine, lambda s: s.kv_usage_fraction == 0)
    assert released.kv_usage_fraction == 0


async def test_reset_prefix_cache_refuses_while_pinned(clean: PinningEngine) -> None:
    engine = clean
    prompt = tuple(_tokens(engine, 120, 2 * engine.capacity.block_size_tokens + 8))
    await engine.generate(GenerateRequest("pinned", prompt, 2, pin_key="reset"))
    with pytest.raises(EngineError, match="unpin_all"):
        await engine.reset_prefix_cache()
    await engine.unpin_all()
    await engine.reset_prefix_cache()


async def test_cache_full_of_pins_shows_waiting_without_running_until_unpin_all(
    clean: PinningEngine,
) -> None:
    """The deadlock a query scheduler must detect: nothing runs, a request waits."""
    engine = clean
    block = engine.capacity.block_size_tokens
    for i in range(3):  # 12 of the 15 usable blocks pinned
        prompt = tuple([*_tokens(engine, 130 + i, 4 * block), *_tokens(engine, 140 + i, 8)])
        await engine.generate(GenerateRequest(f"pinned{i}", prompt, 2, pin_key=f"d{i}"))
    big = tuple(_tokens(engine, 150, 7 * block))  # needs 8 blocks: cannot be admitted
    task = asyncio.ensure_future(engine.generate(GenerateRequest("big", big, 2)))
    try:
        # bounded wait, not a timing assertion: on a loaded machine the state may take a
        # while to show; the test states only that it shows within 30 s
        stuck, _ = await _wait_stats(
            engine, lambda s: s.waiting_requests > 0 and s.running_requests == 0, timeout_s=30.0
        )
        assert (stuck.waiting_requests, stuck.running_requests) == (1, 0), stuck
        await asyncio.sleep(1.0)
        assert not task.done()
        still = await engine.stats()
        assert (still.waiting_requests, still.running_requests) == (1, 0)
        assert await engine.stalled_requests() == 1
        await engine.unpin_all()
        result = await asyncio.wait_for(task, timeout=60)
        assert result.finish_reason in ("stop", "length")
        assert await engine.stalled_requests() == 0
    finally:
        if not task.done():
            await engine.unpin_all()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_request_queued_behind_a_running_one_is_not_stalled(clean: PinningEngine) -> None:
    """The conformance engine runs one request at a time: the second waits while the
    first decodes, which is progress, not a stall (pins or no pins).

    No step depends on the machine's speed (as in the conformance suite's priority test):
    the blocker asks for as many tokens as the context holds, the second request is sent
    only once the blocker runs, and the blocker is cancelled once both states were seen.
    Sent together, the short request could reach the server first, on its own connection,
    and finish before the blocker starts, so nothing would ever queue."""
    engine = clean
    prompt_tokens = 64
    blocker = GenerateRequest(
        "blocker",
        tuple(_tokens(engine, 470, prompt_tokens)),
        engine.capacity.max_model_len_tokens - prompt_tokens - 8,
        ignore_eos=True,
    )
    queued = GenerateRequest("queued", tuple(_tokens(engine, 471, prompt_tokens)), 2)
    blocker_task = asyncio.ensure_future(engine.generate(blocker))
    try:
        await poll_stats_until(lambda s: s.running_requests == 1, engine, blocker_task.done)
        assert not blocker_task.done(), "the blocker finished before the second was sent"
        queued_task = asyncio.ensure_future(engine.generate(queued))
        await poll_stats_until(
            lambda s: (s.running_requests, s.waiting_requests) == (1, 1),
            engine,
            blocker_task.done,
        )
        assert not blocker_task.done(), "the blocker finished before the second queued"
        assert await engine.stalled_requests() == 0
        blocker_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocker_task
        result = await asyncio.wait_for(queued_task, timeout=60)
        assert result.output_token_ids
    finally:
        if not blocker_task.done():
            blocker_task.cancel()
            await asyncio.gather(blocker_task, return_exceptions=True)


async def test_request_held_waiting_by_pins_times_out_and_the_engine_serves_on(
    clean: PinningEngine,
) -> None:
    """A hung request (it can never be admitted beside the pins) fails with
    EngineTimeoutError, is aborted in vLLM (no longer waiting), and the engine serves the
    next request."""
    engine = clean
    block = engine.capacity.block_size_tokens
    for i in range(3):  # 12 of the 15 usable blocks pinned
        prompt = tuple([*_tokens(engine, 170 + i, 4 * block), *_tokens(engine, 180 + i, 8)])
        await engine.generate(GenerateRequest(f"pinned{i}", prompt, 2, pin_key=f"t{i}"))
    big = tuple(_tokens(engine, 190, 7 * block))  # needs 8 blocks: cannot be admitted
    with pytest.raises(EngineTimeoutError, match="'big'"):
        await engine.generate(GenerateRequest("big", big, 2, timeout_s=2.0))
    gone, _ = await _wait_stats(
        engine, lambda s: s.waiting_requests == 0 and s.running_requests == 0, timeout_s=30.0
    )
    assert (gone.waiting_requests, gone.running_requests) == (0, 0), gone
    await engine.unpin_all()
    result = await engine.generate(GenerateRequest("big-again", big, 2))
    assert result.finish_reason in ("stop", "length")


async def test_running_request_that_times_out_frees_its_blocks_and_pins_nothing(
    clean: PinningEngine,
) -> None:
    """A long decode cut by its timeout: the engine stops running it, frees its blocks and,
    as on the simulator, does not pin a request its caller saw fail."""
    engine = clean
    prompt = tuple(_tokens(engine, 200, 64))
    # as many tokens as the context holds take CPU vLLM tens of seconds; the timeout cuts it
    # after its first ones
    max_tokens = engine.capacity.max_model_len_tokens - len(prompt) - 8
    request = GenerateRequest(
        "long", prompt, max_tokens, ignore_eos=True, timeout_s=3.0, pin_key="timed-out"
    )
    with pytest.raises(EngineTimeoutError, match="'long'"):
        await engine.generate(request)
    idle, _ = await _wait_stats(
        engine,
        lambda s: s.running_requests == 0 and s.waiting_requests == 0 and s.kv_usage_fraction == 0,
        timeout_s=30.0,
    )
    assert (idle.running_requests, idle.waiting_requests) == (0, 0), idle
    assert idle.kv_usage_fraction == 0, "the timed-out request's blocks stayed held (pinned?)"
    result = await engine.generate(GenerateRequest("after", prompt, 2))
    assert result.finish_reason in ("stop", "length")


async def test_http_client_without_pinning_rejects_pin_keys(engine: PinningEngine) -> None:
    if not isinstance(engine, HTTPVLLMEngine):
        pytest.skip("the in-process engine enables pinning from its settings alone")
    plain = await HTTPVLLMEngine.connect(engine.base_url)
    try:
        assert not plain.supports_pinning
        prompt = tuple(_tokens(engine, 160, 16))
        with pytest.raises(UnsupportedFeatureError, match="pinning"):
            await plain.generate(GenerateRequest("p", prompt, 2, pin_key="k"))
        with pytest.raises(UnsupportedFeatureError):
            await plain.unpin("k")
        with pytest.raises(UnsupportedFeatureError):
            await plain.unpin_all()
    finally:
        await plain.close()


def test_control_stop_reason_parsing() -> None:
    assert parse_control_stop_reason("kalypso-pinning:released=7") == 7
    assert parse_control_stop_reason("kalypso-pinning:released=x") is None
    assert parse_control_stop_reason(None) is None
    assert parse_control_stop_reason(13) is None
