"""KVLedger, StageBudgets and MemoryManager: reservation arithmetic by owner, dependency
tracking, budget transfers and the admission rules (paper section 5, Algorithm 1's
memory manager).

Everything here is in KV blocks and exact.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kalypso.core.ledger import KVLedger, LedgerError
from kalypso.core.memory import MemoryManager, StageBudgets, TaskMemory


def manager(capacity: int, budgets: list[int], minimums: list[int] | None = None) -> MemoryManager:
    minimums = minimums if minimums is not None else [1] * len(budgets)
    return MemoryManager(KVLedger(capacity), StageBudgets(list(budgets), list(minimums)), "q")


def task(stage: int, total: int, prefix: int = 0, parent: TaskMemory | None = None) -> TaskMemory:
    """A task whose prompt extends its parent's: it shares the parent's whole prefix."""
    return TaskMemory(stage, total, prefix, parent, parent.prefix_blocks if parent else 0)


def state(mm: MemoryManager) -> tuple[int, list[int]]:
    """(ledger reserved, per-stage used) - what every step below asserts."""
    return mm.ledger.reserved_blocks, list(mm.budgets.used_blocks)


# --------------------------------------------------------------------------- KVLedger


def test_ledger_reserves_releases_and_keeps_its_peak() -> None:
    ledger = KVLedger(10)
    ledger.reserve("a", 3)
    ledger.reserve("b", 4)
    assert (ledger.reserved_blocks, ledger.peak_reserved_blocks) == (7, 7)
    assert (ledger.held_by("a"), ledger.held_by("b")) == (3, 4)
    ledger.release("b", 3)
    assert (ledger.reserved_blocks, ledger.peak_reserved_blocks) == (4, 7)
    assert ledger.free_blocks == 6
    assert ledger.fits(6)  # 4 + 6 == 10
    assert not ledger.fits(7)


def test_ledger_refuses_to_release_more_than_an_owner_holds() -> None:
    ledger = KVLedger(10)
    ledger.reserve("a", 2)
    ledger.reserve("b", 5)
    with pytest.raises(LedgerError, match="'a' releasing 3 blocks, holds 2"):
        ledger.release("a", 3)
    with pytest.raises(LedgerError, match="reserving -1 blocks"):
        ledger.reserve("a", -1)
    assert ledger.reserved_blocks == 7


def test_ledger_needs_a_block() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        KVLedger(0)


def test_release_owner_gives_back_everything_it_holds_and_its_running_tasks() -> None:
    ledger = KVLedger(10)
    ledger.register("a")
    ledger.reserve("a", 3)
    ledger.reserve("a", 2)
    ledger.task_started("a")
    ledger.reserve("b", 4)
    ledger.task_started("b")
    assert ledger.running_tasks == 2
    assert ledger.release_owner("a") == 5
    assert (ledger.reserved_blocks, ledger.held_by("a"), ledger.running_tasks) == (4, 0, 1)
    assert ledger.release_owner("a") == 0  # idempotent
    ledger.unregister("a")
    assert ledger.owners == frozenset()


def test_one_owner_registers_once() -> None:
    """Two queries with one id would release each other's blocks."""
    ledger = KVLedger(10)
    ledger.register("q")
    with pytest.raises(ValueError, match="'q' is already running"):
        ledger.register("q")
    ledger.unregister("q")
    ledger.register("q")  # free again once the first run is over


def test_stopping_a_task_never_started_is_a_bug() -> None:
    with pytest.raises(LedgerError, match="never started"):
        KVLedger(4).task_stopped("a")


async def test_a_release_wakes_the_runs_waiting_for_room() -> None:
    ledger = KVLedger(4)
    ledger.reserve("a", 4)
    waiter = asyncio.ensure_future(ledger.wait_for_release(timeout_s=5))
    await asyncio.sleep(0)
    assert not waiter.done()
    ledger.release("a", 1)
    await asyncio.wait_for(waiter, timeout=1)
    # with nothing released, the wait ends at its timeout
    await ledger.wait_for_release(timeout_s=0.01)


# --------------------------------------------------------------------------- StageBudgets


