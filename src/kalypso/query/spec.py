"""Table plans as data: the JSON spec a :class:`~kalypso.query.plan.Table` travels as.

A plan sent to a server is a :class:`TableSpec`: its name, its source rows
(:class:`~kalypso.query.spec_source.SourceSpec`) and its operators, each the arguments of
one builder method (``{"op": "sem_map", "instruction": ..., "output_column": ...}``)::

    spec = plan.to_spec()                       # a TableSpec
    text = spec.model_dump_json()               # what travels
    again = table_from_spec(json.loads(text))   # the same plan

Contract:

* :meth:`Table.to_spec` (:func:`table_spec`) reads the arguments back from the built-in
  operators; the plan it describes has the same ``explain()``, the same task graphs and
  the same spec. It raises :class:`PlanError` naming the operator for a plan that cannot
  travel: a custom operator (``apply(...)``, or ``op(name, ...)`` of a user factory), a
  ``map``/``filter`` function not registered with ``kalypso.register_function``, a join
  half not built by ``sem_join``, or rows JSON cannot carry.
* :func:`table_from_spec` validates with pydantic: a malformed spec raises
  ``pydantic.ValidationError`` whose ``loc`` names the field (a wrong type, a missing or
  unknown field, an unknown ``op``, a bound such as ``k >= 1``, the source's framing).
  It then builds the plan with the builder methods, whose semantic checks (a column that
  does not exist, a function name not registered here) raise :class:`PlanError`
  unchanged.
* A spec carries no code and no path: Python steps are registered function names, the
  tables (source, a join's right table) and an ``index_search`` corpus are inline.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, FiniteFloat

from kalypso.core.errors import PlanError
from kalypso.core.functions import check_function_name, function_name, lookup_function
from kalypso.query.blocking_ops import SemAgg, SemTopK
from kalypso.query.join_ops import CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemClassify, SemExtract, SemFilter, SemMap
from kalypso.query.operators import Operator
from kalypso.query.plan import Table
from kalypso.query.python_ops import IndexSearch, PyFilter, PyMap
from kalypso.query.spec_source import SourceFormat, SourceSpec, StrictSpec

NonEmpty = Annotated[str, Field(min_length=1)]
Positive = Annotated[int, Field(ge=1)]
Number = int | FiniteFloat
"""A distance threshold; an int stays an int, as ``explain()`` shows it."""
Distance = Annotated[int, Field(ge=0)] | Annotated[FiniteFloat, Field(ge=0)]
FunctionName = Annotated[str, AfterValidator(check_function_name)]


def _default(factory: Callable[..., Any], parameter: str) -> Any:
    """The default of ``factory``'s ``parameter``: a spec's defaults are the builders'."""
    return inspect.signature(factory).parameters[parameter].default


class SemFilterSpec(StrictSpec):
    """``sem_filter(instruction, negate=...)``."""

    op: Literal["sem_filter"] = "sem_filter"
    instruction: NonEmpty
    negate: bool = _default(SemFilter, "negate")

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_filter(self.instruction, negate=self.negate)


class SemMapSpec(StrictSpec):
    """``sem_map(instruction, output_column, max_tokens=..., first_bound_tokens=...)``."""

    op: Literal["sem_map"] = "sem_map"
    instruction: NonEmpty
    output_column: NonEmpty
    max_tokens: Positive = _default(SemMap, "max_tokens")
    first_bound_tokens: Positive = _default(SemMap, "first_bound_tokens")

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_map(
            self.instruction,
            self.output_column,
            max_tokens=self.max_tokens,
            first_bound_tokens=self.first_bound_tokens,
        )


class SemExtractSpec(StrictSpec):
    """``sem_extract(instruction, fields, max_tokens=..., first_bound_tokens=...)``."""

    op: Literal["sem_extract"] = "sem_extract"
    instruction: NonEmpty
    fields: Annotated[list[NonEmpty], Field(min_length=1)]
    max_tokens: Positive = _default(SemExtract, "max_tokens")
    first_bound_tokens: Positive = _default(SemExtract, "first_bound_tokens")

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_extract(
            self.instruction,
            list(self.fields),
            max_tokens=self.max_tokens,
            first_bound_tokens=self.first_bound_tokens,
        )


class SemClassifySpec(StrictSpec):
    """``sem_classify(instruction, labels, output_column)``."""

    op: Literal["sem_classify"] = "sem_classify"
    instruction: NonEmpty
    labels: Annotated[list[NonEmpty], Field(min_length=2)]
    output_column: NonEmpty = _default(SemClassify, "output_column")

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_classify(self.instruction, list(self.labels), self.output_column)


