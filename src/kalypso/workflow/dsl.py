"""A lazy DSL for batch agentic workflows (the Helium paper's section 3 and Table 6).

Nothing runs while a workflow is written: every call returns a symbolic value. A
:class:`Workflow` collects what its outputs need, is optimized and lowered to the core's
task graph, and runs on a batch of inputs (one instance per query)::

    from kalypso import workflow as wf

    question = wf.input("question")
    chat = wf.chat(wf.system("You are a careful analyst."), wf.user(question))
    first = wf.llm(chat, max_tokens=48, name="draft")
    better = wf.llm(chat.then(first).user("Check your answer and improve it."),
                    max_tokens=48, name="revised")
    flow = wf.Workflow({"answer": better})

Operators:

================  ===============================================================
``input(name)``   a per-query text, bound by name when the workflow runs
``const(text)``   static text (``data`` in the paper)
``fmt(t, ...)``   a ``str.format`` template over values (``{}`` or ``{name}``)
``system/user/``  a chat message from text and values; ``chat(...)`` a conversation;
``assistant``     ``conv.then(reply)`` appends an LLM's answer as the assistant turn,
                  ``conv.user(...)`` a user turn (the conversation history)
``llm(conv)``     one LLM call per query: ``max_tokens``, greedy or ``temperature``,
                  ``choices`` (a one-token decision), ``cacheable`` (warm its input)
``fn(f, *v)``     a Python step on one query's values (returns text)
``cond(...)``     a branch chosen per query by a Python predicate
``loop(n, ...)``  ``n`` rounds, unrolled when the workflow is built
================  ===============================================================

Values are immutable and identified by what they compute, so writing the same thing twice
gives two equal values (merged by common-subgraph elimination when greedy).
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kalypso.core.errors import PlanError

if TYPE_CHECKING:
    from kalypso.workflow.spec import WorkflowSpec

Part = "str | Value"

_names = itertools.count()


def _auto_name(kind: str) -> str:
    return f"{kind}{next(_names)}"


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise PlanError(f"{what}: a name must be an identifier, got {name!r}")
    return name


class Value:
    """A text value computed per query (abstract)."""

    def parts(self) -> tuple[str | Value, ...]:
        """The value as a concatenation of static text and opaque values."""
        return (self,)

    def deps(self) -> tuple[Value, ...]:
        """The values this one is computed from."""
        return ()


@dataclass(frozen=True, eq=False)
class Input(Value):
    name: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Input) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("input", self.name))


@dataclass(frozen=True)
class Text(Value):
    """Static text, or a concatenation of static text and values (``const``, ``fmt``)."""

    pieces: tuple[str | Value, ...]

    def parts(self) -> tuple[str | Value, ...]:
        out: list[str | Value] = []
        for piece in self.pieces:
            out.extend(piece.parts() if isinstance(piece, Value) else (piece,))
        return tuple(out)

    def deps(self) -> tuple[Value, ...]:
        return tuple(p for p in self.parts() if isinstance(p, Value))


@dataclass(frozen=True)
class Guard:
    """LLM and Fn values created inside a ``cond`` branch: they run only where
    ``decider`` computed ``expected``."""

    decider: Fn
    expected: bool


_GUARDS: list[Guard] = []


@dataclass(frozen=True, eq=False)
class Fn(Value):
    """A Python step: ``function(*texts)`` -> text."""

    function: Callable[..., Any]
    inputs: tuple[Value, ...]
    name: str
    guard: Guard | None = None

    def deps(self) -> tuple[Value, ...]:
        return (*self.inputs, *((self.guard.decider,) if self.guard else ()))


@dataclass(frozen=True)
class Message:
    role: str
    parts: tuple[str | Value, ...]


@dataclass(frozen=True, eq=False)
class LLM(Value):
    """One LLM call per query; its value is the generated text."""

    conversation: Conversation
    max_tokens: int
    name: str
    greedy: bool = True
    temperature: float = 0.0
    first_bound_tokens: int | None = None
    choices: tuple[str, ...] | None = None
    cacheable: bool = False
    guard: Guard | None = None

    def deps(self) -> tuple[Value, ...]:
        out: list[str | Value] = []
        for message in self.conversation.messages:
            for part in message.parts:
                if isinstance(part, Value):
                    out.extend(part.parts() if isinstance(part, Text) else (part,))
        if self.guard is not None:
            out.append(self.guard.decider)
        return tuple(p for p in out if isinstance(p, Value))

    @property
    def history(self) -> Conversation:
        """The conversation with this call's answer appended as the assistant turn."""
        return self.conversation.then(self)

    def signature(self) -> tuple[Any, ...]:
        """What decides the call's answer under greedy decoding (for CSE and the cache)."""
        return (
            self.conversation,
            self.max_tokens,
            self.greedy,
            self.temperature,
            self.choices,
            self.guard,
        )


