"""Calls that stop at their token bound: the scheduler re-enqueues the task (front of its
stage's queue) with a doubled bound and a new reservation; the answers are the ones
operator-at-a-time gets with inline retries.

Every free-text answer here is exactly 40 words (then end of sequence); the sem_map's
bounds go 16 -> 32 -> 64 (its cap) with the default ``max_retries=2``.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import CheckingScheduler, notes, right_table

LONG_ANSWERS = SimOutputModel(yes_rate=0.5, min_output_tokens=40, max_output_tokens=40)
POLICIES = ["adaptive", "parallel-dfs", "parallel-bfs", "static:0.5", "sequential"]


def filter_join_describe() -> Table:
    return (
        kalypso.table(notes(4, 10), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
        .sem_map("Describe the {text} and {aspect}.", "d", max_tokens=64, first_bound_tokens=16)
    )


def stats(result: QueryResult) -> dict[str, tuple[int, int, int, int]]:
    """(rows in, rows out, calls, retries) per operator."""
    return {s.operator: (s.rows_in, s.rows_out, s.calls, s.retries) for s in result.operator_stats}


async def test_operator_at_a_time_retries_inline(make_engine: EngineFactory) -> None:
    result = await filter_join_describe().arun(
        make_engine(outputs=LONG_ANSWERS), policy="operator-at-a-time"
    )
    assert result.pipeline_reports == ()
    # notes 0 and 2 pass the filter; pairs (0,0) (0,1) (2,0) the join; 3 described
    assert stats(result)["4:sem_map"] == (3, 3, 9, 6)
    assert result.retries == 6


async def test_sequential_reruns_a_retried_task_before_anything_else(
    make_engine: EngineFactory, schedulers: list[CheckingScheduler]
) -> None:
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await filter_join_describe().arun(engine, policy="sequential")
    report = result.pipeline_reports[0]

    # each described pair runs three times in a row: 16 and 32 tokens stop at the
    # bound, 64 completes; (2, 1) is rejected by the join and never reaches the map
    assert report.admitted == [
        (0, (0,)),
        *[(1, (0, 0))] * 3,
        *[(1, (0, 1))] * 3,
        (0, (1,)),
        (0, (2,)),
        *[(1, (2, 0))] * 3,
        (1, (2, 1)),
        (0, (3,)),
    ]
    assert report.retries == result.retries == 6
    assert stats(result)["4:sem_map"] == (3, 3, 9, 6)
    assert stats(result)["3:sem_join"] == (4, 3, 4, 0)  # the join is not asked again
    assert [r.max_tokens for r in engine.requests_of("4:sem_map")] == [16, 32, 64] * 3
    # A retry resumes at the sem_map (op 1 of the stage) with a new reservation; the
    # parent holds 3 prefix blocks. First launch: the largest of the join (85 + 8 tokens)
    # and the map (78 + 8 counted for the join's answer + 16) = 102 tokens, 7 blocks - 3.
    # Retries: 78 + 32 = 110 tokens (7 - 3 blocks), then 78 + 64 = 142 (9 - 3).
    launches = [(x.key, x.next_op, x.total_blocks) for x in schedulers[0].launches]
    assert [x for x in launches if x[0] == (0, 0)] == [
        ((0, 0), 0, 4),
        ((0, 0), 1, 4),
        ((0, 0), 1, 6),
    ]
    assert {len(r.prompt_token_ids) for r in engine.requests_of("4:sem_map")} == {78}
    assert {len(r.prompt_token_ids) for r in engine.requests_of("3:sem_join")} == {85}


@pytest.mark.parametrize("policy", POLICIES)
async def test_every_policy_retries_and_returns_operator_at_a_times_answers(
    make_engine: EngineFactory, policy: str
) -> None:
    baseline = await filter_join_describe().arun(
        make_engine(outputs=LONG_ANSWERS), policy="operator-at-a-time"
    )
    engine = make_engine(outputs=LONG_ANSWERS)
    result = await filter_join_describe().arun(engine, policy=policy)
    report = result.pipeline_reports[0]

    assert result.frame.equals(baseline.frame)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40, 40]
    assert report.retries == result.retries == stats(result)["4:sem_map"][3] == 6
    assert stats(result) == stats(baseline)
    # each retried task is admitted once more per retry
    assert len(report.admitted) == 4 + 4 + 6
    assert report.peak_reserved_blocks <= 64


async def test_the_estimator_learns_the_bound_and_later_tasks_stop_retrying(
    make_engine: EngineFactory,
) -> None:
    """30 sem_map tasks; the estimator uses the observed ratios once 8 calls completed.
    The first wave of tasks run before that and retry twice each; the rest start with
    the learned bound (41 tokens: the 40 words and end of sequence) and never retry."""
    plan = kalypso.table(notes(30, 30)).sem_map(
        "Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16
    )
    engine = make_engine(outputs=SimOutputModel(min_output_tokens=40, max_output_tokens=40))
    result = await plan.arun(engine, policy="adaptive")
    baseline = await plan.arun(
        make_engine(outputs=SimOutputModel(min_output_tokens=40, max_output_tokens=40)),
        policy="operator-at-a-time",
    )

    assert result.frame.equals(baseline.frame)
    assert baseline.retries == 60  # every call was sent before any answer came back
    assert result.retries == result.pipeline_reports[0].retries == 18  # 9 tasks x 2
    first_bounds = {}
    for request in engine.requests_of("1:sem_map"):
        first_bounds.setdefault(request.request_id.split(":")[3], request.max_tokens)
    assert sorted(first_bounds.values()) == [16] * 9 + [41] * 21
