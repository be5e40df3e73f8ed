"""The operator contract (paper Table 1) and the base classes every operator derives from.

Each operator declares the properties the scheduler relies on:

==================  ===========  =========  =================
operator            pipelining   predicate  Cartesian product
==================  ===========  =========  =================
sem_filter          yes          yes        no
sem_map             yes          no         no
sem_extract         yes          no         no
sem_classify        yes          no         no
index_search        yes          no         no
map / filter (py)   yes          no / yes   no
sem_join            yes          yes        yes
sem_topk            no           no         no
sem_agg             no           no         no
==================  ===========  =========  =================

and *lowers* to nodes of the core's task graph (:mod:`kalypso.core.graph`), which is
how the scheduler sizes its KV reservations and runs its calls. An operator never calls
the engine itself, so none can escape the memory accounting.

Writing your own operator - pick the base class that matches the contract:

* :class:`LLMOperator` - one LLM call per tuple (possibly skipped): set ``instruction``
  and ``task``, ``max_tokens`` (and ``first_bound_tokens`` for long answers, or
  ``choices`` for a one-token decision), implement ``on_answer``;
* :class:`RowOperator` - plain Python on one tuple: implement ``apply_row``;
* :class:`CartesianOperator` - one left tuple to its right-side partners;
* :class:`BlockingOperator` - the built-in ``sem_topk`` and ``sem_agg`` (a barrier).

Validate the input columns in ``output_schema`` (raise :class:`PlanError`: the plan then
fails when it is built). See ``docs/operators.md``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from kalypso.core.errors import PlanError
from kalypso.core.graph import (
    Decision,
    FanOutNode,
    FnNode,
    LLMNode,
    Message,
    Slot,
    Text,
)
from kalypso.core.instance import CallOutcome, Instance
from kalypso.core.prompt import ChatLayout
from kalypso.query.rows import ContextSlot
from kalypso.query.templates import Instruction, check_text

Schema = tuple[str, ...]
Values = dict[str, Any]


@dataclass(frozen=True)
class OperatorContract:
    """How the scheduler may run an operator (paper section 4)."""

    pipelining: bool
    """One tuple in, at most one tuple out; otherwise blocking (materializes its input)."""
    predicate: bool
    """May drop its input tuple, ending downstream work (and freeing its prefix)."""
    cartesian_product: bool
    """Combines each left tuple with right-side tuples; starts a new stage."""

    def flags(self) -> str:
        parts = ["pipelining" if self.pipelining else "blocking"]
        if self.predicate:
            parts.append("predicate")
        if self.cartesian_product:
            parts.append("cartesian-product")
        return ", ".join(parts)


@dataclass(frozen=True)
class LoweringContext:
    """What lowering needs: the run's system prompt and the model's chat layout (its
    tokenizer decides, for instance, whether labels differ in their first token)."""

    system_prompt: str
    layout: ChatLayout


class Operator(ABC):
    """Base of every operator. Instances are immutable once built."""

    kind: ClassVar[str]
    contract: ClassVar[OperatorContract]

    @abstractmethod
    def output_schema(self, schema: Schema) -> Schema:
        """Validate against the input columns and return the output columns.

        Raises:
            PlanError: naming the problem (missing column, bad argument, ...).
        """

    @abstractmethod
    def describe(self) -> str:
        """One line for ``explain()``."""

    def max_output_tokens(self) -> int:
        """Upper bound on tokens generated per LLM call (0 for operators without calls)."""
        return 0

    def prompt_columns(self) -> tuple[str, ...]:
        """The columns whose values enter this operator's prompts (checked before a run)."""
        return ()

    def prepare(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Do now the one-off work the operator would otherwise do on its first tuple
        (build a vector index, load an embedding model). Idempotent."""

    @property
    def has_preparation(self) -> bool:
        """Whether :meth:`prepare` has work to do: only then does the executor hand it to
        a thread (a thread hop for nothing would make the start order of concurrent queries
        depend on thread timing). An operator that overrides :meth:`prepare` overrides
        this too."""
        return False


class PipelinedOperator(Operator):
    """One tuple in, at most one tuple out: lowers to task-graph nodes.

    Subclass :class:`LLMOperator` or :class:`RowOperator`, which lower themselves; a
    direct subclass must implement :meth:`lower` (a plan with one that does not is
    refused when it is built)."""

    def lower(self, op_id: str, context: LoweringContext) -> list[LLMNode | FnNode]:
        """This operator's nodes, in order, with ids starting with ``op_id``."""
        raise PlanError(no_call_shape(self))


def user_prompt(columns: tuple[str, ...], task: str, system_prompt: str) -> tuple[Message, ...]:
    """``[system | context(columns) | task]``: the prompt layout of every tuple operator."""
    return (
        Message("system", (Text(system_prompt),)),
        Message("user", (Slot(ContextSlot(columns)), Text("\n\n" + task))),
    )


class LLMOperator(PipelinedOperator):
    """One LLM call per tuple; :meth:`on_answer` turns the answer into the output tuple.

    Subclasses set ``instruction`` (its columns form the context), ``task`` (the text
    after the context), ``max_tokens``, and either ``choices`` (a one-token decision
    among them) or ``first_bound_tokens`` (a long answer that starts below the cap).
    """

    instruction: Instruction
    task: str
    max_tokens: int = 1
    first_bound_tokens: int | None = None
    choices: tuple[str, ...] | None = None

    def ask(self, values: Values) -> bool:
        """Whether to call the LLM for this tuple (False: ``on_answer`` gets None)."""
        return True

    def check_call(self) -> None:
        """Refuse an incomplete call shape (checked when the plan is built).

        Raises:
            PlanError: naming the operator and the attribute.
        """
        name = getattr(self, "kind", type(self).__name__)
        instruction = getattr(self, "instruction", None)
        if not isinstance(instruction, Instruction):
            raise PlanError(
                f"{name}: an LLMOperator needs ``instruction``, an Instruction"
                f" (Instruction.parse(text, operator=...)), got {instruction!r}"
            )
        task = getattr(self, "task", None)
        if not isinstance(task, str) or not task.strip():
            raise PlanError(f"{name}: an LLMOperator needs ``task``, the text after the context")
        check_text(task, f"{name}: the task")
        max_tokens = self.max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise PlanError(f"{name}: max_tokens must be a positive integer, got {max_tokens!r}")
        first = self.first_bound_tokens
        if first is not None and (
            isinstance(first, bool) or not isinstance(first, int) or first < 1
        ):
            raise PlanError(
                f"{name}: first_bound_tokens must be a positive integer or None, got {first!r}"
            )
        choices = self.choices
        if choices is not None:
            if (
                not isinstance(choices, tuple)
                or len(choices) < 2
                or any(not isinstance(c, str) or not c.strip() for c in choices)
                or len(set(choices)) != len(choices)
            ):
                raise PlanError(
                    f"{name}: choices must be a tuple of at least two distinct non-empty"
                    f" strings, got {choices!r}"
                )
            if first is not None:
                raise PlanError(
                    f"{name}: give choices (a one-token decision) or first_bound_tokens (a"
                    " long answer), not both"
                )

    @abstractmethod
    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        """The tuple's new column values (an empty dict keeps it as is), or None to drop it."""

    def max_output_tokens(self) -> int:
        return self.max_tokens

    def prompt_columns(self) -> tuple[str, ...]:
        return self.instruction.columns

    def lower(self, op_id: str, context: LoweringContext) -> list[LLMNode | FnNode]:
        call_id = f"{op_id}/call"
        asks = type(self).ask is not LLMOperator.ask

        def answer(instance: Instance) -> Instance | None:
            outcome = instance.outputs.pop(call_id, None)
            values = self.on_answer(dict(instance.values), outcome)
            if values is None:
                return None
            for name, value in values.items():
                instance = instance.with_value(name, value)
            return instance

        return [
            LLMNode(
                node_id=call_id,
                messages=user_prompt(self.instruction.columns, self.task, context.system_prompt),
                max_tokens=self.max_tokens,
                op_id=op_id,
                first_bound_tokens=self.first_bound_tokens,
                decision=Decision(self.choices) if self.choices else None,
                description=self.describe(),
                when=(lambda instance: self.ask(dict(instance.values))) if asks else None,
            ),
            FnNode(f"{op_id}/answer", answer, op_id, (call_id,), "read the answer"),
        ]


class RowOperator(PipelinedOperator):
    """Plain Python on one tuple (no LLM call)."""

    blocking_io: ClassVar[bool] = False
    """Set when ``apply_row`` does I/O or heavy work: it then runs in a thread."""

    @abstractmethod
    def apply_row(self, values: Values) -> Values | None:
        """The tuple's new column values, or None to drop it."""

    def lower(self, op_id: str, context: LoweringContext) -> list[LLMNode | FnNode]:
        def run(instance: Instance) -> Instance | None:
            values = self.apply_row(dict(instance.values))
            if values is None:
                return None
            for name, value in values.items():
                instance = instance.with_value(name, value)
            return instance

        return [FnNode(op_id, run, op_id, description=self.describe(), blocking=self.blocking_io)]


class BlockingOperator(Operator):
    """Consumes its whole materialized input (``sem_topk``, ``sem_agg``); run by the
    executor as a barrier between pipelines. Only the built-in ones (``builtin_barrier``)
    can run: a plan with another is refused when it is built."""

    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)
    builtin_barrier: ClassVar[bool] = False


