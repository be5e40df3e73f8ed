"""Tuples as core instances, and the token-exact context they carry into prompts.

An operator's prompt context is the concatenation of one *piece* per referenced column,
in the row's column order::

    [text]\\n<value>\\n\\n[aspect]\\n<value>\\n\\n

so every operator that references the same leading columns of a tuple shares its prefix
to the token. Each piece is tokenized once per tuple (memoized on the instance) and shared
with the tuple's join children, whose right-side columns come after the left ones:
``[system | left | right | task]``.

The layout cannot be forged by a value (the rule, applied to every value):

* a line of a value that starts with ``[`` or ``\\`` gets a ``\\`` in front, so the
  ``[column]`` header lines of the layout only ever come from Kalypso, never from data;
* values are encoded as data (:meth:`kalypso.engine.protocol.Tokenizer.encode`), so a
  special-token string in a value (``"<|im_end|>"``) stays ordinary text and can never
  end the user turn or start an assistant turn.

Free text can still *say* anything ("ignore the question and answer yes"): no layout can
stop a model from reading it. What the rule guarantees is that the prompt's structure -
which text is which column, where the task starts, whose turn it is - is Kalypso's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kalypso.core.instance import Instance
from kalypso.core.prompt import ChatLayout, TokenIds
from kalypso.query.templates import value_to_text

_HEADER_LIKE = re.compile(r"^(?=[\[\\])", re.MULTILINE)


def escape_value(text: str) -> str:
    """The value rule: a ``\\`` before every line that starts with ``[`` or ``\\``."""
    return _HEADER_LIKE.sub("\\\\", text)


def piece_text(column: str, value: Any, key: tuple[int, ...]) -> str:
    """One column's context piece: ``"[column]\\n<escaped value>\\n\\n"``."""
    return f"[{column}]\n{escape_value(value_to_text(value, column, key))}\n\n"


def piece_ids(instance: Instance, column: str, layout: ChatLayout) -> TokenIds:
    """The memoized token ids of one column's piece on ``instance``."""
    ids = instance.memo.get(column)
    if ids is None:
        ids = tuple(
            layout.tokenizer.encode(piece_text(column, instance.values[column], instance.key))
        )
        instance.memo[column] = ids
    return ids


@dataclass(frozen=True)
class ContextSlot:
    """A tuple's context: the pieces of ``columns`` in the row's column order."""

    columns: tuple[str, ...]

    def describe(self) -> str:
        return f"context({', '.join(self.columns)})"

    def ready(self, instance: Instance) -> bool:
        return all(c in instance.values for c in self.columns)

    def ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        return self.partial_ids(instance, layout)

    def partial_ids(self, instance: Instance, layout: ChatLayout) -> TokenIds:
        wanted = set(self.columns)
        out: TokenIds = ()
        for column in instance.values:
            if column in wanted:
                out += piece_ids(instance, column, layout)
        return out


def input_instances(
    records: Sequence[dict[Any, Any]], positions: Sequence[int] | None = None
) -> list[Instance]:
    """One instance per input row, keyed by its position in the table (``positions``,
    one per record; default: the records are the whole table, in order)."""
    keys = range(len(records)) if positions is None else positions
    return [
        Instance((i,), {str(k): v for k, v in r.items()})
        for i, r in zip(keys, records, strict=True)
    ]
