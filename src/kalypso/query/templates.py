"""Instructions that reference columns, and the rule that turns cell values into text.

An instruction names columns in braces: ``"Does the {review} criticize battery life?"``.
The referenced columns' values form the tuple's *context* (see :mod:`kalypso.query.rows`);
the instruction itself, with each ``{column}`` replaced by the bare column name, is the
*task* (``"Does the review criticize battery life?"``). ``{{`` and ``}}`` are literal braces.

Templates are parsed strictly, as ``str.format`` would, so a typo never silently drops the
document from the prompt: an unmatched ``{`` or ``}``, empty braces, or spaces around a
column name (``{ text }``) are refused with :class:`PlanError`, and so is an instruction
that references no column at all (the LLM would see no document). A name with inner
spaces (``{review text}``) refers to a column of that exact name.

Value-to-text rule (documented for users, enforced before any LLM call):

* ``str`` as is (a string that is not valid Unicode - a lone surrogate such as
  ``"\ud800"`` - is rejected); ``int``, ``float``, ``bool`` with ``str()``;
* lists and tuples: items converted by this rule and joined with ``"; "``;
* dicts: JSON;
* ``None`` or NaN: rejected with :class:`PlanError` naming the row and column (a missing
  value would silently change the prompt);
* anything else: rejected with :class:`PlanError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kalypso.core.errors import PlanError

TEMPLATE_HELP = (
    "write a column name in braces, e.g. {text}, and double a brace to write it literally"
    " ({{ or }})"
)


@dataclass(frozen=True)
class ColumnRef:
    """``{name}`` in a template."""

    name: str


Segment = str | ColumnRef


def check_text(text: str, what: str) -> str:
    """``text`` if it is valid Unicode (encodable as UTF-8); else :class:`PlanError`
    naming ``what`` and the position of the first lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise PlanError(
            f"{what}: the text is not valid Unicode (a lone surrogate {bad!r} at position"
            f" {exc.start}); clean the data before building the table"
        ) from None
    return text


def parse_template(text: str, *, operator: str) -> tuple[Segment, ...]:
    """Split a template into literal text and column references (strictly: see the module
    docstring).

    Raises:
        PlanError: an unmatched brace, empty braces, or spaces around a column name.
    """
    segments: list[Segment] = []
    literal: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        pair = text[position : position + 2]
        if pair in ("{{", "}}"):
            literal.append(char)
            position += 2
            continue
        if char == "}":
            raise PlanError(
                f"{operator}: unmatched '}}' at position {position} of the instruction"
                f" {text!r}; {TEMPLATE_HELP}"
            )
        if char != "{":
            literal.append(char)
            position += 1
            continue
        end = text.find("}", position + 1)
        opening = text.find("{", position + 1)
        if end < 0 or 0 <= opening < end:
            raise PlanError(
                f"{operator}: unmatched '{{' at position {position} of the instruction"
                f" {text!r}; {TEMPLATE_HELP}"
            )
        name = text[position + 1 : end]
        reference = text[position : end + 1]
        if not name.strip():
            raise PlanError(
                f"{operator}: empty braces {reference!r} in the instruction {text!r};"
                f" {TEMPLATE_HELP}"
            )
        if name != name.strip():
            raise PlanError(
                f"{operator}: {reference!r} in the instruction {text!r} has spaces around"
                f" the column name; write {{{name.strip()}}}"
            )
        if literal:
            segments.append("".join(literal))
            literal = []
        segments.append(ColumnRef(name))
        position = end + 1
    if literal:
        segments.append("".join(literal))
    return tuple(segments)


@dataclass(frozen=True)
class Instruction:
    """A natural-language instruction with column references.

    Attributes:
        text: the instruction as the user wrote it.
        columns: referenced column names, in order of first appearance.
    """

    text: str
    columns: tuple[str, ...]
    segments: tuple[Segment, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, *, operator: str, require_column: bool = True) -> Instruction:
        """Parse ``text`` (see the module docstring).

        Raises:
            PlanError: naming ``operator``: an empty instruction, a malformed reference,
                text that is not valid Unicode, or (with ``require_column``, the default)
                no column reference at all.
        """
        if not isinstance(text, str):
            raise PlanError(f"{operator}: the instruction must be a string, got {text!r}")
        if not text.strip():
            raise PlanError(f"{operator}: the instruction is empty")
        check_text(text, f"{operator}: the instruction")
        segments = parse_template(text, operator=operator)
        seen: dict[str, None] = {}
        for segment in segments:
            if isinstance(segment, ColumnRef):
                seen.setdefault(segment.name, None)
        if require_column and not seen:
            raise PlanError(
                f"{operator}: the instruction {text!r} references no column, so the LLM would"
                " see no document; name the column(s) it should read in braces, e.g."
                " 'Is the {text} positive?'"
            )
        return cls(text=text, columns=tuple(seen), segments=segments)

    def task_text(self) -> str:
        """The instruction with ``{column}`` replaced by ``column`` and ``{{``/``}}`` unescaped."""
        return "".join(s.name if isinstance(s, ColumnRef) else s for s in self._segments()).strip()

    def render(self, values: dict[str, Any]) -> str:
        """The instruction with each ``{column}`` replaced by that column's value as text."""
        return "".join(
            value_to_text(values[s.name], s.name) if isinstance(s, ColumnRef) else s
            for s in self._segments()
        )

    def _segments(self) -> tuple[Segment, ...]:
        return self.segments or parse_template(self.text, operator="instruction")

    def check_columns(self, available: tuple[str, ...], *, operator: str) -> None:
        """Raise :class:`PlanError` naming every referenced column that does not exist."""
        missing = [c for c in self.columns if c not in available]
        if missing:
            raise PlanError(
                f"{operator}: instruction references missing column(s) {missing};"
                f" available: {list(available)}"
            )


MAX_NESTING = 32
"""Deepest list/tuple nesting a value may have (a value that contains itself is refused)."""


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return value is pd.NA or value is pd.NaT


def value_to_text(value: Any, column: str, row: object = None, *, _depth: int = 0) -> str:
    """Convert a cell value to prompt text by the module's documented rule.

    Raises:
        PlanError: naming the column (and row when given) for a missing value, a string
            that is not valid Unicode, or a value of another type.
    """
    where = f"column {column!r}" + (f", row {row!r}" if row is not None else "")
    if _missing(value):
        raise PlanError(f"{where}: missing value (None/NaN) cannot be put in a prompt")
    if isinstance(value, str):
        return check_text(value, where)
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list | tuple):
        if _depth >= MAX_NESTING:
            raise PlanError(f"{where}: a list nested more than {MAX_NESTING} deep")
        return "; ".join(value_to_text(v, column, row, _depth=_depth + 1) for v in value)
    if isinstance(value, dict):
        try:
            return check_text(json.dumps(value, sort_keys=True, default=str), where)
        except (TypeError, ValueError, RecursionError) as exc:
            raise PlanError(f"{where}: a dict that cannot be written as JSON ({exc})") from None
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:  # numpy arrays
        return value_to_text(value.tolist(), column, row, _depth=_depth + 1)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value_to_text(value.item(), column, row, _depth=_depth + 1)
    raise PlanError(f"{where}: values of type {type(value).__name__} cannot be put in a prompt")
