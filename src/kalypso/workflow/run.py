"""Running workflows on a batch: optimize, lower, schedule on the core, read the outputs."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kalypso.core.bounds import BoundPolicy
from kalypso.core.dataflow import FlowPlan, root_programs
from kalypso.core.errors import PlanError, QueryError, TaskFailed
from kalypso.core.estimator import TokenBoundEstimator
from kalypso.core.graph import LLMNode, Node
from kalypso.core.instance import Instance
from kalypso.core.instance_window import InstancePeak, instance_peak, llm_levels
from kalypso.core.ledger import KVLedger
from kalypso.core.memory_bound import block_steps, held_blocks, least_decode_steps
from kalypso.core.options import RunOptions
from kalypso.core.policies import PlanInfo
from kalypso.core.progress import ProgressView
from kalypso.core.prompt import ChatLayout
from kalypso.core.report import PipelineReport
from kalypso.core.result_cache import CacheStats, PromptResultCache
from kalypso.core.runner import PipelineRunner, RunState
from kalypso.core.stats import OperatorStats, RunTotals, stats_frame
from kalypso.core.warm import Warmer, WarmReport
from kalypso.engine.protocol import Engine
from kalypso.workflow.analysis import call_costs
from kalypso.workflow.dsl import Workflow
from kalypso.workflow.lower import Lowered, lower
from kalypso.workflow.optimize import Rewrites

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM = ""


@dataclass(frozen=True)
class WorkflowOptions:
    """The workflow optimizer's switches (each is one of the paper's ablations when off).

    Attributes:
        merge: common-subgraph elimination of greedy calls.
        result_cache: reuse greedy answers to identical prompts (a fresh cache per run,
            unless ``cache`` is given to share one across runs).
        warm: prefill the operators' static prefixes early, at low priority
            (:mod:`kalypso.core.warm`); ``warm_min_tokens`` is the shortest one warmed.
    """

    merge: bool = True
    result_cache: bool = True
    warm: bool = True
    warm_min_tokens: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.warm_min_tokens, bool) or not isinstance(self.warm_min_tokens, int):
            raise PlanError(f"warm_min_tokens must be an integer, got {self.warm_min_tokens!r}")
        for name in ("merge", "result_cache", "warm"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"{name} must be True or False, got {getattr(self, name)!r}")


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

    def summary(self) -> str:
        hits = f", result cache {self.cache.hits} hits" if self.cache else ""
        return (
            f"{self.policy} on {self.engine}: {self.time_s:.2f} s, {self.llm_calls} calls,"
            f" {self.prompt_tokens} prompt tokens, {self.prefill_tokens} computed"
            f" (minimum {self.min_prefill_tokens}), prefix hit rate {self.hit_rate:.1%}{hits}"
        )


def batch_instances(
    lowered: Lowered, inputs: Mapping[str, Sequence[Any]] | pd.DataFrame
) -> list[Instance]:
    """One instance per query from the input columns.

    Raises:
        PlanError: a missing or unknown input, columns of different lengths, no query, or
            a value that is not text.
    """
    if isinstance(inputs, pd.DataFrame):
        inputs = {str(c): list(inputs[c]) for c in inputs.columns}
    if not isinstance(inputs, Mapping):
        raise PlanError(f"inputs must map input names to lists of texts, got {inputs!r}")
    missing = [n for n in lowered.inputs if n not in inputs]
    unknown = [n for n in inputs if n not in lowered.inputs]
    if missing or unknown:
        raise PlanError(
            f"workflow inputs are {list(lowered.inputs)}; missing {missing}, unknown {unknown}"
        )
    lengths = {n: len(v) for n, v in inputs.items() if not isinstance(v, str)}
    if len(lengths) != len(inputs):
        raise PlanError("each input is a list of texts (one per query), not a single string")
    if len(set(lengths.values())) > 1:
        raise PlanError(f"inputs have different lengths: {lengths}")
    size = next(iter(lengths.values()), 1)
    if size == 0:
        raise PlanError("the batch is empty")
    instances = []
    for q in range(size):
        values = {}
        for name in lowered.inputs:
            value = inputs[name][q]
            if not isinstance(value, str):
                raise PlanError(f"input {name!r}, query {q}: expected text, got {value!r}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise PlanError(f"input {name!r}, query {q}: invalid text ({exc})") from None
            values[name] = value
        instances.append(Instance((q,), values))
    return instances


PEAK_SAMPLE_INSTANCES = 4
"""Instances whose calls measure an instance's peak working set."""


