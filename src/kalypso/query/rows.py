"""Tuples in flight, and the token-exact context they carry.

A :class:`Row` is one tuple of the query: its values (in column order) and, memoized per
column, the token ids of that column's context piece ``"[column]\\n{value}\\n\\n"``. An
operator's prompt context is the concatenation of the pieces of the columns its
instruction references, in the row's column order, so every operator that references the
same leading columns of a tuple shares its prefix to the token. The children a join
creates from a row share the row's memoized pieces (the left tuple is tokenized once), and
their right-side columns come after the left ones: ``[system | left | right | task]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kalypso.engine.protocol import Tokenizer
from kalypso.query.templates import value_to_text

RowKey = tuple[int, ...]


@dataclass
class Row:
    """One tuple. ``key`` identifies it: ``(i,)`` for input row i, ``(i, j)`` for the pair of
    left row i and right row j, and so on; results are ordered by key."""

    key: RowKey
    values: dict[str, Any]
    pieces: dict[str, tuple[int, ...]] = field(default_factory=dict)
    last_prompt: tuple[int, ...] | None = None
    """The last prompt sent for this tuple (or its parent): the prefix the next call on it
    expects to find in the KV cache."""

    def piece(self, column: str, tokenizer: Tokenizer) -> tuple[int, ...]:
        ids = self.pieces.get(column)
        if ids is None:
            text = value_to_text(self.values[column], column, self.key)
            ids = tuple(tokenizer.encode(f"[{column}]\n{text}\n\n"))
            self.pieces[column] = ids
        return ids

    def context_ids(self, columns: Iterable[str], tokenizer: Tokenizer) -> tuple[int, ...]:
        """Pieces of ``columns`` concatenated in the row's column order."""
        wanted = set(columns)
        out: tuple[int, ...] = ()
        for column in self.values:
            if column in wanted:
                out += self.piece(column, tokenizer)
        return out

    def with_value(self, column: str, value: Any) -> Row:
        """A copy with ``column`` set (appended if new); its memoized piece is dropped."""
        pieces = {c: p for c, p in self.pieces.items() if c != column}
        return Row(self.key, {**self.values, column: value}, pieces, self.last_prompt)

    def child(self, right_index: int, right_values: dict[str, Any]) -> Row:
        """The pair (this row, right row ``right_index``); shares this row's pieces."""
        values = {**self.values, **right_values}
        return Row((*self.key, right_index), values, dict(self.pieces), self.last_prompt)
