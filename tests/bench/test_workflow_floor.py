"""The workflow floor (:mod:`bench.workflow_floor`): Kalypso's least work from its record,
its least time at a known step cost, and the most each baseline's ratio can be, on
hand-made records and traces with exact answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import workflow_bench
from bench.engine_steps import StepCost, runs_path
from bench.workflow_floor import LeastWork, fit_cost, floors, main

COST = StepCost(step_s=0.1, prefill_token_s=0.002, decode_token_s=0.01, attention_pair_s=5e-8)


def _record(system: str, time_s: float, **counts: int) -> dict[str, Any]:
    base = {
        "workflow": "mapred",
        "system": system,
        "time_s": time_s,
        "min_prefill_tokens": 6_000,
        "min_attention_pairs": 1_000_000,
        "decode_tokens": 1_380,
        "decode_attention_pairs": 1_000_000,
        "output_tokens": 1_440,
        "requests": 60,
        "longest_chain_tokens": 48,
        "max_num_seqs": 16,
    }
    return {**base, **counts}


def test_least_steps_are_the_longest_chain_or_the_batch_limit() -> None:
    # 1,440 tokens at most 16 a step: 90 steps, more than the chain's 48
    assert LeastWork.of(_record("kalypso", 1.0)).steps == 90
    # a chain of 200 tokens needs 200 steps however wide the batch
    assert LeastWork.of(_record("kalypso", 1.0, longest_chain_tokens=200)).steps == 200
    least = LeastWork.of(_record("kalypso", 1.0))
    assert least.attention_pairs == 2_000_000
    # 90 steps 9 s, 6,000 prefill 12 s, 1,380 decode 13.8 s, 2M pairs 0.1 s
    assert least.time_s(COST) == pytest.approx(9.0 + 12.0 + 13.8 + 0.1)
    # 4,400 block-steps held in a 40-block cache: at least 110 steps
    memory = _record("kalypso", 1.0, held_block_steps=4_400, kv_blocks=40)
    assert LeastWork.of(memory).steps == 110
    # no step decodes more whole calls than fit beside each other: 120 steps
    assert LeastWork.of({**memory, "least_decode_steps": 120}).steps == 120
    with pytest.raises(ValueError, match="no engine counts"):
        LeastWork.of(_record("langgraph", 1.0, requests=0, max_num_seqs=0))


def test_each_system_is_bounded_by_kalypsos_least_time() -> None:
    records = [
        _record("kalypso", 40.0),
        _record("querywise", 70.0),
        _record("langgraph", 44.0, requests=0, max_num_seqs=0),  # not bounded by its own
    ]
    (floor,) = floors(records, COST)
    assert floor.least_s == pytest.approx(34.9)
    by_system = {row.system: row for row in floor.rows}
    assert by_system["querywise"].over_kalypso == pytest.approx(1.75)
    assert by_system["querywise"].most_over_kalypso == pytest.approx(70.0 / 34.9, abs=1e-4)
    assert by_system["langgraph"].most_over_kalypso == pytest.approx(44.0 / 34.9, abs=1e-4)
    assert by_system["kalypso"].fitted_s is None  # no trace given
    text = floor.explain()
    assert "least 34.9 s (90 steps" in text and "at most 2.01x" in text


def _steps(shapes: list[tuple[int, int, int]], start_s: float) -> list[dict[str, float]]:
    """Back-to-back steps at exactly ``COST``."""
    steps, t = [], start_s
    for prefill, decode, pairs in shapes:
        seconds = 0.1 + 0.002 * prefill + 0.01 * decode + 5e-8 * pairs
        step = {
            "scheduled_s": t,
            "done_s": t + seconds,
            "prefill_tokens": prefill,
            "decode_tokens": decode,
            "requests": 1,
            "context_tokens": 0,
            "attention_pairs": pairs,
            "running": 1,
            "waiting": 0,
        }
        steps.append(step)
        t += seconds
    return steps


def test_cli_fits_the_traced_runs_and_writes_the_floors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kalypso = _steps([(256, 0, 40_000), (0, 16, 9_000), (128, 8, 70_000)], 0.0)
    querywise = _steps([(0, 4, 3_000), (512, 0, 200_000), (64, 12, 5_000)], 100.0)
    warm_up = _steps([(999, 0, 1)], 50.0)  # between the windows: not fitted
    trace = tmp_path / "steps.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in kalypso + warm_up + querywise))
    windows = [
        {"run": "mapred/kalypso", "start_s": 0.0, "end_s": kalypso[-1]["done_s"]},
        {"run": "mapred/querywise", "start_s": 100.0, "end_s": querywise[-1]["done_s"]},
    ]
    runs_path(trace).write_text(json.dumps(windows))
    records = tmp_path / "records.json"
    records.write_text(json.dumps([_record("kalypso", 40.0), _record("querywise", 70.0)]))
    out = tmp_path / "floor.json"
    assert main([str(records), str(trace), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fit over 6 steps of 2 runs: 100 ms a step" in printed
    assert "mean |error| per step 0.000 s" in printed
    # the hand-made runs are tiny: far below the records' least work, part by part
    assert "above the least: steps -8.7 s, prefill tokens -11.2 s" in printed
    body = json.loads(out.read_text())
    assert body["cost"]["prefill_token_s"] == pytest.approx(0.002)
    (floor,) = body["workflows"]
    assert floor["least_s"] == pytest.approx(34.9)
    fitted = {row["system"]: row["fitted_s"] for row in floor["rows"]}
    measured_s = sum(s["done_s"] - s["scheduled_s"] for s in kalypso)
    assert fitted["kalypso"] == pytest.approx(measured_s, abs=1e-3)  # rounded to ms
    with pytest.raises(ValueError, match="at least five steps"):
        fit_cost({"one": [(kalypso[0], 1.0)]})


def test_cli_refuses_records_without_counts(tmp_path: Path) -> None:
    trace = tmp_path / "steps.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in _steps([(8, 1, 10)] * 5, 0.0)))
    records = tmp_path / "records.json"
    records.write_text(json.dumps([_record("kalypso", 1.0, requests=0)]))
    with pytest.raises(SystemExit, match="cannot bound: mapred/kalypso: the record has no"):
        main([str(records), str(trace)])


@pytest.mark.parametrize(
    "extra",
    [
        ["--engine", "sim"],
        ["--engine", "http", "--systems", "kalypso,lspf"],
        ["--engine", "http", "--systems", "kalypso,kalypso-pinned"],
    ],
)
def test_the_bench_refuses_a_step_trace_it_cannot_take(tmp_path: Path, extra: list[str]) -> None:
    # refused before any engine starts
    args = ["--workflows", "mapred", "--engine-trace", str(tmp_path / "t.jsonl"), *extra]
    with pytest.raises(SystemExit, match="--engine-trace needs a vLLM engine"):
        workflow_bench.main([*args, "--out", str(tmp_path / "r.json")])


def test_repeats_run_each_system_in_turn_and_print_their_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = ["--engine", "sim", "--sim-profile", "smollm2-cpu-f32", "--sim-kv-tokens", "1408"]
    args += ["--workflows", "mapred", "--systems", "all-ready,kalypso", "--repeats", "2"]
    assert workflow_bench.main([*args, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    # kalypso runs first in the first repeat (its outputs are the reference), and the
    # order turns by one place in each later one
    assert [(r["system"], r["repeat"]) for r in records] == [
        ("kalypso", 0),
        ("all-ready", 0),
        ("all-ready", 1),
        ("kalypso", 1),
    ]
    # the simulator is deterministic: both repeats take the same virtual time
    assert records[0]["time_s"] == records[3]["time_s"]
    assert all(r["outputs_equal"] == 1.0 for r in records)
    assert records[0]["longest_chain_tokens"] == 48 and records[0]["max_num_seqs"] == 16
    assert workflow_bench.rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert workflow_bench.rotated([], 1) == []
    ratio = records[1]["time_s"] / records[0]["time_s"]
    printed = capsys.readouterr().out
    assert f"mean {ratio:.3f}x, {ratio:.3f}x to {ratio:.3f}x over 2 repeats" in printed
    (floor, again) = floors(records, COST)
    assert (floor.repeat, again.repeat) == (0, 1) and floor.least == again.least
    with pytest.raises(SystemExit, match="--repeats must be at least 1"):
        workflow_bench.main([*args[:-1], "0", "--out", str(out)])


def test_counts_from_a_later_run_of_the_same_calls() -> None:
    records = [_record("kalypso", 40.0), _record("querywise", 70.0)]
    later = [_record("kalypso", 41.0, held_block_steps=8_000, kv_blocks=40)]
    (floor,) = floors(records, COST, counts=later)
    assert floor.least.steps == 200  # the memory bound, counted only by the later run
    assert floor.kalypso_s == 40.0  # times stay the first run's
    changed = [_record("kalypso", 41.0, decode_tokens=1_000)]
    with pytest.raises(ValueError, match=r"differ in \['decode_tokens'\]"):
        floors(records, COST, counts=changed)
