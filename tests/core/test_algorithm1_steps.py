"""Algorithm 1 as pure step tests: the scheduler core driven by hand, no engine, no event
loop, no monkeypatching. Admission orders, budget moves of the starvation (paper Figure 5)
and saturation (Figure 6) cases, and the liveness rules.

Every pipeline runs on 64 KV blocks of 16 tokens unless a test says otherwise. Sizes are
given in tokens (see :class:`tests.core.fakes.StageSize`):

* a first-stage task (a predicate on a note) reserves 6 blocks - its prompt plus its
  bound - and keeps a prefix of 4 blocks (``[system | text]``) while its children run;
* a join task reserves the blocks of its prompt and bound beyond its parent's prefix: 3
  blocks (one predicate) or 4 (a predicate and a map).

Each step is one Launch, then every running task completes (one batch, in task order),
then Rebalance. ``report.admitted`` lists ``(stage, key)`` in launch order;
``report.moves`` ``BudgetMove(iteration, source, target, blocks, reason)``: iteration
``i`` is the Rebalance after the ``i``-th batch. Defaults: ``alpha = 1``, ``beta = 0.5``;
a stage is starving when fewer than ``beta * budget/minimum`` tasks wait for it,
saturated when more than ``alpha * budget/minimum`` do.
"""

from __future__ import annotations

import pytest

from kalypso.core.report import BudgetMove, PipelineReport
from kalypso.core.scheduler import SchedulerCore
from tests.core.fakes import StageSize, Workload, make_core, run_steps

NOTE = StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=64)
"""A predicate on a note: 6 blocks, a 4-block prefix."""
JOIN = StageSize(prompt_tokens=104, bound_tokens=8, prefix_tokens=64, shared_tokens=64)
"""A join predicate on (note, right row): 7 blocks, 4 of them the note's: 3 of its own."""
JOIN_MAP = StageSize(prompt_tokens=120, bound_tokens=8, prefix_tokens=64, shared_tokens=64)
"""A join predicate then a map: 4 blocks of its own."""

Admitted = list[tuple[int, tuple[int, ...]]]


def filter_join_map(kept: set[tuple[int, ...]] | None) -> Workload:
    return Workload([NOTE, JOIN_MAP], fanouts=[2], kept=kept)


def filter_join(fanout: int, kept: set[tuple[int, ...]] | None = None) -> Workload:
    return Workload([NOTE, JOIN], fanouts=[fanout], kept=kept)


def filter_join_join(fanout: int, second: int) -> Workload:
    return Workload([NOTE, JOIN, JOIN], fanouts=[fanout, second])


def moves(report: PipelineReport) -> list[tuple[int, int, int, int, str]]:
    return [(m.iteration, m.source, m.target, m.blocks, m.reason) for m in report.moves]


def assert_budgets_conserved(core: SchedulerCore, capacity: int) -> None:
    report = core.report
    assert sum(report.initial_budgets_blocks) == sum(report.final_budgets_blocks) == capacity
    for final, minimum in zip(report.final_budgets_blocks, report.min_budgets_blocks, strict=True):
        assert final >= minimum
    assert core.ledger.held_by("q") == 0  # everything released at the end


# --------------------------------------------------------------------------- admission order


def test_sequential_admits_a_tuples_children_before_the_next_tuple() -> None:
    kept = {(2,), (3,), (4,)}
    core = make_core(filter_join_map(kept), "sequential")
    log = run_steps(core, filter_join_map(kept), 5)
    expected: Admitted = []
    for i in range(5):
        expected.append((0, (i,)))
        if (i,) in kept:
            expected += [(1, (i, 0)), (1, (i, 1))]
    assert core.report.admitted == expected
    assert log.max_running == {0: 1, 1: 1}  # one task at a time, never rebalanced
    assert core.report.moves == []
    assert core.report.initial_budgets_blocks == core.report.final_budgets_blocks == [6, 58]
    assert core.report.min_budgets_blocks == [6, 4]


