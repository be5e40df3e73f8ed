"""The scheduler core: synchronous admission decisions for one pipeline of tasks.

In the style of vLLM's ``schedule()`` / ``update_from_output()``, it never awaits and
never calls an engine; a runner (:mod:`kalypso.core.runner`) drives it::

    core = SchedulerCore(...);  core.start(programs)
    while core.has_work:
        out = core.schedule()                  # Launch: which waiting tasks start now
        ... run out.admitted, send out.unpin ...
        core.update_from_output(outcomes)      # Complete + Rebalance

One iteration is Algorithm 1 of the Kalypso paper, with the policy deciding the split,
the admission order and the rebalancing (:mod:`kalypso.core.policies`):

1. **Launch** - stage by stage (deepest first by default), admit waiting tasks in order
   while the memory manager admits them (stage budget and engine-wide ledger);
2. **Complete** - a task whose call reached its output bound goes back to the front of
   its queue with a larger bound (it will *continue* that call); a finished task releases
   its memory, keeping its prefix while its children (the next stage's tasks) run;
3. **Rebalance** - the policy moves free budget between stages.

A policy that is not memory-aware (operator-at-a-time) admits every task of a stage once
the stages before it have finished. Outputs are ordered by instance key, so every policy
returns the same table.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Sequence, Set
from dataclasses import dataclass, field

from kalypso.core.bounds import BoundPolicy, next_bound
from kalypso.core.instance import Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.memory import MemoryManager, StageBudgets, TaskMemory
from kalypso.core.policies.base import Policy, RebalanceView, RunInfo, TaskInfo
from kalypso.core.program import TaskProgram
from kalypso.core.report import BudgetMove, Launch, PipelineReport, StageView
from kalypso.core.sizing import min_budgets, size_task

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Task:
    """One stage on one instance: the unit of admission."""

    task_id: int
    stage: int
    program: TaskProgram
    memory: TaskMemory
    bounds: dict[str, int] = field(default_factory=dict)
    """Output bound per operator the reservation assumed; the task's calls use these."""
    continued: dict[str, int] = field(default_factory=dict)
    admitted: bool = False
    """Once admitted, the task keeps the reservation and bounds it was admitted with."""
    pin_key: str | None = None
    pin_blocks: int | None = None
    """With ``pin_key``: pin only this many leading full blocks (None: all)."""
    pin_soft: bool = False
    """With ``pin_key``: the pin is soft (the engine gives it up under memory pressure)."""
    priority: int = 0

    @property
    def key(self) -> tuple[int, ...]:
        return self.program.key


@dataclass(frozen=True)
class Grow:
    """A call of the task stopped at its output bound: continue it with a larger one."""

    op_id: str
    bound_tokens: int
    cap_tokens: int


@dataclass(frozen=True)
class TaskOutcome:
    """What running a task ended with: ``grow`` set, or the stage finished."""

    task: Task
    grow: Grow | None = None


@dataclass(frozen=True)
class SchedulerOutput:
    """One Launch: the tasks to start now, and pin keys to release in the engine."""

    admitted: list[Task]
    unpin: list[str]


@dataclass(frozen=True)
class CoreSettings:
    """Algorithm 1's thresholds and the run's limits.

    Attributes:
        alpha, beta: saturated above ``alpha * budget/minBudget`` waiting tasks, starving
            below ``beta * budget/minBudget``.
        max_running_tasks: a cap on tasks running at once (with the policy's own cap).
        explicit_pinning: pin each parent task's blocks in the engine until its last
            child is done.
        max_continuations: see :class:`~kalypso.core.options.RunOptions`.
        share_blocks: see the attribute.
    """

    alpha: float = 1.0
    beta: float = 0.5
    max_running_tasks: int | None = None
    explicit_pinning: bool = False
    max_continuations: int = 2
    cap_when_it_fits: bool = True
    """Reserve every call's cap when the stage's free budget holds it (no continuation
    then), the estimator's bound only under memory pressure."""
    share_blocks: bool = True
    """Charge the blocks of prompts that running tasks share once (their chained keys, as
    the engine's prefix cache shares them); off: every task is charged all its blocks
    (beyond its parent's prefix)."""


class SchedulerStuck(RuntimeError):
    """Tasks wait, nothing of any owner runs, and none may be admitted: a bug the core
    refuses to hide by polling for ever."""


