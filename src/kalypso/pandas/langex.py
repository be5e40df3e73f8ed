"""Lotus's language expressions (``"{abstract} is about LLMs"``) as Kalypso instructions.

Both write a column in braces and double a brace to write it literally, so an expression
keeps its text. What changes is a column's name: a join names a side (``{Skill:right}``),
and a joined right column that clashed with a left one is ``<name>_right`` in the plan
while Lotus calls it ``<name>:right``. A name that is in neither frame is refused naming
the Lotus argument.
"""

from __future__ import annotations

from collections.abc import Mapping

from kalypso.core.errors import PlanError
from kalypso.pandas.errors import LotusArgumentError, check_text_argument
from kalypso.query.templates import ColumnRef, parse_template

SIDES = (":left", ":right")


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def translate(
    expression: object,
    method: str,
    argument: str,
    columns: Mapping[str, str],
    *,
    right: Mapping[str, str] | None = None,
) -> str:
    """``expression`` with each ``{column}`` renamed to the plan's column.

    Args:
        columns: the left (or only) frame's columns, Lotus's name -> the plan's name.
        right: for a join, the right frame's columns, Lotus's name -> the name the plan
            gives it after the join; ``{name:left}`` / ``{name:right}`` pick a side, a bare
            ``{name}`` is looked up on the left first.

    Raises:
        LotusArgumentError: not a string, a malformed brace, or a column in no frame.
    """
    text = check_text_argument(method, argument, expression)
    try:
        segments = parse_template(text, operator=method)
    except PlanError as exc:
        raise LotusArgumentError(method, argument, str(exc).removeprefix(f"{method}: ")) from None
    pieces: list[str] = []
    for segment in segments:
        if isinstance(segment, ColumnRef):
            pieces.append("{" + _column(segment.name, method, argument, columns, right) + "}")
        else:
            pieces.append(_literal(segment))
    return "".join(pieces)


def _column(
    name: str,
    method: str,
    argument: str,
    columns: Mapping[str, str],
    right: Mapping[str, str] | None,
) -> str:
    if right is not None:
        for side, frame in zip(SIDES, (columns, right), strict=True):
            if name.endswith(side):
                bare = name.removesuffix(side)
                if bare in frame:
                    return frame[bare]
                raise LotusArgumentError(
                    method,
                    argument,
                    f"{{{name}}}: no column {bare!r} on the {side[1:]} side; it has"
                    f" {sorted(frame)}",
                )
        if name in columns:
            return columns[name]
        if name in right:
            return right[name]
    elif name in columns:
        return columns[name]
    known = sorted({*columns, *(right or {})})
    raise LotusArgumentError(
        method, argument, f"{{{name}}} names no column of the DataFrame; its columns are {known}"
    )