def test_adaptive_admission_order_and_budget_moves() -> None:
    """* Rebalance 0, at the start (Algorithm 1 rebalances in every iteration of its loop,
      the first included): nothing waits for stage 1 (0 < beta * 58/4), 5 notes wait for
      stage 0 (not starving: 5 >= 0.5 * 6/6): stage 1 gives all but its minimum,
      58 - 4 = 54.
    * Launch 0: stage 0 (budget 60) admits (0,)..(4,) at once (5 * 6 = 30 blocks).
    * Rebalance 1: (0,) and (1,) are filtered, (2,) (3,) (4,) are kept and hold 3
      prefixes of 4 blocks; their 6 children wait (> alpha * 4/4): stage 1's queue is
      saturated and its feeder, stage 0, gives what it does not hold to the last stage:
      60 - 12 = 48."""
    workload = filter_join_map({(2,), (3,), (4,)})
    core = make_core(workload, "adaptive")
    log = run_steps(core, workload, 5)
    report = core.report
    assert report.min_budgets_blocks == [6, 4]
    assert report.initial_budgets_blocks == [6, 58]
    assert moves(report) == [(0, 1, 0, 54, "starving"), (1, 0, 1, 48, "saturated")]
    assert report.final_budgets_blocks == [12, 52]
    assert report.admitted == [(0, (i,)) for i in range(5)] + [
        (1, (i, j)) for i in (2, 3, 4) for j in (0, 1)
    ]
    assert log.max_running == {0: 5, 1: 6}
    assert_budgets_conserved(core, 64)


@pytest.mark.parametrize(
    "policy", ["sequential", "adaptive", "parallel-dfs", "parallel-bfs", "static:0.5"]
)
def test_every_task_is_admitted_once(policy: str) -> None:
    kept = {(0,), (3,)}
    workload = filter_join_map(kept)
    core = make_core(workload, policy)
    run_steps(core, workload, 5)
    stage_0: Admitted = [(0, (i,)) for i in range(5)]
    stage_1: Admitted = [(1, (i, j)) for (i,) in sorted(kept) for j in range(2)]
    assert sorted(core.report.admitted) == sorted(stage_0 + stage_1)
    assert_budgets_conserved(core, 64)
    assert core.report.peak_reserved_blocks <= 64


def test_deeper_stages_get_a_higher_engine_priority() -> None:
    core = make_core(filter_join_join(1, 1), "adaptive")
    core.start([])
    # vLLM's convention: lower is served first
    assert [core.policy.priority(s, 3) for s in range(3)] == [2, 1, 0]
    assert make_core(filter_join(1), "operator-at-a-time").policy.priority(0, 2) == 0


# --------------------------------------------------------------------------- Figure 5


def test_figure_5_parallel_dfs_starves_the_second_stage() -> None:
    """High selectivity (one of eight notes kept), fan-out one: with the first stage at its
    minimum budget, parallel-dfs runs the filter one note at a time and the join stage
    has nothing to do."""
    workload = filter_join(1, kept={(2,)})
    core = make_core(workload, "parallel-dfs")
    log = run_steps(core, workload, 8)
    report = core.report
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [6, 58]
    assert report.moves == []
    assert log.max_running[0] == 1
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


def test_figure_5_adaptive_gives_a_starving_stage_budget_upstream() -> None:
    """Rebalance 0, at the start (Algorithm 1 rebalances in every iteration of its loop,
    the first included): no task waits for stage 1 (0 < beta * 58/3), 8 notes wait for
    stage 0 (not starving, >= 0.5 * 6/6): stage 1 gives everything above its minimum,
    58 - 3 = 55 blocks, upstream. Stage 0 then runs all eight notes at once (8 * 6 = 48
    blocks, the peak); after that both stages starve (no one to give to), so nothing else
    moves."""
    workload = filter_join(1, kept={(2,)})
    core = make_core(workload, "adaptive")
    log = run_steps(core, workload, 8)
    report = core.report
    assert report.min_budgets_blocks == [6, 3]
    assert report.moves == [BudgetMove(0, 1, 0, 55, "starving")]
    assert report.final_budgets_blocks == [61, 3]
    assert log.max_running[0] == 8
    assert report.peak_reserved_blocks == 48
    assert report.admitted == [(0, (i,)) for i in range(8)] + [(1, (2, 0))]


# --------------------------------------------------------------------------- Figure 6