def test_stage_budgets_need_one_minimum_per_stage() -> None:
    with pytest.raises(ValueError, match="one budget and one minimum per stage"):
        StageBudgets([10, 20], [1])


def test_stage_budgets_start_unused() -> None:
    budgets = StageBudgets([10, 20], [4, 6])
    assert budgets.num_stages == 2
    assert budgets.used_blocks == [0, 0]
    assert [budgets.free_blocks(s) for s in range(2)] == [10, 20]


def test_transfer_moves_only_free_budget_above_the_minimum() -> None:
    budgets = StageBudgets([10, 20], [4, 6], used_blocks=[7, 3])
    # stage 0 keeps max(minimum 4, used 7) = 7 and gives 3
    assert budgets.transferable_blocks(0) == 3
    assert budgets.transfer(0, 1) == 3
    assert budgets.budget_blocks == [7, 23]
    # stage 1 keeps max(minimum 6, used 3) = 6 and gives 17
    assert budgets.transfer(1, 0) == 17
    assert budgets.budget_blocks == [24, 6]
    assert budgets.transfer(1, 0) == 0  # at its minimum: nothing more to give
    assert budgets.transfer(0, 0) == 0
    assert budgets.budget_blocks == [24, 6]


def test_transfer_never_takes_budget_a_stage_is_using() -> None:
    # an idle stage may admit a task larger than its budget (used > budget)
    budgets = StageBudgets([4, 20], [2, 6], used_blocks=[6, 0])
    assert budgets.transferable_blocks(0) == 0
    assert budgets.transfer(0, 1) == 0
    assert budgets.budget_blocks == [4, 20]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 10), st.integers(0, 30)),
        min_size=2,
        max_size=4,
    ),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=12),
)
def test_transfers_keep_every_stage_at_its_minimum_and_what_it_uses(
    stages: list[tuple[int, int, int]], moves: list[tuple[int, int]]
) -> None:
    """Whatever the order of transfers: the total budget is conserved, and a stage that
    had at least max(minimum, used) keeps at least that; one that had less keeps all."""
    budgets = StageBudgets(
        [b for b, _, _ in stages], [m for _, m, _ in stages], [u for _, _, u in stages]
    )
    total = sum(budgets.budget_blocks)
    for source, target in moves:
        source, target = source % len(stages), target % len(stages)
        before = budgets.budget_blocks[source]
        keep = max(budgets.min_budget_blocks[source], budgets.used_blocks[source])
        moved = budgets.transfer(source, target)
        assert moved >= 0
        assert sum(budgets.budget_blocks) == total
        if source != target:
            assert budgets.budget_blocks[source] == min(before, keep)


# --------------------------------------------------------------------------- reservations


def test_allocate_charges_the_stage_and_the_ledger() -> None:
    mm = manager(20, [10, 10])
    first, second = task(0, 4, 2), task(1, 3)
    mm.allocate(first)
    mm.allocate(second)
    assert state(mm) == (7, [4, 3])
    assert (first.held_blocks, second.held_blocks) == (4, 3)
    assert [mm.budgets.free_blocks(s) for s in range(2)] == [6, 7]


def test_last_stage_task_releases_everything_when_it_completes() -> None:
    mm = manager(20, [10, 10])
    last = task(1, 5, 3)
    mm.allocate(last)
    assert mm.complete(last, children=0) == [last]
    assert state(mm) == (0, [0, 0])
    assert last.held_blocks == 0


def test_parent_prefix_stays_reserved_until_its_last_child_is_done() -> None:
    mm = manager(40, [20, 20])
    parent = task(0, 10, 4)
    mm.allocate(parent)
    assert mm.complete(parent, children=2) == []
    assert state(mm) == (4, [4, 0])  # working memory released, prefix kept
    first, second = task(1, 3, 0, parent), task(1, 5, 0, parent)
    mm.allocate(first)
    mm.allocate(second)
    assert state(mm) == (12, [4, 8])
    assert mm.complete(second, children=0) == [second]
    assert state(mm) == (7, [4, 3])  # one child left: the prefix stays
    assert mm.complete(first, children=0) == [first, parent]
    assert state(mm) == (0, [0, 0])


