"""Algorithm 1 end to end on the simulated engine: what the scheduler does to the engine
and to the result, under every policy.

The exact admission orders and budget moves of the starvation (paper Figure 5) and
saturation (Figure 6) cases are asserted as pure step tests of the scheduler core in
``tests/core/test_algorithm1_steps.py``; the same workloads run here through the whole
stack (lowering, sizing from real prompts, the runner, the engine) and must:

* return exactly operator-at-a-time's table under every policy;
* admit every task once (plus once per continuation);
* conserve the budgets and never leave a stage below its minimum;
* stay within the ledger, except by the documented last-resort rule (checked at every
  reservation by :class:`~tests.scheduler.factories.CheckingLedger`, and flagged in
  ``PipelineReport.launches``);
* show on the engine what the policy is for: how many calls of a stage run at once, and
  the engine priority of each stage's calls.

All plans run on 64 KV blocks of 16 tokens over notes of 20 unique words: a first-stage
task (``sem_filter`` on ``{text}``) reserves 6 blocks and keeps a 4-block prefix
(``[system | text]``) while its children run; a join task reserves 3 blocks of its own.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import (
    CheckingLedger,
    RecordingSim,
    check_run,
    key_of,
    notes,
    right_table,
)

POLICIES = ["sequential", "adaptive", "parallel-dfs", "parallel-bfs", "static:0.5"]


def outputs(yes_rate: float) -> SimOutputModel:
    """Yes/no answers at ``yes_rate``; free text of 4 to 8 words (below every bound)."""
    return SimOutputModel(yes_rate=yes_rate, min_output_tokens=4, max_output_tokens=8)


def filter_join_map(num_notes: int = 5) -> Table:
    """Two stages: ``sem_filter`` | ``sem_join`` with two aspects, ``sem_map``."""
    return (
        kalypso.table(notes(num_notes, 20), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
        .sem_map(
            "Quote the {text} about the {aspect}.", "quote", max_tokens=16, first_bound_tokens=16
        )
    )


def filter_join(num_notes: int, fanout: int) -> Table:
    return (
        kalypso.table(notes(num_notes, 20), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", fanout), "Does the {aspect} hold for the {text}?")
    )


def filter_join_join(num_notes: int, fanout: int, second_fanout: int) -> Table:
    return filter_join(num_notes, fanout).sem_join(
        right_table("topic", second_fanout), "Is the {text} with {aspect} about {topic}?"
    )


async def run(
    plan: Table, engine: RecordingSim, policy: str, **options: float
) -> tuple[QueryResult, CheckingLedger]:
    """Run ``plan`` as query ``q`` on a checking ledger, and check what every run must."""
    ledger = CheckingLedger(engine.capacity.num_blocks)
    result = await plan.arun(engine, policy=policy, query_id="q", ledger=ledger, **options)
    assert len(result.pipeline_reports) == 1
    check_run(result, ledger)
    return result, ledger


def kept(engine: RecordingSim, op: str) -> list[tuple[int, ...]]:
    """The tuple keys ``op`` answered "Yes" for."""
    return sorted(key for key, answer in engine.answers(op).items() if answer == "Yes")


# --------------------------------------------------------------------------- every policy


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("shape", ["filter-join-map", "filter-join-join"])
async def test_every_task_is_admitted_once_and_every_policy_returns_the_same_table(
    make_engine: EngineFactory, policy: str, shape: str
) -> None:
    def plan() -> Table:
        return filter_join_map() if shape == "filter-join-map" else filter_join_join(4, 3, 2)

    baseline = await plan().arun(make_engine(outputs=outputs(0.5)), policy="operator-at-a-time")
    engine = make_engine(outputs=outputs(0.5))
    result, ledger = await run(plan(), engine, policy)

    assert result.frame.equals(baseline.frame)
    assert len(result.frame) > 0
    (report,) = result.pipeline_reports
    assert report.continuations == 0  # every answer is below its bound
    # each note once; the pairs of the notes the filter kept; the triples of kept pairs
    notes_kept = kept(engine, "1:sem_filter")
    expected = [(0, (i,)) for i in range(len(plan().source))]
    if shape == "filter-join-map":
        expected += [(1, (i, j)) for (i,) in notes_kept for j in range(2)]
    else:
        expected += [(1, (i, j)) for (i,) in notes_kept for j in range(3)]
        expected += [(2, (*pair, k)) for pair in kept(engine, "3:sem_join") for k in range(2)]
    assert sorted(report.admitted) == sorted(expected)
    assert report.peak_reserved_blocks == ledger.peak_reserved_blocks <= 64


async def test_sequential_sends_one_call_at_a_time_depth_first(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=outputs(0.5))
    result, _ = await run(filter_join_map(), engine, "sequential")

    assert set(engine.max_in_flight.values()) == {1}
    # each note's call, then its pairs' calls, before the next note
    keys = [key_of(r.request_id) for r in engine.requests]
    assert keys == sorted(keys)
    assert result.pipeline_reports[0].moves == []


async def test_deeper_stages_get_a_higher_engine_priority(make_engine: EngineFactory) -> None:
    engine = make_engine(outputs=outputs(1.0))
    await run(filter_join_map(2), engine, "adaptive")
    # vLLM's convention: lower is served first
    assert {r.priority for r in engine.requests_of("1:sem_filter")} == {1}
    assert {r.priority for r in engine.requests_of("3:sem_join")} == {0}
    assert {r.priority for r in engine.requests_of("4:sem_map")} == {0}

    baseline = make_engine(outputs=outputs(1.0))
    await filter_join_map(2).arun(baseline, policy="operator-at-a-time")
    assert {r.priority for r in baseline.requests} == {0}


# --------------------------------------------------------------------------- Figures 5 and 6


async def test_figure_5_adaptive_runs_the_filter_wider_than_parallel_dfs(
    make_engine: EngineFactory,
) -> None:
    """High selectivity, fan-out one: parallel-dfs keeps the first stage at its minimum
    budget (one filter call at a time) while the join stage has nothing to do; Algorithm 1
    sees the starving join stage at its first Rebalance, before any call completes, and
    gives its budget upstream."""
    dfs_engine, adaptive_engine = (
        make_engine(outputs=outputs(0.2)),
        make_engine(outputs=outputs(0.2)),
    )
    dfs, _ = await run(filter_join(8, 1), dfs_engine, "parallel-dfs")
    adaptive, _ = await run(filter_join(8, 1), adaptive_engine, "adaptive")

    assert dfs.frame.equals(adaptive.frame)
    assert dfs.pipeline_reports[0].moves == []
    assert dfs_engine.max_in_flight["1:sem_filter"] == 1
    assert [m.reason for m in adaptive.pipeline_reports[0].moves] == ["starving"]
    assert adaptive.pipeline_reports[0].final_budgets_blocks == [61, 3]
    assert adaptive_engine.max_in_flight["1:sem_filter"] == 8  # all 8 notes at once
    # 8 filter tasks of 6 blocks whose first 2 (the system prompt) are the same blocks,
    # charged once: 8 x 4 + 2 = 34 (48 without sharing, as in the step test)
    assert adaptive.peak_reserved_blocks == 34


async def test_figure_6_adaptive_runs_the_join_wider_than_parallel_bfs(
    make_engine: EngineFactory,
) -> None:
    """Low selectivity, fan-out six: parallel-bfs admits every note at once and keeps the
    join stage at its minimum (one join call at a time) while 36 pairs wait; Algorithm 1
    gives the saturated queue's feeder budget to the last stage."""
    bfs_engine, adaptive_engine = (
        make_engine(outputs=outputs(1.0)),
        make_engine(outputs=outputs(1.0)),
    )
    bfs, _ = await run(filter_join(6, 6), bfs_engine, "parallel-bfs")
    adaptive, _ = await run(filter_join(6, 6), adaptive_engine, "adaptive")

    assert bfs.frame.equals(adaptive.frame)
    assert len(bfs.frame) == 36
    assert bfs.pipeline_reports[0].moves == []
    assert (bfs_engine.max_in_flight["1:sem_filter"], bfs_engine.max_in_flight["3:sem_join"]) == (
        6,
        1,
    )
    reasons = [m.reason for m in adaptive.pipeline_reports[0].moves]
    assert reasons[0] == "starving" and set(reasons[1:]) == {"saturated"}
    # the notes' prefixes share the system prompt's block: more room for joins than the
    # 16 the step test (unshared prefixes) admits
    assert adaptive_engine.max_in_flight["3:sem_join"] == 18
    assert adaptive.peak_reserved_blocks == 64