def test_figure_6_parallel_bfs_saturates_the_cache_with_upstream_work() -> None:
    """Low selectivity (every note kept), fan-out six: parallel-bfs admits every note at
    once; their prefixes stay reserved while 36 join tasks queue behind stage 1, kept at
    its minimum of 3 blocks - one join at a time."""
    workload = filter_join(6)
    core = make_core(workload, "parallel-bfs")
    log = run_steps(core, workload, 6)
    report = core.report
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [61, 3]
    assert report.moves == []
    assert report.admitted[:6] == [(0, (i,)) for i in range(6)]
    assert report.admitted[6:] == [(1, (i, j)) for i in range(6) for j in range(6)]
    assert log.max_running == {0: 6, 1: 1}


def test_figure_6_adaptive_gives_a_saturated_queues_feeder_budget_to_the_last_stage() -> None:
    """* Rebalance 0, at the start: nothing waits for stage 1 (starving) and 6 notes for
      stage 0 (not starving): 58 - 3 = 55 blocks go upstream.
    * Launch 0 admits the six notes (36 of stage 0's 61 blocks).
    * Rebalance 1: the notes completed, holding 6 prefixes of 4 blocks, and their 36
      children wait (> alpha * 3/3): stage 1's queue is saturated and its feeder, stage
      0, gives all it does not hold to the last stage: 61 - 24 = 37.
    * Rebalance 2: two notes' children are all done, their prefixes released: 8 more."""
    workload = filter_join(6)
    core = make_core(workload, "adaptive")
    log = run_steps(core, workload, 6)
    report = core.report
    assert moves(report) == [
        (0, 1, 0, 55, "starving"),
        (1, 0, 1, 37, "saturated"),
        (2, 0, 1, 8, "saturated"),
    ]
    assert report.final_budgets_blocks == [16, 48]
    assert report.admitted[:7] == [(0, (i,)) for i in range(6)] + [(1, (0, 0))]
    assert log.max_running[1] == 16
    assert_budgets_conserved(core, 64)


def test_figure_6_three_stages_the_middle_stage_gives_to_the_last() -> None:
    """Two joins (fan-out 6 then 3), every tuple kept: 6 notes, 36 pairs, 108 triples. A
    pair's prefix is all in its note's prefix, which the note holds: a completed pair
    holds nothing for its triples.

    * Rebalance 0, at the start: nothing waits for stages 2 and 1 (both starving), 6
      notes wait for stage 0: stage 2 gives 55 - 3 = 52 to stage 0, the nearest stage up
      that is not starving.
    * Launch 0 admits the six notes; they complete.
    * Rebalance 1: 36 pairs wait for stage 1 (saturated): its feeder, stage 0, gives 58 -
      24 (6 prefixes of 4 blocks) = 34 to the last stage, which is still starving (no
      triples yet) and sends 37 - 3 (its minimum) = 34 to stage 1.
    * Launch 1: 12 pairs (36 of stage 1's 37 blocks).
    * Rebalance 2: their triples wait for stage 2 (saturated): its feeder - the middle
      stage - gives what it does not hold, 37 - 3 = 34, to the last stage.
    """
    workload = filter_join_join(6, 3)
    core = make_core(workload, "adaptive")
    run_steps(core, workload, 6)
    report = core.report
    assert report.min_budgets_blocks == [6, 3, 3]
    assert report.initial_budgets_blocks == [6, 3, 55]
    assert moves(report)[:4] == [
        (0, 2, 0, 52, "starving"),
        (1, 0, 2, 34, "saturated"),
        (1, 2, 1, 34, "starving"),
        (2, 1, 2, 34, "saturated"),
    ]
    # later: each time all triples of a note are done, its 4 prefix blocks are freed and
    # stage 0, feeding the saturated pair queue, gives them to the last stage (Rebalances
    # 4, 5, 8, 9, and 2 blocks at 10); twice the triple queue runs low while pairs wait,
    # and the starving last stage lends its free budget to stage 1 and takes it back at
    # the next Rebalance
    assert moves(report)[4:] == [
        (4, 0, 2, 4, "saturated"),
        (5, 0, 2, 4, "saturated"),
        (6, 2, 1, 42, "starving"),
        (7, 1, 2, 42, "saturated"),
        (8, 0, 2, 4, "saturated"),
        (9, 0, 2, 4, "saturated"),
        (10, 0, 2, 2, "saturated"),
        (10, 2, 1, 52, "starving"),
        (11, 1, 2, 52, "saturated"),
    ]
    # saturated queues always feed the last stage; starving stages always give upstream
    for move in report.moves:
        if move.reason == "saturated":
            assert move.target == 2 and move.source < 2
        else:
            assert move.reason == "starving" and move.target < move.source
    assert report.final_budgets_blocks == [6, 3, 55]
    assert len([a for a in report.admitted if a[0] == 2]) == 108
    assert_budgets_conserved(core, 64)