class CartesianOperator(Operator):
    """Pairs each left tuple with right-side tuples; the pairs are the next stage's tasks."""

    contract: ClassVar[OperatorContract] = OperatorContract(True, False, True)

    @abstractmethod
    def partners(self, instance: Instance) -> list[Instance]:
        """The child instances of ``instance`` (each ``instance.child(j, right_values)``)."""

    @property
    @abstractmethod
    def right_name(self) -> str:
        """Name of the right-side table, for ``explain()``."""

    @property
    @abstractmethod
    def right_rows(self) -> int:
        """Rows in the right-side table."""

    def can_pair(self, instance: Instance) -> bool:
        """Whether ``instance`` already has what :meth:`partners` needs (the scheduler sizes
        stages from sample tuples before upstream operators have added their columns)."""
        return True

    def right_columns(self) -> dict[str, list[Any]]:
        """The right-side columns (as named in the output) and their values, so values
        can be checked before the run; empty when the operator cannot list them."""
        return {}

    @property
    def pairs_with_io(self) -> bool:
        """Whether :meth:`partners` does heavy work (an index search): it then runs in a
        thread, off the event loop."""
        return False

    def fan_out(self, op_id: str) -> FanOutNode:
        return FanOutNode(
            op_id,
            self.partners,
            op_id,
            can_expand=self.can_pair,
            description=self.describe(),
            blocking=self.pairs_with_io,
        )


