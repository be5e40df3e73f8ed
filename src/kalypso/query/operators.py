"""The operator contract (paper Table 1) and the base classes every operator derives from.

Each operator declares three properties the scheduler relies on:

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

and how many tokens it may generate per call (:meth:`Operator.max_output_tokens`), which
the memory-aware scheduler uses to reserve KV memory.

Writing your own operator: subclass :class:`PipelinedOperator` (one tuple in, at most one
out), :class:`BlockingOperator` (whole table in) or :class:`CartesianOperator` (one left
tuple in, its right-side partners out), set ``kind`` and ``contract``, implement
``output_schema`` (validate the input columns, return the output columns; raise
:class:`~kalypso.query.templates.PlanError`) and ``apply``/``apply_all``/``partners``. Make
LLM calls only through :meth:`ExecContext.complete`. Add it to a plan with
``table.apply(MyOperator(...))``, or register a factory with :func:`register_operator` and
use ``table.op("my_operator", ...)``. See ``docs/operators.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from kalypso.query.context import ExecContext
from kalypso.query.rows import Row
from kalypso.query.templates import PlanError

Schema = tuple[str, ...]


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

    def prompt_parts(self) -> tuple[tuple[str, ...], str] | None:
        """``(context columns, task)`` for operators that make one call per tuple, so the
        executor can check prompt sizes and values before any call; None otherwise."""
        return None

    def prepare(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Do now the one-off work the operator would otherwise do on its first tuple
        (build a vector index, load an embedding model). Idempotent."""


class PipelinedOperator(Operator):
    """One tuple in, at most one tuple out."""

    @abstractmethod
    async def apply(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> Row | None:
        """Run on one tuple; ``None`` drops it (predicates only)."""


class BlockingOperator(Operator):
    """Consumes its whole materialized input."""

    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)

    @abstractmethod
    async def apply_all(self, rows: list[Row], ctx: ExecContext, op_id: str) -> list[Row]:
        """Run on the whole input; returns the output tuples."""


class CartesianOperator(Operator):
    """Pairs each left tuple with right-side tuples; the pairs are the next stage's tasks."""

    contract: ClassVar[OperatorContract] = OperatorContract(True, False, True)

    @abstractmethod
    def partners(self, row: Row) -> list[Row]:
        """The child tuples of ``row`` (each ``row.child(j, right_values)``)."""

    @property
    @abstractmethod
    def right_name(self) -> str:
        """Name of the right-side table, for ``explain()``."""

    @property
    @abstractmethod
    def right_rows(self) -> int:
        """Rows in the right-side table."""

    def can_pair(self, row: Row) -> bool:
        """Whether ``row`` already has what :meth:`partners` needs (the scheduler sizes
        stages from sample rows before upstream operators have added their columns)."""
        return True

    def right_columns(self) -> dict[str, list[Any]]:
        """The right-side columns (as named in the output) and their values, so values
        can be checked before the run; empty when the operator cannot list them."""
        return {}


OperatorFactory = Callable[..., Operator]
_REGISTRY: dict[str, OperatorFactory] = {}


def register_operator(name: str, factory: OperatorFactory, *, replace: bool = False) -> None:
    """Make ``table.op(name, ...)`` build an operator with ``factory(...)``."""
    if not name.isidentifier():
        raise ValueError(f"operator name {name!r} must be an identifier")
    if name in _REGISTRY and not replace:
        raise ValueError(f"operator {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = factory


def build_operator(name: str, *args: Any, **kwargs: Any) -> Operator:
    """Build a registered operator by name.

    Raises:
        PlanError: unknown name (the message lists the registered ones).
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise PlanError(f"unknown operator {name!r}; registered: {sorted(_REGISTRY)}")
    return factory(*args, **kwargs)


def registered_operators() -> list[str]:
    return sorted(_REGISTRY)
