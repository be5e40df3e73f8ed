"""Lowering: workflow values become the core's token-exact task graph.

* an LLM call -> :class:`~kalypso.core.graph.LLMNode`: each message's parts become
  :class:`~kalypso.core.graph.Text` (static text, and the static pieces of ``fmt``) and
  :class:`~kalypso.core.graph.Slot` (an input: :class:`~kalypso.core.slots.ValueSlot`;
  another call's answer: :class:`~kalypso.core.slots.OutputSlot`, the exact tokens it
  generated; a Python step: its text); the message boundaries come from the model's chat
  template when the graph runs. A conversation continued with ``then(reply)`` lowers to
  ``continue_from=reply``: its prompt extends the reply's prompt and answer token for
  token.
* a Python step -> :class:`~kalypso.core.graph.FnNode` storing its text result;
* a ``cond`` branch -> its calls carry ``when`` (the branch's decider), so a query skips
  the calls of the branch it did not take.

Every node's ``deps`` are the calls and steps its slots (and ``continue_from``) read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kalypso.core.errors import PlanError
from kalypso.core.graph import Decision, FnNode, InputNode, LLMNode, Message, Node, Slot, TaskGraph
from kalypso.core.graph import Text as TextPart
from kalypso.core.instance import Instance
from kalypso.core.slots import OutputSlot, ValueSlot
from kalypso.workflow.dsl import LLM, Fn, Guard, Input, Text, Value, Workflow
from kalypso.workflow.optimize import Canonicalizer

INPUT_NODE = "input"


def value_text(value: Value, instance: Instance, canon: Canonicalizer) -> str | None:
    """A value's text for one query (None for a call that was skipped)."""
    value = canon.representative(value)
    if isinstance(value, Input):
        return str(instance.values[value.name])
    if isinstance(value, Text):
        out = []
        for part in value.parts():
            text = part if isinstance(part, str) else value_text(part, instance, canon)
            out.append("" if text is None else text)
        return "".join(out)
    if isinstance(value, LLM):
        outcome = instance.outputs.get(value.name)
        return None if outcome is None else outcome.text
    if isinstance(value, Fn):
        found = instance.values.get(value.name)
        return None if found is None else str(found)
    raise TypeError(f"unknown workflow value {value!r}")


@dataclass(frozen=True)
class Lowered:
    """The task graph of one or more workflows, and how to read their outputs."""

    graph: TaskGraph
    canon: Canonicalizer
    outputs: dict[str, Value]
    """Output name (``workflow/name`` when several workflows run together) -> value."""
    inputs: tuple[str, ...]

    def read_outputs(self, instance: Instance) -> dict[str, str | None]:
        return {
            name: value_text(value, instance, self.canon) for name, value in self.outputs.items()
        }


def _when(guard: Guard | None, canon: Canonicalizer) -> Any:
    if guard is None:
        return None
    decider = canon.representative(guard.decider)
    assert isinstance(decider, Fn)
    expected = "1" if guard.expected else "0"
    return lambda instance: instance.values.get(decider.name) == expected


def lower(workflows: Sequence[Workflow], *, merge: bool = True) -> Lowered:
    """Lower ``workflows`` (run together on one batch) to one task graph.

    Raises:
        PlanError: two different calls or steps share a name.
    """
    canon = Canonicalizer(merge=merge)
    values: list[Value] = []
    outputs: dict[str, Value] = {}
    for workflow in workflows:
        values.extend(workflow.values)
        for name, value in workflow.outputs.items():
            key = name if len(workflows) == 1 else f"{workflow.name}/{name}"
            outputs[key] = value
    inputs = sorted({v.name for v in values if isinstance(v, Input)})
    nodes: list[Node] = [InputNode(INPUT_NODE, tuple(inputs), "the batch's inputs")]
    built: dict[str, Value] = {}
    for value in values:
        rep = canon.representative(value)
        if rep is not value or not isinstance(rep, LLM | Fn):
            continue
        if rep.name in built:
            if built[rep.name] is rep:
                continue
            raise PlanError(f"two different steps are named {rep.name!r}; give them distinct names")
        built[rep.name] = rep
        nodes.append(_llm_node(rep, canon) if isinstance(rep, LLM) else _fn_node(rep, canon))
    name = "+".join(w.name for w in workflows)
    return Lowered(TaskGraph(tuple(nodes), name=name), canon, outputs, tuple(inputs))


