"""Workflows as data: a :class:`WorkflowSpec` is a :class:`~kalypso.workflow.dsl.Workflow` as
JSON, what a client sends a Kalypso server. It never carries code: Python steps (``wf.fn``,
``wf.cond``'s predicate) are named by the functions both sides registered with
:func:`kalypso.core.functions.register_function`::

    text = flow.to_spec().model_dump_json()        # PlanError: an unregistered step
    flow = wf.workflow_from_spec(json.loads(text))  # ValidationError, PlanError

A spec lists ``nodes``, each with an ``id`` and a ``type``, each after the nodes it refers
to (by id), and maps output names to node ids::

    {"kind": "workflow", "version": 1, "name": "review",
     "nodes": [
       {"type": "input", "id": "question", "name": "question"},
       {"type": "llm", "id": "draft", "name": "draft", "max_tokens": 48,
        "messages": [{"role": "user", "parts": ["Q: ", {"ref": "question"}]}]},
       {"type": "llm", "id": "revised", "name": "revised", "max_tokens": 48,
        "continues": "draft", "messages": [{"role": "user", "parts": ["Improve it."]}]}],
     "outputs": {"answer": "revised"}}

=========  ==================================================================
``input``  ``wf.input(name)``
``text``   ``wf.const`` / ``wf.fmt``: ``parts``, text and ``{"ref": id}``
``llm``    ``wf.llm``: ``messages`` (a conversation; with ``continues``, the
           messages after that call's prompt and answer, as ``then(call)``),
           ``max_tokens`` and ``llm()``'s other arguments
``fn``     ``wf.fn``: the registered ``function`` on the ``inputs``
``cond``   a ``wf.cond``'s decider (named ``<cond>_if``): its registered
           ``predicate`` on the ``inputs``
``select`` a ``wf.cond``'s value: ``then`` where ``decider`` holds, else ``otherwise``
=========  ==================================================================

Nodes written inside a ``cond`` branch carry ``guard``: ``{"decider": <cond id>,
"expected": true}`` (the ``then`` branch) or ``false``. Names (of calls and steps) are
explicit, so a workflow and the one rebuilt from its spec lower to the same task graph.

The models check the shape (types, unknown fields, positive integers) and the references
(unknown, duplicate and forward ids; ``continues`` an ``llm``, guards and ``decider`` a
``cond``): a ``ValidationError`` whose ``loc`` names the field. Rebuilding runs the DSL's
own checks (names, templates, a conversation's last turn), which raise ``PlanError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from kalypso.core.errors import PlanError
from kalypso.core.functions import function_name, lookup_function
from kalypso.workflow import dsl
from kalypso.workflow.dsl import (
    LLM,
    CondDecider,
    Conversation,
    Fn,
    Guard,
    Input,
    Message,
    Text,
    Value,
    Workflow,
    _guarded,
    cond_select,
)

NodeId = Annotated[str, Field(min_length=1)]
PositiveInt = Annotated[int, Field(ge=1)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Ref(_Model):
    """A part that is an earlier node's value."""

    ref: NodeId


Part = str | Ref


class GuardSpec(_Model):
    """The node runs only where the ``cond`` node ``decider`` decided ``expected``."""

    decider: NodeId
    expected: bool


class MessageSpec(_Model):
    role: Literal["system", "user", "assistant"]
    parts: Annotated[list[Part], Field(min_length=1)]


class InputSpec(_Model):
    type: Literal["input"]
    id: NodeId
    name: str


class TextSpec(_Model):
    type: Literal["text"]
    id: NodeId
    parts: list[Part]


class LLMSpec(_Model):
    type: Literal["llm"]
    id: NodeId
    name: str
    messages: Annotated[list[MessageSpec], Field(min_length=1)]
    continues: NodeId | None = None
    max_tokens: PositiveInt
    greedy: bool = True
    temperature: Annotated[float, Field(ge=0.0)] = 0.0
    first_bound_tokens: PositiveInt | None = None
    choices: Annotated[list[str], Field(min_length=2)] | None = None
    cacheable: bool = False
    guard: GuardSpec | None = None


class FnSpec(_Model):
    type: Literal["fn"]
    id: NodeId
    name: str
    function: str
    inputs: list[NodeId] = Field(default_factory=list)
    guard: GuardSpec | None = None


class CondSpec(_Model):
    type: Literal["cond"]
    id: NodeId
    name: str
    predicate: str
    inputs: list[NodeId] = Field(default_factory=list)
    guard: GuardSpec | None = None


class SelectSpec(_Model):
    type: Literal["select"]
    id: NodeId
    name: str
    decider: NodeId
    then: NodeId
    otherwise: NodeId
    guard: GuardSpec | None = None


NodeSpec = Annotated[
    InputSpec | TextSpec | LLMSpec | FnSpec | CondSpec | SelectSpec, Field(discriminator="type")
]

Reference = tuple[tuple[str | int, ...], str, str | None]
"""A node's reference: the field's path in the node, the id, the node type it needs."""


