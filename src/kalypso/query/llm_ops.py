"""Pipelined semantic operators that make one LLM call per tuple.

Answers are parsed by documented rules; an answer that cannot be parsed gets the
operator's documented default and is counted in ``unparsed`` in the statistics:

* ``sem_filter``: the first word (lower-cased, stripped of punctuation) is ``yes``/``true``
  -> keep, ``no``/``false`` -> drop. Anything else is unparsed and gets the default: drop
  if the answer contains a negation (``no``, ``not``, ``never``, ``none``, or a word
  ending in ``n't``), else keep. Small models often answer "The text does not ..."
  instead of "No"; the default reads that as intended, and the count shows how often
  it was needed.
* ``sem_classify``: the first label that the answer starts with, else the first label
  that appears in it (case-insensitive); none -> ``None``.
* ``sem_extract``: lines ``field: value``; a field without a line -> ``None``.
* ``sem_map`` / ``sem_extract``: ``max_tokens`` is a hard cap on the answer. Calls start
  with a smaller bound (``first_bound_tokens``, default 64, which is what the scheduler
  reserves KV memory for); an answer that stops at that bound is re-issued with a doubled
  bound up to the cap (counted in ``retries``). ``sem_map`` answers are never unparsed.
"""

from __future__ import annotations

import re
from typing import ClassVar

from kalypso.query.context import ExecContext
from kalypso.query.operators import OperatorContract, PipelinedOperator, Schema
from kalypso.query.rows import Row
from kalypso.query.templates import Instruction, PlanError

FILTER_MAX_TOKENS = 8
"""Static token bound for predicates (paper section 6)."""
DEFAULT_MAP_MAX_TOKENS = 256
DEFAULT_FIRST_BOUND_TOKENS = 64


def _check_new_column(column: str, schema: Schema, operator: str) -> None:
    if not isinstance(column, str) or not column.isidentifier():
        raise PlanError(f"{operator}: output column {column!r} must be an identifier")
    if column in schema:
        raise PlanError(f"{operator}: output column {column!r} already exists")


_NEGATIONS = frozenset({"no", "not", "never", "none", "neither", "nor", "cannot"})


def positive_tokens(value: int, operator: str) -> int:
    if not isinstance(value, int) or value < 1:
        raise PlanError(f"{operator}: token bounds must be positive integers, got {value!r}")
    return value


def parse_yes_no(text: str) -> bool | None:
    """True/False from a leading yes/no (or true/false); None when there is none."""
    words = re.findall(r"[a-z]+", text.lower())
    if not words:
        return None
    if words[0] in ("yes", "true"):
        return True
    if words[0] in ("no", "false"):
        return False
    return None


def default_verdict(text: str) -> bool:
    """The documented default for an unparsed predicate answer: negated -> False."""
    words = re.findall(r"[a-z']+", text.lower())
    return not any(w in _NEGATIONS or w.endswith("n't") for w in words)


