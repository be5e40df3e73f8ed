"""A task's program: one stage of a task graph run on one instance, node by node.

The runner drives it; it never awaits anything itself::

    while (step := program.next_step()) is not None:
        if step is a CallStep: send step.prompt (+ step.generated) to the engine,
                               then program.on_call_result(outcome)
                               (or program.hold_partial(tokens) when the call stopped at
                               its output bound and must be continued later)
        if step is an FnStep:  program.run_fn(step)  (in a thread when step.node.blocking)
    children = program.children()   # the next stage's programs (fan-out), if any

Prompts are rendered once per (node, instance) and built into ids at most once (see
:class:`kalypso.core.prompt.Prompt`): sizing reads their lengths, the request their ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from kalypso.core.graph import FnNode, LLMNode, Stage, Text
from kalypso.core.instance import CallOutcome, Instance, InstanceKey
from kalypso.core.prompt import ChatLayout, Prompt, TokenIds
from kalypso.core.stats import OperatorStats
from kalypso.engine.blocks import cache_hit_tokens, shared_full_blocks

logger = logging.getLogger(__name__)

StatsFor = Callable[[str], OperatorStats]

HoldKind = Literal["ledger", "soft pin", "nothing"]
"""How a task holds what the tasks naming it their prefix parent reuse:

* ``"ledger"``: its first prompt's full blocks up to its prefix stay reserved in the
  ledger until they are done, and under explicit pinning exactly those blocks are
  hard-pinned in the engine (a relational parent);
* ``"soft pin"``: nothing is reserved; under explicit pinning every full block of its
  calls is *soft*-pinned until they are done, and the engine gives that pin up when a
  request cannot get its blocks (a workflow call whose conversation is continued);
* ``"nothing"``: no task will reuse it; it pins nothing."""


@dataclass(frozen=True)
class ProgramContext:
    """What every program of one run shares."""

    layout: ChatLayout
    block_size_tokens: int
    stats_for: StatsFor
    hold_continued_prefixes: bool = False
    """A DAG's finished call keeps its prompt and answer under a soft pin for the calls
    that continue its conversation (see :mod:`kalypso.core.dataflow`): the policy's
    :attr:`~kalypso.core.policies.base.Policy.holds_continued_prefixes`, under explicit
    pinning."""


def render_prompt(
    node: LLMNode, instance: Instance, layout: ChatLayout, *, whole_prefix: bool = False
) -> tuple[Prompt, bool]:
    """``node``'s prompt for ``instance``, and whether every slot was ready. Slots not ready
    yet contribute nothing: such a prompt is only good for its length (sizing).

    The prompt's prefix (what dependent calls reuse) runs to its last slot, or with
    ``whole_prefix`` through its last content segment (a call continued with its answer
    reuses the whole prompt)."""
    messages: list[tuple[str, list[TokenIds]]] = []
    ready = True
    last_slot = 0
    count = 0
    for message in node.messages:
        segments: list[TokenIds] = []
        for part in message.parts:
            count += 1
            if isinstance(part, Text):
                segments.append(layout.text_ids(part.text))
                continue
            last_slot = count
            if part.source.ready(instance):
                segments.append(part.source.ids(instance, layout))
            else:
                ready = False
                segments.append(part.source.partial_ids(instance, layout))
        messages.append((message.role, segments))
    return Prompt(layout, messages, prefix_segments=count if whole_prefix else last_slot), ready


@dataclass(frozen=True)
class PlannedCall:
    """An LLM call the task will make, as sizing sees it."""

    node: LLMNode
    prompt: Prompt
    ready: bool
    generated_tokens: int = 0


class TaskProgram(Protocol):
    """What the scheduler core needs of a task's program (:class:`StageProgram` is the
    one every front end uses; tests drive the core with their own)."""

    instance: Instance | None
    """The current instance (None once dropped)."""

    @property
    def key(self) -> InstanceKey: ...

    @property
    def stage_index(self) -> int:
        """The stage (budget group) the task belongs to."""
        ...

    @property
    def op_key(self) -> str:
        """The operator the task runs (a task-graph node id, or its stage)."""
        ...

    @property
    def prefix_parent(self) -> TaskProgram | None:
        """The task whose prompt this task's prompt extends (it holds that prefix for
        this task until this task is done); None for none."""
        ...

    @property
    def origin(self) -> Instance: ...

    def planned_calls(self) -> list[PlannedCall]: ...

    def expected_cached_tokens(self, prompt: Prompt) -> int: ...

    def children(self) -> Sequence[TaskProgram]:
        """The tasks this one's completion makes ready (after it ran)."""
        ...

    def prefix_holders(self, children: Sequence[TaskProgram]) -> int:
        """How many tasks (given its ``children``, or made ready later) will name this
        task their ``prefix_parent``: its prefix is held until they are all done."""
        ...

    @property
    def holds_with(self) -> HoldKind:
        """How this task holds for those tasks (see :data:`HoldKind`)."""
        ...

    def output(self) -> Instance | None:
        """The instance, when this task's completion ends its whole run (a result)."""
        ...

    def sample_children(self, limit: int) -> Sequence[TaskProgram]: ...