async def test_thresholds_reach_the_scheduler(make_engine: EngineFactory) -> None:
    """``alpha`` so high that no queue is ever saturated: only starving moves (the
    default thresholds make saturated ones on the same query)."""
    high, _ = await run(
        filter_join(6, 6), make_engine(outputs=outputs(1.0)), "adaptive", alpha=1000.0, beta=0.001
    )
    default, _ = await run(filter_join(6, 6), make_engine(outputs=outputs(1.0)), "adaptive")
    assert {m.reason for m in high.pipeline_reports[0].moves} == {"starving"}
    assert "saturated" in {m.reason for m in default.pipeline_reports[0].moves}
    assert high.frame.equals(default.frame)


# --------------------------------------------------------------------------- liveness


def long_texts_after_the_sample(short_notes: int = 4) -> Table:
    """30 notes: the first ``short_notes`` have 5 words, the others 300; the filter reads
    only the title, the join reads the text. Sizing samples the join tasks of the first 4
    notes: with 4 short notes, every join task of notes 4..29 (22 blocks) is larger than
    the stage's sampled minimum (4 blocks)."""
    frame = notes(30, [5] * short_notes + [300] * (30 - short_notes))
    frame["title"] = [f"t{i}" for i in range(30)]
    return (
        kalypso.table(frame[["title", "text"]], name="notes")
        .sem_filter("Is the {title} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
    )


@pytest.mark.parametrize("policy", POLICIES)
async def test_prefixes_held_upstream_do_not_deadlock_join_tasks_larger_than_sampled(
    make_engine: EngineFactory, policy: str
) -> None:
    """Under parallel-bfs (budgets [60, 4]) the 30 notes complete and hold their
    ``[system | title]`` prefixes while a join task needs 22 blocks. The notes' prefixes
    share the system prompt's block, charged once, so they hold about one block each and
    the long join tasks fit beside them: no policy needs the last-resort rule here (the
    step test ``test_prefixes_held_upstream_do_not_deadlock...`` in tests/core drives the
    core into it with unshared prefixes). Every run finishes (the core raises
    ``SchedulerStuck`` instead of waiting for ever) with every pair."""
    engine = make_engine(outputs=outputs(1.0))
    result, _ = await run(long_texts_after_the_sample(), engine, policy)
    (report,) = result.pipeline_reports
    assert report.min_budgets_blocks == [5, 4]
    assert len(result.frame) == 60
    over = [launch for launch in report.launches if launch.over_commit]
    assert over == []
    assert all(launch.stage == 1 and launch.total_blocks == 22 for launch in over)


async def test_a_sample_of_four_notes_sizes_the_long_join_tasks_within_the_ledger(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=outputs(1.0))
    result, ledger = await run(long_texts_after_the_sample(short_notes=2), engine, "parallel-bfs")
    assert result.pipeline_reports[0].min_budgets_blocks == [5, 22]
    assert result.pipeline_reports[0].initial_budgets_blocks == [42, 22]
    assert ledger.over_commits == []
    assert result.peak_reserved_blocks <= 64


async def test_three_stages_on_a_small_cache_stay_within_the_ledger(
    make_engine: EngineFactory,
) -> None:
    """Two notes (8 and 20 words), fan-out 2 then 1, every tuple kept, 16 blocks: the
    step test's idle-stage scenario through the whole stack. The first Rebalance gives
    the empty last stage's 4 free blocks to stage 0, which then runs both notes (5 + 4
    blocks); the peak, 14 of 16, is note 1's prefix beside note 0's pairs and a triple."""
    plan = (
        kalypso.table(notes(2, [8, 20]), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
        .sem_join(right_table("topic", 1), "Is the {text} with {aspect} about {topic}?")
    )
    engine = make_engine(num_blocks=16, outputs=outputs(1.0))
    result, ledger = await run(plan, engine, "adaptive")
    assert len(result.frame) == 4
    assert ledger.over_commits == []
    assert result.peak_reserved_blocks == 14
