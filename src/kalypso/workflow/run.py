"""Running workflows on a batch: optimize, lower, schedule on the core, read the outputs."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kalypso.core.dataflow import FlowPlan, root_programs
from kalypso.core.errors import PlanError, QueryError, TaskFailed
from kalypso.core.hooks import RunHooks
from kalypso.core.instance import Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.memory_bound import block_steps, held_blocks, least_decode_steps
from kalypso.core.options import RunOptions
from kalypso.core.progress import ProgressView
from kalypso.core.replicas import ReplicaSet
from kalypso.core.report import PipelineReport
from kalypso.core.result_cache import CacheStats, PromptResultCache
from kalypso.core.runner import PipelineRunner, RunState
from kalypso.core.stats import OperatorStats, RunTotals, stats_frame
from kalypso.core.warm import WarmReport
from kalypso.engine.protocol import Engine
from kalypso.workflow.dsl import Workflow
from kalypso.workflow.optimize import Rewrites
from kalypso.workflow.plan import WorkflowOptions, plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkflowResult(RunTotals):
    """Outputs (one row per query, a column per output) and what the run cost."""

    outputs: pd.DataFrame
    stats: pd.DataFrame
    operator_stats: tuple[OperatorStats, ...]
    policy: str
    engine: str
    time_s: float
    report: PipelineReport
    rewrites: Rewrites
    cache: CacheStats | None
    warm: WarmReport | None = None
    planning_s: float = 0.0
    """Optimizing, lowering and ordering before the first call (included in ``time_s``)."""
    longest_chain_tokens: int = 0
    """The most tokens one query's chain of dependent calls generated
    (:meth:`~kalypso.core.graph.TaskGraph.longest_chain_tokens`): the least engine steps
    the batch needs, whatever the schedule."""
    held_block_steps: int = 0
    """The KV blocks the calls' decoding holds, each shared block divided among the calls
    that can hold it in one step, summed over their decode steps and rounded up
    (:func:`kalypso.core.memory_bound.block_steps`): over the cache's blocks, another least
    number of engine steps."""
    least_decode_steps: int = 0
    """The least engine steps the calls' decoding needs in this engine's cache, where a
    step decodes no more calls than fit beside each other and the engine runs
    (:func:`kalypso.core.memory_bound.least_decode_steps`)."""

    @property
    def prompt_tokens(self) -> int:
        """The calls' prompt tokens and the warm-ups': a warm-up's prefill is the run's."""
        return super().prompt_tokens + (self.warm.tokens if self.warm else 0)

    @property
    def cached_tokens(self) -> int:
        """Of :attr:`prompt_tokens`, those found in the prefix cache (or the result cache)."""
        return super().cached_tokens + (self.warm.cached_tokens if self.warm else 0)

    def summary(self) -> str:
        hits = f", result cache {self.cache.hits} hits" if self.cache else ""
        return (
            f"{self.policy} on {self.engine}: {self.time_s:.2f} s, {self.llm_calls} calls,"
            f" {self.prompt_tokens} prompt tokens, {self.prefill_tokens} computed"
            f" (minimum {self.min_prefill_tokens}), prefix hit rate {self.hit_rate:.1%}{hits}"
        )


async def arun(
    workflows: Workflow | Sequence[Workflow],
    engine: Engine | ReplicaSet,
    inputs: Mapping[str, Sequence[Any]] | pd.DataFrame,
    options: RunOptions | None = None,
    *,
    workflow_options: WorkflowOptions | None = None,
    ledger: KVLedger | None = None,
    cache: PromptResultCache | None = None,
    hooks: RunHooks | None = None,
    queries: Sequence[int] | None = None,
    **option_values: Any,
) -> WorkflowResult:
    """Run ``workflows`` (one, or several submitted together and optimized as one) on the
    batch ``inputs`` (input name -> one text per query).

    ``options`` are the core's :class:`~kalypso.core.options.RunOptions` (or their fields
    as keywords): the policy, the timeouts, progress. ``cache`` shares a prompt/result
    cache across runs (the second day of a workflow run daily). ``hooks`` attach a journal
    of calls and a progress listener (:mod:`kalypso.core.hooks`; the job server's).
    ``queries`` runs only those queries of the batch (see :func:`~kalypso.workflow.plan.plan`).

    ``engine`` may be a :class:`~kalypso.core.replicas.ReplicaSet`: each query's calls then
    run on one replica, and the outputs equal the one-engine run's
    (:mod:`kalypso.workflow.replicated`).

    Raises:
        PlanError: before any call, for bad inputs or options.
        QueryError: the run failed after it started (nothing it held is left behind;
            ``partial`` holds the queries that had finished).
    """
    if isinstance(engine, ReplicaSet):
        if ledger is not None or cache is not None or queries is not None:
            raise PlanError(
                "a run on a replica set takes no ledger, cache or queries: each replica has"
                " its own ledger, and the set places the queries"
            )
        from kalypso.workflow.replicated import arun_replicated

        return await arun_replicated(
            workflows, engine, inputs, options, workflow_options, hooks, option_values
        )
    started = time.monotonic()
    planned = plan(
        workflows,
        engine,
        inputs,
        options,
        workflow_options=workflow_options,
        queries=queries,
        **option_values,
    )
    options, lowered, policy = planned.options, planned.lowered, planned.policy
    owner, warmer = planned.owner, planned.warmer
    result_cache = None
    if planned.switches.result_cache:
        result_cache = cache if cache is not None else PromptResultCache(engine.name)
    state = RunState.create(
        engine,
        options,
        owner,
        ledger,
        policy,
        planned.layout,
        result_cache=result_cache,
        hooks=hooks,
    )
    flow = FlowPlan.of(lowered.graph)
    runner = PipelineRunner(state, flow.num_stages, policy=policy)
    try:
        state.register_owner()  # from here on, the finally below unregisters it
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    logger.info(
        "workflow %s: %d queries, policy %s, on %s",
        owner,
        len(planned.instances),
        policy.name,
        engine.name,
    )

    def result(done: list[Instance]) -> WorkflowResult:
        ordered = sorted(done, key=lambda i: i.key)
        rows = [lowered.read_outputs(i) for i in ordered]
        frame = pd.DataFrame(rows, columns=list(lowered.outputs))
        operator_stats = tuple(state.stats.values())
        capacity = engine.capacity
        finished = time.monotonic()
        computed = [  # what the engine computed: result-cache answers computed nothing
            ((i.key, node_id), outcome)
            for i in ordered
            for node_id, outcome in i.outputs.items()
            if not outcome.from_result_cache
        ]
        held = held_blocks(
            [(outcome.prompt_token_ids, outcome.output_token_ids) for _, outcome in computed],
            capacity.block_size_tokens,
            sites=[site for site, _ in computed],
            ancestors=lowered.graph.llm_ancestors(),
        )
        return WorkflowResult(
            outputs=frame,
            stats=stats_frame(list(operator_stats)),
            operator_stats=operator_stats,
            policy=policy.name,
            engine=engine.name,
            time_s=finished - started,
            report=runner.report,
            rewrites=lowered.canon.rewrites,
            cache=state.result_cache.stats if state.result_cache else None,
            warm=warmer.report if warmer else None,
            planning_s=planned.planning_s,
            longest_chain_tokens=max(
                (lowered.graph.longest_chain_tokens(i.outputs) for i in ordered), default=0
            ),
            held_block_steps=math.ceil(block_steps(held)),
            least_decode_steps=least_decode_steps(
                held, capacity.num_blocks, capacity.max_running_requests
            ),
        )

    try:
        programs = root_programs(flow, planned.instances, state.program_context())
        if warmer is not None and planned.warm is not None:
            warmer.start(planned.warm)
        with ProgressView(
            enabled=options.progress,
            hit_rate=state.cache_tokens,
            listener=state.hooks.on_progress,
        ) as view:
            runner.on_update = lambda views: view.update(1, views)
            done = await runner.run(programs)
    except TaskFailed as failure:
        raise QueryError(
            f"workflow {owner} failed: {failure}",
            partial=result(list(runner.core.outputs)),
            op_id=failure.op_id,
            key=failure.key,
        ) from failure.cause
    finally:
        state.ledger.unregister(owner)
        if warmer is not None:
            await warmer.release()
    out = result(done)
    logger.info("workflow %s done: %s", owner, out.summary())
    return out