@dataclass(frozen=True)
class Conversation:
    """Messages in order; ``continues`` is the call whose prompt and answer it starts with."""

    messages: tuple[Message, ...]
    continues: LLM | None = None

    def then(self, reply: LLM) -> Conversation:
        """This conversation followed by ``reply``'s answer as the assistant turn."""
        if not isinstance(reply, LLM):
            raise PlanError(f"then() takes the LLM call whose answer continues, got {reply!r}")
        if reply.conversation != self:
            raise PlanError(
                f"then({reply.name}): the call was made on another conversation; use"
                f" {reply.name}.history"
            )
        return Conversation((*self.messages, Message("assistant", (reply,))), reply)

    def user(self, *parts: str | Value) -> Conversation:
        return Conversation((*self.messages, user(*parts)), self.continues)

    def add(self, message: Message) -> Conversation:
        return Conversation((*self.messages, message), self.continues)


def input(name: str) -> Input:
    """A per-query text, given when the workflow runs (one value per query)."""
    return Input(_check_name(name, "input"))


def const(text: str) -> Text:
    """Static text."""
    if not isinstance(text, str):
        raise PlanError(f"const: text must be a string, got {text!r}")
    return Text((text,))


def fmt(template: str, *args: str | Value, **kwargs: str | Value) -> Text:
    """``template`` with ``{}`` / ``{0}`` / ``{name}`` fields replaced by values or text.

    Raises:
        PlanError: a field without a value, an unused value, or a format spec.
    """
    if not isinstance(template, str):
        raise PlanError(f"fmt: template must be a string, got {template!r}")
    pieces: list[str | Value] = []
    auto = 0
    used: set[str | int] = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise PlanError(f"fmt: bad template {template!r}: {exc}") from None
    for literal, field_name, spec, conversion in parsed:
        if literal:
            pieces.append(literal)
        if field_name is None:
            continue
        if spec or conversion:
            raise PlanError(f"fmt: {template!r}: format specs are not supported")
        key: str | int
        if field_name == "":
            key, auto = auto, auto + 1
        else:
            key = int(field_name) if field_name.isdigit() else field_name
        if isinstance(key, int):
            if key >= len(args):
                raise PlanError(f"fmt: {template!r} needs positional value {key}")
            value = args[key]
        else:
            if key not in kwargs:
                raise PlanError(f"fmt: {template!r} needs a value for {{{key}}}")
            value = kwargs[key]
        used.add(key)
        pieces.append(_as_part(value, "fmt"))
    unused = [k for k in (*range(len(args)), *kwargs) if k not in used]
    if unused:
        raise PlanError(f"fmt: {template!r} does not use the value(s) {unused}")
    return Text(tuple(pieces))


def _as_part(value: Any, what: str) -> str | Value:
    if isinstance(value, str | Value):
        return value
    raise PlanError(f"{what}: expected text or a workflow value, got {value!r}")


def _message(role: str, parts: Sequence[str | Value]) -> Message:
    if not parts:
        raise PlanError(f"{role}: a message needs content")
    return Message(role, tuple(_as_part(p, role) for p in parts))


def system(*parts: str | Value) -> Message:
    return _message("system", parts)


def user(*parts: str | Value) -> Message:
    return _message("user", parts)


def assistant(*parts: str | Value) -> Message:
    return _message("assistant", parts)


def chat(*messages: Message) -> Conversation:
    """A conversation from messages (the model's chat template renders it)."""
    if not messages or not all(isinstance(m, Message) for m in messages):
        raise PlanError("chat: give one or more messages (wf.system, wf.user, wf.assistant)")
    return Conversation(tuple(messages))


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{what} must be a positive integer, got {value!r}")
    return value


def llm(
    conversation: Conversation | Message,
    *,
    max_tokens: int,
    name: str | None = None,
    greedy: bool = True,
    temperature: float = 0.0,
    first_bound_tokens: int | None = None,
    choices: Sequence[str] | None = None,
    cacheable: bool = False,
) -> LLM:
    """One LLM call per query on ``conversation``.

    Args:
        max_tokens: the hard cap on the answer.
        greedy: greedy decoding (deterministic; calls may be merged and cached); else
            sampling at ``temperature``.
        first_bound_tokens: start below the cap (the KV reservation) and continue.
        choices: a one-token decision among these answers.
        cacheable: warm this call's input prefix early (proactive caching).
    """
    if isinstance(conversation, Message):
        conversation = chat(conversation)
    if not isinstance(conversation, Conversation):
        raise PlanError(f"llm: expected a conversation (wf.chat(...)), got {conversation!r}")
    if conversation.messages[-1].role == "assistant":
        raise PlanError("llm: the conversation ends with an assistant turn; add a user turn")
    if not greedy and not (isinstance(temperature, int | float) and temperature > 0):
        raise PlanError(f"llm: sampling needs temperature > 0, got {temperature!r}")
    if choices is not None:
        if isinstance(choices, str) or len(choices) < 2:
            raise PlanError(f"llm: choices must be a list of two or more answers, got {choices!r}")
        choices = tuple(choices)
    return LLM(
        conversation,
        _positive(max_tokens, "llm: max_tokens"),
        _check_name(name, "llm") if name is not None else _auto_name("llm"),
        greedy,
        float(temperature),
        _positive(first_bound_tokens, "llm: first_bound_tokens") if first_bound_tokens else None,
        choices,
        bool(cacheable),
        _GUARDS[-1] if _GUARDS else None,
    )


