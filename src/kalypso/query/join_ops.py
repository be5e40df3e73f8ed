"""Joins: a Cartesian product (full, or indexed by a vector index) followed by a predicate.

``sem_join(right, instruction)`` becomes two operators: :class:`CartesianProduct`, which
starts a new stage and pairs each left tuple with every right tuple, and
:class:`JoinPredicate`, a ``sem_filter`` on each pair. With ``index=``, the product is an
*indexed* Cartesian product (ICP): a vector index over a right-table column picks each
left tuple's candidates (top-k and/or a distance limit) and records their distance in the
column ``join_distance``; the predicate can then cascade on that distance: accept below
``accept_below`` without an LLM call, reject above ``reject_above``, ask the LLM between.

Right-table columns whose names exist on the left are renamed ``<name>_right``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from kalypso.core.errors import PlanError
from kalypso.core.instance import CallOutcome, Instance
from kalypso.query.index import CascadeThresholds, VectorIndex
from kalypso.query.llm_ops import SemFilter, positive_int
from kalypso.query.operators import CartesianOperator, OperatorContract, Schema, Values
from kalypso.query.shared_index import index_for
from kalypso.query.templates import Instruction, value_to_text

DISTANCE_COLUMN = "join_distance"


def _right_records(right: Any, operator: str) -> tuple[str, pd.DataFrame]:
    if right is None:
        raise PlanError(f"{operator}: the right-side table is missing")
    from kalypso.query.plan import Table

    if isinstance(right, Table):
        if right.operators:
            raise PlanError(f"{operator}: the right side must be a static table, not a plan")
        name, frame = right.name, right.source
    elif isinstance(right, pd.DataFrame):
        name, frame = "right", right
    else:
        raise PlanError(f"{operator}: the right side must be a DataFrame or kalypso.Table")
    if len(frame) == 0:
        raise PlanError(f"{operator}: the right-side table {name!r} is empty")
    return name, frame.reset_index(drop=True)


def _renamed_right_columns(left: Schema, right: pd.DataFrame) -> dict[str, str]:
    names = [str(c) for c in right.columns]
    renames = {c: (f"{c}_right" if c in left else c) for c in names}
    clashes = [new for old, new in renames.items() if new != old and (new in left or new in names)]
    if clashes:
        raise PlanError(
            f"sem_join: right columns would be renamed to {clashes}, which already exist;"
            " rename them before joining"
        )
    return renames


def _check_number(value: Any, name: str, *, positive: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanError(f"sem_join index: {name} must be a finite number or None, got {value!r}")
    if positive and value < 0:
        raise PlanError(f"sem_join index: {name} must be >= 0, got {value!r}")


def _check_index(index: Any, right: pd.DataFrame) -> Instruction:
    """Validate an :class:`IndexJoin` against the right table; returns its left query.

    Raises:
        PlanError: a bad field, or a right-column value that cannot be embedded.
    """
    if not isinstance(index, IndexJoin):
        raise PlanError(f"sem_join: index must be a kalypso.IndexJoin, got {index!r}")
    if not isinstance(index.right_column, str) or index.right_column not in right.columns:
        raise PlanError(
            f"sem_join index: right column {index.right_column!r} not in {list(right.columns)}"
        )
    if index.k is None and index.max_distance is None:
        raise PlanError("sem_join index: give k, max_distance, or both")
    if index.k is not None:
        positive_int(index.k, "sem_join index", "k")
    _check_number(index.max_distance, "max_distance", positive=True)
    _check_number(index.accept_below, "accept_below")
    _check_number(index.reject_above, "reject_above")
    try:
        index.thresholds()
    except ValueError as exc:
        raise PlanError(f"sem_join index: {exc}") from None
    for position, value in enumerate(right[index.right_column]):
        value_to_text(value, index.right_column, f"right row {position}")
    return Instruction.parse(index.left, operator="sem_join index")


@dataclass(frozen=True)
class IndexJoin:
    """How an indexed Cartesian product picks candidates.

    Attributes:
        left: template rendered per left tuple as the search query (e.g. ``"{labels}"``).
        right_column: the right-table column that is embedded and indexed.
        k: candidates per left tuple (None: no top-k limit).
        max_distance: drop candidates farther than this (None: no limit).
        accept_below / reject_above: the cascade thresholds on the distance.
    """

    left: str
    right_column: str
    k: int | None = 5
    max_distance: float | None = None
    accept_below: float | None = None
    reject_above: float | None = None

    def thresholds(self) -> CascadeThresholds:
        return CascadeThresholds(self.accept_below, self.reject_above)


class CartesianProduct(CartesianOperator):
    """Pairs each left tuple with every right tuple, or with its index candidates."""

    kind = "cartesian_product"

    def __init__(self, right: Any, index: IndexJoin | None = None) -> None:
        self._right_name, self._right = _right_records(right, "sem_join")
        self.index = index
        self._renames: dict[str, str] = {}
        self._query: Instruction | None = None
        self._vector_index: VectorIndex | None = None
        if index is not None:
            self._query = _check_index(index, self._right)

    @property
    def right_name(self) -> str:
        return self._right_name

    @property
    def right_rows(self) -> int:
        return len(self._right)

    @property
    def right_frame(self) -> pd.DataFrame:
        """The right-side table as given (its own column names, before any renaming)."""
        return self._right

    def output_schema(self, schema: Schema) -> Schema:
        self._renames = _renamed_right_columns(schema, self._right)
        out = (*schema, *self._renames.values())
        if self._query is not None:
            self._query.check_columns(schema, operator="sem_join index")
            if DISTANCE_COLUMN in schema:
                raise PlanError(
                    f"sem_join index: {DISTANCE_COLUMN!r} already exists (from an earlier"
                    " indexed join); drop or rename it with map() first"
                )
            out = (*out, DISTANCE_COLUMN)
        return out

    def describe(self) -> str:
        if self.index is None:
            return f"cartesian_product x {self._right_name} ({len(self._right)} rows)"
        ix = self.index
        return (
            f"indexed_cartesian_product x {self._right_name} ({len(self._right)} rows)"
            f" on {ix.right_column} k={ix.k} max_distance={ix.max_distance}"
        )

    def prompt_columns(self) -> tuple[str, ...]:
        """An indexed product renders its left query from these columns."""
        return self._query.columns if self._query is not None else ()

    @property
    def pairs_with_io(self) -> bool:
        return self.index is not None  # embeds the left tuple's query, searches the index

    def can_pair(self, instance: Instance) -> bool:
        return self._query is None or all(c in instance.values for c in self._query.columns)

    def right_columns(self) -> dict[str, list[Any]]:
        return {new: list(self._right[old]) for old, new in self._renames.items()}

    def _right_values(self, j: int) -> dict[str, Any]:
        record = self._right.iloc[j]
        return {new: record[old] for old, new in self._renames.items()}

    @property
    def has_preparation(self) -> bool:
        return self.index is not None

    def prepare(self) -> None:
        if self.index is not None:
            self.vector_index()

    def vector_index(self) -> VectorIndex:
        """The index over the right column, built once (and shared through the cache)."""
        assert self.index is not None
        if self._vector_index is None:
            column = self.index.right_column
            texts = [value_to_text(v, column) for v in self._right[column]]
            self._vector_index = index_for(texts)
        return self._vector_index

    def partners(self, instance: Instance) -> list[Instance]:
        if self.index is None or self._query is None:
            return [instance.child(j, self._right_values(j)) for j in range(len(self._right))]
        query = self._query.render(instance.values)
        hits = self.vector_index().select(
            query, k=self.index.k, max_distance=self.index.max_distance
        )
        children = []
        for hit in sorted(hits, key=lambda h: h.row):
            values = {**self._right_values(hit.row), DISTANCE_COLUMN: float(hit.distance)}
            children.append(instance.child(hit.row, values))
        return children


class JoinPredicate(SemFilter):
    """The predicate half of ``sem_join``; cascades on ``join_distance`` when configured."""

    kind = "sem_join"
    # sem_join as a whole is pipelining + predicate + Cartesian product (paper Table 1);
    # the product half is CartesianProduct, this half is the predicate.
    contract: ClassVar[OperatorContract] = OperatorContract(True, True, False)

    def __init__(
        self,
        instruction: str,
        *,
        thresholds: CascadeThresholds | None = None,
        negate: bool = False,
    ) -> None:
        super().__init__(instruction, negate=negate)
        self.thresholds = thresholds

    def describe(self) -> str:
        cascade = ""
        if self.thresholds is not None and (
            self.thresholds.accept_below is not None or self.thresholds.reject_above is not None
        ):
            t = self.thresholds
            cascade = f" cascade(accept<{t.accept_below}, reject>{t.reject_above})"
        return f"sem_join {'NOT ' if self.negate else ''}{self.instruction.text!r}{cascade}"

    def _cascade(self, values: Values) -> str:
        if self.thresholds is None or DISTANCE_COLUMN not in values:
            return "ask"
        return self.thresholds.decide(float(values[DISTANCE_COLUMN]))

    def ask(self, values: Values) -> bool:
        return self._cascade(values) == "ask"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        if outcome is None:  # decided by the distance, without the LLM
            return {} if self._cascade(values) == "accept" else None
        return super().on_answer(values, outcome)