class IndexJoinSpec(StrictSpec):
    """The fields of :class:`~kalypso.query.join_ops.IndexJoin`."""

    left: NonEmpty
    right_column: NonEmpty
    k: Positive | None = _default(IndexJoin, "k")
    max_distance: Distance | None = _default(IndexJoin, "max_distance")
    accept_below: Number | None = _default(IndexJoin, "accept_below")
    reject_above: Number | None = _default(IndexJoin, "reject_above")


class RightTableSpec(StrictSpec):
    """A join's right table: its name (``"right"`` for a DataFrame) and its rows."""

    name: NonEmpty = "right"
    source: SourceSpec


class SemJoinSpec(StrictSpec):
    """``sem_join(right, instruction, index=..., negate=...)``."""

    op: Literal["sem_join"] = "sem_join"
    right: RightTableSpec
    instruction: NonEmpty
    negate: bool = _default(JoinPredicate, "negate")
    index: IndexJoinSpec | None = None

    def apply_to(self, plan: Table) -> Table:
        where = f"sem_join: the right table {self.right.name!r}: source"
        right = Table(self.right.source.data(where), self.right.name)
        index = None if self.index is None else IndexJoin(**self.index.model_dump())
        return plan.sem_join(right, self.instruction, index=index, negate=self.negate)


class IndexSearchSpec(StrictSpec):
    """``index_search(corpus, query, k, output_column)``; the corpus inline."""

    op: Literal["index_search"] = "index_search"
    corpus: Annotated[list[str], Field(min_length=1)]
    query: NonEmpty
    k: Positive
    output_column: NonEmpty = _default(IndexSearch, "output_column")

    def apply_to(self, plan: Table) -> Table:
        return plan.index_search(list(self.corpus), self.query, self.k, self.output_column)


class SemTopKSpec(StrictSpec):
    """``sem_topk(instruction, k)``."""

    op: Literal["sem_topk"] = "sem_topk"
    instruction: NonEmpty
    k: Positive

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_topk(self.instruction, self.k)


class SemAggSpec(StrictSpec):
    """``sem_agg(instruction, output_column, max_tokens=...)``."""

    op: Literal["sem_agg"] = "sem_agg"
    instruction: NonEmpty
    output_column: NonEmpty = _default(SemAgg, "output_column")
    max_tokens: Positive = _default(SemAgg, "max_tokens")

    def apply_to(self, plan: Table) -> Table:
        return plan.sem_agg(self.instruction, self.output_column, max_tokens=self.max_tokens)


class MapSpec(StrictSpec):
    """``map(function, output_column)``, the function by its registered name."""

    op: Literal["map"] = "map"
    function: FunctionName
    output_column: NonEmpty

    def apply_to(self, plan: Table) -> Table:
        return plan.map(lookup_function(self.function), self.output_column)


class FilterSpec(StrictSpec):
    """``filter(function)``, the predicate by its registered name."""

    op: Literal["filter"] = "filter"
    function: FunctionName

    def apply_to(self, plan: Table) -> Table:
        return plan.filter(lookup_function(self.function))


OperatorSpec = Annotated[
    SemFilterSpec
    | SemMapSpec
    | SemExtractSpec
    | SemClassifySpec
    | SemJoinSpec
    | IndexSearchSpec
    | SemTopKSpec
    | SemAggSpec
    | MapSpec
    | FilterSpec,
    Field(discriminator="op"),
]


class TableSpec(StrictSpec):
    """A table plan: its name, source rows, and operators in order."""

    kind: Literal["table"] = "table"
    version: Literal[1] = 1
    name: NonEmpty
    source: SourceSpec
    operators: list[OperatorSpec] = Field(default_factory=list)


def table_from_spec(spec: TableSpec | Mapping[str, Any]) -> Table:
    """The plan ``spec`` describes (a :class:`TableSpec`, or one as decoded JSON).

    Raises:
        pydantic.ValidationError: a malformed spec; each error's ``loc`` names the field.
        PlanError: a well-formed spec of an invalid plan (from the builder methods).
    """
    if not isinstance(spec, TableSpec):
        spec = TableSpec.model_validate(dict(spec) if isinstance(spec, Mapping) else spec)
    plan = Table(spec.source.data("source"), spec.name)
    for operator in spec.operators:
        plan = operator.apply_to(plan)
    return plan


