"""Running a task graph as a DAG per instance: fan-in, several prefixes per instance, LLM
outputs feeding later prompts.

Each instance (one query of a workflow batch) gets a :class:`FlowState`. Its tasks are:

* a *root* task (no call) that runs the Python steps needing only the inputs;
* one task per LLM node, created when every node it depends on is done, which makes its
  call and then the Python steps its completion made ready.

A task's *prefix parent* is the LLM node whose prompt and answer its own prompt extends
(``continue_from``: a conversation continued); it is what the task's expected cache hit
is measured against.

**What a finished call holds.** Unlike the relational front end's reservation tree, a
workflow task reserves nothing in the ledger once its call is done. When the run asks
(``ProgramContext.hold_continued_prefixes``: cache-aware with explicit pinning does), a
call whose conversation other calls continue keeps its prompt and answer under a *soft*
pin until they are done: vLLM's LRU then evicts other free blocks first, and the engine
gives the pin up (newest first) when a call cannot get its blocks, so holding never
costs a call its place. A debate's first-round answer is kept while the other agents'
first rounds finish, then read by its own second round. Held in the ledger instead
(hard), the answers cut the number of calls running at once. On the simulator Debate
then reached the minimum prefill in 42.4 s against 45.3 s, but on real vLLM (CPU)
it took 40.7 s against 32.3 s (docs/benchmarks.md: hard pins cost 13-30% on CPU).

Prompts that start alike - a system prompt, a query's context, a conversation and its
continuation - are charged once while their calls run together
(:class:`~kalypso.core.memory.MemoryManager`), and the cache-aware order brings
dependent calls close to what they extend. Stages are the LLM nodes' depths in the
dependency DAG.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from kalypso.core.graph import FnNode, GraphError, InputNode, LLMNode, Node, Slot, TaskGraph, Text
from kalypso.core.instance import CallOutcome, Instance, InstanceKey
from kalypso.core.program import (
    CallStep,
    FnStep,
    HoldKind,
    PlannedCall,
    ProgramContext,
    TaskProgram,
    render_prompt,
)
from kalypso.core.prompt import Prompt, TokenIds
from kalypso.engine.blocks import cache_hit_tokens, shared_full_blocks

logger = logging.getLogger(__name__)

ROOT = "root"
"""The operator key of an instance's root task."""


@dataclass(frozen=True)
class FlowPlan:
    """What every instance of one graph shares: stages, prefix parents, dependents."""

    graph: TaskGraph
    stage_of: dict[str, int]
    prefix_parent_of: dict[str, str | None]
    dependents: dict[str, tuple[str, ...]]

    @property
    def num_stages(self) -> int:
        return max(self.stage_of.values(), default=0) + 1

    @classmethod
    def of(cls, graph: TaskGraph) -> FlowPlan:
        """Stages (LLM depth), prefix parents and dependents of ``graph``."""
        nodes = {n.node_id: n for n in graph.nodes}
        llm_depth: dict[str, int] = {}
        dependents: dict[str, list[str]] = {n.node_id: [] for n in graph.nodes}
        for node in graph.nodes:
            deps = _deps(node)
            for dep in deps:
                if dep not in nodes:
                    raise GraphError(f"node {node.node_id!r} depends on unknown {dep!r}")
                dependents[dep].append(node.node_id)
            # depth counts LLM nodes on the longest path of dependencies
            depth = max((llm_depth[d] for d in deps), default=-1)
            llm_depth[node.node_id] = depth + 1 if isinstance(node, LLMNode) else depth
        stage_of = {n: max(0, d) for n, d in llm_depth.items() if isinstance(nodes[n], LLMNode)}
        prefix_parent_of: dict[str, str | None] = {}
        for node_id in stage_of:
            node = nodes[node_id]
            assert isinstance(node, LLMNode)
            prefix_parent_of[node_id] = node.continue_from
        return cls(graph, stage_of, prefix_parent_of, {k: tuple(v) for k, v in dependents.items()})


