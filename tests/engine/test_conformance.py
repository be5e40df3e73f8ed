"""One conformance suite for every engine backend: the simulator and real vLLM on CPU
(in-process and over HTTP) must agree on these behaviours."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from kalypso.engine.protocol import (
    EngineStats,
    GenerateRequest,
    PromptTooLongError,
)
from kalypso.engine.vllm_settings import default_max_model_len_tokens, kv_bytes_per_token
from kalypso.models import resolve_model
from tests.conftest import (
    CONFORMANCE_KV_BLOCKS,
    VLLM_CPU_BLOCK_SIZE_TOKENS,
    EngineUnderTest,
    conformance_vllm_settings,
    poll_stats_until,
)

pytestmark = pytest.mark.timeout(600)


def _words(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    vocab = [
        "alpha",
        "battery",
        "clause",
        "delta",
        "engine",
        "forest",
        "garden",
        "harbor",
        "island",
        "jungle",
        "kernel",
        "lemon",
        "mountain",
        "network",
        "ocean",
        "planet",
        "quartz",
        "river",
        "signal",
        "tunnel",
        "umbrella",
        "valley",
        "window",
        "yellow",
    ]
    return " ".join(rng.choice(vocab) for _ in range(n_words))


def _tokens(eut: EngineUnderTest, seed: int, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` token ids of varied text (distinct per seed)."""
    ids: list[int] = []
    words = 2 * n_tokens
    while len(ids) < n_tokens:
        ids = eut.engine.tokenizer.encode(f"[{seed}] " + _words(seed, words))
        words *= 2
    return ids[:n_tokens]


async def test_capacity_matches_engine(any_engine: EngineUnderTest) -> None:
    capacity = any_engine.engine.capacity
    assert capacity.num_blocks == any_engine.expected_num_blocks
    assert capacity.total_tokens == capacity.num_blocks * capacity.block_size_tokens
    assert 0 < capacity.max_model_len_tokens <= capacity.total_tokens
    # max_num_seqs=1 everywhere; a server at a URL does not report it
    expected_running = None if any_engine.kind == "vllm-http" else 1
    assert capacity.max_running_requests == expected_running


