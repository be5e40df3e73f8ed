"""The task-graph IR that every front end lowers to, and that the core runs.

::

    InputNode ---> LLMNode ---> FnNode ---> FanOutNode ---> LLMNode ---> FnNode ---> output
                   (call)      (parse,      (one instance   (call on       (keep /
                               keep/drop)    -> children)    each child)    drop)

* :class:`LLMNode` - one LLM call per instance. Its prompt is a list of messages whose
  contents are :class:`Text` (static text, tokenized once) and :class:`Slot` (token ids
  filled per instance: a tuple's columns, another node's output, an input value); message
  boundaries come from the model's chat template (:mod:`kalypso.core.prompt`). It carries
  ``max_tokens`` (the hard cap), ``first_bound_tokens`` (generative calls start below the
  cap and are continued when they reach it; None reserves the cap), a constrained
  :class:`Decision` (one token among the choices, with its margin), and
  ``continue_from`` (the prompt extends another call's prompt plus its output).
* :class:`FnNode` - a Python step on the instance; returning None drops it (a predicate).
* :class:`FanOutNode` - one instance spawns many (a join's partners, index candidates);
  it starts a new *stage*.
* fan-in - a node lists several ``deps``; it runs when all of them have.
* :class:`InputNode` - where instances enter.

A *stage* is the run of nodes between fan-outs; running one stage on one instance is a
*task*, the unit the scheduler admits under a KV budget. Loops are unrolled by the front
end to their bound, so the graph is a DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.prompt import ChatLayout, TokenIds


class GraphError(ValueError):
    """A task graph is malformed (unknown dependency, cycle, duplicate id)."""


class SlotSource(Protocol):
    """Where a slot's token ids come from, per instance."""

    def describe(self) -> str: ...

    def ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        """The slot's ids (data encoding); only called when :meth:`ready`."""
        ...

    def ready(self, instance: Instance) -> bool:
        """Whether the instance already has what the slot needs."""
        ...

    def partial_ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        """For sizing before the slot is ready: the ids of what is known already."""
        ...


@dataclass(frozen=True)
class Text:
    """Static content text (an instruction, a system prompt), encoded as data."""

    text: str


@dataclass(frozen=True)
class Slot:
    """Content filled per instance from ``source``. ``bound_from`` names the LLM node that
    produces it, so sizing can count that node's output bound before it has run."""

    source: SlotSource
    bound_from: str | None = None


Part = Text | Slot


@dataclass(frozen=True)
class Message:
    role: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Decision:
    """A constrained answer: exactly one token, the first token of one of ``choices``."""

    choices: tuple[str, ...]


@dataclass(frozen=True)
class LLMNode:
    node_id: str
    messages: tuple[Message, ...]
    max_tokens: int
    op_id: str
    """Statistics key (the operator this call belongs to)."""
    first_bound_tokens: int | None = None
    decision: Decision | None = None
    greedy: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    """Sampling's nucleus and seed (used only when not ``greedy``)."""
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    """Keep each generated token's logprob and this many most likely alternatives
    (:attr:`~kalypso.core.instance.CallOutcome.logprobs`); None: none. A call that asks
    for them is not continued below its cap (``first_bound_tokens`` must be None)."""
    continue_from: str | None = None
    deps: tuple[str, ...] = ()
    description: str = ""
    when: Callable[[Instance], bool] | None = None
    """A condition on the instance: when it is false the call is skipped (a cascade that
    decides without the LLM, a branch not taken). Sizing reserves for the call anyway."""
    warm_input: bool = False
    """Proactive caching: each query's prompt prefix that is known before the call's
    other inputs are (its first slots that are ready at the start: a document, a
    question) is prefilled early (:mod:`kalypso.core.warm`)."""

    @property
    def kind(self) -> str:
        return "llm"


@dataclass(frozen=True)
class FnNode:
    node_id: str
    fn: Callable[[Instance], Instance | None]
    op_id: str
    deps: tuple[str, ...] = ()
    description: str = ""
    blocking: bool = False
    """Runs off the event loop (in a thread): I/O or heavy CPU work."""

    @property
    def kind(self) -> str:
        return "fn"