def test_three_level_tree_releases_ancestors_when_all_their_children_are_done() -> None:
    """root -> (c1, c2); c1 -> (g1, g2); c2 is filtered. The root is done only after
    c1, which is done only after g1 and g2; the last grandchild releases all three.

    A task's ``prefix_blocks`` count its ancestors' (its context extends its parent's):
    c1's prefix of 7 blocks is the root's 4, which the root holds, and 3 of its own -
    what c1 keeps for its children (not min(7, 5) = 5: that held the root's 4 twice)."""
    mm = manager(100, [40, 30, 30])
    root = task(0, 10, 4)
    mm.allocate(root)
    assert mm.complete(root, children=2) == []
    assert state(mm) == (4, [4, 0, 0])

    c1, c2 = task(1, 5, 7, root), task(1, 6, 7, root)
    mm.allocate(c1)
    mm.allocate(c2)
    assert state(mm) == (15, [4, 11, 0])
    assert mm.complete(c1, children=2) == []
    assert state(mm) == (13, [4, 9, 0])  # c1 keeps its own 3 prefix blocks
    assert c1.held_blocks == 3
    assert mm.complete(c2, children=0) == [c2]  # filtered: all of it, root still waits
    assert state(mm) == (7, [4, 3, 0])
    assert root.pending_children == 1

    g1, g2 = task(2, 2, 8, c1), task(2, 2, 8, c1)
    mm.allocate(g1)
    mm.allocate(g2)
    assert state(mm) == (11, [4, 3, 4])
    assert mm.complete(g1, children=0) == [g1]
    assert state(mm) == (9, [4, 3, 2])
    assert mm.complete(g2, children=0) == [g2, c1, root]
    assert state(mm) == (0, [0, 0, 0])
    assert [t.held_blocks for t in (root, c1, c2, g1, g2)] == [0] * 5


def test_a_child_whose_prefix_is_all_its_parents_holds_nothing_for_its_children() -> None:
    """A pair whose context adds no full block to its note's (a short right-side value):
    its children reuse only blocks the note holds, so it keeps none itself."""
    mm = manager(40, [20, 20, 20])
    note = task(0, 6, 4)
    mm.allocate(note)
    mm.complete(note, children=1)
    pair = task(1, 3, 4, note)
    mm.allocate(pair)
    assert mm.complete(pair, children=3) == []
    assert pair.held_blocks == 0
    assert state(mm) == (4, [4, 0, 0])


@pytest.mark.parametrize("hashes", [(1, 2, 3), ()])
def test_a_task_held_by_a_soft_pin_reserves_nothing_but_waits_for_its_children(
    hashes: tuple[int, ...],
) -> None:
    """A workflow call's conversation is held by a soft pin in the engine: the ledger
    frees all of it at completion, and the call is done only with its continuation."""
    mm = manager(40, [40, 40])
    first = TaskMemory(0, 6, 3, hashes=hashes)
    mm.allocate(first)
    assert state(mm) == (6, [6, 0])
    assert mm.complete(first, children=1, reserve_prefix=False) == []
    assert (first.held_blocks, first.held_hashes) == (0, ())
    assert state(mm) == (0, [0, 0])
    second = TaskMemory(1, 8, 0, first, hashes=(*hashes, 4) if hashes else ())
    assert mm.charge(second) == 8
    mm.allocate(second)
    assert mm.complete(second, children=0) == [second, first]
    assert state(mm) == (0, [0, 0])


def test_filtered_task_releases_everything_at_once() -> None:
    mm = manager(20, [10, 10])
    filtered = task(0, 6, 4)
    mm.allocate(filtered)
    assert mm.complete(filtered, children=0) == [filtered]
    assert state(mm) == (0, [0, 0])


def test_completing_with_children_never_holds_more_than_was_reserved() -> None:
    mm = manager(20, [10, 10])
    parent = task(0, 5, 7)  # a prefix larger than the reservation (it shares blocks)
    mm.allocate(parent)
    assert mm.complete(parent, children=1) == []
    assert state(mm) == (5, [5, 0])


