"""Algorithm 1 of the paper: memory-aware scheduling of one pipeline.

Each stage has a waiting queue; running tasks hold reservations. One iteration:

1. **Launch** - for each stage (deepest first), admit waiting tasks in order while the
   memory manager admits them (stage budget and engine-wide ledger);
2. **Complete** - for each finished task: a call that hit its token bound re-enqueues the
   task (front of its queue) with a doubled bound; a filtered task releases its memory; a
   task of a non-last stage runs the next stage's Cartesian product and enqueues the
   children (its prefix stays reserved until the last child is done); a last-stage task's
   tuple is output;
3. **Rebalance** (adaptive policy) - with ``tasks(s) = budget(s) / minBudget(s)``, stage
   ``s`` is *saturated* when more than ``alpha * tasks(s)`` tasks wait for it and
   *starving* when fewer than ``beta * tasks(s)`` do. When a stage other than the first
   is saturated, the stage that feeds it (``s - 1``) has admitted more upstream work than
   the downstream stages can consume: the feeder's free budget goes to the last stage.
   A starving stage gives its free budget to the nearest upstream stage that is not
   starving (walking up through starving stages). Only free budget moves (never below a
   stage's minimum or what it holds), so nothing admitted is ever over-committed.

   Reading of the paper: Algorithm 1 writes ``transferMem(from=stage, to=lastStage)``
   for a saturated stage and measures saturation on "its queue". Its Figure 4 places the
   queue after a stage (its outputs), the rest of the text before it (its waiting
   tasks). We keep waiting queues and therefore move budget from the stage *feeding*
   the saturated queue - the same transfer under the other reading, and the only one
   that, in a two-stage pipeline, ever gives budget back to the last stage as the
   paper's Figure 6 requires.

Calls of deeper stages carry a higher engine priority. Outputs are ordered by tuple key,
so every policy returns the same table as operator-at-a-time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kalypso.query.context import (
    BoundExceeded,
    ExecContext,
    retry_bound,
    set_bound_overrides,
    set_pin_key,
)
from kalypso.query.operators import CartesianOperator, PipelinedOperator
from kalypso.query.planner import PlannedOperator, Stage
from kalypso.query.rows import Row
from kalypso.scheduler.memory import KVLedger, MemoryManager, StageBudgets, TaskMemory
from kalypso.scheduler.policies import SchedulingPolicy

SAMPLE_ROWS = 32
"""Input rows sampled to estimate each stage's minimum budget."""


def expand_products(product: PlannedOperator, rows: list[Row], ctx: ExecContext) -> list[Row]:
    """Run a Cartesian product on ``rows``: their children in order, counted in the
    product's statistics (rows in, children out)."""
    operator = product.operator
    assert isinstance(operator, CartesianOperator)
    stats = ctx.stats_for(product.op_id)
    out: list[Row] = []
    for row in rows:
        partners = operator.partners(row)
        stats.rows_in += 1
        stats.rows_out += len(partners)
        out.extend(partners)
    return out


@dataclass(eq=False)
class Task:
    """One stage on one tuple; resumes at ``next_op`` after a retry."""

    task_id: int
    stage: int
    row: Row
    memory: TaskMemory
    next_op: int = 0
    bounds: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    admitted: bool = False
    """Once admitted, the task keeps the reservation and bounds it was admitted with."""


@dataclass(frozen=True)
class BudgetMove:
    """One transfer made by Rebalance (for tests and the report)."""

    iteration: int
    source: int
    target: int
    blocks: int
    reason: str


@dataclass
class StageView:
    """What the live view shows per stage."""

    done: int = 0
    waiting: int = 0
    running: int = 0
    budget_blocks: int = 0
    used_blocks: int = 0


@dataclass
class PipelineReport:
    """What one pipeline run did: admission order, budget moves, retries, peak memory."""

    admitted: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    moves: list[BudgetMove] = field(default_factory=list)
    retries: int = 0
    deadlocks: int = 0
    """Times the engine had waiting requests and none running (explicit pinning); each
    released all pins and fell back to virtual pinning for the rest of the pipeline."""
    initial_budgets_blocks: list[int] = field(default_factory=list)
    final_budgets_blocks: list[int] = field(default_factory=list)
    min_budgets_blocks: list[int] = field(default_factory=list)
    peak_reserved_blocks: int = 0


@dataclass(frozen=True)
class SchedulerSettings:
    """Algorithm 1's thresholds: saturated above ``alpha * budget/minBudget`` waiting
    tasks, starving below ``beta * budget/minBudget``."""

    alpha: float = 1.0
    beta: float = 0.5
    explicit_pinning: bool = False
    """Pin each parent task's blocks in the engine until its last child is done."""
    deadlock_check_s: float = 0.25
    """How long (wall time) without a completion before asking the engine whether it is
    stuck (waiting requests, none running)."""


