"""The prefill floor (``bench.prefill_floor``) and its place in records and reports, on the
simulator."""

from __future__ import annotations

import pytest

from bench.prefill_floor import (
    CALIBRATION_TOKENS,
    BatchTiming,
    calibration_prompts,
    context_calibration_prompts,
    fit_prefill_cost,
    measure_prefill_cost,
)
from bench.report import markdown, targets
from bench.runner import run_systems
from bench.workloads import fever, medec
from kalypso.engine.protocol import EngineError
from kalypso.engine.sim import SimEngine
from tests.engine.failing_sim import FailingOneSim


def _engine(num_blocks: int = 600) -> SimEngine:
    return SimEngine("smollm2-cpu-f32", num_blocks=num_blocks, max_model_len_tokens=8192)


async def test_calibration_prompts_fill_the_budget_and_share_no_block() -> None:
    engine = _engine()
    try:
        prompts = calibration_prompts(engine, ["short text"])
        block = engine.capacity.block_size_tokens
        assert sum(map(len, prompts)) >= CALIBRATION_TOKENS
        assert all(len(p) <= min(1024, engine.capacity.total_tokens // 4) for p in prompts)
        assert len({p[:block] for p in prompts}) == len(prompts)
        with pytest.raises(ValueError, match="no tokens"):
            calibration_prompts(engine, [""])
        with pytest.raises(ValueError, match="positive"):
            calibration_prompts(engine, ["text"], total_tokens=0)
    finally:
        await engine.close()


async def test_context_prompts_follow_one_whole_block_context_with_the_same_tokens() -> None:
    engine = _engine()
    try:
        texts = ["some calibration text"]
        context, prompts = context_calibration_prompts(engine, texts)
        short = calibration_prompts(engine, texts)
        capacity = engine.capacity
    finally:
        await engine.close()
    assert 0 < len(context) <= min(2048, capacity.total_tokens // 2)
    assert len(context) % capacity.block_size_tokens == 0
    assert prompts == [context + p for p in short]
    assert all(len(p) < capacity.max_model_len_tokens for p in prompts)


async def test_no_room_for_a_context_leaves_attention_unpriced() -> None:
    engine = SimEngine("smollm2-cpu-f32", num_blocks=4, max_model_len_tokens=64)
    try:
        context, prompts = context_calibration_prompts(engine, ["text"])
        cost = await measure_prefill_cost(engine, ["some calibration text"])
    finally:
        await engine.close()
    assert context == ()
    assert prompts == calibration_prompts(engine, ["text"])
    assert cost.after_context is None
    assert cost.pair_s == 0.0
    assert "not priced" in cost.explain()


def test_the_fit_recovers_a_token_and_a_pair_cost() -> None:
    token_s, pair_s = 0.004, 2.5e-6
    short = BatchTiming(6144, 1_000_000, 6144 * token_s + 1_000_000 * pair_s)
    after = BatchTiming(6144, 14_000_000, 6144 * token_s + 14_000_000 * pair_s)
    cost = fit_prefill_cost(short, after)
    assert cost.token_s == pytest.approx(token_s)
    assert cost.pair_s == pytest.approx(pair_s)
    assert cost.floor_s(1000, 2_000_000) == pytest.approx(1000 * token_s + 2_000_000 * pair_s)
    assert "per million attention pairs" in cost.explain()


@pytest.mark.parametrize("after_s", [10.0, 30.0], ids=["no dearer", "cheaper"])
def test_a_context_batch_that_is_not_dearer_leaves_attention_unpriced(after_s: float) -> None:
    """Noise can make the batch after the context cost no more: then the floor is the
    token-only one, never a negative cost."""
    short = BatchTiming(6144, 1_000_000, 30.0)
    cost = fit_prefill_cost(short, BatchTiming(6144, 14_000_000, after_s))
    assert cost.pair_s == 0.0
    assert cost.token_s == pytest.approx(30.0 / 6144)
    with pytest.raises(ValueError, match="no tokens"):
        fit_prefill_cost(BatchTiming(0, 0, 1.0), None)


async def test_the_cost_is_measured_from_an_empty_cache_and_leaves_it_empty() -> None:
    engine = _engine()
    try:
        texts = medec("quick").table_text
        first = await measure_prefill_cost(engine, texts)
        again = await measure_prefill_cost(engine, texts)
        stats = await engine.stats()
    finally:
        await engine.close()
    assert first.peak_rate_tokens_per_s > 0
    assert again == first  # nothing cached from the first calibration
    assert first.after_context is not None
    # the context's own prefill is not timed: its tokens are found cached
    assert first.after_context.computed_tokens == first.short.computed_tokens
    assert first.after_context.attention_pairs > first.short.attention_pairs
    assert stats.running_requests == 0


@pytest.mark.parametrize("make", [medec, fever], ids=["medec", "fever"])
async def test_no_system_runs_below_its_prefill_floor(make) -> None:  # type: ignore[no-untyped-def]
    """The floor is a lower bound on the deterministic simulator, including FEVER, whose
    table (the claims) is far shorter than the calibration."""
    workload = make("quick")
    engine = _engine(num_blocks=200)
    try:
        records = await run_systems(engine, workload, ["operator-at-a-time", "adaptive"])
    finally:
        await engine.close()
    assert len(records) == 2
    for record in records:
        assert record.prefill_floor_s is not None
        assert 0 < record.prefill_floor_s <= record.time_s


async def test_a_failed_calibration_leaves_the_floor_unknown_and_the_runs_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def failing(*_: object) -> float:
        raise RuntimeError("engine lost")

    monkeypatch.setattr("bench.runner.measure_prefill_cost", failing)
    engine = _engine()
    try:
        records = await run_systems(engine, medec("quick"), ["adaptive"], warm_run=False)
    finally:
        await engine.close()
    assert [r.prefill_floor_s for r in records] == [None]


async def test_a_failed_calibration_request_leaves_no_other_running() -> None:
    engine = FailingOneSim(
        "smollm2-cpu-f32",
        num_blocks=600,
        max_model_len_tokens=8192,
        fail_request_id="prefill-floor:0",
    )
    try:
        with pytest.raises(EngineError, match="injected failure"):
            await measure_prefill_cost(engine, medec("quick").table_text)
        stats = await engine.stats()
    finally:
        await engine.close()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)


def test_reports_show_the_floor_and_the_speed_up_it_allows() -> None:
    base = {"workload": "fever", "kv_cache_tokens": 3040, "table_tokens": 266, "llm_calls": 40,
            "prefill_tokens": 100, "min_prefill_tokens": 100, "lost_prefixes": 0,
            "cells_agree": 1.0}  # fmt: skip
    records = [
        {**base, "system": "operator-at-a-time", "time_s": 24.0, "prefill_floor_s": 22.0},
        {**base, "system": "adaptive", "time_s": 23.0, "prefill_floor_s": 20.0},
    ]
    table = markdown(records)
    assert "| floor (s) |" in table
    assert "| adaptive | 23.0 | 20.0 | 1.04x |" in table
    checked = targets(records)
    assert "1.04x (3,040 tokens); the prefill floor allows at most 1.20x" in checked
    assert "**missed**" in checked
    older = [{k: v for k, v in r.items() if k != "prefill_floor_s"} for r in records]
    assert "| adaptive | 23.0 | - | 1.04x |" in markdown(older)
    assert "allows at most" not in targets(older)