def test_requeue_releases_and_re_reserves_with_the_new_size() -> None:
    mm = manager(20, [10, 10])
    continued = task(0, 4, 2)
    mm.allocate(continued)
    assert state(mm) == (4, [4, 0])
    mm.requeue(continued, 9)  # a continuation with a doubled output bound
    assert state(mm) == (0, [0, 0])
    assert (continued.total_blocks, continued.held_blocks) == (9, 0)
    mm.allocate(continued)
    assert state(mm) == (9, [9, 0])
    assert mm.complete(continued, children=0) == [continued]
    assert state(mm) == (0, [0, 0])


def test_release_all_gives_back_every_block_of_a_failed_run() -> None:
    """A run that fails mid-way holds a parent's prefix and running children: all of it
    goes back, the running tasks are no longer counted, and another owner is untouched."""
    mm = manager(40, [20, 20])
    mm.ledger.reserve("other", 5)
    parent = task(0, 10, 4)
    mm.allocate(parent)
    mm.complete(parent, children=2)
    child = task(1, 3, 0, parent)
    mm.allocate(child)
    assert state(mm) == (12, [4, 3])
    assert mm.ledger.running_tasks == 1
    assert mm.release_all() == 7
    assert state(mm) == (5, [0, 0])
    assert mm.ledger.running_tasks == 0
    assert (mm.ledger.held_by("q"), mm.ledger.held_by("other")) == (0, 5)


# --------------------------------------------------------------------------- admission


def test_task_fitting_its_stage_budget_and_the_ledger_is_admitted() -> None:
    mm = manager(20, [6, 14])
    mm.allocate(task(0, 2))
    assert mm.admits(task(0, 4), stage_idle=False, query_idle=False)  # 2 + 4 == 6
    assert not mm.admits(task(0, 5), stage_idle=False, query_idle=False)


def test_task_beyond_its_stage_budget_waits_while_the_stage_runs() -> None:
    mm = manager(20, [4, 16])
    assert not mm.admits(task(0, 6), stage_idle=False, query_idle=False)


def test_stage_budget_is_not_enough_without_room_in_the_ledger() -> None:
    """Another query holds most of the engine: a stage's own budget does not over-commit."""
    mm = manager(10, [6, 4])
    mm.ledger.reserve("other", 7)
    assert not mm.admits(task(0, 4), stage_idle=False, query_idle=False)
    assert not mm.admits(task(0, 4), stage_idle=True, query_idle=False)
    assert mm.admits(task(0, 3), stage_idle=False, query_idle=False)


def test_oversized_task_does_not_deadlock_an_idle_stage() -> None:
    """A task larger than its stage's budget (minimums are estimated on a sample) would
    wait forever for budget its own stage will never free: an idle stage admits it when
    the ledger has room."""
    mm = manager(20, [4, 16], [4, 4])
    big = task(0, 6)
    assert not mm.admits(big, stage_idle=False, query_idle=False)
    assert mm.admits(big, stage_idle=True, query_idle=False)
    mm.allocate(big)
    assert state(mm) == (6, [6, 0])  # over its stage budget, within the ledger
    assert mm.budgets.free_blocks(0) == -2


def test_oversized_task_in_an_idle_stage_still_waits_for_the_ledger() -> None:
    mm = manager(20, [4, 16], [4, 4])
    mm.ledger.reserve("other", 16)
    assert not mm.admits(task(0, 6), stage_idle=True, query_idle=False)


def test_task_larger_than_the_cache_does_not_deadlock_an_idle_engine() -> None:
    """A task needing more blocks than the engine has can never fit the ledger; when no
    task of any query runs it is admitted anyway (the engine runs it, evicting). This
    last resort is the only way the ledger goes above its capacity."""
    mm = manager(8, [4, 4])
    huge = task(1, 12)
    assert not mm.admits(huge, stage_idle=True, query_idle=False)
    assert mm.admits(huge, stage_idle=True, query_idle=True)
    mm.allocate(huge)
    assert mm.ledger.peak_reserved_blocks == 12
    assert mm.complete(huge, children=0) == [huge]
    assert state(mm) == (0, [0, 0])


