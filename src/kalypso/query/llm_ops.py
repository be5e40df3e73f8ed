"""Pipelined semantic operators that make one LLM call per tuple.

Decisions are one constrained token (paper section 6's static bound, at its smallest):

* ``sem_filter`` (and the join predicate) ask the question followed by "Answer yes or
  no." and the engine may only answer with the first token of "Yes" or of "No"; the
  decision carries its margin (log p(chosen) - log p(other)), reported per call, and
  cannot be unparsable;
* ``sem_classify`` constrains the answer to the first tokens of its labels (which must
  differ; otherwise the labels are offered as ``A) ...``, ``B) ...`` and the answer is
  one of those letters).

Generative operators:

* ``sem_map``: the answer, stripped, is the new column. ``max_tokens`` is a hard cap;
  calls start at a smaller bound (``first_bound_tokens``, default 64: what the scheduler
  reserves KV memory for) and are continued up to the cap when they reach it.
* ``sem_extract``: lines ``field: value``; a field without a line is ``None`` (the
  model did not say).
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

from kalypso.core.errors import PlanError
from kalypso.core.graph import FnNode, LLMNode
from kalypso.core.instance import CallOutcome
from kalypso.query.operators import (
    LLMOperator,
    LoweringContext,
    OperatorContract,
    Schema,
    Values,
)
from kalypso.query.templates import Instruction, check_text

DEFAULT_MAP_MAX_TOKENS = 256
DEFAULT_FIRST_BOUND_TOKENS = 64
YES, NO = "Yes", "No"


def check_new_column(column: Any, schema: Schema, operator: str) -> None:
    if not isinstance(column, str) or not column.isidentifier():
        raise PlanError(f"{operator}: output column {column!r} must be an identifier")
    if column in schema:
        raise PlanError(f"{operator}: output column {column!r} already exists")


def positive_int(value: Any, operator: str, name: str) -> int:
    """``value`` if it is a positive ``int`` (not a bool, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{operator}: {name} must be a positive integer, got {value!r}")
    return value


def positive_tokens(value: Any, operator: str, name: str = "max_tokens") -> int:
    return positive_int(value, operator, name)


def check_flag(value: Any, operator: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{operator}: {name} must be True or False, got {value!r}")
    return value


def string_list(value: Any, operator: str, name: str) -> list[str]:
    """A list of strings (a lone string is refused: it would be split into characters)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise PlanError(f"{operator}: {name} must be a list of strings, got {value!r}")
    if any(not isinstance(v, str) for v in value):
        raise PlanError(f"{operator}: {name} must be a list of strings, got {value!r}")
    return list(value)


class _Question(LLMOperator):
    """Shared setup: the instruction and the output columns."""

    new_columns: tuple[str, ...] = ()

    def _setup(self, instruction: str) -> None:
        self.instruction = Instruction.parse(instruction, operator=self.kind)

    def output_schema(self, schema: Schema) -> Schema:
        self.instruction.check_columns(schema, operator=self.kind)
        for column in self.new_columns:
            check_new_column(column, schema, self.kind)
        return (*schema, *self.new_columns)


class SemFilter(_Question):
    """Keep the tuples for which the LLM answers yes (``negate=True``: answers no)."""

    kind = "sem_filter"
    contract: ClassVar[OperatorContract] = OperatorContract(True, True, False)
    choices = (YES, NO)

    def __init__(self, instruction: str, *, negate: bool = False) -> None:
        self._setup(instruction)
        self.negate = check_flag(negate, self.kind, "negate")
        self.task = self.instruction.task_text() + " Answer yes or no."

    def describe(self) -> str:
        return f"sem_filter {'NOT ' if self.negate else ''}{self.instruction.text!r}"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return {} if (outcome.decision == YES) != self.negate else None


class SemMap(_Question):
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
        self._setup(instruction)
        self.max_tokens = positive_tokens(max_tokens, self.kind)
        bound = positive_tokens(first_bound_tokens, self.kind, "first_bound_tokens")
        self.first_bound_tokens = min(bound, self.max_tokens)
        self.output_column = output_column
        self.new_columns = (output_column,)
        self.task = self.instruction.task_text()

    def describe(self) -> str:
        return f"sem_map {self.instruction.text!r} -> {self.output_column}"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return {self.output_column: outcome.text.strip()}


class SemExtract(_Question):
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
        self._setup(instruction)
        self.max_tokens = positive_tokens(max_tokens, self.kind)
        bound = positive_tokens(first_bound_tokens, self.kind, "first_bound_tokens")
        self.first_bound_tokens = min(bound, self.max_tokens)
        names = string_list(fields, self.kind, "fields")
        if not names:
            raise PlanError("sem_extract: give at least one output field")
        if len(set(names)) != len(names):
            raise PlanError(f"sem_extract: duplicate field names in {names}")
        self.fields = tuple(names)
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

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return dict(self.parse(outcome.text))


class SemClassify(_Question):
    """Add a column holding one of ``labels`` (a one-token constrained answer)."""

    kind = "sem_classify"
    contract: ClassVar[OperatorContract] = OperatorContract(True, False, False)

    def __init__(self, instruction: str, labels: list[str], output_column: str = "label") -> None:
        self._setup(instruction)
        cleaned = [
            check_text(label, f"{self.kind}: label {position}").strip()
            for position, label in enumerate(string_list(labels, self.kind, "labels"))
        ]
        if len(cleaned) < 2 or any(not label for label in cleaned):
            raise PlanError(f"sem_classify: give at least two non-empty labels, got {labels!r}")
        if len({label.lower() for label in cleaned}) != len(cleaned):
            raise PlanError(f"sem_classify: labels must differ (case-insensitively): {labels!r}")
        if len(cleaned) > len(string.ascii_uppercase):
            raise PlanError(f"sem_classify: at most 26 labels, got {len(cleaned)}")
        self.labels = tuple(cleaned)
        self.output_column = output_column
        self.new_columns = (output_column,)
        self.choices = self.labels
        self.task = (
            f"{self.instruction.task_text()} Answer with exactly one of: {', '.join(self.labels)}."
        )
        letters = string.ascii_uppercase[: len(self.labels)]
        options = "; ".join(f"{x}) {label}" for x, label in zip(letters, self.labels, strict=True))
        self.lettered_task = (
            f"{self.instruction.task_text()} Answer with the letter of one of: {options}."
        )
        self.letters = tuple(letters)

    def describe(self) -> str:
        return f"sem_classify {self.instruction.text!r} {list(self.labels)} -> {self.output_column}"

    def lower(self, op_id: str, context: LoweringContext) -> list[LLMNode | FnNode]:
        first_tokens = {context.layout.text_ids(label)[:1] for label in self.labels}
        if len(first_tokens) == len(self.labels) and () not in first_tokens:
            return super().lower(op_id, context)
        # labels that start with the same token cannot be told apart by one token
        lettered = _Lettered(self)
        return lettered.lower(op_id, context)

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None and outcome.decision is not None
        return {self.output_column: outcome.decision}


class _Lettered(LLMOperator):
    """``sem_classify`` with its labels offered as ``A) ...``, answered by a letter."""

    kind = "sem_classify"
    contract: ClassVar[OperatorContract] = SemClassify.contract

    def __init__(self, classify: SemClassify) -> None:
        self.instruction = classify.instruction
        self.task = classify.lettered_task
        self.choices = classify.letters
        self._labels = dict(zip(classify.letters, classify.labels, strict=True))
        self._column = classify.output_column
        self._describe = classify.describe()

    def output_schema(self, schema: Schema) -> Schema:
        raise NotImplementedError  # only lowered, never planned

    def describe(self) -> str:
        return self._describe

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None and outcome.decision is not None
        return {self._column: self._labels[outcome.decision]}
