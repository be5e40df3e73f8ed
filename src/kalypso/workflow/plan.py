"""Planning a workflow run: optimize, lower, bind the batch, measure, order - everything
:func:`~kalypso.workflow.run.arun` does before its first call, and the ``explain()`` of it.

    plan = wf.plan(flow, engine, {"question": questions})
    print(plan.explain())   # the DAG, the optimizer's rewrites, the radix tree, the schedule

Planning reads the engine's tokenizer (every prompt is token-exact), its cache's size
(the instance window) and its name; it sends nothing to the engine.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kalypso.core.cost import CallCost
from kalypso.core.errors import PlanError
from kalypso.core.graph import LLMNode, Node
from kalypso.core.instance import Instance
from kalypso.core.instance_window import (
    InstancePeak,
    InstanceWork,
    instance_peak,
    instance_work,
    llm_levels,
)
from kalypso.core.options import WORKFLOW_POLICY, RunOptions, run_options
from kalypso.core.policies import PlanInfo, Policy
from kalypso.core.prompt import ChatLayout
from kalypso.core.trt import TemplatedRadixTree
from kalypso.core.warm import WarmChoice, Warmer
from kalypso.engine.protocol import Engine
from kalypso.workflow.analysis import call_costs
from kalypso.workflow.dsl import Workflow
from kalypso.workflow.lower import Lowered, lower

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM = ""

PEAK_SAMPLE_INSTANCES = 4
"""Instances whose calls measure an instance's peak working set."""


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


SampleCalls = tuple[list[CallCost], list[tuple[str, tuple[int, ...]]]]
"""The sample instances' calls and their (LLM node id, instance key) sites."""


def sample_calls(
    lowered: Lowered, instances: Sequence[Instance], layout: ChatLayout
) -> SampleCalls:
    """The calls of the first :data:`PEAK_SAMPLE_INSTANCES` instances as the cost model
    sees them (:func:`~kalypso.workflow.analysis.call_costs`): answers count at their cap;
    a Python step's output counts what its slot knows before it runs."""

    def out_tokens(node: Node) -> int:
        return node.max_tokens if isinstance(node, LLMNode) else 0

    return call_costs(lowered, instances[:PEAK_SAMPLE_INSTANCES], layout, out_tokens)


def measure_instance_work(
    lowered: Lowered, sample: SampleCalls, block_size_tokens: int
) -> InstanceWork | None:
    """What one instance asks of the engine (:func:`~kalypso.core.instance_window.instance_work`),
    over the ``sample`` (:func:`sample_calls`): a window weighs it when calls continue
    conversations, a ledger's size when none does. None for a workflow without LLM
    calls."""
    calls, sites = sample
    tight = lowered.graph.tight_continuations()  # the automatic window weighs these
    return instance_work(calls, sites, tight, block_size_tokens) if calls else None


def measure_instance_peak(
    lowered: Lowered, sample: SampleCalls, block_size_tokens: int
) -> InstancePeak | None:
    """The largest working set of one instance's conversation group at one dependency
    level (:func:`~kalypso.core.instance_window.instance_peak`, each group of each
    instance apart; :meth:`~kalypso.core.graph.TaskGraph.conversation_groups`), the most
    over the ``sample`` (:func:`sample_calls`, where a Python step's output can only
    make the window larger); None when no call continues a conversation tightly (no
    automatic window would use it; a set one needs no peak)."""
    groups = lowered.graph.conversation_groups(tight_only=True)
    if not groups:
        return None
    group_of = {op: index for index, group in enumerate(groups) for op in group}
    calls, sites = sample
    members = [i for i, (op, _) in enumerate(sites) if op in group_of]
    levels = llm_levels(lowered.graph.llm_ancestors())
    return instance_peak(
        [calls[i] for i in members],
        [(sites[i][0], (group_of[sites[i][0]], sites[i][1])) for i in members],
        levels,
        block_size_tokens,
    )


