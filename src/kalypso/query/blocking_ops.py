"""Blocking semantic operators: they need their whole input before producing output.

The executor runs them as barriers between pipelines, with their LLM calls scheduled by
the core like every other call (same reservations, timeouts and failure handling):

* ``sem_topk(instruction, k)``: each tuple is scored 0-9 by one constrained one-token
  call ("how well does it satisfy the instruction"); the ``k`` best are kept, ties broken
  by input order. The score is kept in ``topk_score``. Pointwise scoring is one of the
  implementations Lotus offers; it makes n calls.
* ``sem_agg(instruction)``: folds the tuples into one answer. Their referenced columns
  (each as its ``[column]`` piece) are packed into groups that fit the context window;
  each group is summarized under the instruction; if there is more than one partial
  answer, the partials are folded the same way until one remains. An item that cannot
  fit a window on its own is refused before any call (never truncated), and
  ``max_tokens`` must leave room for two partial answers in one window so the fold ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kalypso.core.errors import PlanError
from kalypso.core.instance import CallOutcome, Instance
from kalypso.engine.protocol import Tokenizer
from kalypso.query.llm_ops import DEFAULT_FIRST_BOUND_TOKENS, positive_tokens
from kalypso.query.operators import BlockingOperator, LLMOperator, OperatorContract, Schema, Values
from kalypso.query.rows import piece_text
from kalypso.query.templates import Instruction

SCORE_COLUMN = "topk_score"
ITEMS_COLUMN = "items"
PROMPT_MARGIN_TOKENS = 256
"""Room left in a ``sem_agg`` window for the prompt around the packed items."""
ITEM_OVERHEAD_TOKENS = 8
"""Tokens counted per packed item for its ``(n) `` label and separator."""


class _Score(LLMOperator):
    """One tuple's 0-9 score (a one-token decision among the digits)."""

    kind = "sem_topk"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)
    choices = tuple(str(d) for d in range(10))

    def __init__(self, topk: SemTopK) -> None:
        self.instruction = topk.instruction
        self.task = (
            "On a scale from 0 (not at all) to 9 (perfectly), how well does this satisfy:"
            f" {topk.instruction.task_text()} Answer with one digit."
        )
        self._describe = topk.describe()

    def output_schema(self, schema: Schema) -> Schema:
        return (*schema, SCORE_COLUMN)

    def describe(self) -> str:
        return self._describe

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None and outcome.decision is not None
        return {SCORE_COLUMN: int(outcome.decision)}


class SemTopK(BlockingOperator):
    kind = "sem_topk"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)
    builtin_barrier: ClassVar[bool] = True

    def __init__(self, instruction: str, k: int) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        self.k = positive_tokens(k, self.kind, "k")

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        if SCORE_COLUMN in schema:
            raise PlanError(f"sem_topk: column {SCORE_COLUMN!r} already exists")
        return (*schema, SCORE_COLUMN)

    def describe(self) -> str:
        return f"sem_topk k={self.k} {self.instruction.text!r}"

    def prompt_columns(self) -> tuple[str, ...]:
        return self.instruction.columns

    def max_output_tokens(self) -> int:
        return 1

    def scorer(self) -> LLMOperator:
        """The per-tuple scoring call."""
        return _Score(self)

    def select(self, scored: Sequence[Instance]) -> list[Instance]:
        """The ``k`` best, ties by input order, re-keyed in rank order."""
        ranked = sorted(scored, key=lambda i: (-int(i.values[SCORE_COLUMN]), i.key))
        return [Instance((rank,), dict(i.values)) for rank, i in enumerate(ranked[: self.k])]


class _Fold(LLMOperator):
    """One group of packed items summarized under the instruction."""

    kind = "sem_agg"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)

    def __init__(self, agg: SemAgg) -> None:
        self.instruction = Instruction.parse(f"{{{ITEMS_COLUMN}}}", operator=agg.kind)
        self.task = agg.instruction.task_text()
        self.max_tokens = agg.max_tokens
        self.first_bound_tokens = min(DEFAULT_FIRST_BOUND_TOKENS, agg.max_tokens)
        self._describe = agg.describe()

    def output_schema(self, schema: Schema) -> Schema:
        return schema

    def describe(self) -> str:
        return self._describe

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return {"partial": outcome.text.strip()}


class SemAgg(BlockingOperator):
    kind = "sem_agg"
    contract: ClassVar[OperatorContract] = OperatorContract(False, False, False)
    builtin_barrier: ClassVar[bool] = True

    def __init__(
        self,
        instruction: str,
        output_column: str = "aggregate",
        *,
        max_tokens: int = DEFAULT_FIRST_BOUND_TOKENS * 2,
    ) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        if not self.instruction.columns:
            raise PlanError(
                f"sem_agg: the instruction {instruction!r} references no column; name the"
                " column(s) to aggregate in braces, e.g. 'Summarize the {text}'"
            )
        self.output_column = output_column
        self.max_tokens = positive_tokens(max_tokens, self.kind)

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        from kalypso.query.llm_ops import check_new_column

        check_new_column(self.output_column, (), self.kind)
        return (self.output_column,)

    def describe(self) -> str:
        return f"sem_agg {self.instruction.text!r} -> {self.output_column}"

    def prompt_columns(self) -> tuple[str, ...]:
        return self.instruction.columns

    def max_output_tokens(self) -> int:
        return self.max_tokens

    def folder(self) -> LLMOperator:
        return _Fold(self)

    def window_tokens(self, max_model_len_tokens: int) -> int:
        """Tokens of packed items one call may carry."""
        return max_model_len_tokens - self.max_tokens - PROMPT_MARGIN_TOKENS

    def check_fits(self, max_model_len_tokens: int) -> None:
        """Refuse an answer cap that leaves no room to fold two partial answers."""
        window = self.window_tokens(max_model_len_tokens)
        if window < 2 * (self.max_tokens + ITEM_OVERHEAD_TOKENS):
            raise PlanError(
                f"sem_agg: max_tokens={self.max_tokens} leaves no room to fold two partial"
                f" answers in the model context of {max_model_len_tokens} tokens; lower it"
            )

    def item_text(self, instance: Instance) -> str:
        """One tuple as an item: its referenced columns' pieces, in row order."""
        wanted = set(self.instruction.columns)
        return "".join(
            piece_text(c, v, instance.key) for c, v in instance.values.items() if c in wanted
        ).strip()

    def pack(self, texts: Sequence[str], tokenizer: Tokenizer, window_tokens: int) -> list[str]:
        """Items packed greedily into groups of at most ``window_tokens`` tokens, each
        group's items numbered; raises :class:`PlanError` for an item too long alone."""
        groups: list[list[str]] = [[]]
        used = 0
        for position, text in enumerate(texts):
            size = len(tokenizer.encode(text)) + ITEM_OVERHEAD_TOKENS
            if size > window_tokens:
                raise PlanError(
                    f"sem_agg: item {position} has {size} tokens, more than the"
                    f" {window_tokens} one call can carry; shorten it or map it first"
                )
            if groups[-1] and used + size > window_tokens:
                groups.append([])
                used = 0
            groups[-1].append(text)
            used += size
        return ["\n\n".join(f"({i + 1}) {t}" for i, t in enumerate(g)) for g in groups]
