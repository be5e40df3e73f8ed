"""The step-trace summary (:mod:`bench.engine_steps`): kinds, seconds, idle and the fit,
on hand-made steps with exact answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine_steps import load_steps, step_kind, step_seconds, summarise


def _step(
    scheduled_s: float, done_s: float, prefill: int, decode: int, requests: int = 1
) -> dict[str, float]:
    return {
        "scheduled_s": scheduled_s,
        "done_s": done_s,
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "requests": requests,
        "context_tokens": 100 * requests,
        "running": requests,
        "waiting": 0,
    }


def test_kinds() -> None:
    assert step_kind(_step(0, 1, 64, 0)) == "prefill"
    assert step_kind(_step(0, 1, 64, 3)) == "mixed"
    assert step_kind(_step(0, 1, 0, 3)) == "decode"


def test_seconds_count_from_the_previous_step_end_under_async_scheduling() -> None:
    # the second step is scheduled while the first runs (async scheduling): its time
    # starts when the first one ends, so the two never overlap
    steps = [_step(0.0, 1.0, 64, 0), _step(0.5, 1.5, 0, 2), _step(3.0, 3.25, 0, 2)]
    assert step_seconds(steps) == [1.0, 0.5, 0.25]


def test_summary_adds_up_to_the_window() -> None:
    steps = [
        _step(-1.0, 0.5, 100, 0),  # began before the window: counted from its start
        _step(0.5, 1.5, 100, 0),
        _step(1.5, 2.0, 50, 4, requests=5),
        _step(2.0, 2.25, 0, 4, requests=4),
        _step(4.0, 4.5, 0, 4, requests=4),
        _step(9.0, 11.0, 0, 1),  # ended after the window: left out
    ]
    summary = summarise(steps, 0.0, 5.0)
    assert summary.kinds["prefill"].steps == 2
    assert summary.kinds["prefill"].seconds == pytest.approx(1.5)
    assert summary.kinds["prefill"].prefill_tokens == 200
    assert summary.kinds["mixed"].decode_tokens == 4
    assert summary.kinds["decode"].steps == 2
    assert summary.kinds["decode"].requests == 8
    busy_s = 1.5 + 0.5 + 0.25 + 0.5
    assert summary.idle_s == pytest.approx(5.0 - busy_s)
    assert summary.fit_s is not None  # five steps inside the window: enough for a fit
    text = summary.explain()
    assert "prefill: 2 steps, 1.5 s" in text and "decode: 2 steps" in text


def test_fit_recovers_a_linear_cost() -> None:
    # seconds = 0.1 + 0.002 per prefill token + 0.01 per decode token + 0.05 per 1k context
    steps, t = [], 0.0
    for prefill, decode, requests in [
        (256, 0, 1),
        (0, 16, 16),
        (128, 8, 9),
        (0, 4, 4),
        (512, 0, 2),
        (64, 12, 13),
    ]:
        cost = 0.1 + 0.002 * prefill + 0.01 * decode + 0.05 * (100 * requests) / 1000
        steps.append(_step(t, t + cost, prefill, decode, requests))
        t += cost
    summary = summarise(steps, 0.0, t)
    assert summary.fit_s == pytest.approx((0.1, 0.002, 0.01, 0.05), abs=1e-9)
    assert summary.idle_s == pytest.approx(0.0, abs=1e-9)
    assert "ms a step" in summary.explain()


def test_bad_window_and_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="before it starts"):
        summarise([], 2.0, 1.0)
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(_step(0, 1, 5, 0)) + "\n\n" + json.dumps(_step(1, 2, 0, 1)) + "\n")
    assert [step_kind(s) for s in load_steps(path)] == ["prefill", "decode"]