def _deps(node: Node) -> tuple[str, ...]:
    return tuple(getattr(node, "deps", ()))


@dataclass(eq=False)
class FlowState:
    """One instance's progress through the graph (shared by its tasks)."""

    plan: FlowPlan
    instance: Instance
    context: ProgramContext
    done: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    """LLM nodes not run: their ``when`` was false, or a node they depend on was skipped
    (a branch not taken is dead downstream; Fn nodes still run and see no output)."""
    started: set[str] = field(default_factory=set)
    programs: dict[str, DataflowProgram] = field(default_factory=dict)
    finished: bool = False

    def mark_done(self, node_id: str) -> tuple[list[FnNode], list[LLMNode]]:
        """``node_id`` is done; returns the Fn and LLM nodes that became ready."""
        self.done.add(node_id)
        ready_fn: list[FnNode] = []
        ready_llm: list[LLMNode] = []
        for dependent in self.plan.dependents[node_id]:
            node = self.plan.graph.node(dependent)
            if dependent in self.started or not all(d in self.done for d in _deps(node)):
                continue
            self.started.add(dependent)
            if isinstance(node, FnNode):
                ready_fn.append(node)
            elif isinstance(node, LLMNode):
                ready_llm.append(node)
            else:
                self.done.add(dependent)  # inputs and other passive nodes
        return ready_fn, ready_llm

    @property
    def remaining(self) -> int:
        return len(self.plan.graph.nodes) - len(self.done)