async def test_shared_prefix_reports_every_full_shared_block(
    any_engine: EngineUnderTest,
) -> None:
    engine = any_engine.engine
    block = engine.capacity.block_size_tokens
    await engine.reset_prefix_cache()
    prefix = _tokens(any_engine, 1, 3 * block + block // 2)  # 3.5 blocks
    first = GenerateRequest("first", tuple([*prefix, *_tokens(any_engine, 2, 20)]), 4)
    second = GenerateRequest("second", tuple([*prefix, *_tokens(any_engine, 3, 20)]), 4)
    r1 = await engine.generate(first)
    r2 = await engine.generate(second)
    assert r1.cached_tokens == 0
    assert r2.cached_tokens == 3 * block
    assert r2.prefill_tokens == len(second.prompt_token_ids) - 3 * block


async def test_whole_prompt_cached_still_computes_last_token(
    any_engine: EngineUnderTest,
) -> None:
    engine = any_engine.engine
    block = engine.capacity.block_size_tokens
    await engine.reset_prefix_cache()
    prompt = tuple(_tokens(any_engine, 4, 2 * block))  # exactly two full blocks
    await engine.generate(GenerateRequest("once", prompt, 2))
    again = await engine.generate(GenerateRequest("again", prompt, 2))
    assert again.cached_tokens == block  # the last block holds the token that must be computed


async def test_max_tokens_is_honoured_with_finish_reason_length(
    any_engine: EngineUnderTest,
) -> None:
    request = GenerateRequest(
        "capped", tuple(_tokens(any_engine, 5, 40)), max_tokens=5, ignore_eos=True
    )
    result = await any_engine.engine.generate(request)
    assert result.finish_reason == "length"
    assert result.output_tokens == 5
    assert result.prompt_tokens == 40


async def test_greedy_decoding_is_deterministic(any_engine: EngineUnderTest) -> None:
    prompt = tuple(_tokens(any_engine, 6, 60))
    a = await any_engine.engine.generate(GenerateRequest("a", prompt, 12))
    b = await any_engine.engine.generate(GenerateRequest("b", prompt, 12))
    assert a.output_token_ids == b.output_token_ids
    assert a.text == b.text


async def test_lru_evicts_first_prefix_after_overflow(any_engine: EngineUnderTest) -> None:
    engine = any_engine.engine
    capacity = engine.capacity
    block = capacity.block_size_tokens
    await engine.reset_prefix_cache()
    prefix = _tokens(any_engine, 10, 4 * block)
    await engine.generate(
        GenerateRequest("victim", tuple([*prefix, *_tokens(any_engine, 11, 8)]), 2)
    )
    # Distinct prompts that together need more blocks than the cache has.
    filler_tokens = (capacity.max_model_len_tokens // 2 // block) * block
    needed = capacity.total_tokens + 2 * block
    seed = 100
    while needed > 0:
        await engine.generate(
            GenerateRequest(f"filler{seed}", tuple(_tokens(any_engine, seed, filler_tokens)), 2)
        )
        needed -= filler_tokens
        seed += 1
    probe = await engine.generate(
        GenerateRequest("probe", tuple([*prefix, *_tokens(any_engine, 12, 8)]), 2)
    )
    assert probe.cached_tokens == 0


async def test_priorities_order_admission_when_saturated(any_engine: EngineUnderTest) -> None:
    """``max_num_seqs=1``: while a long request runs, later requests wait; they are admitted
    lowest priority number first, ties in arrival order.

    No step depends on the machine's speed: the blocker asks for as many tokens as the
    context holds, the six requests are sent only once it runs, and it is cancelled only
    once the engine reports all six waiting. Should the blocker still finish first (a
    server's gauges lag on a loaded machine), the attempt proves nothing about order and
    is made again, at most three times; the failure then shows what the engine reported."""
    seen: list[str] = []
    for attempt in range(3):
        finished = await _admit_six_behind_a_blocker(any_engine, attempt, seen)
        if finished is not None:
            assert finished == ["p0-3", "p1-1", "p1-5", "p2-4", "p3-0", "p4-2"]
            return
    pytest.fail(f"the blocker finished before six requests waited, 3 times: {seen}")


async def _admit_six_behind_a_blocker(
    eut: EngineUnderTest, attempt: int, seen: list[str]
) -> list[str] | None:
    """Six requests of priorities 3,1,4,0,2,1 sent behind a long priority -1 blocker; the
    order they finished in, or None (and what the engine reported, in ``seen``) when the
    blocker finished before all six were seen waiting."""
    engine = eut.engine
    prompt_tokens = 64
    blocker = GenerateRequest(
        f"blocker-{attempt}",
        tuple(_tokens(eut, 20 + attempt, prompt_tokens)),
        max_tokens=engine.capacity.max_model_len_tokens - prompt_tokens - 8,
        ignore_eos=True,
        priority=-1,
    )
    blocker_task = asyncio.ensure_future(engine.generate(blocker))
    await poll_stats_until(lambda s: s.running_requests >= 1, engine, blocker_task.done)
    if blocker_task.done():
        await blocker_task
        seen.append(f"attempt {attempt}: the blocker finished before it was seen running")
        return None
    priorities = [3, 1, 4, 0, 2, 1]
    finished: list[str] = []

    async def run(i: int, priority: int) -> None:
        request = GenerateRequest(
            f"p{priority}-{i}",
            tuple(_tokens(eut, 30 + 10 * attempt + i, 24)),
            max_tokens=2,
            ignore_eos=True,
            priority=priority,
        )
        await engine.generate(request)
        finished.append(request.request_id)

    waiting = asyncio.gather(*(run(i, p) for i, p in enumerate(priorities)))
    most_waiting = 0

    def six_wait(stats: EngineStats) -> bool:
        nonlocal most_waiting
        most_waiting = max(most_waiting, stats.waiting_requests)
        return stats.waiting_requests >= len(priorities)

    await poll_stats_until(six_wait, engine, blocker_task.done)
    if blocker_task.done():
        await blocker_task
        await waiting
        seen.append(f"attempt {attempt}: at most {most_waiting} seen waiting")
        return None
    blocker_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocker_task
    await waiting
    return finished


async def test_prompt_longer_than_context_is_rejected_before_sending(
    any_engine: EngineUnderTest,
) -> None:
    engine = any_engine.engine
    too_long = GenerateRequest("huge", tuple([1] * engine.capacity.max_model_len_tokens), 8)
    before = await engine.stats()
    with pytest.raises(PromptTooLongError, match="huge"):
        await engine.generate(too_long)
    after = await engine.stats()
    assert after.prefix_cache_queries_tokens == before.prefix_cache_queries_tokens


async def test_stats_count_prefix_cache_tokens(any_engine: EngineUnderTest) -> None:
    engine = any_engine.engine
    prompt = tuple(_tokens(any_engine, 40, 3 * engine.capacity.block_size_tokens))
    await engine.generate(GenerateRequest("s1", prompt, 2))
    before = await engine.stats()
    result = await engine.generate(GenerateRequest("s2", prompt, 2))
    for _ in range(100):  # vLLM publishes scheduler stats after its steps
        after = await engine.stats()
        if after.prefix_cache_hits_tokens > before.prefix_cache_hits_tokens:
            break
        await asyncio.sleep(0.02)
    assert result.cached_tokens > 0
    assert after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens == result.cached_tokens
    assert after.running_requests == 0 and after.waiting_requests == 0


def _yes_no_prompt(eut: EngineUnderTest, question: str) -> tuple[int, ...]:
    """A question in the model's chat format: the template through encode_control, the
    question through data encoding (as the prompt layout does)."""
    tokenizer = eut.engine.tokenizer
    marker = "QUESTION_GOES_HERE"
    text = tokenizer.render_chat([("user", marker)], add_generation_prompt=True)
    head, tail = text.split(marker)
    return tuple(
        [
            *tokenizer.encode_control(head),
            *tokenizer.encode(question),
            *tokenizer.encode_control(tail),
        ]
    )


async def test_constrained_decision_returns_both_candidates_renormalised(
    any_engine: EngineUnderTest,
) -> None:
    """``allowed_token_ids`` with ``logprobs=2``: both candidates come back, after the
    constraint (vLLM: ``logprobs_mode="processed_logprobs"``), so their probabilities sum
    to 1; greedy picks the more likely one."""
    engine = any_engine.engine
    yes, no = engine.tokenizer.encode("Yes")[0], engine.tokenizer.encode("No")[0]
    for i, question in enumerate(
        ["Is the sky blue? Answer Yes or No.", "Is fire cold? Yes or no?"]
    ):
        request = GenerateRequest(
            f"decide{i}",
            _yes_no_prompt(any_engine, question),
            1,
            allowed_token_ids=(yes, no),
            logprobs=2,
        )
        result = await engine.generate(request)
        assert result.output_token_ids[0] in (yes, no)
        (position,) = result.logprobs
        assert {token for token, _ in position} == {yes, no}
        assert position[0][0] == result.output_token_ids[0]
        assert position[0][1] >= position[1][1]
        # log-softmax in float32 over the two allowed ids: 1 within float rounding
        assert math.fsum(math.exp(lp) for _, lp in position) == pytest.approx(1.0, abs=1e-4)


async def test_unconstrained_logprobs_rank_the_greedy_token_first(
    any_engine: EngineUnderTest,
) -> None:
    engine = any_engine.engine
    prompt = tuple(_tokens(any_engine, 7, 30))
    result = await engine.generate(GenerateRequest("lp", prompt, 3, ignore_eos=True, logprobs=3))
    assert len(result.logprobs) == result.output_tokens == 3
    for token, position in zip(result.output_token_ids, result.logprobs, strict=True):
        assert 1 <= len(position) <= 3
        logprobs = [lp for _, lp in position]
        assert logprobs == sorted(logprobs, reverse=True)
        assert all(lp <= 0.0 for lp in logprobs)
        assert math.fsum(math.exp(lp) for lp in logprobs) <= 1.0 + 1e-4
        # greedy: the generated token is the most likely (or tied with it, within 1e-5)
        assert dict(position).get(token, -math.inf) >= logprobs[0] - 1e-5
    plain = await engine.generate(GenerateRequest("no-lp", prompt, 3, ignore_eos=True))
    assert plain.logprobs == ()


async def _stats_after(engine_stats: EngineStats, any_engine: EngineUnderTest) -> EngineStats:
    """Stats once a finished request shows in the per-phase totals (vLLM publishes them
    after its engine steps)."""
    for _ in range(500):
        after = await any_engine.engine.stats()
        if after.prefill_time_s > engine_stats.prefill_time_s:
            return after
        await asyncio.sleep(0.02)
    return after


async def test_per_phase_time_and_request_timings(any_engine: EngineUnderTest) -> None:
    engine = any_engine.engine
    before = await engine.stats()
    prompt = tuple(_tokens(any_engine, 8, 3 * engine.capacity.block_size_tokens))
    result = await engine.generate(GenerateRequest("phases", prompt, 8, ignore_eos=True))
    after = await _stats_after(before, any_engine)
    assert after.prefill_time_s > before.prefill_time_s
    assert after.decode_time_s > before.decode_time_s
    timings = result.timings
    assert 0.0 <= timings.queued_s <= timings.first_token_s <= timings.total_s
    if any_engine.kind == "vllm-http":
        return  # the completions API reports no per-request timings
    assert timings.first_token_s > 0.0 and timings.prefill_s > 0.0 and timings.decode_s > 0.0
    # the engine's prefill total grew by this request's prefill (the only one in flight);
    # both come from the same engine timestamps
    assert after.prefill_time_s - before.prefill_time_s == pytest.approx(
        timings.prefill_s, abs=0.01
    )


@pytest.mark.parametrize(
    "any_engine", [pytest.param("vllm-local", marks=pytest.mark.vllm)], indirect=True
)
async def test_the_deterministic_mode_runs_float32_with_a_cache_sized_for_it(
    any_engine: EngineUnderTest,
) -> None:
    """The conformance settings are the deterministic mode's: float32 weights,
    activations and KV cache, the context sized for float32 KV bytes (no explicit
    max_model_len)."""
    from kalypso.engine.vllm_local import LocalVLLMEngine

    engine = any_engine.engine
    assert isinstance(engine, LocalVLLMEngine)

    model = resolve_model()
    per_token = kv_bytes_per_token(model, "float32")
    assert per_token == 2 * kv_bytes_per_token(model, "bfloat16")  # type: ignore[operator]
    kv_bytes = CONFORMANCE_KV_BLOCKS * VLLM_CPU_BLOCK_SIZE_TOKENS * per_token  # ~90 MiB
    assert conformance_vllm_settings().kv_cache_bytes == kv_bytes
    capacity = engine.capacity
    assert capacity.num_blocks == CONFORMANCE_KV_BLOCKS - 1  # less vLLM's null block
    assert capacity.max_model_len_tokens == default_max_model_len_tokens(model, kv_bytes, "float32")
    config = engine._llm.vllm_config.model_config  # what vLLM really runs
    assert str(config.dtype) == "torch.float32"
    tokenizer = engine.tokenizer
    yes, no = tokenizer.encode("Yes")[0], tokenizer.encode("No")[0]
    system = "You answer questions about the world with one word. " * 20  # > 1 block
    text = tokenizer.render_chat(
        [("system", system), ("user", "Is the sky blue? Answer Yes or No.")],
        add_generation_prompt=True,
    )
    prompt = tuple(tokenizer.encode_control(text))
    results = [
        await engine.generate(
            GenerateRequest(f"d{i}", prompt, 1, allowed_token_ids=(yes, no), logprobs=2)
        )
        for i in range(2)  # the second one reads the prompt's prefix from the cache
    ]
    assert results[1].cached_tokens > 0
    for result in results:
        (position,) = result.logprobs
        assert {token for token, _ in position} == {yes, no}
        assert math.fsum(math.exp(lp) for _, lp in position) == pytest.approx(1.0, abs=1e-6)
    first, second = (dict(r.logprobs[0]) for r in results)
    assert results[0].output_token_ids == results[1].output_token_ids
    assert first[yes] == pytest.approx(second[yes], abs=1e-3)
