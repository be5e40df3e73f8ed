"""The step probe's pure parts: interval union, histogram totals, refused arguments."""

from __future__ import annotations

import pytest

from bench.step_probe import busy_s, histogram_totals, main

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