class PipelineScheduler:
    """Runs the stages of one pipeline on their input tuples under a policy."""

    def __init__(
        self,
        stages: tuple[Stage, ...],
        ctx: ExecContext,
        ledger: KVLedger,
        policy: SchedulingPolicy,
        settings: SchedulerSettings | None = None,
        on_update: Callable[[list[StageView]], None] | None = None,
    ) -> None:
        self.stages = stages
        self.ctx = ctx
        self.ledger = ledger
        self.policy = policy
        self.settings = settings or SchedulerSettings()
        self.on_update = on_update
        self.block_size_tokens = ctx.engine.capacity.block_size_tokens
        self.waiting: list[deque[Task]] = [deque() for _ in stages]
        self.running: dict[asyncio.Task[Row | None], Task] = {}
        self.running_per_stage = [0] * len(stages)
        self.done_per_stage = [0] * len(stages)
        self.report = PipelineReport()
        self._ids = itertools.count()
        self._iteration = 0
        self.memory: MemoryManager | None = None
        self.pinning = self.settings.explicit_pinning
        self._to_unpin: list[str] = []
        self._owners: dict[int, Task] = {}

    # ---- sizing ------------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size_tokens)

    def reservation(
        self, stage: int, row: Row, start_op: int, bounds: dict[str, int], parent: TaskMemory | None
    ) -> tuple[int, int, dict[str, int], int]:
        """``(total_blocks, prefix_blocks, bounds, shared_blocks)`` for running ``stage``
        on ``row`` from op ``start_op``.

        ``total_blocks``: the largest prompt plus its output bound (outputs of earlier ops
        of the stage count toward later prompts), rounded up to blocks, minus the full
        blocks the first prompt shares with the parent's last prompt (the parent holds
        those). ``prefix_blocks``: the full blocks of the tuple's ``[system | context]``.
        ``bounds``: the output bound per operator the reservation assumed; the task's
        calls use exactly these (a later estimate could otherwise exceed it).
        ``shared_blocks``: the parent's blocks subtracted from the total.
        """
        total_tokens = 0
        prefix_tokens = 0
        produced_tokens = 0
        shared_tokens: int | None = None
        used_bounds = dict(bounds)
        for planned in self.stages[stage].operators[start_op:]:
            parts = planned.operator.prompt_parts()
            if parts is None:
                continue
            columns, task = parts
            known = tuple(c for c in columns if c in row.values)
            prompt = self.ctx.prompt_for(row, known, task)
            if shared_tokens is None:
                shared_tokens = self.ctx.expected_cached_tokens(row, prompt)
            prompt_tokens = len(prompt) + produced_tokens
            cap = planned.operator.max_output_tokens()
            first = getattr(planned.operator, "first_bound_tokens", None)
            bound = used_bounds.get(planned.op_id) or self.ctx.first_bound(
                planned.op_id, prompt_tokens, cap, first
            )
            used_bounds[planned.op_id] = bound
            total_tokens = max(total_tokens, prompt_tokens + bound)
            context_tokens = self.ctx.layout.head_tokens + len(
                row.context_ids(known, self.ctx.engine.tokenizer)
            )
            prefix_tokens = max(prefix_tokens, context_tokens)
            produced_tokens += bound
        shared = 0
        if parent is not None:
            shared = parent.prefix_blocks
            if row.last_prompt is not None:  # the parent has run: count what is shared
                shared = min(shared, (shared_tokens or 0) // self.block_size_tokens)
        total = max(self._blocks(total_tokens) - shared, 1 if total_tokens else 0)
        return total, prefix_tokens // self.block_size_tokens, used_bounds, shared

    def min_budgets(self, rows: list[Row]) -> list[int]:
        """Each stage's minimum budget: the largest reservation among sampled tasks."""
        sample = rows[:SAMPLE_ROWS]
        minimums: list[int] = []
        parents: list[tuple[Row, TaskMemory | None]] = [(r, None) for r in sample]
        for index, stage in enumerate(self.stages):
            if index > 0:
                product = stage.product
                assert product is not None and isinstance(product.operator, CartesianOperator)
                children = []
                for row, memory in parents[:4]:
                    if not product.operator.can_pair(row):
                        continue  # sized later: minimums grow as larger tasks appear
                    for child in product.operator.partners(row)[:SAMPLE_ROWS]:
                        children.append((child, memory))
                parents = children
            sized = []
            for row, parent in parents:
                total, prefix, _, shared = self.reservation(index, row, 0, {}, parent)
                sized.append((row, TaskMemory(index, total, prefix, parent, shared)))
            minimums.append(max([m.total_blocks for _, m in sized], default=1) or 1)
            parents = [(row, memory) for row, memory in sized]
        return minimums

    # ---- Algorithm 1 ---------------------------------------------------------------
    async def run(self, rows: list[Row]) -> list[Row]:
        """Run the pipeline on ``rows``; returns its output tuples ordered by key."""
        capacity = self.ledger.capacity_blocks
        minimums = self.min_budgets(rows)
        budgets = self.policy.initial_budgets(capacity, minimums)
        self.memory = MemoryManager(self.ledger, StageBudgets(list(budgets), minimums))
        self.report.initial_budgets_blocks = list(budgets)
        self.report.min_budgets_blocks = list(minimums)
        first = self.stages[0]
        inputs = rows
        if first.product is not None:
            inputs = expand_products(first.product, rows, self.ctx)
        for row in inputs:
            self.waiting[0].append(self._new_task(0, row, None))
        outputs: list[Row] = []
        try:
            while self.running or any(self.waiting):
                self._launch()
                if not self.running:
                    await asyncio.sleep(0.005)  # other queries hold the ledger; let them finish
                    continue
                finished, _ = await asyncio.wait(
                    self.running,
                    timeout=self.settings.deadlock_check_s if self.pinning else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not finished:
                    await self._check_deadlock()
                    continue
                for handle in sorted(finished, key=lambda h: self.running[h].task_id):
                    task = self.running.pop(handle)
                    self.running_per_stage[task.stage] -= 1
                    self._complete(task, handle, outputs)
                await self._release_pins()
                self._iteration += 1
                if self.policy.rebalance:
                    self._rebalance()
                self._notify()
        finally:
            for handle in self.running:
                handle.cancel()
            await asyncio.gather(*self.running, return_exceptions=True)
            self.report.final_budgets_blocks = list(self.memory.budgets.budget_blocks)
            self.report.peak_reserved_blocks = self.ledger.peak_reserved_blocks
        return sorted(outputs, key=lambda r: r.key)

    def _pin_key(self, task: Task) -> str:
        return f"{self.ctx.query_id}:task{task.task_id}"

    async def _release_pins(self) -> None:
        keys, self._to_unpin = self._to_unpin, []
        if self.settings.explicit_pinning:
            for key in keys:
                await self.ctx.engine.unpin(key)

    async def _check_deadlock(self) -> None:
        """Explicit pins can hold the memory a waiting request needs while the tasks that
        would release them wait for it: the engine then has waiting requests and none
        running. Release every pin and continue with virtual pinning."""
        stats = await self.ctx.engine.stats()
        if stats.waiting_requests > 0 and stats.running_requests == 0:
            self.report.deadlocks += 1
            self.pinning = False
            await self.ctx.engine.unpin_all()

    def _size(self, task: Task) -> None:
        """(Re)compute a waiting task's reservation and bounds."""
        total, prefix, bounds, shared = self.reservation(
            task.stage, task.row, task.next_op, {}, task.memory.parent
        )
        task.memory.total_blocks = total
        task.memory.prefix_blocks = prefix
        task.memory.shared_blocks = shared
        task.bounds = bounds
        if self.memory is not None:  # a task larger than sampled raises its stage's minimum
            minimums = self.memory.budgets.min_budget_blocks
            minimums[task.stage] = max(minimums[task.stage], total)

    def _new_task(self, stage: int, row: Row, parent: TaskMemory | None) -> Task:
        task = Task(next(self._ids), stage, row, TaskMemory(stage, 0, 0, parent))
        self._size(task)
        self._owners[id(task.memory)] = task
        return task

    def _launch(self) -> None:
        assert self.memory is not None
        cap = self.policy.max_running_tasks
        for stage in reversed(range(len(self.stages))):
            queue = self.waiting[stage]
            while queue:
                if cap is not None and len(self.running) >= cap:
                    return
                task = queue[0]
                if not task.admitted:
                    self._size(task)  # with the estimator's bounds as of now
                if not self.memory.admits(
                    task.memory,
                    # idle: runs nothing and holds nothing (held prefixes wait for deeper
                    # stages; taking their room would fill it with more such prefixes)
                    stage_idle=self.running_per_stage[stage] == 0
                    and self.memory.budgets.used_blocks[stage] == 0,
                    query_idle=not self.running,
                ):
                    break
                queue.popleft()
                task.admitted = True
                self.memory.allocate(task.memory)
                self.report.admitted.append((stage, task.row.key))
                self.running_per_stage[stage] += 1
                handle = asyncio.ensure_future(self._run_task(task))
                self.running[handle] = task

    async def _run_task(self, task: Task) -> Row | None:
        """The stage's operators in order on the task's tuple (from ``next_op``)."""
        set_bound_overrides(task.bounds or None)
        pins = self.pinning and task.stage + 1 < len(self.stages)
        set_pin_key(self._pin_key(task) if pins else None)
        priority = len(self.stages) - 1 - task.stage
        stage = self.stages[task.stage]
        row: Row | None = task.row
        while task.next_op < len(stage.operators) and row is not None:
            planned = stage.operators[task.next_op]
            operator = planned.operator
            assert isinstance(operator, PipelinedOperator)
            stats = self.ctx.stats_for(planned.op_id)
            stats.rows_in += 1
            try:
                row = await operator.apply(row, self.ctx, planned.op_id, priority)
            except BoundExceeded:
                stats.rows_in -= 1  # counted again when the task resumes
                raise
            if row is not None:
                stats.rows_out += 1
                task.row = row
            task.next_op += 1
        return row

    def _complete(self, task: Task, handle: asyncio.Task[Row | None], outputs: list[Row]) -> None:
        assert self.memory is not None
        error = handle.exception()
        if isinstance(error, BoundExceeded):
            # the bound doubles up to the operator's cap, where calls stop raising
            self.ctx.stats_for(error.op_id).retries += 1
            self.report.retries += 1
            task.retries[error.op_id] = task.retries.get(error.op_id, 0) + 1
            task.bounds[error.op_id] = retry_bound(
                error.bound_tokens,
                error.cap_tokens,
                retries_done=task.retries[error.op_id],
                max_retries=self.ctx.max_retries,
            )
            total, _, task.bounds, _ = self.reservation(
                task.stage, task.row, task.next_op, task.bounds, task.memory.parent
            )
            self.memory.requeue(task.memory, total)
            self.waiting[task.stage].appendleft(task)
            return
        if error is not None:
            raise error
        row = handle.result()
        children: list[Task] = []
        if row is not None and task.stage + 1 < len(self.stages):
            product = self.stages[task.stage + 1].product
            assert product is not None
            children = [
                self._new_task(task.stage + 1, child, task.memory)
                for child in expand_products(product, [row], self.ctx)
            ]
        elif row is not None:
            outputs.append(row)
        for done in self.memory.complete(task.memory, children=len(children)):
            self.done_per_stage[done.stage] += 1
            owner = self._owners.pop(id(done), None)
            if owner is not None and owner.stage + 1 < len(self.stages):
                self._to_unpin.append(self._pin_key(owner))
        self.waiting[task.stage + 1 if children else task.stage].extend(children)

    def _thresholds(self, stage: int) -> tuple[float, float]:
        assert self.memory is not None
        budgets = self.memory.budgets
        tasks_fitting = budgets.budget_blocks[stage] / max(1, budgets.min_budget_blocks[stage])
        return self.settings.alpha * tasks_fitting, self.settings.beta * tasks_fitting

    def _starving(self, stage: int) -> bool:
        return len(self.waiting[stage]) < self._thresholds(stage)[1]

    def _saturated(self, stage: int) -> bool:
        return len(self.waiting[stage]) > self._thresholds(stage)[0]

    def _rebalance(self) -> None:
        last = len(self.stages) - 1
        if last == 0:
            return
        for stage in range(1, last + 1):
            if self._saturated(stage):
                self._move(stage - 1, last, "saturated")
        for stage in range(last, 0, -1):
            if not self._starving(stage):
                continue
            upstream = stage - 1
            while upstream > 0 and self._starving(upstream):
                upstream -= 1
            if not self._starving(upstream):
                self._move(stage, upstream, "starving")

    def _move(self, source: int, target: int, reason: str) -> None:
        assert self.memory is not None
        moved = self.memory.budgets.transfer(source, target)
        if moved:
            self.report.moves.append(BudgetMove(self._iteration, source, target, moved, reason))

    def _notify(self) -> None:
        if self.on_update is None or self.memory is None:
            return
        budgets = self.memory.budgets
        self.on_update(
            [
                StageView(
                    done=self.done_per_stage[s],
                    waiting=len(self.waiting[s]),
                    running=self.running_per_stage[s],
                    budget_blocks=budgets.budget_blocks[s],
                    used_blocks=budgets.used_blocks[s],
                )
                for s in range(len(self.stages))
            ]
        )