def _references(node: NodeSpec) -> Iterator[Reference]:
    def parts(path: tuple[str | int, ...], items: list[Part]) -> Iterator[Reference]:
        for k, part in enumerate(items):
            if isinstance(part, Ref):
                yield (*path, k, "ref"), part.ref, None

    if isinstance(node, TextSpec):
        yield from parts(("parts",), node.parts)
    if isinstance(node, LLMSpec):
        if node.continues is not None:
            yield ("continues",), node.continues, "llm"
        for m, message in enumerate(node.messages):
            yield from parts(("messages", m, "parts"), message.parts)
    if isinstance(node, FnSpec | CondSpec):
        for k, ref in enumerate(node.inputs):
            yield ("inputs", k), ref, None
    if isinstance(node, SelectSpec):
        yield ("decider",), node.decider, "cond"
        yield ("then",), node.then, None
        yield ("otherwise",), node.otherwise, None
    if not isinstance(node, InputSpec | TextSpec) and node.guard is not None:
        yield ("guard", "decider"), node.guard.decider, "cond"


def _error(loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)


class WorkflowSpec(_Model):
    """A workflow as data (the module's docstring has the format)."""

    kind: Literal["workflow"] = "workflow"
    version: Literal[1] = 1
    name: str
    nodes: Annotated[list[NodeSpec], Field(min_length=1)]
    outputs: Annotated[dict[str, NodeId], Field(min_length=1)]

    @model_validator(mode="after")
    def _check_references(self) -> Self:
        """Every id is unique; every reference names an earlier node of the right type."""
        errors: list[InitErrorDetails] = []
        first: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.id in first:
                message = f"duplicate node id {node.id!r} (also nodes[{first[node.id]}])"
                errors.append(
                    _error(("nodes", i, node.type, "id"), "duplicate_id", message, node.id)
                )
            else:
                first[node.id] = i
        for i, node in enumerate(self.nodes):
            for path, ref, needs in _references(node):
                problem = self._problem(ref, i, needs, first)
                if problem is not None:
                    errors.append(_error(("nodes", i, node.type, *path), *problem, ref))
        for key, ref in self.outputs.items():
            problem = self._problem(ref, len(self.nodes), None, first)
            if problem is not None:
                errors.append(_error(("outputs", key), *problem, ref))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def _problem(
        self, ref: str, at: int, needs: str | None, first: Mapping[str, int]
    ) -> tuple[str, str] | None:
        where = first.get(ref)
        if where is None:
            return "unknown_id", f"no node has the id {ref!r}"
        if where >= at:
            return "forward_reference", (
                f"node {ref!r} is nodes[{where}], not before this one; a node refers only"
                " to earlier nodes"
            )
        if needs is not None and self.nodes[where].type != needs:
            found = self.nodes[where].type
            return "wrong_node_type", f"node {ref!r} has type {found!r}, not {needs!r}"
        return None


def _registered(function: Callable[..., Any], what: str) -> str:
    name = function_name(function)
    if name is None:
        raise PlanError(
            f"{what}: {function!r} is not registered; a workflow spec names its Python"
            " steps: register it with kalypso.register_function(name, fn)"
        )
    return name


class _Writer:
    """Writes values as spec nodes, each after those it refers to, once per object."""

    def __init__(self) -> None:
        self.nodes: list[NodeSpec] = []
        self._ids: dict[int, str] = {}
        self._taken: set[str] = set()

    def ref(self, value: Value) -> str:
        """The id of ``value``'s node, written (after its references) when new."""
        found = self._ids.get(id(value))
        if found is None:
            node = self._node(value)
            self.nodes.append(node)
            found = self._ids[id(value)] = node.id
        return found

    def _fresh(self, base: str) -> str:
        """``base`` (a name), or ``base_<n>`` when another node has it."""
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name

    def _parts(self, parts: tuple[str | Value, ...]) -> list[Part]:
        return [p if isinstance(p, str) else Ref(ref=self.ref(p)) for p in parts]

    def _guard(self, guard: Guard | None) -> GuardSpec | None:
        if guard is None:
            return None
        return GuardSpec(decider=self.ref(guard.decider), expected=guard.expected)

    def _node(self, value: Value) -> NodeSpec:
        if isinstance(value, Input):
            return InputSpec(type="input", id=self._fresh(value.name), name=value.name)
        if isinstance(value, Text):
            parts = self._parts(value.pieces)
            return TextSpec(type="text", id=self._fresh("text"), parts=parts)
        if isinstance(value, LLM):
            return self._llm(value)
        if isinstance(value, Fn):
            return self._fn(value)
        raise PlanError(f"unknown workflow value {value!r}")

    def _llm(self, call: LLM) -> LLMSpec:
        messages = call.conversation.messages
        continues = None
        reply = call.conversation.continues
        if reply is not None:
            prefix = reply.history.messages
            if messages[: len(prefix)] != prefix:
                raise PlanError(
                    f"llm {call.name!r}: its conversation continues {reply.name!r} but does"
                    f" not start with {reply.name}.history (build it with then())"
                )
            continues = self.ref(reply)
            messages = messages[len(prefix) :]
        written = [
            MessageSpec.model_validate({"role": m.role, "parts": self._parts(m.parts)})
            for m in messages
        ]
        guard = self._guard(call.guard)
        return LLMSpec(
            type="llm",
            id=self._fresh(call.name),
            name=call.name,
            messages=written,
            continues=continues,
            max_tokens=call.max_tokens,
            greedy=call.greedy,
            temperature=call.temperature,
            first_bound_tokens=call.first_bound_tokens,
            choices=None if call.choices is None else list(call.choices),
            cacheable=call.cacheable,
            guard=guard,
        )

    def _fn(self, step: Fn) -> FnSpec | CondSpec | SelectSpec:
        if step.function is cond_select:
            decider, yes, no = (self.ref(v) for v in step.inputs)
            guard = self._guard(step.guard)
            return SelectSpec(
                type="select",
                id=self._fresh(step.name),
                name=step.name,
                decider=decider,
                then=yes,
                otherwise=no,
                guard=guard,
            )
        inputs = [self.ref(v) for v in step.inputs]
        guard = self._guard(step.guard)
        if isinstance(step.function, CondDecider):
            return CondSpec(
                type="cond",
                id=self._fresh(step.name),
                name=step.name,
                predicate=_registered(step.function.predicate, f"cond {step.name!r}: predicate"),
                inputs=inputs,
                guard=guard,
            )
        return FnSpec(
            type="fn",
            id=self._fresh(step.name),
            name=step.name,
            function=_registered(step.function, f"fn {step.name!r}"),
            inputs=inputs,
            guard=guard,
        )