def test_task_larger_than_the_cache_waits_while_another_query_runs() -> None:
    ledger = KVLedger(8)
    mm = MemoryManager(ledger, StageBudgets([4, 4], [1, 1]), "q")
    other = MemoryManager(ledger, StageBudgets([8], [1]), "other")  # same engine
    running = task(0, 1)
    other.allocate(running)
    huge = task(1, 12)
    assert not mm.admits(huge, stage_idle=True, query_idle=True)
    assert other.complete(running, children=0) == [running]
    assert mm.admits(huge, stage_idle=True, query_idle=True)


def test_prefixes_held_by_an_idle_query_do_not_deadlock_its_next_task() -> None:
    """The state a real run reaches (see test_algorithm1's liveness tests): the first
    stage completed tasks whose children all wait; their prefixes fill the ledger but
    one block short of the first child, which is larger than the sampled minimum.
    Nothing runs, nothing can be released but by running the child: it is admitted
    (beyond the ledger: the last resort)."""
    mm = manager(10, [6, 4], [2, 4])
    parents = [task(0, 3, 2) for _ in range(4)]
    for parent in parents:
        mm.allocate(parent)
        mm.complete(parent, children=1)
    assert state(mm) == (8, [8, 0])
    child = task(1, 5, 0, parents[0])  # more than the stage-1 minimum of 4
    assert not mm.admits(child, stage_idle=True, query_idle=False)
    assert mm.admits(child, stage_idle=True, query_idle=True)


# --------------------------------------------------------------------------- random trees

Spec = tuple[int, int, list["Spec"]]
"""A task of a random tree: (total blocks, prefix blocks, children); no children means
filtered (or last stage)."""


@dataclass(eq=False)
class Node:
    memory: TaskMemory
    children: list[Node] = field(default_factory=list)


def build(spec: Spec, stage: int, parent: TaskMemory | None, nodes: list[Node]) -> Node:
    total, prefix, children = spec
    node = Node(TaskMemory(stage, total, prefix, parent, parent.prefix_blocks if parent else 0))
    nodes.append(node)
    node.children = [build(child, stage + 1, node.memory, nodes) for child in children]
    return node


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[int], list[Spec]]:
    """Per-stage largest task sizes and the roots' specs: each stage's tasks are at most
    its size, each task of a non-last stage has 0 (filtered) to 3 children."""
    num_stages = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 6)) for _ in range(num_stages)]

    def spec(stage: int) -> Spec:
        total = draw(st.integers(1, sizes[stage]))
        prefix = draw(st.integers(0, total))
        fanout = draw(st.integers(0, 3)) if stage + 1 < num_stages else 0
        return total, prefix, [spec(stage + 1) for _ in range(fanout)]

    return sizes, [spec(0) for _ in range(draw(st.integers(1, 5)))]


@dataclass
class Outcome:
    finished: bool
    """False: nothing runs and nothing is admitted (stuck for ever)."""
    manager: MemoryManager
    nodes: list[Node]
    done: list[TaskMemory]
    over_commits: list[bool]
    """Per admission that took the ledger above capacity: whether the query was idle."""


