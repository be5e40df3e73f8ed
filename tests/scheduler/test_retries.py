"""Calls that stop at their token bound: the scheduler re-enqueues the task (front of its
stage's queue) with a doubled bound and a new reservation; the answers are the ones
operator-at-a-time gets.

Every free-text answer here is exactly 40 words (then end of sequence); the sem_map's
bounds go 16 -> 32 -> its cap (64, or 128 in the estimator tests) with the default
``max_retries=2``: the last allowed retry runs at the cap.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import CartesianProduct, QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import CheckingScheduler, key_of, notes, right_table

pytestmark = pytest.mark.usefixtures("schedulers")

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


async def test_operator_at_a_time_gets_the_full_answers(make_engine: EngineFactory) -> None:
    result = await filter_join_describe().arun(
        make_engine(outputs=LONG_ANSWERS), policy="operator-at-a-time"
    )
    assert result.pipeline_reports == ()
    # notes 0 and 2 pass the filter; pairs (0,0) (0,1) (2,0) the join; 3 described
    assert stats(result)["4:sem_map"][:2] == (3, 3)
    assert [len(d.split()) for d in result.frame["d"]] == [40, 40, 40]


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
    assert stats(result)["4:sem_map"] == (3, 3, 9, 6)
    for op in ("1:sem_filter", "3:sem_join", "4:sem_map"):  # same tuples in and out
        assert stats(result)[op][:2] == stats(baseline)[op][:2]
    # each retried task is admitted once more per retry
    assert len(report.admitted) == 4 + 4 + 6
    assert report.peak_reserved_blocks <= 64


async def test_the_estimator_learns_the_bound_and_later_tasks_stop_retrying(
    make_engine: EngineFactory,
) -> None:
    """30 notes, all kept by a filter; each is paired with one aspect and its pair runs
    a sem_map (alone in stage 1; its prompt reads the note, 90 tokens). A task keeps the
    bounds it was sized with when it was created (its reservation assumes them), so what
    the estimator learns applies to tasks created afterwards: the map tasks of notes
    completed later.

    * Launch 0 runs (0,); its map task (0, 0) is created before any sem_map call: first
      bound 16. Rebalance 1 gives stage 1's free budget to stage 0 (61 blocks), where
      Launch 1 runs (1,)..(8,) beside (0,)'s 4-block prefix (8 * 7 = 56 blocks).
    * They complete while (0, 0) still runs its first call (no sem_map call observed
      yet): 8 more map tasks at 16 tokens. Rebalance 2: their queue is saturated and
      stage 0 gives everything but the 9 prefixes it holds (36 blocks) to stage 1.
    * Each of these 9 tasks stops at 16 and at 32 tokens and completes at the cap (128),
      2 retries each. Stage 0's budget stays within 4 blocks of what its prefixes hold
      until map tasks are done and release them: (9,) runs after two notes' map tasks
      are done. The estimator has then seen more than 8 calls, among them complete
      41-token answers (40 words and end of sequence); below 100 samples the 99th
      percentile is the largest ratio, 41/90, so the 21 later map tasks get
      ceil(41/90 * 90) = 41 tokens and never retry.
    """
    plan = (
        kalypso.table(notes(30, 30))
        .sem_filter("Is the {text} relevant?")
        .apply(CartesianProduct(right_table("aspect", 1)))
        .sem_map("Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16)
    )
    answers = SimOutputModel(yes_rate=1.0, min_output_tokens=40, max_output_tokens=40)
    engine = make_engine(outputs=answers)
    result = await plan.arun(engine, policy="adaptive")
    baseline = await plan.arun(make_engine(outputs=answers), policy="operator-at-a-time")

    assert result.frame.equals(baseline.frame)
    assert result.retries == result.pipeline_reports[0].retries == 18  # 9 tasks x 2
    assert {len(r.prompt_token_ids) for r in engine.requests_of("3:sem_map")} == {90}
    bounds: dict[tuple[int, ...], list[int]] = {}
    for request in engine.requests_of("3:sem_map"):
        bounds.setdefault(key_of(request.request_id), []).append(request.max_tokens)
    assert bounds == {
        **{(i, 0): [16, 32, 128] for i in range(9)},
        **{(i, 0): [41] for i in range(9, 30)},
    }


async def test_tasks_admitted_after_the_estimator_calibrates_use_its_bound(
    make_engine: EngineFactory,
) -> None:
    """One stage: all 30 sem_map tasks exist from the start, but each is sized when it is
    admitted. Tasks admitted before the estimator has 8 samples reserve for the first bound
    (16 tokens) and run at 16, 32, then the cap (2 retries each); tasks admitted after it
    learned the 40-token answers reserve for that bound and run once. A call never runs
    above the bound its task was admitted with."""
    plan = kalypso.table(notes(30, 30)).sem_map(
        "Describe the {text}.", "d", max_tokens=128, first_bound_tokens=16
    )
    answers = SimOutputModel(min_output_tokens=40, max_output_tokens=40)
    engine = make_engine(outputs=answers)
    result = await plan.arun(engine, policy="adaptive")

    bounds: dict[tuple[int, ...], list[int]] = {}
    for request in engine.requests_of("1:sem_map"):
        bounds.setdefault(key_of(request.request_id), []).append(request.max_tokens)
    early = [key for key, seq in bounds.items() if seq == [16, 32, 128]]
    learned = [key for key, seq in bounds.items() if len(seq) == 1 and seq[0] >= 40]
    assert len(early) + len(learned) == 30, bounds
    assert len(early) >= 8  # the estimator needs 8 completed calls
    assert learned, "later tasks should be admitted with the learned bound"
    assert result.retries == 2 * len(early)
    assert list(result.frame["d"].str.split().str.len()) == [40] * 30
