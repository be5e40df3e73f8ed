"""The benchmark runner's records, system names and plots, on the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kalypso.bench.plots import plot_file
from kalypso.bench.runner import run_systems, system_options, write_records
from kalypso.bench.workloads import medec
from kalypso.engine.sim import SimEngine

REQUIRED = {"workload", "system", "scale", "engine", "kv_cache_tokens", "time_s", "llm_calls",
            "prompt_tokens", "cached_tokens", "prefill_tokens", "min_prefill_tokens", "retries",
            "outputs_agree"}  # fmt: skip


def test_system_names_map_to_run_options() -> None:
    assert system_options("adaptive") == {"policy": "adaptive"}
    assert system_options("static:0.3+explicit+fixed") == {
        "policy": "static:0.3", "pinning": "explicit", "estimate_bounds": False,
    }  # fmt: skip
    with pytest.raises(ValueError, match="modifier"):
        system_options("adaptive+turbo")


async def test_records_have_the_documented_fields_and_plots_are_written(tmp_path: Path) -> None:
    workload = medec("quick")
    engine = SimEngine("llama-3.3-70b-4xgpu", num_blocks=600, max_model_len_tokens=9600)
    try:
        records = await run_systems(
            engine, workload, ["operator-at-a-time", "adaptive", "static:0.5"]
        )
    finally:
        await engine.close()
    out = tmp_path / "suite.json"
    write_records(records, out)
    write_records(records[:1], out)  # appends
    rows = json.loads(out.read_text())
    assert len(rows) == 4
    assert set(rows[0]) >= REQUIRED
    assert all(row["outputs_agree"] for row in rows)
    adaptive = next(r for r in rows if r["system"] == "adaptive")
    assert adaptive["prefill_tokens"] <= 1.1 * adaptive["min_prefill_tokens"]
    written = plot_file(out)
    assert {p.name for p in written} == {"suite-time.png", "suite-prefill.png", "suite-splits.png"}
    assert all(p.stat().st_size > 1000 for p in written)