class _OneCallOperator(PipelinedOperator):
    """Shared by the operators that make one LLM call per tuple.

    Subclasses call :meth:`_setup` and set ``task`` (the text sent after the tuple's
    context) and ``new_columns`` (what they add); ``first_bound_tokens`` is set only by
    generative operators, whose answers may be long.
    """

    instruction: Instruction
    task: str
    max_tokens: int
    first_bound_tokens: int | None = None
    new_columns: tuple[str, ...] = ()

    def _setup(
        self, instruction: str, max_tokens: int, first_bound_tokens: int | None = None
    ) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)
        self.max_tokens = positive_tokens(max_tokens, self.kind)
        if first_bound_tokens is not None:
            bound = positive_tokens(first_bound_tokens, self.kind)
            self.first_bound_tokens = min(bound, self.max_tokens)

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        for column in self.new_columns:
            _check_new_column(column, schema, self.kind)
        return (*schema, *self.new_columns)

    def max_output_tokens(self) -> int:
        return self.max_tokens

    def prompt_parts(self) -> tuple[tuple[str, ...], str] | None:
        return self.instruction.columns, self.task

    async def _ask(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> str:
        result = await ctx.complete(
            op_id,
            row,
            self.instruction.columns,
            self.task,
            max_tokens=self.max_tokens,
            first_bound_tokens=self.first_bound_tokens,
            priority=priority,
        )
        return result.text


class SemFilter(_OneCallOperator):
    """Keep the tuples for which the LLM answers yes (``negate=True``: answers no)."""

    kind = "sem_filter"
    contract: ClassVar[OperatorContract] = OperatorContract(True, True, False)

    def __init__(
        self, instruction: str, *, max_tokens: int = FILTER_MAX_TOKENS, negate: bool = False
    ) -> None:
        self._setup(instruction, max_tokens)
        self.negate = negate
        self.task = self.instruction.task_text() + " Answer yes or no."

    def describe(self) -> str:
        return f"sem_filter {'NOT ' if self.negate else ''}{self.instruction.text!r}"

    async def apply(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> Row | None:
        answer = await self._ask(row, ctx, op_id, priority)
        verdict = parse_yes_no(answer)
        if verdict is None:
            ctx.stats_for(op_id).unparsed += 1
            verdict = default_verdict(answer)
        return row if verdict != self.negate else None


class SemMap(_OneCallOperator):
    """Add a column with the LLM's answer to the instruction."""

    kind = "sem_map"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(
        self,
        instruction: str,
        output_column: str,
        *,
        max_tokens: int = DEFAULT_MAP_MAX_TOKENS,
        first_bound_tokens: int = DEFAULT_FIRST_BOUND_TOKENS,
    ) -> None:
        self._setup(instruction, max_tokens, first_bound_tokens)
        self.output_column = output_column
        self.new_columns = (output_column,)
        self.task = self.instruction.task_text()

    def describe(self) -> str:
        return f"sem_map {self.instruction.text!r} -> {self.output_column}"

    async def apply(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> Row | None:
        answer = await self._ask(row, ctx, op_id, priority)
        return row.with_value(self.output_column, answer.strip())


class SemExtract(_OneCallOperator):
    """Add several named fields, read from ``field: value`` lines of one answer."""

    kind = "sem_extract"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(
        self,
        instruction: str,
        fields: list[str],
        *,
        max_tokens: int = DEFAULT_MAP_MAX_TOKENS,
        first_bound_tokens: int = DEFAULT_FIRST_BOUND_TOKENS,
    ) -> None:
        self._setup(instruction, max_tokens, first_bound_tokens)
        if not fields:
            raise PlanError("sem_extract: give at least one output field")
        if len(set(fields)) != len(fields):
            raise PlanError(f"sem_extract: duplicate field names in {list(fields)}")
        self.fields = tuple(fields)
        self.new_columns = self.fields
        listed = ", ".join(self.fields)
        self.task = (
            f"{self.instruction.task_text()} Answer with one line per field, written as"
            f" 'field: value', for the fields: {listed}."
        )

    def describe(self) -> str:
        return f"sem_extract {self.instruction.text!r} -> {', '.join(self.fields)}"

    def parse(self, text: str) -> dict[str, str | None]:
        found: dict[str, str | None] = dict.fromkeys(self.fields)
        lowered = {f.lower(): f for f in self.fields}
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            key = name.strip().strip("-* ").lower()
            if sep and key in lowered and found[lowered[key]] is None:
                found[lowered[key]] = value.strip()
        return found

    async def apply(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> Row | None:
        values = self.parse(await self._ask(row, ctx, op_id, priority))
        if any(v is None for v in values.values()):
            ctx.stats_for(op_id).unparsed += 1
        for name, value in values.items():
            row = row.with_value(name, value)
        return row


class SemClassify(_OneCallOperator):
    """Add a column holding one of ``labels``."""

    kind = "sem_classify"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(
        self,
        instruction: str,
        labels: list[str],
        output_column: str = "label",
        *,
        max_tokens: int = FILTER_MAX_TOKENS,
    ) -> None:
        self._setup(instruction, max_tokens)
        cleaned = [str(label).strip() for label in labels or []]
        if len(cleaned) < 2 or any(not label for label in cleaned):
            raise PlanError(f"sem_classify: give at least two non-empty labels, got {labels!r}")
        if len({label.lower() for label in cleaned}) != len(cleaned):
            raise PlanError(f"sem_classify: labels must differ (case-insensitively): {labels!r}")
        self.labels = tuple(cleaned)
        self.output_column = output_column
        self.new_columns = (output_column,)
        self.task = (
            f"{self.instruction.task_text()} Answer with exactly one of: {', '.join(self.labels)}."
        )

    def describe(self) -> str:
        return f"sem_classify {self.instruction.text!r} {list(self.labels)} -> {self.output_column}"

    def parse(self, text: str) -> str | None:
        answer = text.strip().lower()
        by_length = sorted(self.labels, key=len, reverse=True)
        for label in by_length:
            if answer.startswith(label.lower()):
                return label
        positions = [(answer.find(label.lower()), label) for label in by_length]
        present = [(pos, label) for pos, label in positions if pos >= 0]
        # earliest match; at the same position the longer label ("pass with conditions")
        return min(present, key=lambda p: (p[0], -len(p[1])))[1] if present else None

    async def apply(self, row: Row, ctx: ExecContext, op_id: str, priority: int) -> Row | None:
        label = self.parse(await self._ask(row, ctx, op_id, priority))
        if label is None:
            ctx.stats_for(op_id).unparsed += 1
        return row.with_value(self.output_column, label)
