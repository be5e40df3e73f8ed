"""Running a batch file on an engine: validate it whole, then chunk by chunk lower, run
on the core and write the answers in input order.

Within a chunk each shape (:mod:`kalypso.batch.lower`) is one core run; a chunk's shapes
run together on one KV ledger, so they share the engine's capacity as concurrent runs do.
Greedy answers go through one result cache for the whole file: a request equal to one
answered in an earlier chunk is answered from it. A call the engine fails (a timeout, a
refusal) is that line's error; the other lines go on.

Chunks are formed in the order of the requests' prefix keys (:meth:`FileIndex.chunks`),
so a chunk's answers are for lines anywhere in the file: each chunk's lines go to a
temporary file beside the output, in line order, and the files are merged in input
order at the end (reading a line of each at a time). A run that fails or is cancelled
merges the chunks it finished into ``<out>.part`` (input order, the unfinished lines
missing) and writes no ``out``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from kalypso.batch import output
from kalypso.batch.lower import NODE, Shape, lower_shape, shape_key
from kalypso.batch.reader import FileIndex, check_file
from kalypso.batch.schema import BatchRequest
from kalypso.core.bounds import BoundPolicy
from kalypso.core.dataflow import FlowPlan, root_programs
from kalypso.core.errors import PlanError, QueryError, TaskFailed
from kalypso.core.estimator import TokenBoundEstimator
from kalypso.core.hooks import RunHooks
from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.options import WORKFLOW_POLICY, RunOptions
from kalypso.core.policies import PlanInfo
from kalypso.core.result_cache import PromptResultCache
from kalypso.core.runner import PipelineRunner, RunState
from kalypso.engine.protocol import Engine

logger = logging.getLogger(__name__)

CHUNK_REQUESTS = 4096
"""Requests lowered and run together by default: the scope of the prefix ordering, and
what the run holds in memory at once."""


@dataclass
class BatchResult:
    """What a batch run did.

    ``prompt_tokens`` and ``cached_tokens`` are the engine's, over the requests it was
    sent (a greedy body answered once, or by the result cache, counts once); ``prefill``
    is what it computed.
    """

    answered: int = 0
    failed: int = 0
    distinct: int = 0
    """Distinct requests: greedy requests with equal bodies count once (those refused
    before the run included)."""
    result_cache_hits: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    shapes: int = 0
    chunks: int = 0
    time_s: float = 0.0
    model: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    """Failed lines by error code."""

    @property
    def requests(self) -> int:
        return self.answered + self.failed

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def summary(self) -> str:
        return (
            f"{self.requests:,} requests ({self.answered:,} answered, {self.failed:,} failed;"
            f" {self.requests - self.distinct:,} answered by an equal request,"
            f" {self.result_cache_hits:,} from the result cache), {self.prompt_tokens:,} prompt"
            f" tokens, {self.prefill_tokens:,} prefilled, hit rate {self.hit_rate:.1%},"
            f" {self.output_tokens:,} output tokens, {self.shapes} shape(s) in"
            f" {self.chunks} chunk(s), {self.time_s:.1f} s"
        )


Progress = Callable[[BatchResult], None]


async def arun_batch(
    input_path: str | Path,
    output_path: str | Path,
    engine: Engine,
    *,
    error_path: str | Path | None = None,
    options: RunOptions | None = None,
    chunk_requests: int = CHUNK_REQUESTS,
    on_progress: Progress | None = None,
    index: FileIndex | None = None,
    ledger: KVLedger | None = None,
    hooks: RunHooks | None = None,
) -> BatchResult:
    """Run the OpenAI-format batch file ``input_path`` on ``engine``; answers go to
    ``output_path`` and failed lines to ``error_path`` (default ``<output>.errors.jsonl``,
    written only when a line failed), both in input order.

    ``options`` are the core's (the policy, the call timeout); ``cache-aware`` by default.
    ``index``: the file already checked (:func:`~kalypso.batch.reader.check_file`), so it
    is not read twice. ``ledger`` shares the engine with other runs (the job server's; by
    default the run has one of its own) and ``hooks`` attach a journal of calls and a
    progress listener (:mod:`kalypso.core.hooks`).

    Raises:
        BatchFileError: a line is refused (line and field named); nothing was run.
        PlanError: bad options.
        QueryError: the run failed (the finished chunks' lines are in ``<output>.part``).
    """
    started = time.monotonic()
    source, target = Path(input_path), Path(output_path)
    errors_to = Path(error_path) if error_path else target.with_name(target.name + ".errors.jsonl")
    if chunk_requests < 1:
        raise PlanError(f"chunk_requests must be >= 1, got {chunk_requests}")
    if target.resolve() == source.resolve():
        raise PlanError(f"the output {target} would overwrite the input")
    if index is None or index.path != source:
        index = check_file(source)
    base = options or RunOptions()
    run_options = replace(
        base, policy=base.policy or WORKFLOW_POLICY, isolate_call_errors=True, system_prompt=""
    )
    result = BatchResult(model=index.model)
    ledger = ledger if ledger is not None else KVLedger(engine.capacity.num_blocks)
    cache = PromptResultCache(engine.name)
    batch_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        pieces: list[Path] = []
        try:
            for number, chunk in enumerate(index.chunks(chunk_requests)):
                piece = Path(tmp) / f"chunk-{number}.tsv"
                with piece.open("w", encoding="utf-8") as sink:
                    owner = f"b{batch_id}c{number}"
                    await _run_chunk(
                        chunk, engine, run_options, ledger, cache, owner, sink, result, hooks
                    )
                pieces.append(piece)
                result.chunks += 1
                result.time_s = time.monotonic() - started
                if on_progress is not None:
                    on_progress(result)
        except BaseException:
            _merge(pieces, target.with_name(target.name + ".part"), None)
            raise
        _merge(pieces, target, errors_to if result.failed else None)
    result.result_cache_hits = cache.stats.hits
    result.time_s = time.monotonic() - started
    logger.info("batch %s: %s", source, result.summary())
    return result


async def _run_chunk(
    chunk: list[BatchRequest],
    engine: Engine,
    options: RunOptions,
    ledger: KVLedger,
    cache: PromptResultCache,
    owner: str,
    sink: IO[str],
    result: BatchResult,
    hooks: RunHooks | None,
) -> None:
    """Run ``chunk``; write a line per request to ``sink``, in line order: its number, a
    tab, ``a`` (answered) or ``e`` (failed), a tab, the output line's JSON."""
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
                    _run_shape(shape, engine, options, ledger, cache, f"{owner}s{index}", hooks)
                )
                for index, shape in enumerate(shapes)
            ]
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None
    for shape, run in zip(shapes, runs, strict=True):
        done, prompt, cached = run.result()
        result.distinct += len(shape.instances)
        result.prompt_tokens += prompt
        result.cached_tokens += cached
        for instance in done:
            outcome = instance.outputs[NODE]
            for line in shape.lines_of[instance.key[0]]:
                answers[line] = outcome
            if not outcome.error:
                result.output_tokens += len(outcome.output_token_ids)
    result.distinct += len(refused)
    for request in chunk:
        found = answers.get(request.line)
        if found is None or found.error:
            code, message = refused.get(
                request.line,
                ("engine_error", (found.error if found else None) or "no answer"),
            )
            sink.write(f"{request.line}\te\t{json.dumps(output.failed(request, code, message))}\n")
            result.failed += 1
            result.errors[code] = result.errors.get(code, 0) + 1
            continue
        answer = output.answered(request, found, engine.tokenizer)
        sink.write(f"{request.line}\ta\t{json.dumps(answer, ensure_ascii=False)}\n")
        result.answered += 1