def table_spec(plan: Table, source_format: SourceFormat = "rows") -> TableSpec:
    """``plan`` as a spec, its tables as JSON rows or Parquet (see :meth:`Table.to_spec`).

    Raises:
        PlanError: naming the operator (or the table, column and row) that cannot travel,
            and the fix.
    """
    specs: list[OperatorSpec] = []
    operators = plan.operators
    position = 0
    while position < len(operators):
        operator = operators[position]
        op_id = f"{position + 1}:{operator.kind}"
        if type(operator) is CartesianProduct:
            predicate = operators[position + 1] if position + 1 < len(operators) else None
            specs.append(_join_spec(operator, predicate, op_id, source_format))
            position += 2
        else:
            specs.append(_operator_spec(operator, op_id))
            position += 1
    return TableSpec(
        name=plan.name,
        source=SourceSpec.of(plan.source, source_format, "source"),
        operators=specs,
    )


def _join_spec(
    product: CartesianProduct,
    predicate: Operator | None,
    op_id: str,
    source_format: SourceFormat,
) -> SemJoinSpec:
    index = product.index
    if type(predicate) is not JoinPredicate or predicate.thresholds != (
        index.thresholds() if index is not None else None
    ):
        raise PlanError(_half_join(op_id))
    where = f"operator {op_id}: the right table {product.right_name!r}"
    return SemJoinSpec(
        right=RightTableSpec(
            name=product.right_name,
            source=SourceSpec.of(product.right_frame, source_format, where),
        ),
        instruction=predicate.instruction.text,
        negate=predicate.negate,
        index=None if index is None else IndexJoinSpec(**dataclasses.asdict(index)),
    )


def _operator_spec(operator: Operator, op_id: str) -> OperatorSpec:
    """The spec of one built-in operator (its exact class: a subclass may behave
    differently, so it is refused like any custom operator)."""
    if type(operator) is SemFilter:
        return SemFilterSpec(instruction=operator.instruction.text, negate=operator.negate)
    if type(operator) is SemMap:
        return SemMapSpec(
            instruction=operator.instruction.text,
            output_column=operator.output_column,
            max_tokens=operator.max_tokens,
            first_bound_tokens=_first_bound_tokens(operator),
        )
    if type(operator) is SemExtract:
        return SemExtractSpec(
            instruction=operator.instruction.text,
            fields=list(operator.fields),
            max_tokens=operator.max_tokens,
            first_bound_tokens=_first_bound_tokens(operator),
        )
    if type(operator) is SemClassify:
        return SemClassifySpec(
            instruction=operator.instruction.text,
            labels=list(operator.labels),
            output_column=operator.output_column,
        )
    if type(operator) is IndexSearch:
        return IndexSearchSpec(
            corpus=list(operator.passages),
            query=operator.query.text,
            k=operator.k,
            output_column=operator.output_column,
        )
    if type(operator) is SemTopK:
        return SemTopKSpec(instruction=operator.instruction.text, k=operator.k)
    if type(operator) is SemAgg:
        return SemAggSpec(
            instruction=operator.instruction.text,
            output_column=operator.output_column,
            max_tokens=operator.max_tokens,
        )
    if type(operator) is PyMap:
        return MapSpec(
            function=_registered_name(operator.fn, op_id), output_column=operator.output_column
        )
    if type(operator) is PyFilter:
        return FilterSpec(function=_registered_name(operator.predicate, op_id))
    if type(operator) is JoinPredicate:
        raise PlanError(_half_join(op_id))
    raise PlanError(
        f"operator {op_id} ({type(operator).__name__}) cannot travel as a spec: a spec"
        " names only the built-in operators (sem_filter, sem_map, sem_extract, sem_classify,"
        " sem_join, index_search, sem_topk, sem_agg, map, filter); write the step with"
        " them, e.g. as map/filter of a function registered with kalypso.register_function"
    )


def _first_bound_tokens(operator: SemMap | SemExtract) -> int:
    bound = operator.first_bound_tokens
    assert bound is not None  # their constructors always set it
    return bound


def _half_join(op_id: str) -> str:
    return (
        f"operator {op_id}: a Cartesian product and its join predicate travel only as the"
        " pair Table.sem_join builds; build the join with sem_join"
    )


def _registered_name(function: Callable[..., Any], op_id: str) -> str:
    name = function_name(function)
    if name is None:
        raise PlanError(
            f"operator {op_id}: its function {getattr(function, '__name__', function)!r} is"
            " not registered, so a spec cannot name it; register it on both sides with"
            " kalypso.register_function(name, function)"
        )
    return name