def test_parallel_bfs_with_three_stages_never_moves_budget() -> None:
    workload = filter_join_join(6, 3)
    core = make_core(workload, "parallel-bfs")
    log = run_steps(core, workload, 6)
    assert core.report.moves == []
    assert core.report.initial_budgets_blocks == core.report.final_budgets_blocks == [58, 3, 3]
    assert log.max_running == {0: 6, 1: 1, 2: 1}


def test_thresholds_are_configurable() -> None:
    """The Figure 6 workload with alpha so high that no queue is ever saturated and beta
    tiny (an empty queue still starves: 0 < beta * budget/minimum):

    * Rebalance 0, at the start: stage 1's queue is empty (starving): it gives 58 - 3 = 55
      upstream, as with the defaults.
    * Later, 36 pairs wait for stage 1 - with the default alpha that queue is saturated
      and its feeder gives budget back to the last stage (37, then 8 blocks); with this
      alpha nothing else ever moves, and the join runs one pair at a time."""
    workload = filter_join(6)
    core = make_core(workload, "adaptive", alpha=1000.0, beta=0.001)
    log = run_steps(core, workload, 6)
    assert core.report.moves == [BudgetMove(0, 1, 0, 55, "starving")]
    assert core.report.final_budgets_blocks == [61, 3]
    assert log.max_running == {0: 6, 1: 1}


# --------------------------------------------------------------------------- liveness


def long_after_the_sample(short_notes: int) -> Workload:
    """30 notes: the predicate reads a title (5 blocks, a 2-block prefix); the join reads
    the text, which is short (4 blocks) for the first ``short_notes`` notes and long (22
    blocks) after them. A join task shares only the system's 2 blocks with its note."""
    title = StageSize(prompt_tokens=72, bound_tokens=8, prefix_tokens=32)
    short = StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=32, shared_tokens=32)
    long = StageSize(prompt_tokens=376, bound_tokens=8, prefix_tokens=32, shared_tokens=32)

    def size_of(stage: int, key: tuple[int, ...]) -> StageSize:
        if stage == 0:
            return title
        return short if key[0] < short_notes else long

    return Workload([title, short], fanouts=[2], size_of=size_of)


@pytest.mark.parametrize(
    "policy", ["sequential", "parallel-dfs", "parallel-bfs", "static:0.5", "adaptive"]
)
def test_prefixes_held_upstream_do_not_deadlock_join_tasks_larger_than_sampled(
    policy: str,
) -> None:
    """Under parallel-bfs (budgets [60, 4]) stage 0 runs 12 notes at a time and completes
    all 30; each keeps a 2-block prefix for its two join tasks. The join tasks of notes
    0..3 (4 blocks) run one at a time in stage 1's budget; then notes 4..29 hold 52
    blocks. The next join task, (4, 0), needs 22; the ledger has 12 free and nothing
    runs: only running it can free anything, so it is admitted beyond the ledger (74 of
    64) - the core raises SchedulerStuck rather than wait for ever if it ever cannot. So
    are the next nine, until the notes still waiting hold 42 blocks or less."""
    workload = long_after_the_sample(short_notes=4)
    core = make_core(workload, policy)
    run_steps(core, workload, 30)
    report = core.report
    assert report.min_budgets_blocks == [5, 4]
    assert len([a for a in report.admitted if a[0] == 1]) == 60
    # the first join task larger than sampled raised its stage's minimum
    assert core.memory is not None and core.memory.budgets.min_budget_blocks == [5, 22]
    over = [launch for launch in report.launches if launch.over_commit]
    if policy == "parallel-bfs":  # two join tasks per waiting note: 26, 25, ... 22 notes
        held = [2 * waiting for waiting in (26, 25, 24, 23, 22) for _ in range(2)]
        assert [launch.ledger_blocks for launch in over] == [h + 22 for h in held]


