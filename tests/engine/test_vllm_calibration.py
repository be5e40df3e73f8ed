"""Calibration on real vLLM (CPU, the deterministic mode): it leaves the engine as it found
it, and the engine's steps refit its cost model. (That the deterministic mode runs float32
with a cache sized for it is checked on the conformance suite's engine.)"""

from __future__ import annotations

import pytest

from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.vllm_settings import (
    VLLMSettings,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


async def test_calibration_leaves_the_engine_as_it_found_it_and_steps_refit_the_model() -> None:
    """A calibration (what an engine runs at start when no model is kept for it) measures
    a positive step and prefill cost and a non-negative cost per decoding sequence, then
    leaves nothing running, held or cached, and the engine answers as before; every step
    vLLM reports refits the model the engine was given."""
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
        # 384 more prompt tokens cost far more than timing noise, so the step and prefill
        # parts are positive on any host. The per-sequence decode part is not: 7 more
        # sequences over 16 steps of a 135M model can cost less than the noise of a loaded
        # CPU, and the non-negative fit then gives 0 (batching measured as free).
        assert measured.step_s > 0 and measured.prefill_token_s > 0
        assert measured.decode_seq_s >= 0
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