def _merge(pieces: list[Path], answers_to: Path, errors_to: Path | None) -> None:
    """Merge the chunks' lines (each piece in line order) into ``answers_to`` and, when
    given, ``errors_to``, in input order; a piece is read a line at a time."""
    handles = [piece.open(encoding="utf-8") for piece in pieces]
    try:
        rows = heapq.merge(*handles, key=lambda row: int(row.split("\t", 1)[0]))
        with contextlib.ExitStack() as stack:
            answers = stack.enter_context(answers_to.open("w", encoding="utf-8"))
            errors = stack.enter_context(errors_to.open("w")) if errors_to else None
            for row in rows:
                _, kind, text = row.split("\t", 2)
                if kind == "a":
                    answers.write(text)
                elif errors is not None:
                    errors.write(text)
    finally:
        for handle in handles:
            handle.close()


async def _run_shape(
    shape: Shape,
    engine: Engine,
    options: RunOptions,
    ledger: KVLedger,
    cache: PromptResultCache,
    owner: str,
    hooks: RunHooks | None = None,
) -> tuple[list[Instance], int, int]:
    """One shape's instances on the core: them with their outcomes, and the engine's
    prompt and cached tokens."""
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
    bounds = BoundPolicy(
        bounded=policy.bounded_outputs,
        estimator=TokenBoundEstimator() if options.estimate_bounds else None,
        fixed_bound_tokens=options.fixed_bound_tokens,
    )
    state = RunState.create(engine, options, owner, ledger, bounds, shape.layout)
    state.result_cache = cache
    if hooks is not None:
        state.hooks = hooks
    flow = FlowPlan.of(shape.graph)
    runner = PipelineRunner(state, flow.num_stages, policy=policy)
    if hooks is not None and hooks.on_progress is not None:
        listener = hooks.on_progress
        runner.on_update = lambda views: listener(1, views)
    ledger.register(owner, options.request_priority)
    try:
        done = await runner.run(root_programs(flow, shape.instances, state.program_context()))
    except TaskFailed as failure:
        raise QueryError(
            f"batch run {owner} failed: {failure}", op_id=failure.op_id, key=failure.key
        ) from failure.cause
    finally:
        ledger.unregister(owner)
    prompt = sum(s.prompt_tokens for s in state.stats.values())
    cached = sum(s.cached_tokens for s in state.stats.values())
    return done, prompt, cached
