"""The step-trace summary (:mod:`bench.engine_steps`): kinds, seconds, idle and the fit,
on hand-made steps with exact answers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.engine_steps import (
    StepCost,
    load_steps,
    main,
    runs_path,
    step_kind,
    step_seconds,
    summarise,
)


def _step(
    scheduled_s: float,
    done_s: float,
    prefill: int,
    decode: int,
    requests: int = 1,
    waiting: int = 0,
) -> dict[str, float]:
    return {
        "scheduled_s": scheduled_s,
        "done_s": done_s,
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "requests": requests,
        "context_tokens": 100 * requests,
        "attention_pairs": 100 * requests * (prefill + decode) + 7_000 * prefill,
        "running": requests,
        "waiting": waiting,
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
        _step(4.0, 4.5, 0, 4, requests=4, waiting=2),
        _step(9.0, 11.0, 0, 1),  # ended after the window: left out
    ]
    summary = summarise(steps, 0.0, 5.0)
    assert summary.kinds["prefill"].steps == 2
    assert summary.kinds["prefill"].seconds == pytest.approx(1.5)
    assert summary.kinds["prefill"].prefill_tokens == 200
    assert summary.kinds["mixed"].decode_tokens == 4
    assert summary.kinds["decode"].steps == 2
    assert summary.kinds["decode"].requests == 8
    assert (summary.kinds["decode"].waiting_steps, summary.kinds["decode"].waiting_s) == (1, 0.5)
    busy_s = 1.5 + 0.5 + 0.25 + 0.5
    assert summary.idle_s == pytest.approx(5.0 - busy_s)
    assert summary.fit is not None  # five steps inside the window: enough for a fit
    text = summary.explain()
    assert summary.kinds["prefill"].attention_pairs == 2 * (100 * 100 + 7_000 * 100)
    assert "prefill: 2 steps, 1.5 s" in text and "decode: 2 steps" in text
    assert "1 steps (0.5 s) with requests waiting" in text


def _linear_steps(shapes: list[tuple[int, int, int]]) -> list[dict[str, float]]:
    # seconds = 0.1 + 0.002 per prefill token + 0.01 per decode token + 0.05 per million
    # attention pairs, back to back
    steps, t = [], 0.0
    for prefill, decode, requests in shapes:
        step = _step(t, 0.0, prefill, decode, requests)
        t += 0.1 + 0.002 * prefill + 0.01 * decode + 0.05 * step["attention_pairs"] / 1e6
        step["done_s"] = t
        steps.append(step)
    return steps


def test_cli_fits_the_files_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # neither file alone has five steps; together they do, and the cost is exact
    first = _linear_steps([(256, 0, 1), (0, 16, 16), (128, 8, 9)])
    second = _linear_steps([(0, 4, 4), (512, 0, 2), (64, 12, 13)])
    paths = []
    for name, steps in (("a.jsonl", first), ("b.jsonl", second)):
        path = tmp_path / name
        path.write_text("".join(json.dumps(step) + "\n" for step in steps))
        paths.append(path)
    assert main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    assert "fit over 6 steps: 100 ms a step + 2.00 ms a prefill token" in out
    assert "mean |e| 0.000 s" in out
    assert f"{paths[0]}: 3 steps" in out and "steps 0.3 s" in out
    with pytest.raises(SystemExit, match="at least five steps, got 3"):
        main([str(paths[0])])
    with pytest.raises(ValueError, match="3 steps but 2 durations"):
        StepCost.fit(first, [1.0, 2.0])


def test_cli_reads_each_files_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a warm-up step, then two runs; the warm-up lies outside both windows and is left out
    steps = _linear_steps([(999, 0, 1), (256, 0, 1), (0, 16, 16), (128, 8, 9), (0, 4, 4)])
    steps += _linear_steps([(512, 0, 2), (64, 12, 13)])
    offset = steps[4]["done_s"] + 1.0  # the second run starts a second after the first
    for step in steps[5:]:
        step["scheduled_s"] += offset
        step["done_s"] += offset
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(step) + "\n" for step in steps))
    windows = [
        # the run's clock starts just after the warm-up's last step ended
        {"run": 1, "start_s": steps[0]["done_s"] + 1e-6, "end_s": steps[4]["done_s"]},
        {"run": 2, "start_s": offset, "end_s": steps[6]["done_s"]},
    ]
    runs_path(path).write_text(json.dumps(windows))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "fit over 6 steps" in out  # the warm-up step is not fitted
    assert f"{path} run 1: 4 steps" in out and f"{path} run 2: 2 steps" in out
    assert "mean |e| 0.000 s" in out


def test_fit_recovers_a_linear_cost() -> None:
    # seconds = 0.1 + 0.002 per prefill token + 0.01 per decode token + 0.05 per million
    # attention pairs
    steps, t = [], 0.0
    for prefill, decode, requests in [
        (256, 0, 1),
        (0, 16, 16),
        (128, 8, 9),
        (0, 4, 4),
        (512, 0, 2),
        (64, 12, 13),
    ]:
        step = _step(t, 0.0, prefill, decode, requests)
        cost = 0.1 + 0.002 * prefill + 0.01 * decode + 0.05 * step["attention_pairs"] / 1e6
        step["done_s"] = t + cost
        steps.append(step)
        t += cost
    summary = summarise(steps, 0.0, t)
    assert summary.fit is not None
    fitted = summary.fit
    assert (
        fitted.step_s,
        fitted.prefill_token_s,
        fitted.decode_token_s,
        fitted.attention_pair_s * 1e6,
    ) == pytest.approx((0.1, 0.002, 0.01, 0.05), abs=1e-9)
    # the parts add up to the steps' seconds when the cost is exact
    assert sum(summary.parts_s.values()) == pytest.approx(t)
    assert summary.parts_s["steps"] == pytest.approx(0.6)
    assert summary.idle_s == pytest.approx(0.0, abs=1e-9)
    assert "ms a step" in summary.explain()


def test_bad_window_and_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="before it starts"):
        summarise([], 2.0, 1.0)
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(_step(0, 1, 5, 0)) + "\n\n" + json.dumps(_step(1, 2, 0, 1)) + "\n")
    assert [step_kind(s) for s in load_steps(path)] == ["prefill", "decode"]


def test_a_gzipped_trace_loads_as_the_plain_one(tmp_path: Path) -> None:
    text = json.dumps(_step(0, 1, 5, 0)) + "\n" + json.dumps(_step(1, 2, 0, 1)) + "\n"
    plain, packed = tmp_path / "steps.jsonl", tmp_path / "steps.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert load_steps(packed) == load_steps(plain)


def test_a_nonnegative_fit_holds_a_part_at_zero_rather_than_below() -> None:
    # decode tokens always move with the steps here, and the seconds fall slightly with
    # them: the free fit prices a decode token below zero, the constrained one at zero
    steps = [_step(0, 0, prefill, decode) for prefill, decode in [(0, 1), (0, 2), (0, 3)]]
    steps += [_step(0, 0, prefill, 0) for prefill in (100, 300, 500)]
    seconds = [0.099, 0.098, 0.097, 0.3, 0.7, 1.1]
    assert StepCost.fit(steps, seconds).decode_token_s < 0
    cost = StepCost.fit_nonnegative(steps, seconds)
    assert min(cost.step_s, cost.prefill_token_s, cost.decode_token_s) >= 0
    assert cost.attention_pair_s >= 0 and cost.decode_token_s == 0
    exact = _linear_steps([(256, 0, 1), (0, 16, 16), (128, 8, 9), (0, 4, 4), (512, 0, 2)])
    exact_s = step_seconds(exact)
    assert StepCost.fit_nonnegative(exact, exact_s) == pytest.approx(StepCost.fit(exact, exact_s))