@dataclass(frozen=True)
class WorkflowPlan:
    """One run's plan: what :func:`~kalypso.workflow.run.arun` runs, built before its first
    call. ``policy`` is prepared for this run (its order and window are built) and is
    used by one run only; ``warmer`` and ``warm`` (what it warms) are None when warming
    is off."""

    flows: tuple[Workflow, ...]
    lowered: Lowered
    instances: list[Instance]
    options: RunOptions
    switches: WorkflowOptions
    layout: ChatLayout
    policy: Policy
    info: PlanInfo
    owner: str
    engine_name: str
    tree: TemplatedRadixTree
    """The LLM nodes' templated radix tree."""
    warmer: Warmer | None
    warm: WarmChoice | None
    planning_s: float
    """Seconds the plan took (counted in the run's time)."""

    @property
    def llm_nodes(self) -> list[LLMNode]:
        return [n for n in self.lowered.graph.nodes if isinstance(n, LLMNode)]

    def explain(self) -> str:
        """The plan as text: the batch and engine, the optimizer's rewrites, the task
        graph (the DAG the calls run in), the templated radix tree (which calls share
        which prefix, in tokens), the prefixes warmed, and the policy's schedule."""
        graph, capacity = self.lowered.graph, self.info.capacity
        engine = self.engine_name
        if capacity is not None:
            running = capacity.max_running_requests
            engine += (
                f" ({capacity.num_blocks} KV blocks of {capacity.block_size_tokens} tokens, "
                + (f"at most {running} sequences)" if running else "sequences unbounded)")
            )
        values = sum(len(f.values) for f in self.flows)
        model = self.info.cost_model
        lines = [
            f"workflow plan {graph.name!r}: {len(self.instances)} queries on {engine}",
            "engine cost model: " + (model.explain() if model is not None else "none"),
            "optimizer:",
            f"  pruning: only what the outputs need is built ({values} values,"
            f" {len(self.llm_nodes)} distinct LLM calls per query)",
            *(f"  {line}" for line in self._merging()),
            "  prompt/result cache: "
            + (
                "on (greedy calls; keyed by model, decoding and token ids)"
                if self.switches.result_cache
                else "off"
            ),
            f"  proactive prefix caching: {self._warming()}",
            graph.explain(),
            self.tree.explain(),
            f"schedule (policy {self.policy.name}):",
            *(f"  {line}" for line in self.policy.explain().splitlines()),
        ]
        return "\n".join(lines)

    def _merging(self) -> list[str]:
        if not self.switches.merge:
            return ["common-subgraph elimination: off"]
        return self.lowered.canon.rewrites.describe()

    def _warming(self) -> str:
        if self.warm is None:
            return "off"
        block = self.info.block_size_tokens
        return self.warm.describe(max(self.switches.warm_min_tokens, block), block)


def plan(
    workflows: Workflow | Sequence[Workflow],
    engine: Engine,
    inputs: Mapping[str, Sequence[Any]] | pd.DataFrame,
    options: RunOptions | None = None,
    *,
    workflow_options: WorkflowOptions | None = None,
    queries: Sequence[int] | None = None,
    **option_values: Any,
) -> WorkflowPlan:
    """Plan ``workflows`` on the batch ``inputs`` for ``engine`` without running them;
    the arguments are :func:`~kalypso.workflow.run.arun`'s. ``explain()`` shows the plan.
    ``queries`` plans only those queries of the batch (by position; each keeps its
    position as its key, so outputs and journaled calls name it alike in every run).

    Raises:
        PlanError: bad workflows, inputs or options (nothing was sent to the engine).
    """
    started = time.monotonic()
    flows = [workflows] if isinstance(workflows, Workflow) else list(workflows)
    if not flows or not all(isinstance(w, Workflow) for w in flows):
        raise PlanError(f"expected a Workflow or a list of them, got {workflows!r}")
    options = run_options(options, option_values, system_prompt=DEFAULT_SYSTEM)
    if engine is None or isinstance(engine, type) or not isinstance(engine, Engine):
        raise PlanError(
            f"a workflow runs on an engine (kalypso.engine.protocol.Engine), got {engine!r}"
        )
    options = options.with_default_policy(WORKFLOW_POLICY)
    switches = workflow_options or WorkflowOptions()
    lowered = lower(flows, merge=switches.merge)
    instances = batch_instances(lowered, inputs)
    if queries is not None:
        if any(not 0 <= q < len(instances) for q in queries) or len(set(queries)) != len(queries):
            raise PlanError(f"queries must be distinct positions in the batch of {len(instances)}")
        instances = [instances[q] for q in queries]
    layout = ChatLayout(engine.tokenizer)
    capacity = engine.capacity
    policy = options.resolved_policy()
    peak = work = None
    if policy.reads_instance_peak:
        sample = sample_calls(lowered, instances, layout)
        peak = measure_instance_peak(lowered, sample, capacity.block_size_tokens)
        work = measure_instance_work(lowered, sample, capacity.block_size_tokens)
    info = PlanInfo(
        lowered.graph,
        [i.key for i in instances],
        layout,
        capacity.block_size_tokens,
        capacity=capacity,
        instance_peak=peak,
        instance_work=work,
        cost_model=engine.cost_model,
    )
    policy.prepare(info)
    owner = options.query_id or f"w{uuid.uuid4().hex[:8]}"
    nodes = [n for n in lowered.graph.nodes if isinstance(n, LLMNode)]
    tree = TemplatedRadixTree.of(nodes, layout)
    warmer = warm = None
    if switches.warm:
        warmer = Warmer(
            engine, layout, owner, switches.warm_min_tokens, pin=options.pinning == "explicit"
        )
        warm = warmer.choose(tree, nodes, instances)
    return WorkflowPlan(
        flows=tuple(flows),
        lowered=lowered,
        instances=instances,
        options=options,
        switches=switches,
        layout=layout,
        policy=policy,
        info=info,
        owner=owner,
        engine_name=engine.name,
        tree=tree,
        warmer=warmer,
        warm=warm,
        planning_s=time.monotonic() - started,
    )
