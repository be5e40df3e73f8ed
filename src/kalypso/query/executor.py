"""Runs a physical plan on an engine: checks it, lowers it to the core's task graph, and
runs its pipelines through the core runner under the run's policy.

Blocking operators are barriers: the pipeline before them is materialized, their own
calls run as one scheduled stage, and the next pipeline starts from their output. Results
are ordered by tuple key (input order, then right-side order; after a blocking operator,
its output order), so every policy returns identical tables for identical answers.

Before the first LLM call the executor checks every value that will enter a prompt (the
rule of :mod:`kalypso.query.templates`), that every prompt of the first pipeline fits
the model's context and the KV cache (from the longest values that can meet in it), and
that decisions can be answered with one token. Later prompts (which contain generated
text) are checked by the engine layer before they are sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kalypso.core.errors import PlanError, QueryError, TaskFailed
from kalypso.core.graph import LLMNode, Slot, Stage
from kalypso.core.instance import Instance, InstanceKey
from kalypso.core.program import StageProgram, render_prompt
from kalypso.core.report import PipelineReport, StageView
from kalypso.core.runner import PipelineRunner, RunState, decision_token_ids
from kalypso.query.blocking_ops import (
    ITEM_OVERHEAD_TOKENS,
    ITEMS_COLUMN,
    SCORE_COLUMN,
    SemAgg,
    SemTopK,
)
from kalypso.query.lower import LoweredPipeline, lower
from kalypso.query.operators import CartesianOperator, LoweringContext
from kalypso.query.planner import PhysicalPlan
from kalypso.query.rows import ContextSlot, piece_ids, piece_text
from kalypso.query.templates import check_text, value_to_text

logger = logging.getLogger(__name__)

OnUpdate = Callable[[int, list[StageView]], None]


@dataclass
class Execution:
    """What a run produced so far: output instances and one report per pipeline."""

    instances: list[Instance]
    reports: list[PipelineReport]
    longest_chain_tokens: int = 0
    """The most tokens one row's chain of calls generated, summed over the pipelines and
    barriers (each starts after the one before): the least engine steps any schedule of
    these calls needs."""

    def add_chain(
        self, instances: Sequence[Instance], had: Mapping[InstanceKey, int] | None = None
    ) -> None:
        """Count what a pipeline or barrier generated for its output ``instances``: all of
        it for fresh instances (a pipeline's inputs are the table's rows or a barrier's
        new instances), less what each had generated when it started (``had``, by key:
        the rows a ``sem_topk`` scores, which go on counting in place)."""
        had = had or {}
        self.longest_chain_tokens += max(
            (i.generated_tokens - had.get(i.key, 0) for i in instances), default=0
        )


def initial_programs(
    stages: Sequence[Stage], instances: Sequence[Instance], state: RunState
) -> list[StageProgram]:
    """The first stage's programs (after its fan-out, when the pipeline starts with one)."""
    context = state.program_context()
    fan_out = stages[0].fan_out
    if fan_out is None:
        return [StageProgram(stages, 0, i, context) for i in instances]
    stats = state.stats_for(fan_out.op_id)
    programs: list[StageProgram] = []
    for instance in instances:
        children = fan_out.expand(instance)
        stats.rows_in += 1
        stats.rows_out += len(children)
        programs.extend(StageProgram(stages, 0, c, context) for c in children)
    return programs


# --------------------------------------------------------------------------- checks


def _check_values(physical: PhysicalPlan, instances: Sequence[Instance]) -> dict[str, list[Any]]:
    """Every value that will enter a prompt can become text (the rule of
    :mod:`kalypso.query.templates`); returns the right-table columns.

    Raises:
        PlanError: naming the operator, the row and the column.
    """
    source_columns = set(instances[0].values) if instances else set()
    right: dict[str, list[Any]] = {}
    for planned in physical.operators():
        operator = planned.operator
        if isinstance(operator, CartesianOperator):
            right.update(operator.right_columns())
        try:
            for column in operator.prompt_columns():
                if column in source_columns:
                    for instance in instances:
                        value_to_text(instance.values[column], column, instance.key[0])
                elif column in right:
                    for position, value in enumerate(right[column]):
                        value_to_text(value, column, f"right row {position}")
        except PlanError as exc:
            raise PlanError(f"[{planned.op_id}] {exc}") from None
    return right


def _longest_pieces(
    instances: Sequence[Instance],
    right: dict[str, list[Any]],
    columns: set[str],
    state: RunState,
) -> dict[str, tuple[int, str]]:
    """Per referenced column: (tokens of its longest piece, where it is) over the input
    rows and the right tables. Input pieces are memoized on the instances the run uses."""
    longest: dict[str, tuple[int, str]] = {}
    layout = state.layout
    for instance in instances:
        for column in instance.values:
            if column not in columns:
                continue
            size = len(piece_ids(instance, column, layout))
            if size > longest.get(column, (-1, ""))[0]:
                longest[column] = (size, f"row {instance.key[0]}")
    for column, values in right.items():
        if column not in columns:
            continue
        for position, value in enumerate(values):
            size = len(layout.tokenizer.encode(piece_text(column, value, (position,))))
            if size > longest.get(column, (-1, ""))[0]:
                longest[column] = (size, f"right row {position}")
    return longest


