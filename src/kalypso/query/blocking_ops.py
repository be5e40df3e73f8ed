"""Blocking semantic operators: they need their whole input before producing output.

* ``sem_topk(instruction, k)``: each tuple is scored 0-9 by one LLM call ("how well does
  it satisfy the instruction"); the ``k`` best are kept, ties broken by input order. The
  score is kept in ``topk_score`` (unparsable answers score -1 and count as unparsed).
  Pointwise scoring is one of the implementations Lotus offers; it makes n calls.
* ``sem_agg(instruction)``: folds the tuples into one answer. Tuples are packed into
  groups that fit the context window; each group is summarized under the instruction;
  if there is more than one partial answer, the partials are folded the same way until
  one remains. The output is one row with ``output_column``.
"""

from __future__ import annotations

import asyncio
import re
from typing import ClassVar

from kalypso.query.context import ExecContext
from kalypso.query.llm_ops import DEFAULT_FIRST_BOUND_TOKENS, positive_tokens
from kalypso.query.operators import BlockingOperator, OperatorContract, Schema
from kalypso.query.rows import Row
from kalypso.query.templates import Instruction, PlanError

SCORE_COLUMN = "topk_score"


class SemTopK(BlockingOperator):
    kind = "sem_topk"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)

    def __init__(self, instruction: str, k: int) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        if k <= 0:
            raise PlanError(f"sem_topk: k must be positive, got {k}")
        self.k = k
        self.task = (
            f"On a scale from 0 (not at all) to 9 (perfectly), how well does this satisfy:"
            f" {self.instruction.task_text()} Answer with one digit."
        )

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        if SCORE_COLUMN in schema:
            raise PlanError(f"sem_topk: column {SCORE_COLUMN!r} already exists")
        return (*schema, SCORE_COLUMN)

    def describe(self) -> str:
        return f"sem_topk k={self.k} {self.instruction.text!r}"

    def prompt_parts(self) -> tuple[tuple[str, ...], str] | None:
        return self.instruction.columns, self.task

    def max_output_tokens(self) -> int:
        return 4

    async def apply_all(self, rows: list[Row], ctx: ExecContext, op_id: str) -> list[Row]:
        async def score(row: Row) -> Row:
            result = await ctx.complete(
                op_id,
                row,
                self.instruction.columns,
                self.task,
                max_tokens=4,
            )
            match = re.search(r"\d", result.text)
            if match is None:
                ctx.stats_for(op_id).unparsed += 1
            return row.with_value(SCORE_COLUMN, int(match.group()) if match else -1)

        scored = await asyncio.gather(*(score(r) for r in rows))
        ranked = sorted(scored, key=lambda r: (-int(r.values[SCORE_COLUMN]), r.key))
        return ranked[: self.k]


class SemAgg(BlockingOperator):
    kind = "sem_agg"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)

    def __init__(
        self,
        instruction: str,
        output_column: str = "aggregate",
        *,
        max_tokens: int = DEFAULT_FIRST_BOUND_TOKENS * 2,
    ) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        self.output_column = output_column
        self.max_tokens = positive_tokens(max_tokens, self.kind)

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        return (self.output_column,)

    def describe(self) -> str:
        return f"sem_agg {self.instruction.text!r} -> {self.output_column}"

    def prompt_parts(self) -> tuple[tuple[str, ...], str] | None:
        # the columns whose values enter the packed prompt (checked before the run)
        return self.instruction.columns, self.instruction.task_text()

    def max_output_tokens(self) -> int:
        return self.max_tokens

    async def apply_all(self, rows: list[Row], ctx: ExecContext, op_id: str) -> list[Row]:
        if not rows:
            return [Row((0,), {self.output_column: ""})]
        tokenizer = ctx.engine.tokenizer
        columns = self.instruction.columns
        texts = [
            tokenizer.decode(row.context_ids(columns, tokenizer)) if columns else str(row.values)
            for row in rows
        ]
        task = self.instruction.task_text()
        budget = ctx.engine.capacity.max_model_len_tokens - self.max_tokens - 256
        while True:
            groups = self._pack(texts, budget, ctx)
            partials = []
            for number, group in enumerate(groups):
                joined = "\n\n".join(f"({i + 1}) {t}" for i, t in enumerate(group))
                holder = Row((number,), {"items": joined})
                result = await ctx.complete(
                    op_id,
                    holder,
                    ("items",),
                    task,
                    max_tokens=self.max_tokens,
                )
                partials.append(result.text.strip())
            if len(partials) == 1:
                return [Row((0,), {self.output_column: partials[0]})]
            texts = partials

    @staticmethod
    def _pack(texts: list[str], budget_tokens: int, ctx: ExecContext) -> list[list[str]]:
        tokenizer = ctx.engine.tokenizer
        groups: list[list[str]] = [[]]
        used = 0
        for text in texts:
            ids = tokenizer.encode(text)
            if len(ids) > budget_tokens:
                text = tokenizer.decode(ids[:budget_tokens])
                ids = ids[:budget_tokens]
            if groups[-1] and used + len(ids) > budget_tokens:
                groups.append([])
                used = 0
            groups[-1].append(text)
            used += len(ids)
        if len(groups) > 1 and len(groups) == len(texts) and len(texts) > 1:
            # every item fills a window on its own: pair them up so the fold terminates
            return [texts[i : i + 2] for i in range(0, len(texts), 2)]
        return groups