def no_call_shape(operator: Operator) -> str:
    name = getattr(operator, "kind", type(operator).__name__)
    return (
        f"{name}: the operator {type(operator).__name__} declares no call shape; subclass"
        " LLMOperator (one LLM call per tuple: instruction, task, max_tokens, choices or"
        " first_bound_tokens, on_answer) or RowOperator (plain Python: apply_row), or"
        " implement lower() (see docs/operators.md)"
    )


def check_shape(operator: Operator) -> None:
    """Refuse, when the plan is built, an operator the executor cannot run: one that
    declares no call shape, or an LLM operator whose shape is incomplete.

    Raises:
        PlanError: naming the operator and what is missing.
    """
    if isinstance(operator, PipelinedOperator):
        if type(operator).lower is PipelinedOperator.lower:
            raise PlanError(no_call_shape(operator))
        if isinstance(operator, LLMOperator):
            operator.check_call()
    elif isinstance(operator, BlockingOperator):
        if not operator.builtin_barrier:
            raise PlanError(
                f"{getattr(operator, 'kind', type(operator).__name__)}: blocking operators"
                " are the built-in sem_topk and sem_agg; write a custom operator as an"
                " LLMOperator or RowOperator (per tuple) instead"
            )
    elif not isinstance(operator, CartesianOperator):
        raise PlanError(
            f"operator {operator!r} is neither pipelined, blocking nor a Cartesian product:"
            f" {no_call_shape(operator)}"
        )


OperatorFactory = Callable[..., Operator]
_REGISTRY: dict[str, OperatorFactory] = {}


def register_operator(name: str, factory: OperatorFactory, *, replace: bool = False) -> None:
    """Make ``table.op(name, ...)`` build an operator with ``factory(...)``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"operator name {name!r} must be an identifier")
    if name in _REGISTRY and not replace:
        raise ValueError(f"operator {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = factory


def build_operator(name: str, *args: Any, **kwargs: Any) -> Operator:
    """Build a registered operator by name.

    Raises:
        PlanError: unknown name (the message lists the registered ones), or arguments the
            factory does not take.
    """
    factory = _REGISTRY.get(name) if isinstance(name, str) else None
    if factory is None:
        raise PlanError(f"unknown operator {name!r}; registered: {sorted(_REGISTRY)}")
    try:
        inspect.signature(factory).bind(*args, **kwargs)
    except TypeError as exc:
        raise PlanError(f"{name}: {exc}") from None
    except ValueError:  # no signature to check (a builtin): let the call say
        pass
    operator = factory(*args, **kwargs)
    if not isinstance(operator, Operator):
        raise PlanError(f"operator {name!r}: its factory returned {operator!r}, not an Operator")
    return operator


def registered_operators() -> list[str]:
    return sorted(_REGISTRY)
