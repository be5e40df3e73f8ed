"""Deterministic mode on real vLLM (CPU): float32 weights, activations and KV cache, with the
context sized for float32 KV bytes (no explicit max_model_len)."""

from __future__ import annotations

import math

import pytest

from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.vllm_settings import (
    VLLMSettings,
    default_max_model_len_tokens,
    kv_bytes_per_token,
)
from kalypso.models import resolve_model
from tests.conftest import CONFORMANCE_KV_BLOCKS, VLLM_CPU_BLOCK_SIZE_TOKENS

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


async def test_deterministic_engine_runs_float32_with_a_cache_sized_for_it() -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine

    model = resolve_model()
    per_token = kv_bytes_per_token(model, "float32")
    assert per_token == 2 * kv_bytes_per_token(model, "bfloat16")  # type: ignore[operator]
    kv_bytes = CONFORMANCE_KV_BLOCKS * VLLM_CPU_BLOCK_SIZE_TOKENS * per_token  # ~90 MiB
    settings = VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=1, deterministic=True)
    engine = await LocalVLLMEngine.start(settings)
    try:
        capacity = engine.capacity
        assert capacity.num_blocks == CONFORMANCE_KV_BLOCKS - 1  # less vLLM's null block
        assert capacity.max_model_len_tokens == default_max_model_len_tokens(
            model, kv_bytes, "float32"
        )
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
    finally:
        await engine.close()


async def test_calibration_leaves_the_engine_as_it_found_it_and_steps_refit_the_model() -> None:
    """A calibration (what an engine runs at start when no model is kept for it) measures
    positive costs, then leaves nothing running, held or cached, and the engine answers
    as before; every step vLLM reports refits the model the engine was given."""
    from kalypso.engine.batch import generate_all
    from kalypso.engine.calibration import QUICK, calibrate
    from kalypso.engine.cost_model import CostModel
    from kalypso.engine.vllm_local import LocalVLLMEngine

    given = CostModel(0.05, 0.003, 0.002, source="given")
    settings = VLLMSettings(
        kv_cache_bytes=64 * 2**20, max_num_seqs=8, deterministic=True, cost_model=given
    )
    engine = await LocalVLLMEngine.start(settings)
    try:
        assert engine.cost_model == given.with_limits(2048, 8)  # given: nothing measured
        request = GenerateRequest("a", tuple(range(3000, 3300)), 12)
        before = await engine.generate(request)
        measured = (await calibrate(engine, QUICK)).model
        assert min(measured.step_s, measured.prefill_token_s, measured.decode_seq_s) > 0
        stats = await engine.stats()
        assert (stats.running_requests, stats.waiting_requests, stats.kv_usage_fraction) == (
            0,
            0,
            0.0,
        )
        after = await engine.generate(GenerateRequest("b", request.prompt_token_ids, 12))
        assert after.output_token_ids == before.output_token_ids
        assert after.cached_tokens == 0  # the calibration's reset: nothing of it is kept
        # the steps of everything above (and of a batch) reach the model's online fit
        batch = [GenerateRequest(f"c{i}", tuple(range(4000 + 50 * i, 4040 + 50 * i)), 24)
                 for i in range(8)]  # fmt: skip
        await generate_all(engine, batch)
        assert engine._costs is not None and engine._costs.steps >= 64
        assert engine.cost_model is not None
        assert engine.cost_model.source.startswith("given, refitted over")
    finally:
        await engine.close()