def drive(
    sizes: list[int], roots: list[Spec], spare: int, picks: list[int], moves: list[int]
) -> Outcome:
    """Algorithm 1's Launch/Complete loop on the memory manager alone, as the scheduler
    core drives it: deepest stage first; a stage is idle when none of its tasks runs and
    it holds nothing (no prefix kept for children); the query is idle when none runs.
    Budgets start as the adaptive policy's (minimum = the stage's largest task, the last
    gets the rest); after each
    completion (the running task ``picks[i] % len(running)``) budget moves from stage
    ``moves[i] // 4`` to ``moves[i] % 4`` (mod the stage count). Checks the accounting
    invariants at every step and records admissions beyond the ledger's capacity; stops
    when nothing runs and nothing is admitted."""
    capacity = sum(sizes) + spare
    mm = manager(capacity, [*sizes[:-1], capacity - sum(sizes[:-1])], list(sizes))
    nodes: list[Node] = []
    waiting: list[deque[Node]] = [deque() for _ in sizes]
    waiting[0].extend(build(spec, 0, None, nodes) for spec in roots)
    running: list[Node] = []
    done: list[TaskMemory] = []
    over_commits: list[bool] = []
    step = 0
    while running or any(waiting):
        for stage in reversed(range(len(sizes))):
            while waiting[stage]:
                head = waiting[stage][0]
                idle = (
                    not any(r.memory.stage == stage for r in running)
                    and mm.budgets.used_blocks[stage] == 0
                )
                if not mm.admits(head.memory, stage_idle=idle, query_idle=not running):
                    break
                waiting[stage].popleft()
                mm.allocate(head.memory)
                if mm.ledger.reserved_blocks > capacity:
                    over_commits.append(not running)
                running.append(head)
        if not running:
            return Outcome(False, mm, nodes, done, over_commits)
        finished = running.pop(picks[step % len(picks)] % len(running) if picks else 0)
        done.extend(mm.complete(finished.memory, children=len(finished.children)))
        if finished.children:
            waiting[finished.memory.stage + 1].extend(finished.children)
        if moves:
            move = moves[step % len(moves)]
            mm.budgets.transfer((move // 4) % len(sizes), (move % 4) % len(sizes))
        step += 1
        held = sum(n.memory.held_blocks for n in nodes)
        assert mm.ledger.reserved_blocks == sum(mm.budgets.used_blocks) == held
        assert all(b >= m for b, m in zip(mm.budgets.budget_blocks, sizes, strict=True))
    return Outcome(True, mm, nodes, done, over_commits)


RUNS = (
    forests(),
    st.integers(0, 12),
    st.lists(st.integers(0, 15), max_size=20),
    st.lists(st.integers(0, 15), max_size=20),
)


@settings(max_examples=40, deadline=None)
@given(*RUNS)
def test_random_task_trees_release_exactly_what_they_held(
    forest: tuple[list[int], list[Spec]], spare: int, picks: list[int], moves: list[int]
) -> None:
    """Random trees, completion orders and budget moves: the ledger always equals what
    the tasks hold (checked in ``drive``) and goes above capacity only through the
    last-resort rule (an idle query); a run that finishes has released everything, and
    every task is done exactly once, after all of its children."""
    sizes, roots = forest
    outcome = drive(sizes, roots, spare, picks, moves)
    assert all(outcome.over_commits), "beyond the ledger while the query was running tasks"
    if not outcome.finished:
        return  # stuck: see the liveness test below
    assert state(outcome.manager) == (0, [0] * len(sizes))
    assert sorted(map(id, outcome.done)) == sorted(id(n.memory) for n in outcome.nodes)
    position = {id(m): i for i, m in enumerate(outcome.done)}
    for node in outcome.nodes:
        for child in node.children:
            assert position[id(child.memory)] < position[id(node.memory)]


STUCK_ROOTS: list[Spec] = [(1, 1, [(1, 1, [(1, 0, [])])]), (1, 1, [(1, 0, [])])]
"""Three stages of one block each on a ledger of three blocks. r0 completes (holds its
prefix), its child c runs; stage 0 runs nothing - when a stage holding a prefix counted
as idle, the idle-stage rule admitted r1 beyond stage 0's budget of 1 into the room of
stage 2. c completes (holds its prefix): the
ledger is full (r0, c, r1) and c's child g waits. r1 completes and holds its prefix for
its own waiting child: nothing runs, three blocks held by this query, and g needs a
fourth - admitted only beyond the ledger, or never."""


@settings(max_examples=40, deadline=None)
@example(forest=([1, 1, 1], STUCK_ROOTS), spare=0, picks=[], moves=[])
@given(*RUNS)
def test_random_task_trees_need_no_over_commit_when_minimums_cover_every_task(
    forest: tuple[list[int], list[Spec]], spare: int, picks: list[int], moves: list[int]
) -> None:
    """When each stage's minimum budget covers its largest task (the estimator's
    contract) and the minimums fit in the ledger, the deepest waiting task always fits
    once nothing runs: the loop must finish without ever going above the ledger."""
    sizes, roots = forest
    outcome = drive(sizes, roots, spare, picks, moves)
    assert outcome.finished
    assert outcome.over_commits == []
