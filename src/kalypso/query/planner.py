"""The planner (paper section 5.1): a left-deep plan becomes pipelines and stages.

* A **pipeline** is split off at every blocking operator: the blocking operator consumes
  the materialized output of the pipeline before it and starts the next one.
* A **stage** is split off at every Cartesian product inside a pipeline: the product
  starts the stage, turning each upstream tuple into its child tuples.
* Running one stage on one tuple is a **task**, the scheduling unit.

::

    scan -> sem_filter -> sem_join(H) -> sem_map -> sem_topk -> sem_map
    '----- stage 1 ----' '--- stage 2 -------'     '-- pipeline 2 ----'
    '------------- pipeline 1 ----------------'
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.core.errors import PlanError
from kalypso.query.operators import (
    BlockingOperator,
    CartesianOperator,
    Operator,
    PipelinedOperator,
    Schema,
    check_shape,
)


@dataclass(frozen=True)
class PlannedOperator:
    """An operator with its id in the plan (``"<position>:<kind>"``, e.g. ``"2:sem_map"``)."""

    op_id: str
    operator: Operator


@dataclass(frozen=True)
class Stage:
    """Operators run in sequence on one tuple. ``product`` (stages after the first) pairs
    each upstream tuple with its right-side partners before ``operators`` run."""

    number: int
    product: PlannedOperator | None
    operators: tuple[PlannedOperator, ...]


@dataclass(frozen=True)
class Pipeline:
    """``barrier`` (all pipelines but a plan's first) runs on the materialized input; then
    ``stages`` run as pipelined tasks."""

    number: int
    barrier: PlannedOperator | None
    stages: tuple[Stage, ...]


@dataclass(frozen=True)
class PhysicalPlan:
    source_name: str
    source_rows: int
    pipelines: tuple[Pipeline, ...]
    output_schema: Schema

    def operators(self) -> list[PlannedOperator]:
        out: list[PlannedOperator] = []
        for pipeline in self.pipelines:
            if pipeline.barrier is not None:
                out.append(pipeline.barrier)
            for stage in pipeline.stages:
                if stage.product is not None:
                    out.append(stage.product)
                out.extend(stage.operators)
        return out


def validate(operators: tuple[Operator, ...], schema: Schema) -> Schema:
    """Check every operator's call shape and the columns it receives; return the final
    columns.

    Raises:
        PlanError: an operator the executor cannot run, or bad columns.
    """
    for operator in operators:
        check_shape(operator)
        schema = operator.output_schema(schema)
        if not isinstance(schema, tuple) or any(not isinstance(c, str) for c in schema):
            raise PlanError(
                f"{getattr(operator, 'kind', type(operator).__name__)}: output_schema must"
                f" return a tuple of column names, got {schema!r}"
            )
        duplicates = sorted({c for c in schema if schema.count(c) > 1})
        if duplicates:
            raise PlanError(
                f"{getattr(operator, 'kind', type(operator).__name__)}: the output would have"
                f" duplicate columns {duplicates}"
            )
    return schema


def plan(
    operators: tuple[Operator, ...], source_name: str, source_rows: int, schema: Schema
) -> PhysicalPlan:
    """Split ``operators`` into pipelines and stages (and validate them)."""
    output_schema = validate(operators, schema)
    pipelines: list[Pipeline] = []
    barrier: PlannedOperator | None = None
    stages: list[Stage] = []
    product: PlannedOperator | None = None
    current: list[PlannedOperator] = []

    def close_stage() -> None:
        nonlocal product, current
        if product is not None or current or not stages:
            stages.append(Stage(len(stages) + 1, product, tuple(current)))
        product, current = None, []

    def close_pipeline() -> None:
        nonlocal barrier, stages
        close_stage()
        pipelines.append(Pipeline(len(pipelines) + 1, barrier, tuple(stages)))
        barrier, stages = None, []

    for position, operator in enumerate(operators, start=1):
        planned = PlannedOperator(f"{position}:{operator.kind}", operator)
        if isinstance(operator, BlockingOperator):
            close_pipeline()
            barrier = planned
        elif isinstance(operator, CartesianOperator):
            close_stage()
            product = planned
        elif isinstance(operator, PipelinedOperator):
            current.append(planned)
        else:
            raise PlanError(f"operator {operator!r} is neither pipelined, blocking nor a product")
    close_pipeline()
    return PhysicalPlan(source_name, source_rows, tuple(pipelines), output_schema)


def explain(physical: PhysicalPlan) -> str:
    """The plan as text: pipelines, stages and operators with their contracts."""
    ops = physical.operators()
    lines = [
        f"Plan over {physical.source_name!r} ({physical.source_rows} rows):"
        f" {len(ops)} operators, {len(physical.pipelines)} pipeline(s)"
    ]
    for pipeline in physical.pipelines:
        lines.append(f"Pipeline {pipeline.number}")
        if pipeline.barrier is not None:
            b = pipeline.barrier
            lines.append(
                f"  barrier  [{b.op_id}] {b.operator.describe()}  ({b.operator.contract.flags()})"
            )
        for stage in pipeline.stages:
            source = (
                f"scan {physical.source_name}"
                if pipeline.number == 1 and stage.number == 1
                else ("materialized input" if stage.number == 1 else "")
            )
            lines.append(f"  Stage {stage.number}" + (f" <- {source}" if source else ""))
            members = ([stage.product] if stage.product else []) + list(stage.operators)
            for member in members:
                flags = member.operator.contract.flags()
                lines.append(f"    [{member.op_id}] {member.operator.describe()}  ({flags})")
    lines.append(f"Output columns: {', '.join(physical.output_schema)}")
    return "\n".join(lines)
