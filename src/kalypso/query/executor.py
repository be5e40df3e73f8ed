"""Runs a physical plan on an engine under a named execution policy.

* ``operator-at-a-time`` (the baseline; what Lotus-style systems do): each operator runs
  on every tuple (all calls submitted together) and its output is materialized before
  the next operator starts.
* ``pipelined``: tasks (one stage on one tuple) flow through the stages as soon as their
  input exists, at most ``max_tasks_in_flight`` at a time; when a slot frees, the deepest
  stage with waiting tasks goes first (so a tuple's dependent work runs while its prefix
  is still cached), and its calls carry a higher engine priority.

Blocking operators are barriers under both policies. Results are ordered by tuple key
(input order, then right-side order; after a blocking operator, its output order), so both
policies return identical tables for
identical answers.

Before the first LLM call the executor checks every value that will enter a prompt
(the rule of :mod:`kalypso.query.templates`) and the prompt size of every first-stage
call on the input table; later prompts (which contain generated text) are checked by the
engine layer before they are sent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from kalypso.query.context import ExecContext
from kalypso.query.operators import CartesianOperator
from kalypso.query.planner import PhysicalPlan, PlannedOperator, Stage
from kalypso.query.rows import Row
from kalypso.query.templates import PlanError, value_to_text

POLICIES = ("operator-at-a-time", "pipelined")


@dataclass(frozen=True)
class ExecutionOptions:
    """How to run a plan.

    Attributes:
        policy: one of :data:`POLICIES`.
        max_tasks_in_flight: cap on concurrent tasks for ``pipelined``.
        max_retries: re-issues of a call whose answer hit its token bound.
    """

    policy: str = "pipelined"
    max_tasks_in_flight: int = 8
    max_retries: int = 2

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise PlanError(f"unknown execution policy {self.policy!r}; choose from {POLICIES}")
        if self.max_tasks_in_flight < 1:
            raise PlanError("max_tasks_in_flight must be at least 1")
        if self.max_retries < 0:
            raise PlanError("max_retries must be at least 0")


def precheck(physical: PhysicalPlan, rows: list[Row], ctx: ExecContext) -> None:
    """Fail before any LLM call on values that cannot enter a prompt, and on first-stage
    prompts that do not fit the model's context."""
    source_columns = set(rows[0].values) if rows else set()
    limit = ctx.engine.capacity.max_model_len_tokens
    first_stage = physical.pipelines[0].stages[0].operators
    right_values: dict[str, list[object]] = {}  # right-table columns joined so far
    for planned in physical.operators():
        if isinstance(planned.operator, CartesianOperator):
            right_values.update(planned.operator.right_columns())
        parts = planned.operator.prompt_parts()
        if parts is None:
            continue
        columns, task = parts
        for column in columns:
            if column in source_columns:
                for row in rows:
                    value_to_text(row.values[column], column, row.key)
            elif column in right_values:
                for position, value in enumerate(right_values[column]):
                    value_to_text(value, column, f"right row {position}")
        if planned in first_stage and all(c in source_columns for c in columns):
            bound = planned.operator.max_output_tokens()
            for row in rows:
                size = len(ctx.prompt_for(row, columns, task)) + bound
                if size > limit:
                    raise PlanError(
                        f"[{planned.op_id}] row {row.key[0]}: prompt of {size - bound} tokens"
                        f" plus {bound} output tokens exceeds the model context of {limit}"
                    )


async def _apply(planned: PlannedOperator, row: Row, ctx: ExecContext, priority: int) -> Row | None:
    stats = ctx.stats_for(planned.op_id)
    stats.rows_in += 1
    operator = planned.operator
    assert not isinstance(operator, CartesianOperator)
    out = await operator.apply(row, ctx, planned.op_id, priority)  # type: ignore[attr-defined]
    if out is not None:
        stats.rows_out += 1
    return out  # type: ignore[no-any-return]


def _expand(product: PlannedOperator, rows: list[Row], ctx: ExecContext) -> list[Row]:
    operator = product.operator
    assert isinstance(operator, CartesianOperator)
    stats = ctx.stats_for(product.op_id)
    out: list[Row] = []
    for row in rows:
        children = operator.partners(row)
        stats.rows_in += 1
        stats.rows_out += len(children)
        out.extend(children)
    return out


async def _gather_all(coroutines: Sequence[asyncio.Future[Row | None]]) -> list[Row | None]:
    try:
        return list(await asyncio.gather(*coroutines))
    except BaseException:
        for c in coroutines:
            c.cancel()
        await asyncio.gather(*coroutines, return_exceptions=True)
        raise


async def _operator_at_a_time(
    stages: tuple[Stage, ...], rows: list[Row], ctx: ExecContext
) -> list[Row]:
    for stage in stages:
        if stage.product is not None:
            rows = _expand(stage.product, rows, ctx)
        for planned in stage.operators:
            futures = [asyncio.ensure_future(_apply(planned, r, ctx, 0)) for r in rows]
            rows = [r for r in await _gather_all(futures) if r is not None]
    return rows


async def _pipelined(
    stages: tuple[Stage, ...], rows: list[Row], ctx: ExecContext, max_in_flight: int
) -> list[Row]:
    waiting: list[deque[Row]] = [deque() for _ in stages]
    waiting[0].extend(rows if stages[0].product is None else _expand(stages[0].product, rows, ctx))
    running: dict[asyncio.Task[Row | None], int] = {}
    outputs: list[Row] = []

    async def run_task(stage: Stage, row: Row, priority: int) -> Row | None:
        current: Row | None = row
        for planned in stage.operators:
            if current is None:
                break
            current = await _apply(planned, current, ctx, priority)
        return current

    try:
        while running or any(waiting):
            while len(running) < max_in_flight:
                index = next((i for i in reversed(range(len(stages))) if waiting[i]), None)
                if index is None:
                    break
                row = waiting[index].popleft()
                priority = len(stages) - 1 - index  # deeper stages first (lower is earlier)
                task = asyncio.ensure_future(run_task(stages[index], row, priority))
                running[task] = index
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index = running.pop(task)
                result = task.result()
                if result is None:
                    continue
                if index + 1 < len(stages):
                    product = stages[index + 1].product
                    assert product is not None
                    waiting[index + 1].extend(_expand(product, [result], ctx))
                else:
                    outputs.append(result)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    return sorted(outputs, key=lambda r: r.key)


async def execute(
    physical: PhysicalPlan, rows: list[Row], ctx: ExecContext, options: ExecutionOptions
) -> list[Row]:
    """Run every pipeline in order; returns the output tuples ordered by key."""
    precheck(physical, rows, ctx)
    for pipeline in physical.pipelines:
        if pipeline.barrier is not None:
            barrier = pipeline.barrier
            stats = ctx.stats_for(barrier.op_id)
            stats.rows_in += len(rows)
            rows = await barrier.operator.apply_all(rows, ctx, barrier.op_id)  # type: ignore[attr-defined]
            stats.rows_out += len(rows)
            # the barrier's output order is the new input order (sem_topk ranks rows)
            rows = [Row((i,), r.values, r.pieces) for i, r in enumerate(rows)]
        if options.policy == "operator-at-a-time":
            rows = await _operator_at_a_time(pipeline.stages, rows, ctx)
        else:
            rows = await _pipelined(pipeline.stages, rows, ctx, options.max_tasks_in_flight)
    return rows