@dataclass(frozen=True)
class FanOutNode:
    node_id: str
    expand: Callable[[Instance], list[Instance]]
    op_id: str
    can_expand: Callable[[Instance], bool] = field(default=lambda instance: True)
    """Whether an instance already has what ``expand`` needs (sizing samples children of
    instances that have not run yet)."""
    deps: tuple[str, ...] = ()
    description: str = ""
    blocking: bool = False
    """``expand`` does heavy work (embeds a query, searches an index): the runner calls
    it in a thread, off the event loop."""

    @property
    def kind(self) -> str:
        return "fan-out"


@dataclass(frozen=True)
class InputNode:
    node_id: str
    fields: tuple[str, ...]
    description: str = ""

    @property
    def kind(self) -> str:
        return "input"


Node = LLMNode | FnNode | FanOutNode | InputNode


@dataclass(frozen=True)
class Stage:
    """The nodes one task runs on one instance, in order; ``fan_out`` (stages after the
    first) turns each instance of the stage before into this stage's instances."""

    index: int
    fan_out: FanOutNode | None
    nodes: tuple[LLMNode | FnNode, ...]

    def llm_nodes(self) -> list[LLMNode]:
        return [n for n in self.nodes if isinstance(n, LLMNode)]


@dataclass(frozen=True)
class TaskGraph:
    """Nodes in a topological order (each after its ``deps``), and the output nodes."""

    nodes: tuple[Node, ...]
    outputs: tuple[str, ...] = ()
    name: str = "graph"

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.nodes:
            if node.node_id in seen:
                raise GraphError(f"duplicate node id {node.node_id!r}")
            for dep in getattr(node, "deps", ()):
                if dep not in seen:
                    raise GraphError(
                        f"node {node.node_id!r} depends on {dep!r}, which is not before it"
                    )
            seen.add(node.node_id)
        for output in self.outputs:
            if output not in seen:
                raise GraphError(f"output {output!r} is not a node")

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise GraphError(f"no node {node_id!r}")

    def llm_ancestors(self) -> dict[str, set[str]]:
        """Each LLM node's LLM ancestors, reached through any chain of nodes (Python steps
        included): a call starts only after every one of them has finished."""
        ancestors: dict[str, set[str]] = {}
        for node in self.nodes:
            found: set[str] = set()
            for dep in getattr(node, "deps", ()):
                found |= ancestors.get(dep, set())
                if isinstance(self.node(dep), LLMNode):
                    found.add(dep)
            ancestors[node.node_id] = found
        return {n.node_id: ancestors[n.node_id] for n in self.nodes if isinstance(n, LLMNode)}

    def continuations(self) -> dict[str, str]:
        """The LLM nodes that continue another's conversation (``continue_from``): node
        id -> the node it continues."""
        return {
            node.node_id: node.continue_from
            for node in self.nodes
            if isinstance(node, LLMNode) and node.continue_from is not None
        }

    def tight_continuations(self) -> dict[str, str]:
        """Of :meth:`continuations`, those that wait for nothing that waits for the call
        they continue: each one's other LLM inputs can run beside that call (a debate's
        next round reads the other agents' answers), so the conversation is needed again
        as soon as they are done. A reflection's final answer is not one: it waits for
        critics that read the analyst's answer first (a *loose* continuation)."""
        ancestors = self.llm_ancestors()
        return {
            node_id: producer
            for node_id, producer in self.continuations().items()
            if not any(producer in ancestors[o] for o in ancestors[node_id] - {producer})
        }

    def conversation_groups(self, *, tight_only: bool = False) -> list[frozenset[str]]:
        """The LLM nodes that continuations tie together, one set per group: each
        continuation with the call it continues and its other LLM inputs that do not run
        before that call (neither its ancestors nor it); groups that share a node are one.
        A debate's rounds are one group; a trading desk's bull and bear rounds are
        another, and each trader's three risk analysts a third, since each continues its
        own conversation and reads the other two. A reflection's analyst, critics and
        final answer are a group of a loose continuation, left out with ``tight_only``
        (:meth:`tight_continuations`). Ordered by each group's first node; empty without
        continuations."""
        ancestors = self.llm_ancestors()
        parent: dict[str, str] = {}

        def root(op: str) -> str:
            while parent.setdefault(op, op) != op:
                op = parent[op]
            return op

        ties = self.tight_continuations() if tight_only else self.continuations()
        for node_id, producer in ties.items():
            beside = ancestors[node_id] - ancestors[producer] - {producer}
            for other in (producer, *beside):
                parent[root(other)] = root(node_id)
        members: dict[str, set[str]] = {}
        for node in self.nodes:
            if node.node_id in parent:
                members.setdefault(root(node.node_id), set()).add(node.node_id)
        return [frozenset(group) for group in members.values()]

    def longest_chain_tokens(self, outputs: Mapping[str, CallOutcome]) -> int:
        """The most tokens one chain of dependent LLM calls generated for an instance whose
        calls produced ``outputs`` (by node id; a call that did not run, or that the
        result cache answered, counts 0).

        It is the least number of engine steps the instance needs under any schedule: each
        generated token takes a step of its own (a call's first comes from its prefill
        step), and a call starts only after every call it depends on has finished.
        """
        chain_tokens: dict[str, int] = {}
        for node in self.nodes:
            before = max((chain_tokens[d] for d in getattr(node, "deps", ())), default=0)
            outcome = outputs.get(node.node_id) if isinstance(node, LLMNode) else None
            own = 0
            if outcome is not None and not outcome.from_result_cache:
                own = len(outcome.output_token_ids)
            chain_tokens[node.node_id] = before + own
        return max(chain_tokens.values(), default=0)

    def linear_stages(self) -> list[Stage]:
        """Split a chain (each node depending on the one before) into stages at fan-outs."""
        stages: list[Stage] = []
        fan_out: FanOutNode | None = None
        current: list[LLMNode | FnNode] = []
        for node in self.nodes:
            if isinstance(node, InputNode):
                continue
            if isinstance(node, FanOutNode):
                stages.append(Stage(len(stages), fan_out, tuple(current)))
                fan_out, current = node, []
            else:
                current.append(node)
        stages.append(Stage(len(stages), fan_out, tuple(current)))
        return stages

    def explain(self) -> str:
        """The graph as text: one line per node, with its dependencies and prompt shape."""
        lines = [f"Task graph {self.name!r}: {len(self.nodes)} nodes"]
        for node in self.nodes:
            deps = getattr(node, "deps", ())
            after = f"  <- {', '.join(deps)}" if deps else ""
            lines.append(f"  {node.kind:8} {node.node_id}{after}")
            if node.description:
                lines.append(f"           {node.description}")
            if isinstance(node, LLMNode):
                lines.append(f"           prompt: {describe_messages(node.messages)}")
                lines.append(f"           {describe_decoding(node)}")
                if node.warm_input:
                    lines.append("           cacheable: its known prompt prefix is warmed early")
        if self.outputs:
            lines.append(f"  outputs: {', '.join(self.outputs)}")
        return "\n".join(lines)


