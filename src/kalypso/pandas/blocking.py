"""Lotus's whole-table operators, ``sem_topk`` and ``sem_agg``: appended to a pending
plan, or, with ``group_by``, one plan per group run together on the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from kalypso.pandas.errors import LotusArgumentError, check_positive_int
from kalypso.pandas.langex import translate
from kalypso.pandas.lazy import Chain, run_together
from kalypso.pandas.pipelined import extend
from kalypso.pandas.runtime import current
from kalypso.query.blocking_ops import SCORE_COLUMN, SemAgg, SemTopK

TOPK_METHODS = ("quick", "heap", "naive", "quick-sem")
"""Lotus's ranking methods; Kalypso ranks every one of them the same way (a score per
row), see the compatibility table in the guide."""


def _drop_score(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[SCORE_COLUMN])


def sem_topk(chain: Chain, user_instruction: str, K: Any, *, method: Any) -> Chain:
    """The ``K`` rows that best satisfy the instruction, best first, numbered from 0."""
    if method not in TOPK_METHODS:
        raise LotusArgumentError(
            "sem_topk", "method", f"Method {method!r} not recognized; one of {TOPK_METHODS}"
        )
    k = check_positive_int("sem_topk", "K", K)
    instruction = translate(user_instruction, "sem_topk", "user_instruction", chain.column_map())
    table = extend(chain, "sem_topk", "user_instruction", SemTopK(instruction, k))
    return chain.then(table, _drop_score, reset_index=True)


def agg_instruction(chain: Chain, user_instruction: str, all_cols: bool) -> str:
    """The fold's instruction: Lotus's, naming every column when ``all_cols``."""
    columns = chain.column_map()
    if not all_cols:
        return translate(user_instruction, "sem_agg", "user_instruction", columns)
    if not isinstance(user_instruction, str) or not user_instruction.strip():
        raise LotusArgumentError(
            "sem_agg", "user_instruction", f"a non-empty string is needed, got {user_instruction!r}"
        )
    listed = ", ".join(
        "{" + plan.replace("{", "{{").replace("}", "}}") + "}" for plan in columns.values()
    )
    text = user_instruction.replace("{", "{{").replace("}", "}}")
    return f"Over the {listed}: {text}"


def sem_agg(
    chain: Chain, user_instruction: str, *, all_cols: bool, suffix: str, max_tokens: int
) -> Chain:
    """One row, one column ``suffix``: the model's answer over every row."""
    if not isinstance(suffix, str) or not suffix:
        raise LotusArgumentError("sem_agg", "suffix", f"a non-empty column name, got {suffix!r}")
    instruction = agg_instruction(chain, user_instruction, all_cols)
    operator = SemAgg(instruction, suffix, max_tokens=max_tokens)
    return chain.then(extend(chain, "sem_agg", "user_instruction", operator), reset_index=True)


def check_group_by(method: str, group_by: Any, frame: pd.DataFrame) -> list[str]:
    """``group_by`` as a list of existing columns."""
    if (
        not isinstance(group_by, list | tuple)
        or not group_by
        or not all(isinstance(c, str) for c in group_by)
    ):
        raise LotusArgumentError(
            method, "group_by", f"a non-empty list of column names, got {group_by!r}"
        )
    missing = [c for c in group_by if c not in frame.columns]
    if missing:
        raise LotusArgumentError(method, "group_by", f"column(s) {missing} not found in DataFrame")
    return list(group_by)


def by_group(
    frame: pd.DataFrame,
    group_by: list[str],
    build: Callable[[Chain], Chain],
    combine: Callable[[pd.DataFrame, tuple[Any, ...]], pd.DataFrame],
) -> pd.DataFrame:
    """``build``'s plan over each group of ``frame`` (in ``groupby`` order), all run at
    once on one KV ledger; each group's frame passed through ``combine`` with its key,
    concatenated."""
    groups = [
        (key if isinstance(key, tuple) else (key,), rows) for key, rows in frame.groupby(group_by)
    ]
    chains = [build(Chain.over(rows)) for _, rows in groups]
    results = run_together(chains, current())
    parts = [combine(out, key) for (key, _), (out, _) in zip(groups, results, strict=True)]
    return pd.concat(parts) if parts else frame.iloc[:0]


def agg_by_group(
    frame: pd.DataFrame,
    group_by: list[str],
    user_instruction: str,
    *,
    all_cols: bool,
    suffix: str,
    max_tokens: int,
) -> pd.DataFrame:
    """One row per group: ``suffix`` then the group columns (each row's index is 0, as
    Lotus's concatenation gives)."""

    def combine(out: pd.DataFrame, key: tuple[Any, ...]) -> pd.DataFrame:
        return out.assign(**dict(zip(group_by, key, strict=True)))

    def build(chain: Chain) -> Chain:
        return sem_agg(
            chain, user_instruction, all_cols=all_cols, suffix=suffix, max_tokens=max_tokens
        )

    return by_group(frame, group_by, build, combine)


def topk_by_group(
    frame: pd.DataFrame, group_by: list[str], user_instruction: str, K: Any, *, method: Any
) -> pd.DataFrame:
    """The top ``K`` of each group, each group numbered from 0."""
    return by_group(
        frame,
        group_by,
        lambda chain: sem_topk(chain, user_instruction, K, method=method),
        lambda out, key: out,
    )
