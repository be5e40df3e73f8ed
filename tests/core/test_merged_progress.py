"""One job's progress over several runs (its chunks on replicas, a batch file's pieces):
the runs' latest views summed per stage; a dropped run, and the runs under its name, no
longer count."""

from __future__ import annotations

from kalypso.core.hooks import MergedProgress, RunHooks
from kalypso.core.report import StageView


def test_runs_are_summed_per_stage_and_a_dropped_run_no_longer_counts() -> None:
    shown: list[tuple[int, list[StageView]]] = []
    hooks = RunHooks(on_progress=lambda pipeline, views: shown.append((pipeline, views)))
    merged = hooks.merged()
    assert merged.merged() is merged  # merging twice changes nothing
    first, second = merged.for_run("job.r0.c0"), merged.for_run("job.r1.c1")
    assert first.on_progress is not None and second.on_progress is not None
    first.on_progress(1, [StageView(done=3, running=2, budget_blocks=10), StageView(done=1)])
    second.on_progress(1, [StageView(done=4, waiting=5, budget_blocks=10)])
    assert shown[-1] == (
        1,
        [StageView(done=7, waiting=5, running=2, budget_blocks=20), StageView(done=1)],
    )
    first.on_progress(1, [StageView(done=5, budget_blocks=10), StageView(done=2)])  # latest
    assert [v.done for v in shown[-1][1]] == [9, 2]
    part = merged.for_run("job.r1.c1.s0").on_progress
    assert part is not None
    part(2, [StageView(done=6)])
    merged.drop_run("job.r1.c1")  # the run and its parts (a piece's shapes)
    assert shown[-2:] == [(1, [StageView(done=5, budget_blocks=10), StageView(done=2)]), (2, [])]
    merged.drop_run("job.r1")  # nothing is left under it: nothing to show again
    assert len(shown) == 6


def test_hooks_without_a_listener_or_unmerged_stay_as_they_are() -> None:
    bare = RunHooks()
    assert bare.merged() is bare and bare.for_run("x") is bare
    bare.drop_run("x")
    shown: list[int] = []
    plain = RunHooks(on_progress=lambda pipeline, views: shown.append(pipeline))
    assert plain.for_run("x") is plain  # one run: its listener as given
    unbound = MergedProgress(lambda pipeline, views: shown.append(pipeline))
    unbound(3, [StageView(done=1)])  # a run not bound reports as the run named ""
    assert shown == [3]
