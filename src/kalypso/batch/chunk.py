"""One piece of a batch run: a chunk of requests lowered by shape, each shape run on the
core, the answers written to a piece file in line order (merged by :mod:`kalypso.batch.run`).

Within a chunk each shape (:mod:`kalypso.batch.lower`) is one core run; a chunk's shapes
run together on one KV ledger, so they share the engine's capacity as concurrent runs do.
A call the engine fails (a timeout, a refusal) is that line's error; the other lines go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from kalypso.batch import output
from kalypso.batch.lower import NODE, Shape, lower_shape, shape_key
from kalypso.batch.result import BatchResult
from kalypso.batch.schema import BatchRequest
from kalypso.core.dataflow import FlowPlan, root_programs
from kalypso.core.errors import QueryError, TaskFailed
from kalypso.core.hooks import RunHooks
from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.options import RunOptions
from kalypso.core.policies import PlanInfo
from kalypso.core.result_cache import PromptResultCache
from kalypso.core.runner import PipelineRunner, RunState
from kalypso.core.stats import OperatorStats, merged_stats
from kalypso.engine.protocol import Engine

logger = logging.getLogger(__name__)


async def run_piece(
    chunk: list[BatchRequest],
    engine: Engine,
    options: RunOptions,
    ledger: KVLedger,
    cache: PromptResultCache,
    owner: str,
    piece: Path,
    hooks: RunHooks | None,
) -> BatchResult:
    """Run ``chunk``; write a line per request to the file ``piece``, in line order: its
    number, a tab, ``a`` (answered) or ``e`` (failed), a tab, the output line's JSON.
    Returns what it did, as one chunk."""
    result = BatchResult(chunks=1)
    groups: dict[Any, list[BatchRequest]] = {}
    for request in chunk:
        groups.setdefault(shape_key(request), []).append(request)
    capacity = engine.capacity
    layouts: dict[str, Any] = {}
    answers: dict[int, CallOutcome] = {}
    refused: dict[int, tuple[str, str]] = {}
    shapes: list[Shape] = []
    for requests in groups.values():
        shape, too_long = lower_shape(
            requests, engine.tokenizer, capacity.max_model_len_tokens, layouts
        )
        for line, message in too_long:
            refused[line] = ("context_length_exceeded", message)
        if shape is not None:
            shapes.append(shape)
    result.shapes += len(shapes)
    try:
        async with asyncio.TaskGroup() as group:  # one failing run cancels the others
            runs = [
                group.create_task(
                    run_shape(shape, engine, options, ledger, cache, f"{owner}.s{index}", hooks)
                )
                for index, shape in enumerate(shapes)
            ]
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0]  # noqa: B904 - a shape's own error, with its cause
    for shape, run in zip(shapes, runs, strict=True):
        done, stats = run.result()
        result.distinct += len(shape.instances)
        result.prompt_tokens += stats.prompt_tokens
        result.cached_tokens += stats.cached_tokens
        result.min_prefill_tokens += stats.min_prefill_tokens
        for instance in done:
            outcome = instance.outputs[NODE]
            for line in shape.lines_of[instance.key[0]]:
                answers[line] = outcome
            if not outcome.error:
                result.output_tokens += len(outcome.output_token_ids)
    result.distinct += len(refused)
    with piece.open("w", encoding="utf-8") as sink:
        for request in chunk:
            found = answers.get(request.line)
            if found is None or found.error:
                code, message = refused.get(
                    request.line,
                    ("engine_error", (found.error if found else None) or "no answer"),
                )
                sink.write(
                    f"{request.line}\te\t{json.dumps(output.failed(request, code, message))}\n"
                )
                result.failed += 1
                result.errors[code] = result.errors.get(code, 0) + 1
                continue
            answer = output.answered(request, found, engine.tokenizer)
            sink.write(f"{request.line}\ta\t{json.dumps(answer, ensure_ascii=False)}\n")
            result.answered += 1
    return result


async def run_shape(
    shape: Shape,
    engine: Engine,
    options: RunOptions,
    ledger: KVLedger,
    cache: PromptResultCache,
    owner: str,
    hooks: RunHooks | None = None,
) -> tuple[list[Instance], OperatorStats]:
    """One shape's instances on the core: them with their outcomes, and the run's
    statistics summed over its nodes."""
    policy = options.resolved_policy()
    capacity = engine.capacity
    policy.prepare(
        PlanInfo(
            shape.graph,
            [i.key for i in shape.instances],
            shape.layout,
            capacity.block_size_tokens,
            capacity=capacity,
            cost_model=engine.cost_model,
        )
    )
    state = RunState.create(
        engine, options, owner, ledger, policy, shape.layout, result_cache=cache, hooks=hooks
    )
    flow = FlowPlan.of(shape.graph)
    runner = PipelineRunner(state, flow.num_stages, policy=policy)
    if hooks is not None and hooks.on_progress is not None:
        listener = hooks.for_run(owner).on_progress
        assert listener is not None
        runner.on_update = lambda views: listener(1, views)
    state.register_owner()
    try:
        done = await runner.run(root_programs(flow, shape.instances, state.program_context()))
    except TaskFailed as failure:
        raise QueryError(
            f"batch run {owner} failed: {failure}", op_id=failure.op_id, key=failure.key
        ) from failure.cause
    finally:
        ledger.unregister(owner)
    parts = list(state.stats.values())
    return done, merged_stats(parts) if parts else OperatorStats(NODE)
