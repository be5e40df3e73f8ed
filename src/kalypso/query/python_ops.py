"""Pipelined operators without LLM calls: plain Python over rows, and retrieval."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pandas as pd

from kalypso.core.errors import PlanError
from kalypso.query.index import VectorIndex
from kalypso.query.llm_ops import check_new_column, positive_int
from kalypso.query.operators import OperatorContract, RowOperator, Schema, Values
from kalypso.query.shared_index import index_for
from kalypso.query.templates import Instruction, check_text


class PyMap(RowOperator):
    """``fn(row_values) -> value`` stored in ``output_column``."""

    kind = "map"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(self, fn: Callable[[dict[str, Any]], Any], output_column: str) -> None:
        if not callable(fn):
            raise PlanError("map: fn must be callable")
        self.fn = fn
        self.output_column = output_column

    def output_schema(self, schema: Schema) -> Schema:
        check_new_column(self.output_column, schema, self.kind)
        return (*schema, self.output_column)

    def describe(self) -> str:
        return f"map {getattr(self.fn, '__name__', 'fn')} -> {self.output_column}"

    def apply_row(self, values: Values) -> Values | None:
        return {self.output_column: self.fn(values)}


class PyFilter(RowOperator):
    """Keep rows for which ``predicate(row_values)`` is true."""

    kind = "filter"
    contract: ClassVar[OperatorContract] = OperatorContract(True, True, False)

    def __init__(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        if not callable(predicate):
            raise PlanError("filter: predicate must be callable")
        self.predicate = predicate

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return f"filter {getattr(self.predicate, '__name__', 'predicate')}"

    def apply_row(self, values: Values) -> Values | None:
        return {} if self.predicate(values) else None


class IndexSearch(RowOperator):
    """Retrieve the ``k`` passages of ``corpus`` nearest to the rendered query template and
    append them, joined by blank lines, as ``output_column`` (evidence for later prompts)."""

    kind = "index_search"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)
    blocking_io: ClassVar[bool] = True  # embeds the query: off the event loop

    def __init__(
        self,
        corpus: Sequence[str] | pd.Series,
        query: str,
        k: int,
        output_column: str = "evidence",
    ) -> None:
        if (
            corpus is None
            or isinstance(corpus, str | bytes)
            or not isinstance(corpus, Sequence | pd.Series)
        ):
            raise PlanError(
                f"index_search: the corpus must be a list of passages (strings), got"
                f" {type(corpus).__name__}"
            )
        passages: list[str] = []
        for position, passage in enumerate(corpus):
            if not isinstance(passage, str):
                raise PlanError(
                    f"index_search: passage {position} of the corpus is {passage!r}, not a string"
                )
            passages.append(check_text(passage, f"index_search: passage {position}"))
        if not passages:
            raise PlanError("index_search: the corpus is empty")
        self.k = positive_int(k, self.kind, "k")
        self.passages = passages
        self.query = Instruction.parse(query, operator=self.kind)
        self.output_column = output_column
        self._index: VectorIndex | None = None

    def output_schema(self, schema: Schema) -> Schema:
        self.query.check_columns(schema, operator=self.kind)
        check_new_column(self.output_column, schema, self.kind)
        return (*schema, self.output_column)

    def prompt_columns(self) -> tuple[str, ...]:
        """The query's columns: their values are rendered into the search query."""
        return self.query.columns

    def describe(self) -> str:
        return (
            f"index_search {self.query.text!r} k={self.k} over {len(self.passages)} passages"
            f" -> {self.output_column}"
        )

    def vector_index(self) -> VectorIndex:
        """The index over the passages, built once (and shared through the cache)."""
        if self._index is None:
            self._index = index_for(self.passages)
        return self._index

    def prepare(self) -> None:
        self.vector_index()

    def apply_row(self, values: Values) -> Values | None:
        hits = self.vector_index().select(self.query.render(values), k=self.k)
        return {self.output_column: "\n\n".join(self.passages[h.row] for h in hits)}
