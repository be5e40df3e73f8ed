"""Runs a physical plan on an engine under a named execution policy.

* ``operator-at-a-time`` (the baseline; what Lotus-style systems do): each operator runs
  on every tuple (all calls submitted together) and its output is materialized before
  the next operator starts.
* every other policy (``adaptive``/``pipelined`` by default, and the baselines of
  :mod:`kalypso.scheduler.policies`): tasks (one stage on one tuple) flow through the
  stages under :class:`kalypso.scheduler.pipeline.PipelineScheduler`, admitted by KV
  memory budgets (Algorithm 1).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kalypso.query.context import ExecContext
from kalypso.query.operators import CartesianOperator
from kalypso.query.planner import PhysicalPlan, PlannedOperator, Stage
from kalypso.query.rows import Row
from kalypso.query.templates import PlanError, value_to_text
from kalypso.scheduler.memory import KVLedger
from kalypso.scheduler.pipeline import (
    PipelineReport,
    PipelineScheduler,
    SchedulerSettings,
    StageView,
    expand_products,
)
from kalypso.scheduler.policies import parse_policy


@dataclass(frozen=True)
class ExecutionOptions:
    """How to run a plan.

    Attributes:
        policy: a name from :data:`kalypso.scheduler.policies.POLICY_NAMES`.
        max_tasks_in_flight: optional cap on tasks running at once (budget policies).
        max_retries: re-enqueues of a task whose call hit its output bound, at doubled
            bounds, before the last one at the operator's cap (scheduled policies).
        alpha, beta: Algorithm 1's saturation and starvation thresholds.
        pinning: ``"virtual"`` (admission control alone keeps prefixes cached under LRU)
            or ``"explicit"`` (the engine pins each parent's blocks until its children are
            done; needs an engine with ``supports_pinning``).
    """

    policy: str = "adaptive"
    max_tasks_in_flight: int | None = None
    max_retries: int = 2
    alpha: float = 1.0
    beta: float = 0.5
    pinning: str = "virtual"

    def __post_init__(self) -> None:
        if self.pinning not in ("virtual", "explicit"):
            raise PlanError(f"pinning must be 'virtual' or 'explicit', got {self.pinning!r}")
        parse_policy(self.policy)  # raises PlanError for unknown names
        if self.max_tasks_in_flight is not None and self.max_tasks_in_flight < 1:
            raise PlanError("max_tasks_in_flight must be at least 1")
        if not 0 < self.beta < self.alpha:
            raise PlanError("need 0 < beta < alpha")
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
            rows = expand_products(stage.product, rows, ctx)
        for planned in stage.operators:
            futures = [asyncio.ensure_future(_apply(planned, r, ctx, 0)) for r in rows]
            rows = [r for r in await _gather_all(futures) if r is not None]
    return rows


async def execute(
    physical: PhysicalPlan,
    rows: list[Row],
    ctx: ExecContext,
    options: ExecutionOptions,
    ledger: KVLedger | None = None,
    on_update: Callable[[int, list[StageView]], None] | None = None,
) -> tuple[list[Row], list[PipelineReport]]:
    """Run every pipeline in order; returns the output tuples and one report per pipeline
    run by the scheduler. ``ledger`` is shared by the queries running on one engine."""
    precheck(physical, rows, ctx)
    if options.pinning == "explicit" and not ctx.engine.supports_pinning:
        raise PlanError(
            f"explicit pinning needs an engine that supports it; {ctx.engine.name} does not"
            " (vLLM: start it with scheduler_cls=kalypso.engine.vllm_pinning.PINNING_SCHEDULER_CLS)"
        )
    policy = parse_policy(options.policy)
    if policy is not None and options.max_tasks_in_flight is not None:
        cap = min(
            policy.max_running_tasks or options.max_tasks_in_flight, options.max_tasks_in_flight
        )
        policy = replace(policy, max_running_tasks=cap)
    ledger = ledger or KVLedger(ctx.engine.capacity.num_blocks)
    ctx.bounded_outputs = policy is not None
    reports: list[PipelineReport] = []
    for pipeline in physical.pipelines:
        if pipeline.barrier is not None:
            barrier = pipeline.barrier
            stats = ctx.stats_for(barrier.op_id)
            stats.rows_in += len(rows)
            rows = await barrier.operator.apply_all(rows, ctx, barrier.op_id)  # type: ignore[attr-defined]
            stats.rows_out += len(rows)
            # the barrier's output order is the new input order (sem_topk ranks rows)
            rows = [Row((i,), r.values, r.pieces) for i, r in enumerate(rows)]
        if policy is None:
            rows = await _operator_at_a_time(pipeline.stages, rows, ctx)
            continue
        settings = SchedulerSettings(
            alpha=options.alpha, beta=options.beta, explicit_pinning=options.pinning == "explicit"
        )
        number = pipeline.number

        def update(views: list[StageView], number: int = number) -> None:
            if on_update is not None:
                on_update(number, views)

        scheduler = PipelineScheduler(pipeline.stages, ctx, ledger, policy, settings, update)
        rows = await scheduler.run(rows)
        reports.append(scheduler.report)
    return rows, reports
