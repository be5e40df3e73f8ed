"""Calibrating against the simulator recovers the simulator's own costs; the disk cache
keeps one model per engine key, stored whole by writers at once; a calibration leaves the
engine as it found it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kalypso.engine.calibration import FULL, QUICK, CalibrationCache, CalibrationPlan, calibrate
from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import EngineCapacity
from kalypso.engine.sim import CostProfile, SimEngine

TRUTH = CostProfile(
    "truth",
    per_step_s=0.02,
    per_prefill_token_s=0.0015,
    per_decode_token_s=0.005,
    capacity=EngineCapacity(num_blocks=64, block_size_tokens=128, max_model_len_tokens=4096),
)


@pytest.mark.parametrize("plan", [QUICK, FULL], ids=["quick", "full"])
async def test_calibration_recovers_the_profile_it_measures(plan: CalibrationPlan) -> None:
    engine = SimEngine(TRUTH, max_num_seqs=8)
    try:
        calibration = await calibrate(engine, plan)
        stats = await engine.stats()
    finally:
        await engine.close()
    model = calibration.model
    assert model.prefill_token_s == pytest.approx(TRUTH.per_prefill_token_s, rel=0.02)
    assert model.step_s == pytest.approx(TRUTH.per_step_s, rel=0.05)
    assert model.decode_seq_s == pytest.approx(TRUTH.per_decode_token_s, rel=0.05)
    assert model.max_seqs == 8 and model.source.startswith("calibrated on sim:truth, 20")
    # left as found: nothing running or waiting, nothing held, nothing cached
    assert (stats.running_requests, stats.waiting_requests, stats.kv_usage_fraction) == (0, 0, 0)
    assert engine.block_pool.num_cached_blocks == 0


async def test_an_engine_too_small_for_the_plan_is_refused_before_any_request() -> None:
    engine = SimEngine(TRUTH, num_blocks=3, max_num_seqs=8)
    try:
        with pytest.raises(ValueError, match="cannot hold a 513-token calibration prompt"):
            await calibrate(engine, QUICK)
        assert engine.num_steps == 0
    finally:
        await engine.close()
    narrow = SimEngine(TRUTH, max_num_seqs=4)
    try:
        with pytest.raises(ValueError, match="runs 4 sequences"):
            await calibrate(narrow, QUICK)
    finally:
        await narrow.close()


def test_the_cache_keeps_a_model_per_key(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path)
    key = {"model": "m", "dtype": "float32", "block_size": 32, "host": "h"}
    model = CostModel(0.07, 0.006, 0.003, max_step_tokens=2048, max_seqs=16, source="calibrated")
    assert cache.load(key) is None
    path = cache.store(key, model)
    assert path.parent == tmp_path and cache.load(key) == model
    assert cache.load({**key, "host": "other"}) is None
    path.write_text("{not json")
    assert cache.load(key) is None  # unreadable: measured again, not trusted


def test_engines_storing_one_key_at_once_each_store_whole(tmp_path: Path) -> None:
    """Replicas started side by side on one host calibrate the same key and store it at
    once: every store succeeds, the file kept is whole, and no partial file is left."""
    cache = CalibrationCache(tmp_path)
    key = {"model": "m", "dtype": "float32", "block_size": 32, "host": "h"}
    models = [CostModel(0.07 + i / 1000, 0.006, 0.003, source="calibrated") for i in range(8)]
    barrier = threading.Barrier(len(models))

    def store(model: CostModel) -> None:
        barrier.wait()
        for _ in range(40):
            cache.store(key, model)

    with ThreadPoolExecutor(len(models)) as pool:
        list(pool.map(store, models))
    assert cache.load(key) in models
    assert [p.name for p in tmp_path.iterdir()] == [cache.path(key).name]
