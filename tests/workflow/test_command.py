"""``kalypso workflow run`` end to end on the simulator, and ``kalypso demo --help``."""

from __future__ import annotations

import pytest

from kalypso.cli import main


@pytest.mark.parametrize("name", ["debate", "trading"])
def test_a_library_workflow_runs_from_the_cli(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["workflow", "run", name, "--engine", "sim", "--no-progress"])
    assert code == 0
    err = capsys.readouterr().err
    assert "per node" in err and "cache-aware on sim:qwen3-8b-h100" in err
    if name == "trading":  # day 1 warms, day 2 is timed
        assert "trading-day1" in err and "(timed)" in err


def test_an_in_process_call_leaves_no_sigterm_handler_behind() -> None:
    """The CLI turns SIGTERM into Ctrl-C while it runs and restores the handler after:
    a handler left behind would route a later SIGTERM to whatever the process runs next
    (under pytest, into the running test's event loop, where it was swallowed)."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    assert main(["workflow", "run", "debate", "--engine", "sim", "--no-progress"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_unknown_workflow_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["workflow", "run", "nope", "--engine", "sim"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_bad_overcommit_is_refused_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["workflow", "run", "mapred", "--engine", "sim", "--kv-overcommit", "0.5"])
    assert code != 0
    assert "kv_overcommit must be in [1.0, 4.0], got 0.5" in capsys.readouterr().err


def test_an_overcommitted_run_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["workflow", "run", "mapred", "--engine", "sim", "--no-progress", "--kv-overcommit", "2"]
    )
    assert code == 0
    assert "per node" in capsys.readouterr().err


def test_demo_help_lists_its_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["demo", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for knob in (
        "--docs",
        "--kv-fraction",
        "--kv-cache-bytes",
        "--policies",
        "--model",
        "--url",
        "--deterministic",
        "--verbose",
        "--plot",
    ):
        assert knob in out, knob


def test_a_workflow_runs_on_replicas_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """Trading on 2 simulated replicas (its two days, each placed anew): the first query's
    outputs as on one engine, and what each replica did."""
    sim = ["--engine", "sim", "--no-progress"]
    assert main(["workflow", "run", "trading", *sim]) == 0
    one = capsys.readouterr().err
    assert main(["workflow", "run", "trading", *sim, "--replicas", "2", "--explain"]) == 0
    two = capsys.readouterr().err
    assert "the plan of one engine; the run places the queries on 2" in two
    assert "replica set: 2 engines" in two and two.count("units done") == 2

    def first_query(err: str) -> list[str]:
        return [line for line in err.splitlines() if line.startswith("query 0 ")]

    assert first_query(two) == first_query(one) != []
    assert main(["workflow", "run", "trading", *sim, "--replicas", "0"]) == 2
    assert "--replicas must be at least 1" in capsys.readouterr().err