class SchedulerCore:
    """Admission, completion and rebalancing for one pipeline (see the module docstring).

    Args:
        num_stages: stages of the pipeline.
        ledger: the engine's shared ledger; ``owner`` is this run's id in it.
        policy: the scheduling policy.
        bounds: how first output bounds are chosen.
        block_size_tokens: the engine's KV block size.
    """

    def __init__(
        self,
        num_stages: int,
        ledger: KVLedger,
        owner: str,
        policy: Policy,
        bounds: BoundPolicy,
        block_size_tokens: int,
        settings: CoreSettings | None = None,
    ) -> None:
        self.num_stages = num_stages
        self.ledger = ledger
        self.owner = owner
        self.policy = policy
        self.bounds = bounds
        self.block_size_tokens = block_size_tokens
        self.settings = settings or CoreSettings()
        self.waiting: list[deque[Task]] = [deque() for _ in range(num_stages)]
        self.running: dict[int, Task] = {}
        self.running_per_stage = [0] * num_stages
        self.done_per_stage = [0] * num_stages
        self.outputs: list[Instance] = []
        self.completed_keys: dict[str, set[tuple[int, ...]]] = {}
        """Per operator, the instances whose task of it completed (ranked policies)."""
        self.report = PipelineReport(policy=policy.name)
        self.pinning = self.settings.explicit_pinning
        self.memory: MemoryManager | None = None
        self._ids = itertools.count()
        self._iteration = 0
        self._owners: dict[int, Task] = {}
        """Tasks not yet done, by the id of their memory."""
        self._by_program: dict[int, Task] = {}
        """The same, by the id of their program (children name their prefix parent's)."""
        self._to_unpin: list[str] = []
        self._pins_in_flight: dict[int, str] = {}
        """After a deadlock stopped pinning: the pin keys of calls that were already in the
        engine (by task id). The engine pins their blocks when they finish, so each key is
        released again when its task comes back."""
        self._touched_roots: set[int] = set()
        """Root keys (an instance key's first part: a row, a query) of the instances with
        a task admitted: they can no longer be withdrawn."""
        self._row_ordered: set[int] = set()
        """Stages whose queue was put in input-row order (behind a barrier, see
        :meth:`_launch_order`)."""
        caps = [c for c in (policy.max_running_tasks, self.settings.max_running_tasks) if c]
        self._max_running = min(caps) if caps else None

    # ---- setup -------------------------------------------------------------------
    def start(self, programs: Sequence[TaskProgram]) -> None:
        """Queue the first stage's tasks and set the stage budgets."""
        minimums = min_budgets(
            programs, self.num_stages, self.bounds.first_bound, self.block_size_tokens
        )
        budgets = self.policy.initial_budgets(self.ledger.admit_blocks, minimums)
        self.memory = MemoryManager(
            self.ledger, StageBudgets(list(budgets), list(minimums)), self.owner
        )
        self.report.initial_budgets_blocks = list(budgets)
        self.report.min_budgets_blocks = list(minimums)
        for program in programs:
            task = self._new_task(program.stage_index, program, None)
            self.waiting[task.stage].append(task)
        logger.debug("%s: budgets %s, minimums %s", self.owner, budgets, minimums)
        # Algorithm 1 rebalances in every iteration of its loop, the first included: the
        # stages below the first have nothing to run yet (starving), so an adaptive
        # policy lends their free budget upstream before any call completes
        self._rebalance()

    @property
    def has_work(self) -> bool:
        return bool(self.running) or any(self.waiting)

    # ---- Launch ------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Admit the waiting tasks that may start now (Launch)."""
        assert self.memory is not None
        admitted: list[Task] = []
        unpin, self._to_unpin = self._to_unpin, []
        if self.policy.ranked:
            self._launch_ranked(admitted)
            self._check_stuck()
            return SchedulerOutput(admitted, unpin)
        for stage in self._launch_order():
            queue = self._in_row_order(stage)
            while queue:
                if self._max_running is not None and len(self.running) >= self._max_running:
                    return SchedulerOutput(admitted, unpin)
                task = queue[0]
                if not task.admitted:
                    self._size_to_fit(task)
                if not self._admits(task):
                    break
                queue.popleft()
                self._admit(task)
                admitted.append(task)
        self._check_stuck()
        return SchedulerOutput(admitted, unpin)

    def _launch_ranked(self, admitted: list[Task]) -> None:
        """Ranked policies: every waiting task in rank order, each one the policy's gate
        lets through and the memory admits (the first that does not fit stops the launch,
        so the order holds)."""
        assert self.memory is not None
        waiting = sorted(
            (t for queue in self.waiting for t in queue),
            key=lambda t: self.policy.rank(self.info(t)),
        )
        run = self.run_info()
        for task in waiting:
            if self._max_running is not None and len(self.running) >= self._max_running:
                return
            if not self.policy.gate(self.info(task), run):
                continue
            if not task.admitted:
                self._size_to_fit(task)
            if not self._admits(task):
                continue  # backfill: a later, smaller task may fit
            self.waiting[task.stage].remove(task)
            self._admit(task)
            admitted.append(task)
            run = self.run_info()

    def info(self, task: Task) -> TaskInfo:
        return TaskInfo(task.task_id, task.stage, task.key, task.program.op_key)

    def run_info(self) -> RunInfo:
        return RunInfo(
            completed=self.completed_keys,
            finished=frozenset(i.key for i in self.outputs),
            running=[self.info(t) for t in self.running.values()],
        )

    def _check_stuck(self) -> None:
        if not self.running and any(self.waiting) and self.ledger.running_tasks == 0:
            heads = [
                (s, q[0].key, q[0].memory.total_blocks) for s, q in enumerate(self.waiting) if q
            ]
            raise SchedulerStuck(
                f"{self.owner}: idle with waiting tasks (stage, key, blocks) {heads}, nothing"
                f" running; the ledger holds {self.ledger.reserved_blocks} of"
                f" {self.ledger.capacity_blocks} blocks"
            )

    def _launch_order(self) -> list[int]:
        if not self.policy.operator_at_a_time:
            return list(self.policy.admission_stages(self.num_stages))
        # a barrier between stages: only the first stage with anything left runs
        for stage in range(self.num_stages):
            if self.waiting[stage] or self.running_per_stage[stage]:
                return [stage] if not self.running_per_stage[stage] or self.waiting[stage] else []
        return []

    def _in_row_order(self, stage: int) -> deque[Task]:
        """``stage``'s queue; behind a barrier (operator at a time), put in input-row order
        (task keys) the first time it launches. Its tasks were queued as the previous
        operator's calls completed; a materialized operator reads the previous one's output
        table row by row, as Lotus does, which keeps rows that share a document together."""
        if self.policy.operator_at_a_time and stage not in self._row_ordered:
            self._row_ordered.add(stage)
            self.waiting[stage] = deque(sorted(self.waiting[stage], key=lambda t: t.key))
        return self.waiting[stage]

    def _admits(self, task: Task) -> bool:
        assert self.memory is not None
        if not self.policy.memory_aware:
            return True
        stage = task.stage
        return self.memory.admits(
            task.memory,
            # idle: runs nothing and holds nothing (held prefixes wait for deeper stages;
            # taking their room would fill it with more such prefixes)
            stage_idle=self.running_per_stage[stage] == 0
            and self.memory.budgets.used_blocks[stage] == 0,
            query_idle=not self.running,
        )

    def _admit(self, task: Task) -> None:
        assert self.memory is not None
        task.admitted = True
        self._touched_roots.add(task.key[0])
        before = self.ledger.reserved_blocks
        charge = self.memory.charge(task.memory)
        if self.policy.memory_aware:
            self.memory.allocate(task.memory)
        after = self.ledger.reserved_blocks
        parent = task.memory.parent
        self.report.admitted.append((task.stage, task.key))
        self.report.launches.append(
            Launch(
                task.stage,
                task.key,
                charge,
                parent.prefix_blocks if parent is not None else 0,
                after,
                over_commit=after > self.ledger.capacity_blocks and after > before,
                referenced_blocks=len(task.memory.hashes) - (charge - task.memory.private_blocks)
                if task.memory.hashes
                else 0,
            )
        )
        self.running[task.task_id] = task
        self.running_per_stage[task.stage] += 1
        holds = task.program.holds_with
        pins = (
            self.pinning
            and holds != "nothing"
            and self.policy.pins(task.stage, self.num_stages, self.settings.explicit_pinning)
        )
        if pins:
            task.pin_key = f"{self.owner}:task{task.task_id}"
            # a hard pin covers what the ledger reserves for the children, no more: blocks
            # pinned beyond it could fill the cache behind the ledger's back
            task.pin_soft = holds == "soft pin"
            task.pin_blocks = None if task.pin_soft else task.memory.prefix_blocks
        else:
            task.pin_key, task.pin_blocks, task.pin_soft = None, None, False
        logger.debug(
            "%s: admit stage %d %s (%d blocks, ledger %d/%d)",
            self.owner,
            task.stage,
            task.key,
            task.memory.total_blocks,
            self.ledger.reserved_blocks,
            self.ledger.capacity_blocks,
        )

    # ---- Complete + Rebalance ------------------------------------------------------
    def update_from_output(self, outcomes: Sequence[TaskOutcome]) -> None:
        """Apply a batch of finished tasks (in task order), then Rebalance."""
        for outcome in sorted(outcomes, key=lambda o: o.task.task_id):
            task = outcome.task
            del self.running[task.task_id]
            stale_pin = self._pins_in_flight.pop(task.task_id, None)
            if stale_pin is not None:
                self._to_unpin.append(stale_pin)
            self.running_per_stage[task.stage] -= 1
            if outcome.grow is not None:
                self._continue_later(task, outcome.grow)
            else:
                self._complete(task)
        self._iteration += 1
        self._rebalance()

    def _continue_later(self, task: Task, grow: Grow) -> None:
        assert self.memory is not None
        self.report.continuations += 1
        continued = task.continued.get(grow.op_id, 0) + 1
        task.continued[grow.op_id] = continued
        task.bounds[grow.op_id] = next_bound(
            grow.bound_tokens,
            grow.cap_tokens,
            continued=continued,
            max_continuations=self.settings.max_continuations,
        )
        size = size_task(
            task.program,
            task.memory.parent,
            self.bounds.first_bound,
            task.bounds,
            self.block_size_tokens,
            share_blocks=self.settings.share_blocks,
        )
        task.bounds = size.bounds
        task.memory.hashes = size.hashes
        if self.policy.memory_aware:
            self.memory.requeue(task.memory, size.total_blocks)
        else:
            task.memory.total_blocks = size.total_blocks
        self.waiting[task.stage].appendleft(task)

    def _complete(self, task: Task) -> None:
        assert self.memory is not None
        program = task.program
        op = program.op_key
        if self.policy.ranked:  # only ranked policies read it, and their tasks have keys
            self.completed_keys.setdefault(op, set()).add(task.key)
        children = [
            self._new_task(child.stage_index, child, self._holder_of(child))
            for child in program.children()
        ]
        output = program.output()
        if output is not None:
            self.outputs.append(output)
        if self.policy.memory_aware:
            holders = program.prefix_holders([c.program for c in children])
            done = self.memory.complete(
                task.memory, children=holders, reserve_prefix=program.holds_with == "ledger"
            )
        else:
            done = [task.memory] if not children else []
        for finished in done:
            self.done_per_stage[finished.stage] += 1
            owner = self._owners.pop(id(finished), None)
            if owner is not None:
                self._by_program.pop(id(owner.program), None)
                if owner.pin_key is not None:
                    self._to_unpin.append(owner.pin_key)
        for child in children:
            self.waiting[child.stage].append(child)

    def _holder_of(self, program: TaskProgram) -> TaskMemory | None:
        """The memory of the task holding ``program``'s prefix (its ``prefix_parent``)."""
        parent = program.prefix_parent
        if parent is None:
            return None
        task = self._by_program.get(id(parent))
        return task.memory if task is not None else None

    def _rebalance(self) -> None:
        """Rebalance (memory-aware policies only: the others reserve nothing)."""
        if self.policy.memory_aware:
            self.policy.rebalance(self._rebalance_view())

    def _rebalance_view(self) -> RebalanceView:
        assert self.memory is not None
        return RebalanceView(
            waiting=[len(q) for q in self.waiting],
            budgets=self.memory.budgets,
            alpha=self.settings.alpha,
            beta=self.settings.beta,
            move=self._move,
        )

    def _move(self, source: int, target: int, reason: str) -> int:
        assert self.memory is not None
        moved = self.memory.budgets.transfer(source, target)
        if moved:
            self.report.moves.append(BudgetMove(self._iteration, source, target, moved, reason))
            logger.debug(
                "%s: move %d blocks %d -> %d (%s)", self.owner, moved, source, target, reason
            )
        return moved

    # ---- failure, pinning, views -------------------------------------------------
    def abort(self) -> list[str]:
        """Release everything this run holds in the ledger (failure or cancellation);
        returns the pin keys the engine may still hold for it. Idempotent."""
        released = self.memory.release_all() if self.memory is not None else 0
        released += self.ledger.release_owner(self.owner)
        keys = [t.pin_key for t in self._owners.values() if t.pin_key is not None]
        keys += self._to_unpin + list(self._pins_in_flight.values())
        self._owners.clear()
        self._to_unpin = []
        self._pins_in_flight.clear()
        if released:
            logger.info("%s: released %d KV blocks after a failure", self.owner, released)
        return keys

    def stop_pinning(self) -> None:
        """Deadlock recovery: pin nothing more (the caller unpins everything).

        No task pins again: calls not yet sent carry no pin key. The calls already in the
        engine still carry theirs, and the engine pins their blocks when they finish;
        each of those keys is released again when its task comes back (else the calls in
        flight would pin the cache full again, and nothing would unpin them until their
        parents were done)."""
        self.report.deadlocks += 1
        self.pinning = False
        for task in self._owners.values():
            if task.pin_key is not None and task.task_id in self.running:
                self._pins_in_flight[task.task_id] = task.pin_key
            task.pin_key, task.pin_blocks, task.pin_soft = None, None, False

    @property
    def pins_in_flight(self) -> bool:
        """Calls in the engine may still pin blocks (see :meth:`stop_pinning`)."""
        return bool(self._pins_in_flight)

    # ---- taking work back (a replica set's stealing) -------------------------------
    def untouched_roots(self) -> set[int]:
        """Root keys (an instance key's first part: an input row, a workflow query) of
        the waiting instances none of whose tasks was admitted."""
        waiting = {task.key[0] for queue in self.waiting for task in queue}
        return waiting - self._touched_roots

    def withdraw(self, roots: Set[int]) -> set[int]:
        """Take out of the run the instances of ``roots`` none of whose tasks was
        admitted (their waiting tasks leave the queues; they will not be among the
        outputs), so that another run takes them. Returns the roots taken; the others
        (started, done, or unknown) stay."""
        taken = set(roots) & self.untouched_roots()
        if not taken:
            return taken
        for stage, queue in enumerate(self.waiting):
            kept: deque[Task] = deque()
            for task in queue:
                if task.key[0] in taken:
                    del self._owners[id(task.memory)]
                    self._by_program.pop(id(task.program), None)
                else:
                    kept.append(task)
            self.waiting[stage] = kept
        logger.debug("%s: %d instances withdrawn", self.owner, len(taken))
        return taken

    def finish(self) -> list[Instance]:
        """The outputs ordered by instance key, with the final report figures."""
        assert self.memory is not None
        self.report.final_budgets_blocks = list(self.memory.budgets.budget_blocks)
        self.report.peak_reserved_blocks = self.ledger.peak_reserved_blocks
        return sorted(self.outputs, key=lambda i: i.key)

    def views(self) -> list[StageView]:
        assert self.memory is not None
        budgets = self.memory.budgets
        return [
            StageView(
                done=self.done_per_stage[s],
                waiting=len(self.waiting[s]),
                running=self.running_per_stage[s],
                budget_blocks=budgets.budget_blocks[s],
                used_blocks=budgets.used_blocks[s],
            )
            for s in range(self.num_stages)
        ]

    # ---- tasks -------------------------------------------------------------------
    def _new_task(self, stage: int, program: TaskProgram, parent: TaskMemory | None) -> Task:
        task = Task(next(self._ids), stage, program, TaskMemory(stage, 0, 0, parent))
        task.priority = self.policy.priority(stage, self.num_stages)
        self._size(task)
        self._owners[id(task.memory)] = task
        self._by_program[id(program)] = task
        return task

    def _size_to_fit(self, task: Task) -> None:
        """Size a waiting task at its calls' caps when it would be admitted now at that
        size (its stage's free budget holds it, or the rules for an idle stage or query
        let it in): then no call of it is ever continued. Else with the estimator's
        bounds as of now: the memory-pressure case."""
        if self.settings.cap_when_it_fits and self.policy.memory_aware:
            self._size(task, at_cap=True)
            if self._admits(task):
                return
        self._size(task)

    def _size(self, task: Task, *, at_cap: bool = False) -> None:
        """(Re)compute a waiting task's reservation and bounds (the estimator's, or every
        call's cap)."""
        size = size_task(
            task.program,
            task.memory.parent,
            (lambda node, prompt_tokens: node.max_tokens) if at_cap else self.bounds.first_bound,
            {},
            self.block_size_tokens,
            share_blocks=self.settings.share_blocks,
        )
        task.memory.total_blocks = size.total_blocks
        task.memory.prefix_blocks = size.prefix_blocks
        task.memory.shared_blocks = size.shared_blocks
        task.memory.hashes = size.hashes
        task.bounds = size.bounds
        if self.memory is not None and not at_cap:  # larger than sampled: raise the minimum
            minimums = self.memory.budgets.min_budget_blocks
            minimums[task.stage] = max(minimums[task.stage], size.net_blocks)