class RunnableProgram(TaskProgram, Protocol):
    """What the runner needs besides: the steps of the task."""

    def next_step(self) -> CallStep | FnStep | None: ...

    def run_fn(self, step: FnStep) -> None: ...

    def on_call_result(self, outcome: CallOutcome) -> None: ...

    def hold_partial(self, generated: TokenIds) -> None: ...


@dataclass(frozen=True)
class CallStep:
    """Send ``prompt`` followed by ``generated`` (tokens an earlier request of this call
    produced before it stopped at its bound)."""

    node: LLMNode
    prompt: Prompt
    generated: TokenIds = ()


@dataclass(frozen=True)
class FnStep:
    node: FnNode


class StageProgram:
    """Runs ``stage`` on ``instance``; ``next_stage`` is what its children run."""

    def __init__(
        self,
        stages: Sequence[Stage],
        stage_index: int,
        instance: Instance,
        context: ProgramContext,
        prefix_parent: StageProgram | None = None,
    ) -> None:
        self._stages = stages
        self.stage = stages[stage_index]
        self._prefix_parent = prefix_parent
        self.instance: Instance | None = instance
        self._context = context
        self._layout = context.layout
        self._stats_for = context.stats_for
        self._position = 0
        self._prompts: dict[str, tuple[Instance, Prompt, bool]] = {}
        self._partial: TokenIds = ()
        self._counted_in: set[str] = set()
        self._children: list[StageProgram] | None = None
        self._counted_out = False

    # ---- for sizing --------------------------------------------------------------
    @property
    def stage_index(self) -> int:
        return self.stage.index

    @property
    def op_key(self) -> str:
        return f"stage{self.stage.index}"

    @property
    def prefix_parent(self) -> StageProgram | None:
        return self._prefix_parent

    def prefix_holders(self, children: Sequence[TaskProgram]) -> int:
        return len(children)

    @property
    def holds_with(self) -> HoldKind:
        return "ledger"

    def output(self) -> Instance | None:
        last = self.stage.index + 1 == len(self._stages)
        return self.instance if last else None

    @property
    def key(self) -> InstanceKey:
        assert self.instance is not None
        return self.instance.key

    @property
    def origin(self) -> Instance:
        """The instance the task started from (sizing samples its children)."""
        assert self.instance is not None
        return self.instance

    def prompt_for(self, node: LLMNode) -> tuple[Prompt, bool]:
        """The prompt of ``node`` on the current instance (rendered once per instance)."""
        assert self.instance is not None
        found = self._prompts.get(node.node_id)
        if found is not None and found[0] is self.instance:
            return found[1], found[2]
        prompt, ready = render_prompt(node, self.instance, self._layout)
        self._prompts[node.node_id] = (self.instance, prompt, ready)
        return prompt, ready

    def planned_calls(self) -> list[PlannedCall]:
        """The LLM calls still to make, from the current node on."""
        planned: list[PlannedCall] = []
        for node in self.stage.nodes[self._position :]:
            if isinstance(node, LLMNode):
                prompt, ready = self.prompt_for(node)
                generated = len(self._partial) if not planned else 0
                planned.append(PlannedCall(node, prompt, ready, generated))
        return planned

    def expected_cached_tokens(self, prompt: Prompt) -> int:
        """Tokens of ``prompt`` the engine should find cached: the full blocks it shares
        with the instance's previous prompt."""
        assert self.instance is not None
        previous = self.instance.last_prompt
        if not previous:
            return 0
        block = self._context.block_size_tokens
        shared = shared_full_blocks(previous, prompt.ids, block) * block
        return cache_hit_tokens(shared, prompt.length_tokens, block)

    # ---- running -----------------------------------------------------------------
    def next_step(self) -> CallStep | FnStep | None:
        """The next node to run, or None when the stage is done (or the instance dropped)."""
        if self.instance is None or self._position >= len(self.stage.nodes):
            return None
        node = self.stage.nodes[self._position]
        if node.op_id not in self._counted_in:
            self._counted_in.add(node.op_id)
            self._stats_for(node.op_id).rows_in += 1
        if isinstance(node, FnNode):
            return FnStep(node)
        if node.when is not None and not node.when(self.instance):
            self._advance(self.instance)  # skipped: no call, the instance goes on
            return self.next_step()
        prompt, ready = self.prompt_for(node)
        if not ready:
            raise RuntimeError(f"node {node.node_id}: a slot is not filled when the call runs")
        return CallStep(node, prompt, self._partial)

    def hold_partial(self, generated: TokenIds) -> None:
        """The current call stopped at its bound after ``generated`` tokens (all of them,
        earlier requests included): the next request continues it."""
        self._partial = generated

    def on_call_result(self, outcome: CallOutcome) -> None:
        node = self.stage.nodes[self._position]
        assert isinstance(node, LLMNode) and self.instance is not None
        self._partial = ()
        self.instance.outputs[node.node_id] = outcome
        if not outcome.from_result_cache:
            self.instance.generated_tokens += len(outcome.output_token_ids)
        self._advance(self.instance)

    def run_fn(self, step: FnStep) -> None:
        assert self.instance is not None
        self._advance(step.node.fn(self.instance))

    def _advance(self, instance: Instance | None) -> None:
        node = self.stage.nodes[self._position]
        self._position += 1
        following = (
            self.stage.nodes[self._position] if self._position < len(self.stage.nodes) else None
        )
        ends_op = following is None or following.op_id != node.op_id
        if instance is not None and ends_op:
            self._stats_for(node.op_id).rows_out += 1
        self.instance = instance

    @property
    def dropped(self) -> bool:
        return self.instance is None

    @property
    def expands_off_loop(self) -> bool:
        """Whether computing :meth:`children` is heavy (the runner then calls
        :meth:`prepare_children` in a thread first)."""
        following = self.stage.index + 1
        if self.instance is None or following >= len(self._stages):
            return False
        fan_out = self._stages[following].fan_out
        return fan_out is not None and fan_out.blocking

    def prepare_children(self) -> None:
        """Compute the children now (in a thread, for a heavy fan-out; they are counted in
        the statistics by :meth:`children`, on the event loop's thread)."""
        if self.instance is not None:
            self._children = self._expand(self.instance)

    def children(self) -> list[StageProgram]:
        """The next stage's programs for this instance (after the stage ran)."""
        if self.instance is None or self.stage.index + 1 >= len(self._stages):
            return []
        if self._children is None:
            self._children = self._expand(self.instance)
        if not self._counted_out:
            self._counted_out = True
            fan_out = self._stages[self.stage.index + 1].fan_out
            if fan_out is not None:
                stats = self._stats_for(fan_out.op_id)
                stats.rows_in += 1
                stats.rows_out += len(self._children)
        return self._children

    def sample_children(self, limit: int) -> list[StageProgram]:
        """Children of the *unrun* instance, for sizing (not counted in statistics); empty
        when the fan-out needs values the stage has not produced yet."""
        if self.instance is None or self.stage.index + 1 >= len(self._stages):
            return []
        fan_out = self._stages[self.stage.index + 1].fan_out
        if fan_out is not None and not fan_out.can_expand(self.instance):
            return []
        return self._expand(self.instance)[:limit]

    def _expand(self, instance: Instance) -> list[StageProgram]:
        index = self.stage.index + 1
        fan_out = self._stages[index].fan_out
        children = [instance] if fan_out is None else fan_out.expand(instance)
        return [StageProgram(self._stages, index, child, self._context, self) for child in children]