def fn(function: Callable[..., Any], *inputs: str | Value, name: str | None = None) -> Fn:
    """``function(*texts)`` per query; its result (as text) is the value. A skipped LLM
    input (a branch not taken) is passed as None."""
    if not callable(function):
        raise PlanError(f"fn: {function!r} is not callable")
    values = tuple(const(i) if isinstance(i, str) else i for i in inputs)
    for value in values:
        _as_part(value, "fn")
    return Fn(
        function,
        values,
        _check_name(name, "fn") if name is not None else _auto_name("fn"),
        _GUARDS[-1] if _GUARDS else None,
    )


@contextmanager
def _guarded(guard: Guard) -> Iterator[None]:
    _GUARDS.append(guard)
    try:
        yield
    finally:
        _GUARDS.pop()


def cond(
    predicate: Callable[..., bool],
    inputs: Sequence[str | Value],
    then: Callable[[], Value],
    otherwise: Callable[[], Value],
    *,
    name: str | None = None,
) -> Fn:
    """Per query, ``then()``'s value where ``predicate(*inputs)`` holds, else
    ``otherwise()``'s. Both branches are written once; the LLM calls of the branch not
    taken are skipped for that query (and anything depending on them)."""
    base = _check_name(name, "cond") if name is not None else _auto_name("cond")
    decider = fn(CondDecider(predicate), *inputs, name=f"{base}_if")
    with _guarded(Guard(decider, True)):
        yes = then()
    with _guarded(Guard(decider, False)):
        no = otherwise()
    if not isinstance(yes, Value) or not isinstance(no, Value):
        raise PlanError("cond: then() and otherwise() must return workflow values")
    return fn(cond_select, decider, yes, no, name=base)


@dataclass(frozen=True)
class CondDecider:
    """The function of a ``cond``'s decider step (``{name}_if``): "1" where ``predicate``
    holds, else "0". Kept as an object so a spec can name the predicate."""

    predicate: Callable[..., bool]

    def __call__(self, *texts: str | None) -> str:
        return "1" if self.predicate(*texts) else "0"


def cond_select(decided: str | None, yes: str | None, no: str | None) -> str | None:
    """The function of a ``cond``'s last step: the branch's value its decider chose."""
    return yes if decided == "1" else no


def loop(rounds: int, body: Callable[[int, Any], Any], state: Any) -> Any:
    """``state = body(round, state)`` for each round, unrolled now (a fixed bound)."""
    _positive(rounds, "loop: rounds")
    for number in range(rounds):
        state = body(number, state)
    return state


@dataclass
class Workflow:
    """A workflow: its named outputs and everything they need (nothing else: what no
    output needs is pruned by construction).

    Args:
        outputs: output name -> value.
        name: for reports.
    """

    outputs: Mapping[str, Value]
    name: str = "workflow"
    _order: list[Value] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.outputs:
            raise PlanError("a workflow needs at least one output")
        for key, value in self.outputs.items():
            _check_name(key, "output")
            if not isinstance(value, Value):
                raise PlanError(f"output {key!r}: expected a workflow value, got {value!r}")
        self._order = _topological(list(self.outputs.values()))

    @property
    def values(self) -> list[Value]:
        """Every value the outputs need, each after its dependencies."""
        return list(self._order)

    @property
    def inputs(self) -> list[str]:
        return sorted({v.name for v in self._order if isinstance(v, Input)})

    @property
    def llm_calls(self) -> list[LLM]:
        return [v for v in self._order if isinstance(v, LLM)]

    def to_spec(self) -> WorkflowSpec:
        """The workflow as data (:mod:`kalypso.workflow.spec`); Python steps by their
        registered names.

        Raises:
            PlanError: a Python step or ``cond`` predicate is not registered.
        """
        from kalypso.workflow.spec import workflow_spec

        return workflow_spec(self)


def _topological(roots: list[Value]) -> list[Value]:
    order: list[Value] = []
    seen: set[int] = set()

    def visit(value: Value, path: tuple[int, ...]) -> None:
        if id(value) in seen:
            return
        for dep in value.deps():
            visit(dep, (*path, id(value)))
        if isinstance(value, LLM) and value.conversation.continues is not None:
            visit(value.conversation.continues, (*path, id(value)))
        seen.add(id(value))
        order.append(value)

    for root in roots:
        visit(root, ())
    return order