def _produced_tokens(physical: PhysicalPlan, state: RunState) -> dict[str, int]:
    """Per column an LLM call generates: the most tokens its piece can take (the call's
    cap, some slack for re-tokenizing the decoded text, and the ``[column]`` header)."""
    produced: dict[str, int] = {}
    encode = state.layout.tokenizer.encode
    for planned in physical.operators():
        operator = planned.operator
        columns: tuple[str, ...] = tuple(getattr(operator, "new_columns", ()))
        if isinstance(operator, SemAgg):
            columns = (operator.output_column,)
        elif isinstance(operator, SemTopK):
            columns = (SCORE_COLUMN,)
        for column in columns:
            header = len(encode(piece_text(column, "", (0,))))
            produced[column] = header + operator.max_output_tokens() + 8
    return produced


def _checked_nodes(lowered: Sequence[LoweredPipeline], context: LoweringContext) -> list[LLMNode]:
    """Every LLM node of the plan: the pipelines' stages and the barriers' calls."""
    nodes: list[LLMNode] = []
    for pipeline in lowered:
        barrier = pipeline.barrier
        if barrier is not None and isinstance(barrier.operator, SemTopK):
            scorer = barrier.operator.scorer().lower(barrier.op_id, context)
            nodes.extend(n for n in scorer if isinstance(n, LLMNode))
        for stage in pipeline.stages:
            nodes.extend(stage.llm_nodes())
    return nodes


def _check_prompt_sizes(
    nodes: Sequence[LLMNode],
    longest: dict[str, tuple[int, str]],
    produced: dict[str, int],
    state: RunState,
) -> None:
    """The longest prompt each call can have (every column at its longest value, generated
    columns at their cap) plus the call's cap must fit the model's context and the KV
    cache."""
    capacity = state.engine.capacity
    limit = min(capacity.max_model_len_tokens, capacity.total_tokens)
    empty = Instance((), {})
    for node in nodes:
        size = render_prompt(node, empty, state.layout)[0].length_tokens
        worst, worst_tokens, where = "", -1, ""
        for message in node.messages:
            for part in message.parts:
                if not isinstance(part, Slot) or not isinstance(part.source, ContextSlot):
                    continue
                for column in part.source.columns:
                    if column in longest:
                        tokens, place = longest[column]
                    else:  # generated by an earlier call: at most its cap
                        tokens, place = produced.get(column, 0), "generated text"
                    size += tokens
                    if tokens > worst_tokens:
                        worst, worst_tokens, where = column, tokens, place
        output = 1 if node.decision is not None else node.max_tokens
        if size + output > limit:
            what = "model context" if limit == capacity.max_model_len_tokens else "KV cache"
            raise PlanError(
                f"[{node.op_id}] {where or 'the instruction'}: a prompt of up to {size} tokens"
                f" (longest column {worst!r}) plus {output} output tokens exceeds the"
                f" {what} of {limit} tokens"
            )


def _check_agg(
    agg: SemAgg,
    op_id: str,
    instances: Sequence[Instance],
    longest: dict[str, tuple[int, str]],
    produced: dict[str, int],
    state: RunState,
) -> None:
    """A ``sem_agg`` item that can never fit one call is refused now (never truncated)."""
    max_model_len = state.engine.capacity.max_model_len_tokens
    try:
        agg.check_fits(max_model_len)
        window = agg.window_tokens(max_model_len)
        columns = agg.instruction.columns
        if instances and all(c in instances[0].values for c in columns):
            agg.pack([agg.item_text(i) for i in instances], state.layout.tokenizer, window)
        elif all(c in longest or c in produced for c in columns):
            bound = sum(longest[c][0] if c in longest else produced[c] for c in columns)
            if bound + ITEM_OVERHEAD_TOKENS > window:
                raise PlanError(
                    f"sem_agg: an item can have {bound + ITEM_OVERHEAD_TOKENS} tokens (its"
                    f" columns {list(columns)} at their longest), more than the {window} one"
                    " call can carry; shorten them or lower their operators' max_tokens"
                )
    except PlanError as exc:
        raise PlanError(f"[{op_id}] {exc}") from None


def precheck(
    lowered: Sequence[LoweredPipeline],
    physical: PhysicalPlan,
    instances: Sequence[Instance],
    state: RunState,
) -> None:
    """Fail before any LLM call on values that cannot enter a prompt, prompts that cannot
    fit, and decisions one token cannot answer."""
    check_text(state.options.system_prompt, "system_prompt")
    right = _check_values(physical, instances)
    referenced = {c for planned in physical.operators() for c in planned.operator.prompt_columns()}
    longest = _longest_pieces(instances, right, referenced, state)
    produced = _produced_tokens(physical, state)
    context = LoweringContext(state.options.system_prompt, state.layout)
    nodes = _checked_nodes(lowered, context)
    _check_prompt_sizes(nodes, longest, produced, state)
    for node in nodes:
        if node.decision is not None:
            try:
                decision_token_ids(node, state.layout)
            except ValueError as exc:
                raise PlanError(str(exc)) from None
    for pipeline in lowered:
        barrier = pipeline.barrier
        if barrier is not None and isinstance(barrier.operator, SemAgg):
            _check_agg(barrier.operator, barrier.op_id, instances, longest, produced, state)


