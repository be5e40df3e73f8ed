"""Errors in Lotus's terms: bad input names the method and the Lotus argument."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kalypso.core.errors import PlanError


class LotusArgumentError(PlanError):
    """A Lotus-style method got an argument it cannot take; the message names the
    method and the argument as Lotus spells them. A :class:`ValueError`, as Lotus's own."""

    def __init__(self, method: str, argument: str, message: str) -> None:
        super().__init__(f"{method}: {argument}: {message}")
        self.method = method
        self.argument = argument


def unsupported(method: str, argument: str, value: Any, why: str) -> LotusArgumentError:
    """The error for an argument kalypso.pandas refuses (see the compatibility table in
    the guide, docs/lotus.md)."""
    return LotusArgumentError(
        method, argument, f"{value!r} is not supported by kalypso.pandas: {why}"
    )


def check_text_argument(method: str, argument: str, value: Any) -> str:
    """``value`` if it is a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise LotusArgumentError(method, argument, f"a non-empty string is needed, got {value!r}")
    return value


def check_positive_int(method: str, argument: str, value: Any) -> int:
    """``value`` if it is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LotusArgumentError(method, argument, f"a positive integer is needed, got {value!r}")
    return value


def check_flag(method: str, argument: str, value: Any) -> bool:
    """``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise LotusArgumentError(method, argument, f"True or False, got {value!r}")
    return value


def check_frame(
    frame: Any, method: str = "kalypso.pandas", argument: str = "the DataFrame"
) -> None:
    """Refuse a frame whose column names are not distinct strings (a prompt names a
    column by its name)."""
    if not isinstance(frame, pd.DataFrame):
        raise LotusArgumentError(
            method, argument, f"a pandas DataFrame is needed, got {type(frame).__name__}"
        )
    names = list(frame.columns)
    odd = [c for c in names if not isinstance(c, str)]
    if odd:
        raise LotusArgumentError(
            method, argument, f"column names must be strings, got {odd}; rename them first"
        )
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise LotusArgumentError(method, argument, f"repeated column names {repeated}")
