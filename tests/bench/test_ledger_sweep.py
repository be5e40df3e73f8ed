"""The ledger what-if sweep: its cells and systems are refused when malformed, and a
system's fixed ledger reaches the run (on the simulator: exact)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ledger_sweep
from bench.regimes import Cell


def test_cells_and_systems_are_parsed() -> None:
    assert ledger_sweep.parse_cell("debate:P6:88000", "gpu") == Cell(
        "shapes", "gpu", "debate:P6", 88_000
    )
    assert ledger_sweep.parse_system("kalypso") == ("kalypso", None)
    assert ledger_sweep.parse_system("kalypso-unwindowed@1.5") == ("kalypso-unwindowed", 1.5)
    assert ledger_sweep.parse_system("kalypso:12") == ("kalypso:12", None)


@pytest.mark.parametrize(
    "cell", ["debate:P6", "debate:P9:88000", "trading:P1:88000", "debate:P1:0", "debate:P1:x"]
)
def test_a_malformed_cell_is_refused(cell: str) -> None:
    with pytest.raises(ValueError, match="cell"):
        ledger_sweep.parse_cell(cell, "gpu")


@pytest.mark.parametrize(
    "system",
    ["nope", "kalypso@0.5", "kalypso@inf", "kalypso@nan", "kalypso@9", "kalypso-pinned@1.5"],
)
def test_a_malformed_system_is_refused(system: str) -> None:
    with pytest.raises(ValueError):
        ledger_sweep.parse_system(system)


def test_the_command_refuses_bad_input_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        ledger_sweep.main(["--cells", "debate:P1:88000", "--systems", "kalypso@0"])
    assert exit_info.value.code == 2
    assert "ledger factor" in capsys.readouterr().err


def test_a_fixed_ledger_reaches_the_run(tmp_path: Path) -> None:
    """Debate P1 at 88,000 tokens: the cache's ledger (Kalypso's choice in that cell)
    never preempts; a ledger of 1.5x the cache admits beyond it and the engine preempts,
    as all-ready's does."""
    out = tmp_path / "sweep.json"
    argv = ["--cells", "debate:P1:88000", "--systems", "kalypso,kalypso@1.5", "--out", str(out)]
    assert ledger_sweep.main(argv) == 0
    records = json.loads(out.read_text())
    assert [(r["system"], r["kv_overcommit"], r["preemptions"]) for r in records] == [
        ("kalypso", None, 0),
        ("kalypso", 1.5, 9),
    ]
    assert records[0]["min_prefill_tokens"] == records[1]["min_prefill_tokens"] == 87_316
    assert all({"date", "commit", "host"} <= set(r) for r in records)


def test_an_engine_that_knows_the_lengths_reaches_the_run(tmp_path: Path) -> None:
    """The same over-committed ledger on an engine admitting by known output lengths:
    nothing is preempted, and the admission is in the record."""
    out = tmp_path / "sweep.json"
    argv = ["--cells", "debate:P1:88000", "--systems", "kalypso@1.5", "--out", str(out),
            "--admission", "known-lengths"]  # fmt: skip
    assert ledger_sweep.main(argv) == 0
    (record,) = json.loads(out.read_text())
    assert (record["admission"], record["kv_overcommit"], record["preemptions"]) == (
        "known-lengths",
        1.5,
        0,
    )
    with pytest.raises(SystemExit):
        ledger_sweep.main([*argv[:-1], "vllm,oracle"])
