"""Calibrating against the simulator recovers the simulator's own cost profile."""

from __future__ import annotations

import pytest

from kalypso.engine.protocol import EngineCapacity
from kalypso.engine.sim import CostProfile, SimEngine
from kalypso.engine.sim.calibrate import DECODE_BATCHES, calibrate


async def test_calibration_recovers_the_profile_it_measures() -> None:
    truth = CostProfile(
        "truth",
        per_step_s=0.02,
        per_prefill_token_s=0.0015,
        per_decode_token_s=0.005,
        capacity=EngineCapacity(num_blocks=64, block_size_tokens=128, max_model_len_tokens=4096),
    )
    engine = SimEngine(truth, max_num_seqs=max(DECODE_BATCHES))
    try:
        fitted = await calibrate(engine)
    finally:
        await engine.close()
    assert fitted.per_prefill_token_s == pytest.approx(truth.per_prefill_token_s, rel=0.02)
    assert fitted.per_step_s == pytest.approx(truth.per_step_s, rel=0.05)
    assert fitted.per_decode_token_s == pytest.approx(truth.per_decode_token_s, rel=0.05)
