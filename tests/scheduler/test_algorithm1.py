"""Algorithm 1 on the simulated engine: admission order, and the budget moves of the
starvation (paper Figure 5) and saturation (Figure 6) cases.

All plans run on 64 KV blocks of 16 tokens over notes of 20 unique words. The numbers
below were computed once and checked by hand against the algorithm (the derivations are
in the comments); with these tables:

* a first-stage task (``sem_filter`` on ``{text}``) reserves 6 blocks - its prompt plus
  the 8-token bound - and keeps a prefix of 4 blocks (``[system | text]``, 40 + 24
  tokens) while its children run;
* a join task reserves the blocks of its prompt and bound beyond the parent's prefix: 3
  or 4 blocks (``min_budgets_blocks`` is the largest among sampled tasks).

``report.admitted`` lists ``(stage, tuple key)`` in launch order; ``report.moves`` lists
``BudgetMove(iteration, source, target, blocks, reason)``; iteration ``i`` is the
Rebalance after the ``i``-th batch of completions. Stages are numbered from 0 as in the
reports. Defaults: ``alpha = 1``, ``beta = 0.5``; a stage is starving when fewer than
``beta * budget/minimum`` tasks wait for it, saturated when more than ``alpha *
budget/minimum`` do.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from kalypso.scheduler.pipeline import BudgetMove, PipelineReport
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import CheckingScheduler, RecordingSim, notes, right_table

pytestmark = pytest.mark.usefixtures("schedulers")

Admitted = list[tuple[int, tuple[int, ...]]]


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


async def run(plan: Table, engine: RecordingSim, policy: str) -> tuple[QueryResult, PipelineReport]:
    result = await plan.arun(engine, policy=policy, query_id="q")
    assert len(result.pipeline_reports) == 1
    return result, result.pipeline_reports[0]


def kept(engine: RecordingSim, op: str) -> list[tuple[int, ...]]:
    """The tuple keys ``op`` answered "Yes" for."""
    return sorted(key for key, answer in engine.answers(op).items() if answer == "Yes")


def moves(report: PipelineReport) -> list[tuple[int, int, int, int, str]]:
    return [(m.iteration, m.source, m.target, m.blocks, m.reason) for m in report.moves]


def assert_budgets_conserved(report: PipelineReport, capacity: int) -> None:
    assert sum(report.initial_budgets_blocks) == sum(report.final_budgets_blocks) == capacity
    for final, minimum in zip(report.final_budgets_blocks, report.min_budgets_blocks, strict=True):
        assert final >= minimum


# --------------------------------------------------------------------------- admission order


async def test_sequential_admits_a_tuples_children_before_the_next_tuple(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=outputs(0.5))
    result, report = await run(filter_join_map(), engine, "sequential")

    assert kept(engine, "1:sem_filter") == [(2,), (3,), (4,)]
    assert report.admitted == [
        (0, (0,)),
        (0, (1,)),
        (0, (2,)),
        (1, (2, 0)),
        (1, (2, 1)),
        (0, (3,)),
        (1, (3, 0)),
        (1, (3, 1)),
        (0, (4,)),
        (1, (4, 0)),
        (1, (4, 1)),
    ]
    # depth-first: each tuple, then the children of those the filter kept
    expected: Admitted = []
    for i in range(5):
        expected.append((0, (i,)))
        if (i,) in kept(engine, "1:sem_filter"):
            expected += [(1, (i, 0)), (1, (i, 1))]
    assert report.admitted == expected
    # one task at a time, never rebalanced
    assert set(engine.max_in_flight.values()) == {1}
    assert report.moves == []
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [6, 58]
    assert report.min_budgets_blocks == [6, 4]
    assert len(result.frame) == 1


async def test_adaptive_admission_order_and_budget_moves(make_engine: EngineFactory) -> None:
    engine = make_engine(outputs=outputs(0.5))
    _, report = await run(filter_join_map(), engine, "adaptive")

    assert report.min_budgets_blocks == [6, 4]
    assert report.initial_budgets_blocks == [6, 58]  # stage 1 at its minimum, stage 2 the rest
    # Launch 0: stage 0's budget of 6 fits one task, (0,). It is filtered.
    # Rebalance 1: nothing waits for stage 1 (0 < beta * 58/4), 4 notes wait for stage 0
    #   (not starving: 4 >= 0.5 * 6/6): stage 1 gives all but its minimum, 58 - 4 = 54.
    # Launch 1: stage 0 (budget 60) admits (1,)..(4,) at once (4 * 6 = 24 blocks).
    # Rebalance 2: (1,) is filtered, (2,) (3,) (4,) are kept and hold 3 prefixes of 4
    #   blocks; their 6 children wait (> alpha * 4/4): stage 1's queue is saturated and
    #   its feeder, stage 0, gives what it does not hold to the last stage: 60 - 12 = 48.
    assert moves(report) == [(1, 1, 0, 54, "starving"), (2, 0, 1, 48, "saturated")]
    assert report.final_budgets_blocks == [12, 52]
    assert report.admitted == [
        (0, (0,)),
        (0, (1,)),
        (0, (2,)),
        (0, (3,)),
        (0, (4,)),
        (1, (2, 0)),
        (1, (2, 1)),
        (1, (3, 0)),
        (1, (3, 1)),
        (1, (4, 0)),
        (1, (4, 1)),
    ]
    assert engine.max_in_flight["1:sem_filter"] == 4
    assert engine.max_in_flight["3:sem_join"] == 6
    assert_budgets_conserved(report, 64)


@pytest.mark.parametrize(
    "policy", ["sequential", "adaptive", "parallel-dfs", "parallel-bfs", "static:0.5"]
)
async def test_every_task_is_admitted_once_and_every_policy_returns_the_same_table(
    make_engine: EngineFactory, policy: str
) -> None:
    baseline = await filter_join_map().arun(
        make_engine(outputs=outputs(0.5)), policy="operator-at-a-time"
    )
    engine = make_engine(outputs=outputs(0.5))
    result, report = await run(filter_join_map(), engine, policy)

    assert result.frame.equals(baseline.frame)
    stage_0: Admitted = [(0, (i,)) for i in range(5)]
    stage_1: Admitted = [(1, (i, j)) for (i,) in kept(engine, "1:sem_filter") for j in range(2)]
    assert sorted(report.admitted) == sorted(stage_0 + stage_1)
    assert_budgets_conserved(report, 64)
    assert report.peak_reserved_blocks <= 64


async def test_deeper_stages_get_a_higher_engine_priority(make_engine: EngineFactory) -> None:
    engine = make_engine(outputs=outputs(1.0))
    await run(filter_join_map(2), engine, "adaptive")
    # vLLM's convention: lower is served first
    assert {r.priority for r in engine.requests_of("1:sem_filter")} == {1}
    assert {r.priority for r in engine.requests_of("3:sem_join")} == {0}
    assert {r.priority for r in engine.requests_of("4:sem_map")} == {0}


# --------------------------------------------------------------------------- Figure 5


async def test_figure_5_parallel_dfs_starves_the_second_stage(make_engine: EngineFactory) -> None:
    """High selectivity (one of eight notes kept), fan-out one: with the first stage at
    its minimum budget, parallel-dfs runs the filter one note at a time and the join
    stage has nothing to do."""
    engine = make_engine(outputs=outputs(0.2))
    _, report = await run(filter_join(8, 1), engine, "parallel-dfs")

    assert kept(engine, "1:sem_filter") == [(2,)]
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [6, 58]
    assert report.moves == []
    assert engine.max_in_flight["1:sem_filter"] == 1
    assert report.admitted == [
        (0, (0,)),
        (0, (1,)),
        (0, (2,)),
        (1, (2, 0)),
        (0, (3,)),
        (0, (4,)),
        (0, (5,)),
        (0, (6,)),
        (0, (7,)),
    ]


async def test_figure_5_adaptive_gives_a_starving_stage_budget_upstream(
    make_engine: EngineFactory,
) -> None:
    """The same query under Algorithm 1. Rebalance 1 (after (0,) was filtered): no task
    waits for stage 1 (0 < beta * 58/3), 7 notes wait for stage 0 (not starving, >= 0.5 *
    6/6): stage 1 gives everything above its minimum, 58 - 3 = 55 blocks, upstream. Stage
    0 then runs the seven remaining notes at once (7 * 6 = 42 blocks, the peak); after
    that both stages starve (no one to give to), so nothing else moves."""
    engine = make_engine(outputs=outputs(0.2))
    _, report = await run(filter_join(8, 1), engine, "adaptive")

    assert report.min_budgets_blocks == [6, 3]
    assert report.moves == [BudgetMove(1, 1, 0, 55, "starving")]
    assert report.final_budgets_blocks == [61, 3]
    assert engine.max_in_flight["1:sem_filter"] == 7
    assert report.peak_reserved_blocks == 42
    assert report.admitted == [(0, (i,)) for i in range(8)] + [(1, (2, 0))]


# --------------------------------------------------------------------------- Figure 6


async def test_figure_6_parallel_bfs_saturates_the_cache_with_upstream_work(
    make_engine: EngineFactory,
) -> None:
    """Low selectivity (every note kept), fan-out six: parallel-bfs admits every note at
    once; their prefixes stay reserved while 36 join tasks queue behind stage 1, kept at
    its minimum of 3 blocks - one join at a time."""
    engine = make_engine(outputs=outputs(1.0))
    result, report = await run(filter_join(6, 6), engine, "parallel-bfs")

    assert report.initial_budgets_blocks == report.final_budgets_blocks == [61, 3]
    assert report.moves == []
    assert report.admitted[:6] == [(0, (i,)) for i in range(6)]
    assert report.admitted[6:] == [(1, (i, j)) for i in range(6) for j in range(6)]
    assert engine.max_in_flight["1:sem_filter"] == 6
    assert engine.max_in_flight["3:sem_join"] == 1
    assert len(result.frame) == 36


async def test_figure_6_adaptive_gives_a_saturated_queues_feeder_budget_to_the_last_stage(
    make_engine: EngineFactory,
) -> None:
    """The same query under Algorithm 1.

    * Rebalance 1: (0,) was kept; its 6 children wait for stage 1 (< beta * 58/3:
      starving) and 5 notes for stage 0 (not starving): 58 - 3 = 55 blocks go upstream.
    * Launch 1 admits (0, 0) (3 blocks, stage 1's whole budget) and (1,)..(5,).
    * Rebalance 2: the five notes completed, 30 more children wait (> alpha * 3/3):
      stage 1's queue is saturated and its feeder, stage 0, gives all it does not hold (6
      prefixes of 4 blocks) to the last stage: 61 - 24 = 37.
    * Rebalance 3: two notes' children are all done, their prefixes released: 8 more.
    """
    engine = make_engine(outputs=outputs(1.0))
    _, report = await run(filter_join(6, 6), engine, "adaptive")

    assert moves(report) == [
        (1, 1, 0, 55, "starving"),
        (2, 0, 1, 37, "saturated"),
        (3, 0, 1, 8, "saturated"),
    ]
    assert report.final_budgets_blocks == [16, 48]
    assert report.admitted[:7] == [(0, (0,)), (1, (0, 0))] + [(0, (i,)) for i in range(1, 6)]
    assert engine.max_in_flight["3:sem_join"] == 16
    assert_budgets_conserved(report, 64)


async def test_figure_6_three_stages_the_middle_stage_gives_to_the_last(
    make_engine: EngineFactory,
) -> None:
    """Two joins (fan-out 6 then 3), every tuple kept: 6 notes, 36 pairs, 108 triples.
    A pair's prefix (``[system | text, aspect]``, 4 full blocks) is all in its note's
    prefix, which the note holds: a completed pair holds nothing for its triples.

    * Rebalance 1: nothing waits for stage 2 (starving, 0 < 0.5 * 55/3) and 6 pairs wait
      for stage 1 (not starving at its minimum): 55 - 3 = 52 go to stage 1. Now stage 1
      is starving too (6 < 0.5 * 55/3) while stage 0 is not (5 notes): it passes the
      same 52 blocks on to stage 0.
    * Launch 1 admits (0, 0) and (1,)..(5,); they complete.
    * Rebalance 2: 35 pairs wait for stage 1 (saturated): its feeder, stage 0, gives
      58 - 24 (6 prefixes of 4 blocks) = 34 to the last stage, which is still starving
      (3 triples < 0.5 * 37/3) and sends 37 - 3 (its minimum) = 34 back to stage 1.
    * Launch 2: the triple (0, 0, 0) and 12 pairs (36 of stage 1's 37 blocks); they
      complete, holding nothing.
    * Rebalance 3: 38 triples wait for stage 2 (saturated, > 3/3): its feeder - the
      middle stage - gives what it does not hold, 37 - 3 (its minimum) = 34, to the
      last stage. (Were a pair to keep min(prefix, reservation) = 3 blocks, as before
      the fix, its 12 pairs would hold 36 and it would give 1.)
    * Later: each time all triples of a note are done, its 4 prefix blocks are freed and
      stage 0, feeding the saturated pair queue, gives them to the last stage
      (Rebalances 5, 6, 9 and 10). Twice the triple queue runs low while pairs wait
      (3 < 0.5 * 45/3 at Rebalance 7, 8 < 0.5 * 53/3 at 11): the starving last stage
      lends its free budget to stage 1 (42, then 50 blocks), and takes it back at the
      next Rebalance, when the triples those pairs produced saturate its queue.
    """
    engine = make_engine(outputs=outputs(1.0))
    result, report = await run(filter_join_join(6, 6, 3), engine, "adaptive")

    assert len(result.frame) == 108
    assert report.min_budgets_blocks == [6, 3, 3]
    assert report.initial_budgets_blocks == [6, 3, 55]
    assert moves(report)[:5] == [
        (1, 2, 1, 52, "starving"),
        (1, 1, 0, 52, "starving"),
        (2, 0, 2, 34, "saturated"),
        (2, 2, 1, 34, "starving"),
        (3, 1, 2, 34, "saturated"),
    ]
    assert moves(report)[5:] == [
        (5, 0, 2, 4, "saturated"),
        (6, 0, 2, 4, "saturated"),
        (7, 2, 1, 42, "starving"),
        (8, 1, 2, 42, "saturated"),
        (9, 0, 2, 4, "saturated"),
        (10, 0, 2, 4, "saturated"),
        (11, 2, 1, 50, "starving"),
        (12, 1, 2, 50, "saturated"),
    ]
    # saturated queues always feed the last stage; starving stages always give upstream
    for move in report.moves:
        if move.reason == "saturated":
            assert move.target == 2 and move.source < 2
        else:
            assert move.reason == "starving" and move.target < move.source
    assert report.final_budgets_blocks == [8, 3, 53]
    assert_budgets_conserved(report, 64)


async def test_parallel_bfs_with_three_stages_never_moves_budget(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(outputs=outputs(1.0))
    _, report = await run(filter_join_join(6, 6, 3), engine, "parallel-bfs")
    assert report.moves == []
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [58, 3, 3]
    assert engine.max_in_flight == {"1:sem_filter": 6, "3:sem_join": 1, "5:sem_join": 1}


async def test_thresholds_are_configurable(make_engine: EngineFactory) -> None:
    """The Figure 6 query with alpha so high that no queue is ever saturated (at most 36
    tasks wait, never more than 1000 * budget/minimum) and beta tiny. Beta must stay
    above 0, so an empty queue still starves (0 < beta * budget/minimum); only then:

    * Rebalance 1: 6 pairs wait for stage 1 - not starving (6 >= 0.001 * 58/3), where
      the default beta moves its budget upstream at once (6 < 0.5 * 58/3).
    * Launch 1: stage 1 runs the 6 pairs; stage 0 holds (0,)'s prefix, so (1,) does not
      fit its budget of 6 and waits.
    * Rebalance 2: stage 1's queue is empty (starving), 5 notes wait for stage 0 (not
      starving): stage 1 gives 58 - 3 = 55 upstream.
    * Stage 0 runs the 5 notes; their 30 pairs never saturate stage 1's queue, and when it
      is empty again stage 0 starves too: nothing else moves.
    """
    engine = make_engine(outputs=outputs(1.0))
    result = await filter_join(6, 6).arun(engine, policy="adaptive", alpha=1000.0, beta=0.001)
    report = result.pipeline_reports[0]
    assert report.moves == [BudgetMove(2, 1, 0, 55, "starving")]
    assert report.final_budgets_blocks == [61, 3]

    # the default thresholds, on the same query: upstream at once, then saturated moves
    default = await filter_join(6, 6).arun(make_engine(outputs=outputs(1.0)), policy="adaptive")
    default_moves = moves(default.pipeline_reports[0])
    assert default_moves[0] == (1, 1, 0, 55, "starving")
    assert {m[4] for m in default_moves[1:]} == {"saturated"}


# --------------------------------------------------------------------------- liveness


def long_texts_after_the_sample(short_notes: int = 4) -> Table:
    """30 notes: the first ``short_notes`` have 5 words, the others 300; the filter reads
    only the title, the join reads the text. The join stage's minimum is the largest join
    task of the first 4 notes (the sample): with 4 short notes it is 4 blocks and every
    join task of notes 4..29 needs 22 - more than sampled; with 2, the sample includes
    notes 2 and 3 and the minimum is 22."""
    frame = notes(30, [5] * short_notes + [300] * (30 - short_notes))
    frame["title"] = [f"t{i}" for i in range(30)]
    return (
        kalypso.table(frame[["title", "text"]], name="notes")
        .sem_filter("Is the {title} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
    )


@pytest.mark.parametrize(
    "policy", ["sequential", "parallel-dfs", "parallel-bfs", "static:0.5", "adaptive"]
)
async def test_prefixes_held_upstream_do_not_deadlock_join_tasks_larger_than_sampled(
    make_engine: EngineFactory, schedulers: list[CheckingScheduler], policy: str
) -> None:
    """Under parallel-bfs (budgets [60, 4]) stage 0 runs 12 notes at a time and completes
    all 30; each keeps a 2-block prefix (``[system | title]``) for its two join tasks. The
    join tasks of notes 0..3 (4 blocks) run one at a time in stage 1's budget; when they
    are done, notes 4..29 hold 52 blocks. The next join task, (4, 0), needs 22 (its text
    shares only the system prompt's 2 blocks with the parent's prompt); the ledger has 12
    free and nothing runs: only running it can free anything, so it must be admitted
    (CheckingScheduler raises SchedulerDeadlock where the real scheduler would poll for
    ever) - beyond the ledger, 74 of 64. So are the next nine, until the notes still
    waiting hold 42 blocks or less (22 + 42 = 64: (9, 0) fits)."""
    engine = make_engine(outputs=outputs(1.0))
    result, report = await run(long_texts_after_the_sample(), engine, policy)
    assert report.min_budgets_blocks == [5, 4]
    assert len(result.frame) == 60
    # the first join task larger than sampled raised its stage's minimum
    memory = schedulers[0].memory
    assert memory is not None and memory.budgets.min_budget_blocks == [5, 22]
    # going beyond the ledger is the last resort of an idle query, one task at a time
    over_commits = schedulers[0].over_commits
    for over in over_commits:
        assert over.query_was_idle and over.admitted == 1
    if policy == "parallel-bfs":  # the state above is reached: two join tasks per note
        held = [2 * waiting for waiting in (26, 25, 24, 23, 22) for _ in range(2)]
        assert [(o.reserved_before, o.reserved_after) for o in over_commits] == [
            (h, h + 22) for h in held
        ]


async def test_a_sample_of_four_notes_sizes_the_long_join_tasks_within_the_ledger(
    make_engine: EngineFactory,
) -> None:
    """With notes 2..29 long, the join tasks sampled (those of notes 0..3) include long
    ones: stage 1's minimum is 22 blocks and parallel-bfs keeps it (budgets [42, 22]), so
    stage 0 never holds more prefixes than leave room for one long join task. (Sampling
    only the first 2 notes gave a minimum of 4, budgets [60, 4] and the over-commits of
    the test above.)"""
    engine = make_engine(outputs=outputs(1.0))
    _, report = await run(long_texts_after_the_sample(short_notes=2), engine, "parallel-bfs")
    assert report.min_budgets_blocks == [5, 22]
    assert report.initial_budgets_blocks == [42, 22]
    assert report.peak_reserved_blocks <= 64


async def test_an_idle_stage_does_not_take_a_deeper_stages_room_for_its_prefixes(
    make_engine: EngineFactory, schedulers: list[CheckingScheduler]
) -> None:
    """Two notes (8 and 20 words), fan-out 2 then 1, every tuple kept, 16 blocks.
    Minimums [6, 3, 4] (note 0's triples need 4 blocks), budgets [6, 3, 7]. A pair's
    prefix is all in its note's: completed pairs hold nothing.

    * Launch 0: stage 0 runs (0,) (its whole budget); it completes holding 3 prefix
      blocks. Rebalance 1: stage 2 starves, stage 1 (2 pairs waiting) does not: 7 - 4 = 3
      go to stage 1.
    * Launch 1: stage 1 runs (0, 0) and (0, 1) (its 6 blocks). Stage 0 runs nothing but
      holds (0,)'s prefix, so it is not idle: (1,) (6 blocks, 3 free) waits. (Counting
      it idle admitted (1,) beyond stage 0's budget, into the room of the triples: 9 of
      its 6 blocks, 15 of the ledger's 16; with pairs keeping 3 prefix blocks each, as
      they also did then, the triple (0, 0, 0) could only go beyond the ledger, 17.)
    * Rebalance 2: 2 triples wait (saturated, > 4/4): stage 1 gives its 3 back to stage 2.
      The triples of note 0 run one at a time (4 + 4 > 7) and release (0,)'s prefix.
    * Rebalance 4: only (1,) waits; stages 2 and 1 starve, stage 0 does not: stage 2
      gives 7 - 4 = 3 to stage 0, which runs (1,) (6 of 9 blocks). Rebalance 5: its 2
      pairs saturate stage 1's queue: stage 0 gives 9 - 6 = 3 to stage 2, which starves
      and passes 3 to stage 1; it runs both pairs (ledger 4 + 3 + 3 = 10, the peak).
      Rebalance 6: their triples saturate stage 2's queue: stage 1 gives 3 to it, and the
      two triples of note 1 (3 blocks each) run together.
    """
    plan = (
        kalypso.table(notes(2, [8, 20]), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
        .sem_join(right_table("topic", 1), "Is the {text} with {aspect} about {topic}?")
    )
    engine = make_engine(num_blocks=16, outputs=outputs(1.0))
    result, report = await run(plan, engine, "adaptive")
    assert len(result.frame) == 4
    assert report.min_budgets_blocks == [6, 3, 4]
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [6, 3, 7]
    assert moves(report) == [
        (1, 2, 1, 3, "starving"),
        (2, 1, 2, 3, "saturated"),
        (4, 2, 0, 3, "starving"),
        (5, 0, 2, 3, "saturated"),
        (5, 2, 1, 3, "starving"),
        (6, 1, 2, 3, "saturated"),
    ]
    # note 0's whole tree before note 1
    assert report.admitted == [
        (0, (0,)),
        (1, (0, 0)),
        (1, (0, 1)),
        (2, (0, 0, 0)),
        (2, (0, 1, 0)),
        (0, (1,)),
        (1, (1, 0)),
        (1, (1, 1)),
        (2, (1, 0, 0)),
        (2, (1, 1, 0)),
    ]
    assert schedulers[0].over_commits == []
    assert report.peak_reserved_blocks == 10
