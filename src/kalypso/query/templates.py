"""Instructions that reference columns, and the rule that turns cell values into text.

An instruction names columns in braces: ``"Does the {review} criticize battery life?"``.
The referenced columns' values form the tuple's *context* (see :mod:`kalypso.query.rows`);
the instruction itself, with each ``{column}`` replaced by the bare column name, is the
*task* (``"Does the review criticize battery life?"``). ``{{`` and ``}}`` are literal braces.

Value-to-text rule (documented for users, enforced before any LLM call):

* ``str`` as is; ``int``, ``float``, ``bool`` with ``str()``;
* lists and tuples: items converted by this rule and joined with ``"; "``;
* dicts: JSON;
* ``None`` or NaN: rejected with :class:`PlanError` naming the row and column (a missing
  value would silently change the prompt);
* anything else: rejected with :class:`PlanError`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from kalypso.core.errors import PlanError

_FIELD = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


@dataclass(frozen=True)
class Instruction:
    """A natural-language instruction with column references.

    Attributes:
        text: the instruction as the user wrote it.
        columns: referenced column names, in order of first appearance.
    """

    text: str
    columns: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, *, operator: str) -> Instruction:
        """Parse ``text``; empty instructions are rejected naming ``operator``."""
        if not isinstance(text, str) or not text.strip():
            raise PlanError(f"{operator}: the instruction is empty")
        seen: dict[str, None] = {}
        for match in _FIELD.finditer(text):
            seen.setdefault(match.group(1), None)
        return cls(text=text, columns=tuple(seen))

    def task_text(self) -> str:
        """The instruction with ``{column}`` replaced by ``column`` and ``{{``/``}}`` unescaped."""
        replaced = _FIELD.sub(lambda m: m.group(1), self.text)
        return replaced.replace("{{", "{").replace("}}", "}").strip()

    def render(self, values: dict[str, Any]) -> str:
        """The instruction with each ``{column}`` replaced by that column's value as text."""
        replaced = _FIELD.sub(lambda m: value_to_text(values[m.group(1)], m.group(1)), self.text)
        return replaced.replace("{{", "{").replace("}}", "}")

    def check_columns(self, available: tuple[str, ...], *, operator: str) -> None:
        """Raise :class:`PlanError` naming every referenced column that does not exist."""
        missing = [c for c in self.columns if c not in available]
        if missing:
            raise PlanError(
                f"{operator}: instruction references missing column(s) {missing};"
                f" available: {list(available)}"
            )


def value_to_text(value: Any, column: str, row: object = None) -> str:
    """Convert a cell value to prompt text by the module's documented rule."""
    where = f"column {column!r}" + (f", row {row!r}" if row is not None else "")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise PlanError(f"{where}: missing value (None/NaN) cannot be put in a prompt")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "; ".join(value_to_text(v, column, row) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:  # numpy arrays
        return value_to_text(value.tolist(), column, row)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value_to_text(value.item(), column, row)
    raise PlanError(f"{where}: values of type {type(value).__name__} cannot be put in a prompt")