def describe_messages(messages: Sequence[Message]) -> str:
    """``[system: text] [user: slot(context text) text]``: the prompt's segments."""
    out = []
    for message in messages:
        parts = []
        for part in message.parts:
            if isinstance(part, Text):
                shown = part.text if len(part.text) <= 40 else part.text[:37] + "..."
                parts.append(f"text {shown!r}")
            else:
                parts.append(f"slot {part.source.describe()}")
        out.append(f"[{message.role}: {' | '.join(parts)}]")
    return " ".join(out)


def describe_decoding(node: LLMNode) -> str:
    if node.decision is not None:
        how = f"decision: one token of {list(node.decision.choices)}"
    else:
        start = (
            f", starts at {node.first_bound_tokens} and continues"
            if node.first_bound_tokens is not None and node.first_bound_tokens < node.max_tokens
            else ""
        )
        how = f"generate: max_tokens={node.max_tokens}{start}"
    sampling = "greedy" if node.greedy else f"temperature {node.temperature}"
    if not node.greedy and node.top_p < 1.0:
        sampling += f", top_p {node.top_p}"
    if not node.greedy and node.seed is not None:
        sampling += f", seed {node.seed}"
    if node.stop:
        sampling += f", stop {list(node.stop)}"
    if node.logprobs is not None:
        sampling += f", logprobs (top {node.logprobs})"
    cont = f", continues {node.continue_from}" if node.continue_from else ""
    return f"{how}, {sampling}{cont}"