class DataflowProgram:
    """One task of a DAG instance: an LLM node's call (None: the root task), then the Fn
    nodes its completion made ready."""

    def __init__(self, flow: FlowState, node: LLMNode | None) -> None:
        self.flow = flow
        self.node = node
        self.instance: Instance | None = flow.instance
        self._called = node is None
        self._fn_queue: list[FnNode] = []
        self._ready_llm: list[LLMNode] = []
        self._partial: TokenIds = ()
        self._prompt: tuple[Prompt, bool] | None = None
        if node is None:  # the root: inputs are done, their ready dependents queued
            for root in flow.plan.graph.nodes:
                if isinstance(root, InputNode) or not _deps(root):
                    if root.node_id in flow.started:
                        continue
                    flow.started.add(root.node_id)
                    if isinstance(root, FnNode):
                        self._fn_queue.append(root)
                    elif isinstance(root, LLMNode):
                        self._ready_llm.append(root)
                    else:
                        self._queue(*flow.mark_done(root.node_id))
        else:
            flow.programs[node.node_id] = self

    # ---- identity ----------------------------------------------------------------
    @property
    def key(self) -> InstanceKey:
        return self.flow.instance.key

    @property
    def stage_index(self) -> int:
        return 0 if self.node is None else self.flow.plan.stage_of[self.node.node_id]

    @property
    def op_key(self) -> str:
        return ROOT if self.node is None else self.node.node_id

    @property
    def prefix_parent(self) -> DataflowProgram | None:
        if self.node is None:
            return None
        parent = self.flow.plan.prefix_parent_of[self.node.node_id]
        return self.flow.programs.get(parent) if parent is not None else None

    @property
    def origin(self) -> Instance:
        return self.flow.instance

    # ---- sizing ------------------------------------------------------------------
    def prompt(self) -> tuple[Prompt, bool]:
        assert self.node is not None
        if self._prompt is None or not self._prompt[1]:
            self._prompt = render_prompt(
                self.node, self.flow.instance, self.flow.context.layout, whole_prefix=True
            )
        return self._prompt

    def planned_calls(self) -> list[PlannedCall]:
        if self.node is None or (self._called and not self._partial):
            return []
        prompt, ready = self.prompt()
        return [PlannedCall(self.node, prompt, ready, len(self._partial))]

    def expected_cached_tokens(self, prompt: Prompt) -> int:
        """Full blocks shared with the prefix parent's prompt and output."""
        assert self.node is not None
        parent = self.flow.plan.prefix_parent_of[self.node.node_id]
        outcome = self.flow.instance.outputs.get(parent) if parent else None
        if outcome is None:
            return 0
        previous = outcome.prompt_token_ids + outcome.output_token_ids
        block = self.flow.context.block_size_tokens
        shared = shared_full_blocks(previous, prompt.ids, block) * block
        return cache_hit_tokens(shared, prompt.length_tokens, block)

    def sample_children(self, limit: int) -> Sequence[TaskProgram]:
        return []

    # ---- running -----------------------------------------------------------------
    def next_step(self) -> CallStep | FnStep | None:
        if not self._called:
            assert self.node is not None
            stats = self.flow.context.stats_for(self.node.op_id)
            if not self._partial:
                stats.rows_in += 1
            dead = any(d in self.flow.skipped for d in self.node.deps)
            if dead or (self.node.when is not None and not self.node.when(self.flow.instance)):
                self._called = True
                self.flow.skipped.add(self.node.node_id)
                self._queue(*self.flow.mark_done(self.node.node_id))
                return self.next_step()
            prompt, ready = self.prompt()
            if not ready:
                raise RuntimeError(f"node {self.node.node_id}: a slot is not filled")
            return CallStep(self.node, prompt, self._partial)
        if self._fn_queue:
            return FnStep(self._fn_queue.pop(0))
        return None

    def hold_partial(self, generated: TokenIds) -> None:
        self._partial = generated

    def on_call_result(self, outcome: CallOutcome) -> None:
        assert self.node is not None
        self._called = True
        self._partial = ()
        self.flow.instance.outputs[self.node.node_id] = outcome
        self.flow.context.stats_for(self.node.op_id).rows_out += 1
        self._queue(*self.flow.mark_done(self.node.node_id))

    def run_fn(self, step: FnStep) -> None:
        result = step.node.fn(self.flow.instance)
        if result is not None and result is not self.flow.instance:
            self.flow.instance.values.update(result.values)
        stats = self.flow.context.stats_for(step.node.op_id)
        stats.rows_in += 1
        stats.rows_out += 1
        self._queue(*self.flow.mark_done(step.node.node_id))

    def _queue(self, fns: list[FnNode], llms: list[LLMNode]) -> None:
        self._fn_queue.extend(fns)
        self._ready_llm.extend(llms)

    # ---- completion --------------------------------------------------------------
    def children(self) -> list[DataflowProgram]:
        ready, self._ready_llm = self._ready_llm, []
        return [DataflowProgram(self.flow, node) for node in ready]

    def prefix_holders(self, children: Sequence[TaskProgram]) -> int:
        """The calls that continue this one's conversation, when the run holds such
        prefixes; otherwise 0 (see the module docstring). Each of them names this task its
        prefix parent and releases it when done, skipped ones included."""
        return len(self._continuing())

    def _continuing(self) -> list[LLMNode]:
        """The calls that continue this one's conversation, when the run holds them."""
        if self.node is None or not self.flow.context.hold_continued_prefixes:
            return []
        me = self.node.node_id
        graph = self.flow.plan.graph
        return [
            node
            for node in (graph.node(d) for d in self.flow.plan.dependents[me])
            if isinstance(node, LLMNode) and node.continue_from == me
        ]

    @property
    def holds_with(self) -> HoldKind:
        """A call whose conversation other calls continue holds its prompt and answer by
        a soft pin, when the run holds them (see the module docstring)."""
        return "soft pin" if self._continuing() else "nothing"

    def output(self) -> Instance | None:
        if self.flow.finished or self.flow.remaining > 0:
            return None
        self.flow.finished = True
        return self.flow.instance


def root_programs(
    plan: FlowPlan, instances: Sequence[Instance], context: ProgramContext
) -> list[DataflowProgram]:
    """One root task per instance."""
    return [DataflowProgram(FlowState(plan, instance, context), None) for instance in instances]


def static_segments(node: LLMNode) -> list[Text | Slot]:
    """The node's content parts in order (for the templated radix tree)."""
    return [part for message in node.messages for part in message.parts]
