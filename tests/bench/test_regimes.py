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