def workflow_spec(workflow: Workflow) -> WorkflowSpec:
    """``workflow`` as a spec (:meth:`Workflow.to_spec`): its outputs and every value they
    read, each once per object, named by the values' names.

    Raises:
        PlanError: a Python step or ``cond`` predicate that is not registered, or a
            conversation continuing a call it does not start with.
    """
    writer = _Writer()
    outputs = {key: writer.ref(value) for key, value in workflow.outputs.items()}
    return WorkflowSpec(name=workflow.name, nodes=writer.nodes, outputs=outputs)


_MESSAGES: dict[str, Callable[..., Message]] = {
    "system": dsl.system,
    "user": dsl.user,
    "assistant": dsl.assistant,
}


def workflow_from_spec(spec: WorkflowSpec | Mapping[str, Any]) -> Workflow:
    """The workflow ``spec`` describes (a dict is validated first), built with the DSL:
    ``workflow_from_spec(w.to_spec())`` lowers to the same task graph as ``w``.

    Raises:
        ValidationError: a malformed spec (``loc`` names the field).
        PlanError: an unregistered function, or what the DSL refuses (a bad name or
            template, a conversation ending with an assistant turn, ...).
    """
    if not isinstance(spec, WorkflowSpec):
        spec = WorkflowSpec.model_validate(spec)
    built: dict[str, Value] = {}

    def part(p: Part) -> str | Value:
        return p if isinstance(p, str) else built[p.ref]

    def step(ref: str) -> Fn:
        value = built[ref]
        assert isinstance(value, Fn)  # a cond node (checked by the model)
        return value

    def build(node: NodeSpec) -> Value:
        if isinstance(node, InputSpec):
            return dsl.input(node.name)
        if isinstance(node, TextSpec):
            return Text(tuple(part(p) for p in node.parts))
        if isinstance(node, LLMSpec):
            messages = [_MESSAGES[m.role](*map(part, m.parts)) for m in node.messages]
            conversation: Conversation
            if node.continues is None:
                conversation = dsl.chat(*messages)
            else:
                reply = built[node.continues]
                assert isinstance(reply, LLM)  # checked by the model
                conversation = reply.history
                for message in messages:
                    conversation = conversation.add(message)
            return dsl.llm(
                conversation,
                max_tokens=node.max_tokens,
                name=node.name,
                greedy=node.greedy,
                temperature=node.temperature,
                first_bound_tokens=node.first_bound_tokens,
                choices=node.choices,
                cacheable=node.cacheable,
            )
        if isinstance(node, FnSpec):
            function = lookup_function(node.function)
            return dsl.fn(function, *(built[i] for i in node.inputs), name=node.name)
        if isinstance(node, CondSpec):
            decider = CondDecider(lookup_function(node.predicate))
            return dsl.fn(decider, *(built[i] for i in node.inputs), name=node.name)
        chosen = (built[node.then], built[node.otherwise])
        return dsl.fn(cond_select, step(node.decider), *chosen, name=node.name)

    for node in spec.nodes:
        guard = None if isinstance(node, InputSpec | TextSpec) else node.guard
        scope = (
            nullcontext() if guard is None else _guarded(Guard(step(guard.decider), guard.expected))
        )
        with scope:
            built[node.id] = build(node)
    return Workflow({key: built[ref] for key, ref in spec.outputs.items()}, name=spec.name)