# --------------------------------------------------------------------------- running


async def _run_stage(
    stage_nodes: list[Any],
    instances: list[Instance],
    state: RunState,
    on_update: Callable[[list[StageView]], None] | None,
) -> tuple[list[Instance], PipelineReport]:
    stages = (Stage(0, None, tuple(stage_nodes)),)
    runner = PipelineRunner(state, len(stages), on_update)
    out = await runner.run(initial_programs(stages, instances, state))
    return out, runner.report


async def _run_barrier(
    pipeline: LoweredPipeline,
    done: Execution,
    state: RunState,
    on_update: Callable[[list[StageView]], None] | None,
) -> list[Instance]:
    """The barrier's output instances (fresh, so the next pipeline counts its chain from
    0); its reports and chain added to ``done``."""
    assert pipeline.barrier is not None
    instances = done.instances
    planned = pipeline.barrier
    op = planned.operator
    context = LoweringContext(state.options.system_prompt, state.layout)
    stats = state.stats_for(planned.op_id)
    if isinstance(op, SemTopK):
        nodes = op.scorer().lower(planned.op_id, context)
        before = {i.key: i.generated_tokens for i in instances}
        scored, report = await _run_stage(nodes, instances, state, on_update)
        done.reports.append(report)
        done.add_chain(scored, before)
        stats.rows_in, stats.rows_out = len(instances), min(op.k, len(scored))
        return op.select(scored)
    assert isinstance(op, SemAgg)
    stats.rows_in = len(instances)
    if not instances:  # nothing to aggregate: one empty answer, no call
        stats.rows_out = 1
        return [Instance((0,), {op.output_column: ""})]
    texts = [op.item_text(i) for i in instances]
    window = op.window_tokens(state.engine.capacity.max_model_len_tokens)
    nodes = op.folder().lower(planned.op_id, context)
    while True:
        groups = op.pack(texts, state.layout.tokenizer, window)
        holders = [Instance((g,), {ITEMS_COLUMN: text}) for g, text in enumerate(groups)]
        folded, report = await _run_stage(nodes, holders, state, on_update)
        done.reports.append(report)
        done.add_chain(folded)
        texts = [str(i.values["partial"]) for i in folded]
        if len(texts) == 1:
            stats.rows_out = 1
            return [Instance((0,), {op.output_column: texts[0]})]


async def execute(
    physical: PhysicalPlan,
    instances: list[Instance],
    state: RunState,
    on_update: OnUpdate | None = None,
) -> Execution:
    """Run every pipeline in order.

    Raises:
        PlanError: before any LLM call, for the checks of the module docstring.
        QueryError: a task failed; ``partial`` is the :class:`Execution` so far (the rows
            that had completed the whole plan). Nothing the run held is left behind.
    """
    options = state.options
    policy = options.resolved_policy()
    if options.pinning == "explicit" and not state.engine.supports_pinning:
        raise PlanError(
            f"explicit pinning needs an engine that supports it; {state.engine.name} does not"
            " (vLLM: start it with scheduler_cls=kalypso.engine.vllm_pinning.PINNING_SCHEDULER_CLS)"
        )
    context = LoweringContext(options.system_prompt, state.layout)
    lowered = lower(physical, context, operator_at_a_time=policy.operator_at_a_time)
    precheck(lowered, physical, instances, state)
    for planned in physical.operators():  # build indexes, load the embedder: off the loop
        if planned.operator.has_preparation:
            await asyncio.to_thread(planned.operator.prepare)
    done = Execution(instances, [])
    for pipeline in lowered:
        number = pipeline.number

        def update(views: list[StageView], number: int = number) -> None:
            if on_update is not None:
                on_update(number, views)

        last = pipeline is lowered[-1]
        try:
            if pipeline.barrier is not None:
                done.instances = await _run_barrier(pipeline, done, state, update)
            runner = PipelineRunner(state, len(pipeline.stages), update)
            try:
                done.instances = await runner.run(
                    initial_programs(pipeline.stages, done.instances, state)
                )
            finally:
                done.reports.append(runner.report)
            done.add_chain(done.instances)
        except TaskFailed as failure:
            completed = (
                sorted(runner.core.outputs, key=lambda i: i.key)
                if last and pipeline.barrier is None
                else []
            )
            logger.info("%s failed: %s", state.owner, failure)
            raise QueryError(
                f"query {state.owner} failed: {failure}",
                partial=Execution(completed, done.reports),
                op_id=failure.op_id,
                key=failure.key,
            ) from failure.cause
    return done
