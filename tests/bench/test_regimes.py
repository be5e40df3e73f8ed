"""The regime benchmark's records: a run of some cells replaces theirs and keeps the
others' (a run of one grid must not lose the rest of the page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.regimes import Cell, _kept_records, cells, chosen


def _record(cell: Cell, system: str) -> dict[str, object]:
    return {"grid": cell.grid, "profile": cell.profile, "workload": cell.workload,
            "kv_tokens": cell.kv_tokens, "system": system, "time_s": 1.0}  # fmt: skip


def test_a_run_keeps_the_records_of_the_cells_it_does_not_run(tmp_path: Path) -> None:
    run = Cell("shapes", "gpu", "mapred:P3", 88_000)
    other = Cell("shapes", "cpu", "mapred:P3", 88_000)
    out = tmp_path / "regimes.json"
    assert _kept_records(out, {run}) == []  # nothing recorded yet
    records = [_record(run, "kalypso"), _record(other, "kalypso"), _record(other, "opwise")]
    out.write_text(json.dumps(records))
    assert _kept_records(out, {run}) == records[1:]
    assert _kept_records(out, {run, other}) == []


def test_a_run_of_chosen_cells_runs_those_and_refuses_a_cell_no_grid_has() -> None:
    grid = cells(["shapes"], ["gpu"])
    picked = chosen(grid, ["debate:P6", "mapred:P3"], [88_000])
    assert picked == [
        Cell("shapes", "gpu", "mapred:P3", 88_000),
        Cell("shapes", "gpu", "debate:P6", 88_000),
    ]
    assert chosen(grid, [], []) == grid
    assert len(chosen(grid, ["debate:P6"], [])) == 3
    with pytest.raises(ValueError, match="debate:P7, 99"):
        chosen(grid, ["debate:P7"], [99])


def test_cells_under_other_engine_limits_are_cells_of_their_own() -> None:
    from bench.regimes import _cell_of, _engine

    wide = cells(["shapes"], ["gpu"], (1024, 8192))
    assert [(c.max_num_seqs, c.max_step_tokens) for c in wide] == [(1024, 8192)] * len(wide)
    assert not wide[0].default_limits and cells(["shapes"], ["gpu"])[0].default_limits
    default = Cell("shapes", "gpu", "mapred:P3", 88_000)
    record = {**_record(default, "kalypso"), "max_num_seqs": 1024, "max_step_tokens": 8192}
    assert _cell_of(_record(default, "kalypso")) == default  # older records: the defaults
    assert _cell_of(record) == Cell("shapes", "gpu", "mapred:P3", 88_000, 1024, 8192)
    engine = _engine(_cell_of(record))
    assert (engine.capacity.max_running_requests, engine.cost_model.max_step_tokens) == (
        1024,
        8192,
    )


def test_a_workflow_cells_least_time_bounds_every_systems_time() -> None:
    """The least time is the least work at the simulator's own step cost, and no system's
    run of the cell takes less (the bound is one)."""
    import asyncio

    from bench.engine_steps import StepCost
    from bench.regimes import _engine, cell_least_s
    from bench.workflow_bench import run_system
    from bench.workflow_floor import LeastWork
    from kalypso.workflow.library import workload

    cell = Cell("workflows", "gpu", "debate", 8_000)
    job = workload("debate", "small")

    async def run(system: str) -> tuple[float, float, LeastWork]:
        engine = _engine(cell)
        try:
            done = await run_system(engine, job, system)
        finally:
            await engine.close()
        least = LeastWork.of_result(done.result, engine.capacity)
        assert least.steps >= done.result.longest_chain_tokens > 0
        assert least.time_s(StepCost.of_model(engine.cost_model)) == cell_least_s(
            done.result, engine
        )
        return done.elapsed_s, cell_least_s(done.result, engine), least

    runs = {s: asyncio.run(run(s)) for s in ("kalypso", "all-ready", "opwise")}
    least_s = runs["kalypso"][1]
    assert {r[2] for r in runs.values()} == {runs["kalypso"][2]}  # the same least work
    assert all(0 < least_s <= elapsed_s for elapsed_s, _, _ in runs.values())


def test_a_verdict_gives_the_most_any_schedule_could_reach() -> None:
    from bench.regimes import summary, verdicts

    cell = Cell("shapes", "gpu", "debate:P5", 88_000)
    records = [
        {**_record(cell, "kalypso"), "time_s": 86.0, "least_s": 67.0},
        {**_record(cell, "all-ready"), "time_s": 87.1, "least_s": 67.0},
    ]
    for r in records:
        r.update(prefill_tokens=740, min_prefill_tokens=460, outputs_equal=True)
    (verdict,) = verdicts(records)
    assert verdict.thrash and verdict.least_s == 67.0
    assert verdict.most_speedup == pytest.approx(87.1 / 67.0)
    text = summary(records)
    assert "least 67.00 s (any schedule <= 1.30x)" in text
    assert "of the 1 with a least time, 0 where no schedule reaches 1.1x" in text
    older = [{k: v for k, v in r.items() if k != "least_s"} for r in records]
    assert verdicts(older)[0].most_speedup is None  # records from before the least time
