"""The step probe's pure parts: interval union, histogram totals, the concurrency summary
of a trace, refused arguments."""

from __future__ import annotations

import pytest

from bench.step_probe import (
    busy_s,
    concurrency_summary,
    decode_floor_steps,
    decode_step_s,
    histogram_totals,
    main,
)
from kalypso.engine.sim import SimEngine

METRICS = """\
# HELP vllm:iteration_tokens_total Tokens per engine step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="+Inf",model_name="m"} 3.0
vllm:iteration_tokens_total_count{model_name="m"} 3.0
vllm:iteration_tokens_total_sum{model_name="m"} 2100.0
"""


def test_busy_time_counts_overlapping_requests_once() -> None:
    assert busy_s([]) == 0.0
    assert busy_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert busy_s([(5.0, 6.0), (0.0, 1.0), (0.5, 0.7)]) == pytest.approx(2.0)


def test_histogram_totals_read_sums_and_counts_and_zero_for_the_absent() -> None:
    totals = histogram_totals(METRICS)
    assert totals["vllm:iteration_tokens_total_count"] == 3.0
    assert totals["vllm:iteration_tokens_total_sum"] == 2100.0
    assert totals["vllm:request_queue_time_seconds_sum"] == 0.0


def test_concurrency_summary_splits_the_span_by_requests_outstanding() -> None:
    # 0-1 s: one request; 1-2 s: none; 2-3 s: sixteen; 3-4 s: five
    trace: list[dict[str, object]] = [{"start_s": 0.0, "end_s": 1.0}]
    trace += [{"start_s": 2.0, "end_s": 3.0} for _ in range(11)]
    trace += [{"start_s": 2.0, "end_s": 4.0} for _ in range(5)]
    assert concurrency_summary(trace) == "0: 25%, 1-3: 25%, 4-15: 25%, 16+: 25%"
    assert concurrency_summary([]) == "0: 0%, 1-3: 0%, 4-15: 0%, 16+: 0%"


def test_the_decode_floor_is_one_token_per_request_slot_per_step() -> None:
    assert decode_floor_steps(1450, 16) == 91
    assert decode_floor_steps(16, 16) == 1
    assert decode_floor_steps(0, 16) == 0


async def test_the_decode_step_is_measured_over_a_full_batch_and_leaves_the_cache_empty() -> None:
    engine = SimEngine(
        "smollm2-cpu-f32", num_blocks=400, block_size_tokens=16, max_num_seqs=16,
        max_model_len_tokens=6400,
    )  # fmt: skip
    try:
        step_s, context_tokens = await decode_step_s(engine, "word " * 3000, 16)
        stats = await engine.stats()
    finally:
        await engine.close()
    # the simulator's clock: 32 more steps of a 16-request batch, each costing its profile's
    # step (positive, and the same in every run)
    assert step_s > 0
    again = SimEngine(
        "smollm2-cpu-f32", num_blocks=400, block_size_tokens=16, max_num_seqs=16,
        max_model_len_tokens=6400,
    )  # fmt: skip
    try:
        assert await decode_step_s(again, "word " * 3000, 16) == (step_s, context_tokens)
    finally:
        await again.close()
    # the shared context and each request's own block and output fit in half the cache
    assert 1000 < context_tokens + 16 * (36 + 1 + 16) <= 400 * 16 // 2
    assert engine.block_pool.num_cached_blocks == 0
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workload", "nope", "--kv-tokens", "100"], "choose one of"),
        (["--workload", "fever"], "--kv-tokens is required"),
        (["--workload", "fever", "--kv-tokens", "3040", "--runs", "0"], "at least 1"),
    ],
)
def test_bad_arguments_are_refused_before_any_engine_starts(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        main(argv)