def test_a_sample_of_four_notes_sizes_the_long_join_tasks_within_the_ledger() -> None:
    """With notes 2..29 long, the join tasks sampled (those of notes 0..3) include long
    ones: stage 1's minimum is 22 and parallel-bfs keeps it (budgets [42, 22]), so stage 0
    never holds more prefixes than leave room for one long join task."""
    workload = long_after_the_sample(short_notes=2)
    core = make_core(workload, "parallel-bfs")
    run_steps(core, workload, 30)
    assert core.report.min_budgets_blocks == [5, 22]
    assert core.report.initial_budgets_blocks == [42, 22]
    assert core.report.peak_reserved_blocks <= 64
    assert not any(launch.over_commit for launch in core.report.launches)


def test_an_idle_stage_does_not_take_a_deeper_stages_room_for_its_prefixes() -> None:
    """Two notes, fan-out 2 then 1, every tuple kept, 16 blocks. Minimums [6, 3, 4] (note
    0's triples need 4 blocks), budgets [6, 3, 7]. A pair's prefix is all in its note's:
    completed pairs hold nothing.

    * Rebalance 0, at the start: stages 2 and 1 starve, stage 0 does not: stage 2 gives
      7 - 4 = 3 to stage 0 (budget 9).
    * Launch 0: stage 0 runs (0,) (6 blocks; (1,) needs 6 more and waits); it completes
      holding 3 prefix blocks. Rebalance 1: 2 pairs wait (saturated, > 3/3): stage 0
      gives the 3 blocks above its minimum to stage 2, which starves and passes them to
      stage 1 (2 pairs waiting: not starving).
    * Launch 1: stage 1 runs (0, 0) and (0, 1) (its 6 blocks). Stage 0 runs nothing but
      holds (0,)'s prefix, so it is not idle: (1,) (6 blocks, 3 free) waits.
    * Rebalance 2: 2 triples wait (saturated, > 4/4): stage 1 gives its 3 back to stage 2.
      The triples of note 0 run one at a time (4 + 4 > 7) and release (0,)'s prefix.
    * Rebalance 4: only (1,) waits; stages 2 and 1 starve, stage 0 does not: stage 2 gives
      7 - 4 = 3 to stage 0, which runs (1,). Rebalance 5: its 2 pairs saturate stage 1's
      queue: stage 0 gives 3 to stage 2, which starves and passes 3 to stage 1; it runs
      both pairs (ledger 4 + 3 + 3 = 10, the peak). Rebalance 6: their triples saturate
      stage 2's queue: stage 1 gives 3 to it, and the two triples run together.
    """
    note_0 = StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=48)
    note_1 = StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=64)
    pair_0 = StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=48, shared_tokens=48)
    pair_1 = StageSize(prompt_tokens=104, bound_tokens=8, prefix_tokens=64, shared_tokens=64)
    triple_0 = StageSize(prompt_tokens=104, bound_tokens=8, prefix_tokens=48, shared_tokens=48)
    triple_1 = StageSize(prompt_tokens=104, bound_tokens=8, prefix_tokens=64, shared_tokens=64)
    sizes = {0: (note_0, note_1), 1: (pair_0, pair_1), 2: (triple_0, triple_1)}
    workload = Workload(
        [note_0, pair_0, triple_0],
        fanouts=[2, 1],
        size_of=lambda stage, key: sizes[stage][key[0]],
    )
    core = make_core(workload, "adaptive", capacity_blocks=16)
    run_steps(core, workload, 2)
    report = core.report
    assert report.min_budgets_blocks == [6, 3, 4]
    assert report.initial_budgets_blocks == report.final_budgets_blocks == [6, 3, 7]
    assert moves(report) == [
        (0, 2, 0, 3, "starving"),
        (1, 0, 2, 3, "saturated"),
        (1, 2, 1, 3, "starving"),
        (2, 1, 2, 3, "saturated"),
        (4, 2, 0, 3, "starving"),
        (5, 0, 2, 3, "saturated"),
        (5, 2, 1, 3, "starving"),
        (6, 1, 2, 3, "saturated"),
    ]
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
    assert not any(launch.over_commit for launch in report.launches)
    assert report.peak_reserved_blocks == 10