def measure_instance_peak(
    lowered: Lowered, instances: Sequence[Instance], layout: ChatLayout, block_size_tokens: int
) -> InstancePeak | None:
    """The largest working set of one instance's conversation group at one dependency
    level (:func:`~kalypso.core.instance_window.instance_peak`, each group of each
    instance apart; :meth:`~kalypso.core.graph.TaskGraph.conversation_groups`), the most
    over the first :data:`PEAK_SAMPLE_INSTANCES` instances; None when no call continues a
    conversation tightly (no window would use it). Answers count at their cap; a Python
    step's output counts what its slot knows before it runs, which can only make the
    window larger."""
    groups = lowered.graph.conversation_groups()
    if not groups:
        return None
    group_of = {op: index for index, group in enumerate(groups) for op in group}

    def out_tokens(node: Node) -> int:
        return node.max_tokens if isinstance(node, LLMNode) else 0

    calls, sites = call_costs(lowered, instances[:PEAK_SAMPLE_INSTANCES], layout, out_tokens)
    members = [i for i, (op, _) in enumerate(sites) if op in group_of]
    levels = llm_levels(lowered.graph.llm_ancestors())
    return instance_peak(
        [calls[i] for i in members],
        [(sites[i][0], (group_of[sites[i][0]], sites[i][1])) for i in members],
        levels,
        block_size_tokens,
    )


async def arun(
    workflows: Workflow | Sequence[Workflow],
    engine: Engine,
    inputs: Mapping[str, Sequence[Any]] | pd.DataFrame,
    options: RunOptions | None = None,
    *,
    workflow_options: WorkflowOptions | None = None,
    ledger: KVLedger | None = None,
    cache: PromptResultCache | None = None,
    **option_values: Any,
) -> WorkflowResult:
    """Run ``workflows`` (one, or several submitted together and optimized as one) on the
    batch ``inputs`` (input name -> one text per query).

    ``options`` are the core's :class:`~kalypso.core.options.RunOptions` (or their fields
    as keywords): the policy, the timeouts, progress. ``cache`` shares a prompt/result
    cache across runs (the second day of a workflow run daily).

    Raises:
        PlanError: before any call, for bad inputs or options.
        QueryError: the run failed after it started (nothing it held is left behind;
            ``partial`` holds the queries that had finished).
    """
    flows = [workflows] if isinstance(workflows, Workflow) else list(workflows)
    if not flows or not all(isinstance(w, Workflow) for w in flows):
        raise PlanError(f"expected a Workflow or a list of them, got {workflows!r}")
    if options is None:
        try:
            options = RunOptions(**{"system_prompt": DEFAULT_SYSTEM, **option_values})
        except TypeError as exc:
            raise PlanError(f"arun: {exc}") from None
    switches = workflow_options or WorkflowOptions()
    started = time.monotonic()
    lowered = lower(flows, merge=switches.merge)
    instances = batch_instances(lowered, inputs)
    plan = FlowPlan.of(lowered.graph)
    policy = options.resolved_policy()
    owner = options.query_id or f"w{uuid.uuid4().hex[:8]}"
    bounds = BoundPolicy(
        bounded=policy.bounded_outputs,
        estimator=TokenBoundEstimator() if options.estimate_bounds else None,
        fixed_bound_tokens=options.fixed_bound_tokens,
    )
    state = RunState.create(engine, options, owner, ledger, bounds)
    if switches.result_cache:
        state.result_cache = cache if cache is not None else PromptResultCache(engine.name)
    try:
        state.ledger.register(owner)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    logger.info(
        "workflow %s: %d queries, policy %s, on %s", owner, len(instances), policy.name, engine.name
    )
    capacity = engine.capacity
    info = PlanInfo(
        lowered.graph,
        [i.key for i in instances],
        state.layout,
        capacity.block_size_tokens,
        capacity=capacity,
        instance_peak=measure_instance_peak(
            lowered, instances, state.layout, capacity.block_size_tokens
        ),
    )
    runner = PipelineRunner(state, plan.num_stages, plan=info)
    programs = root_programs(plan, instances, state.program_context())
    planned = time.monotonic()

    def hit_rate() -> tuple[int, int]:
        return (
            sum(s.cached_tokens for s in state.stats.values()),
            sum(s.prompt_tokens for s in state.stats.values()),
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
            planning_s=planned - started,
            longest_chain_tokens=max(
                (lowered.graph.longest_chain_tokens(i.outputs) for i in ordered), default=0
            ),
            held_block_steps=math.ceil(block_steps(held)),
            least_decode_steps=least_decode_steps(
                held, capacity.num_blocks, capacity.max_running_requests
            ),
        )

    warmer = None
    if switches.warm:
        warmer = Warmer(
            engine,
            state.layout,
            owner,
            switches.warm_min_tokens,
            pin=options.pinning == "explicit",
        )
        warmer.start([n for n in lowered.graph.nodes if isinstance(n, LLMNode)])
    try:
        with ProgressView(enabled=options.progress, hit_rate=hit_rate) as view:
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