def _deps_of(values: Sequence[Value], canon: Canonicalizer) -> tuple[str, ...]:
    names: list[str] = []
    for value in values:
        rep = canon.representative(value)
        if isinstance(rep, Text):
            names.extend(_deps_of(rep.deps(), canon))
        elif isinstance(rep, LLM | Fn) and rep.name not in names:
            names.append(rep.name)
    return tuple(dict.fromkeys(names))


def _parts(value: str | Value, canon: Canonicalizer) -> list[TextPart | Slot]:
    if isinstance(value, str):
        return [TextPart(value)] if value else []
    rep = canon.representative(value)
    if isinstance(rep, Input):
        return [Slot(ValueSlot(rep.name))]
    if isinstance(rep, Text):
        return [p for part in rep.pieces for p in _parts(part, canon)]
    if isinstance(rep, LLM):
        return [Slot(OutputSlot(rep.name), bound_from=rep.name)]
    assert isinstance(rep, Fn)
    return [Slot(ValueSlot(rep.name))]


def _llm_node(call: LLM, canon: Canonicalizer) -> LLMNode:
    messages = []
    for message in call.conversation.messages:
        parts = [p for part in message.parts for p in _parts(part, canon)]
        messages.append(Message(message.role, tuple(_merge_texts(parts))))
    continues = call.conversation.continues
    continue_from = None
    if continues is not None:
        rep = canon.representative(continues)
        assert isinstance(rep, LLM)
        continue_from = rep.name
    deps = list(_deps_of(call.deps(), canon))
    if continue_from is not None and continue_from not in deps:
        deps.append(continue_from)
    return LLMNode(
        node_id=call.name,
        messages=tuple(messages),
        max_tokens=call.max_tokens,
        op_id=call.name,
        first_bound_tokens=call.first_bound_tokens,
        decision=Decision(call.choices) if call.choices else None,
        greedy=call.greedy,
        temperature=call.temperature,
        continue_from=continue_from,
        deps=(INPUT_NODE, *deps),
        description=_describe(call.guard, canon),
        when=_when(call.guard, canon),
        warm_input=call.cacheable,
    )


def _merge_texts(parts: list[TextPart | Slot]) -> list[TextPart | Slot]:
    """Adjacent static texts joined (tokenized as one piece)."""
    out: list[TextPart | Slot] = []
    for part in parts:
        if isinstance(part, TextPart) and out and isinstance(out[-1], TextPart):
            out[-1] = TextPart(out[-1].text + part.text)
        else:
            out.append(part)
    return out


def _fn_node(step: Fn, canon: Canonicalizer) -> FnNode:
    when = _when(step.guard, canon)

    def run(instance: Instance) -> Instance:
        if when is not None and not when(instance):
            instance.values[step.name] = None
            return instance
        args = [value_text(v, instance, canon) for v in step.inputs]
        result = step.function(*args)
        instance.values[step.name] = None if result is None else str(result)
        return instance

    deps = _deps_of(step.deps(), canon)
    return FnNode(step.name, run, step.name, (INPUT_NODE, *deps), _describe(step.guard, canon))


def _describe(guard: Guard | None, canon: Canonicalizer) -> str:
    """A node's note for ``explain()``: the branch it belongs to."""
    if guard is None:
        return ""
    decider = canon.representative(guard.decider)
    assert isinstance(decider, Fn)
    return f"runs only where {decider.name} is {guard.expected}"
