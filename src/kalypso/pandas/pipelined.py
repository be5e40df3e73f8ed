"""Lotus's row-at-a-time operators (``sem_filter``, ``sem_map``, ``sem_extract``,
``sem_join``, ``sem_sim_join``) as operators appended to a pending plan.

Each function takes the chain so far and Lotus's arguments (already checked for the ones
Kalypso refuses) and returns the longer chain; nothing runs. The frame a chain finally
gives has Lotus's columns: the ones Lotus adds, named as Lotus names them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd

from kalypso.core.errors import PlanError
from kalypso.core.instance import CallOutcome
from kalypso.pandas.errors import LotusArgumentError, check_frame, check_positive_int
from kalypso.pandas.langex import translate
from kalypso.pandas.lazy import ROW_COLUMN, Chain, Finish, LazyFrame
from kalypso.query.join_ops import DISTANCE_COLUMN, CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemExtract, SemFilter, SemMap
from kalypso.query.operators import Operator, OperatorContract, Values
from kalypso.query.plan import Table
from kalypso.query.templates import Instruction

TRUE, FALSE = "True", "False"
"""Lotus's answer tokens (its ``output_tokens``); a claim is decided between them."""


def claim_task(instruction: Instruction) -> str:
    """Lotus's question about a claim: is it true for the context, True or False."""
    claim = instruction.task_text()
    return f"Claim: {claim}\nIs the claim true for the context? Answer True or False."


class _Claim:
    """A predicate asked as Lotus asks it (:func:`claim_task`), decided by one
    constrained token, True or False (Lotus's ``output_tokens``, the subclass's ``choices``);
    True keeps the row."""

    instruction: Instruction
    task: str

    def __init__(self, instruction: str) -> None:
        super().__init__(instruction)  # type: ignore[call-arg]
        self.task = claim_task(self.instruction)

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return {} if outcome.decision == TRUE else None


class ClaimFilter(_Claim, SemFilter):
    """``sem_filter``: keep the rows whose claim the model decides True."""

    choices = (TRUE, FALSE)


class ClaimFlag(ClaimFilter):
    """``sem_filter(return_all=True)``: the same decision, every row kept, the answer in
    a bool column."""

    contract: ClassVar[OperatorContract] = SemMap.contract

    def __init__(self, instruction: str, column: str) -> None:
        super().__init__(instruction)
        self.column = column
        self.new_columns = (column,)

    def describe(self) -> str:
        return f"sem_filter {self.instruction.text!r} -> {self.column} (every row kept)"

    def on_answer(self, values: Values, outcome: CallOutcome | None) -> Values | None:
        assert outcome is not None
        return {self.column: outcome.decision == TRUE}


class ClaimJoin(_Claim, JoinPredicate):
    """``sem_join``'s predicate: keep the pairs whose claim the model decides True."""

    choices = (TRUE, FALSE)


def free_name(name: str, taken: list[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... if taken (Lotus's rule for ``_filter``)."""
    candidate, n = name, 0
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def extend(chain: Chain, method: str, argument: str, *operators: Operator) -> Table:
    """The chain's plan with ``operators`` appended; the plan's own refusal (a column
    that exists, a value that cannot enter a prompt) named as Lotus's argument."""
    try:
        return chain.table.apply(*operators)
    except LotusArgumentError:
        raise
    except PlanError as exc:
        raise LotusArgumentError(method, argument, str(exc)) from None


def with_column(name: str, value: Any) -> Finish:
    """A step adding a column of one value (an explanation Lotus leaves empty without
    chain-of-thought)."""

    def step(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(**{name: [value] * len(frame)})

    return step


def sem_filter(
    chain: Chain,
    user_instruction: str,
    *,
    return_explanations: bool,
    return_all: bool,
    suffix: str,
) -> Chain:
    """Rows whose claim the model holds true; with ``return_all``, every row and a bool
    column named ``suffix``; with ``return_explanations``, ``explanation<suffix>`` ("")."""
    columns = chain.column_map()
    instruction = translate(user_instruction, "sem_filter", "user_instruction", columns)
    operator: SemFilter = (
        ClaimFlag(instruction, free_name(suffix, list(columns)))
        if return_all
        else ClaimFilter(instruction)
    )
    table = extend(chain, "sem_filter", "user_instruction", operator)
    finish = with_column(f"explanation{suffix}", "") if return_explanations else None
    return chain.then(table, finish)


def sem_map(
    chain: Chain,
    user_instruction: str,
    *,
    suffix: str,
    max_tokens: int,
    return_explanations: bool,
    return_raw_outputs: bool,
) -> Chain:
    """A column ``suffix`` with the model's answer; ``explanation<suffix>`` (None) and
    ``raw_output<suffix>`` (the answer) when asked."""
    columns = chain.column_map()
    if suffix in columns:
        raise LotusArgumentError(
            "sem_map",
            "suffix",
            f"the DataFrame already has a column {suffix!r}; choose another suffix",
        )
    instruction = translate(user_instruction, "sem_map", "user_instruction", columns)
    first_bound = min(max_tokens, 64)
    operator = SemMap(instruction, suffix, max_tokens=max_tokens, first_bound_tokens=first_bound)
    table = extend(chain, "sem_map", "user_instruction", operator)

    def extras(frame: pd.DataFrame) -> pd.DataFrame:
        if return_explanations:
            frame = frame.assign(**{f"explanation{suffix}": pd.Series(None, frame.index, object)})
        if return_raw_outputs:
            frame = frame.assign(**{f"raw_output{suffix}": frame[suffix]})
        return frame

    return chain.then(table, extras if return_explanations or return_raw_outputs else None)


def sem_extract(
    chain: Chain,
    input_cols: Any,
    output_cols: Any,
    *,
    extract_quotes: bool,
    max_tokens: int,
    return_explanations: bool,
) -> Chain:
    """One column per ``output_cols`` key (and ``<key>_quote`` with ``extract_quotes``),
    read from one answer over the ``input_cols``."""
    columns = chain.column_map()
    if (
        not isinstance(input_cols, list | tuple)
        or not input_cols
        or not all(isinstance(c, str) for c in input_cols)
    ):
        raise LotusArgumentError(
            "sem_extract", "input_cols", f"a non-empty list of column names, got {input_cols!r}"
        )
    for column in input_cols:
        if column not in columns:
            raise LotusArgumentError(
                "sem_extract",
                "input_cols",
                f"column {column!r} not found in DataFrame; its columns are {sorted(columns)}",
            )
    if not isinstance(output_cols, dict) or not output_cols:
        raise LotusArgumentError(
            "sem_extract",
            "output_cols",
            f"a non-empty dict of new column -> description, got {output_cols!r}",
        )
    fields: list[str] = []
    wanted: list[str] = []
    for name, description in output_cols.items():
        if not isinstance(name, str) or not name.strip() or not isinstance(description, str | None):
            raise LotusArgumentError(
                "sem_extract",
                "output_cols",
                f"{name!r}: {description!r} is not a column name and a description (or None)",
            )
        if name in columns:
            raise LotusArgumentError(
                "sem_extract", "output_cols", f"the DataFrame already has a column {name!r}"
            )
        fields.append(name)
        wanted.append(name if description is None else f"{name} ({description})")
        if extract_quotes:
            fields.append(f"{name}_quote")
            wanted.append(f"{name}_quote (the exact quote that supports {name})")
    sources = " and ".join(
        "{" + columns[c].replace("{", "{{").replace("}", "}}") + "}" for c in input_cols
    )
    instruction = (
        f"From the {sources}, extract: "
        + "; ".join(w.replace("{", "{{").replace("}", "}}") for w in wanted)
        + "."
    )
    operator = SemExtract(
        instruction, fields, max_tokens=max_tokens, first_bound_tokens=min(max_tokens, 64)
    )
    table = extend(chain, "sem_extract", "output_cols", operator)
    finish = with_column("explanation", None) if return_explanations else None
    return chain.then(table, finish)


def right_frame(method: str, other: Any) -> pd.DataFrame:
    """A join's right side as a DataFrame (a named Series becomes one column; a pending
    frame is run first)."""
    if isinstance(other, pd.Series):
        if other.name is None or not isinstance(other.name, str):
            raise LotusArgumentError(
                method, "other", "a Series needs a name (the column it becomes)"
            )
        other = other.to_frame()
    if isinstance(other, LazyFrame):
        other = other.collect()
    check_frame(other, method, "other")
    if ROW_COLUMN in other.columns:
        raise LotusArgumentError(method, "other", f"the column name {ROW_COLUMN!r} is reserved")
    if len(other) == 0:
        raise LotusArgumentError(method, "other", "the right DataFrame is empty")
    return pd.DataFrame(other).reset_index(drop=True)


def _right_plan_names(chain: Chain, right: pd.DataFrame) -> dict[str, str]:
    """Right column -> its plan name after the join (``<name>_right`` on a clash)."""
    plan_columns = set(chain.table.columns)
    return {c: (f"{c}_right" if c in plan_columns else c) for c in right.columns}


def sem_join(
    chain: Chain,
    other: Any,
    join_instruction: str,
    *,
    return_explanations: bool,
    how: str,
    suffix: str,
) -> Chain:
    """The pairs of a left and a right row whose claim the model holds true; columns in
    both frames become ``<name>:left`` and ``<name>:right``, the rows are numbered from 0."""
    if how != "inner":
        raise LotusArgumentError(
            "sem_join", "how", f"only 'inner' joins exist (as in Lotus), got {how!r}"
        )
    right = right_frame("sem_join", other)
    left = chain.column_map()
    right_names = _right_plan_names(chain, right)
    instruction = translate(
        join_instruction, "sem_join", "join_instruction", left, right=right_names
    )
    try:
        table = chain.table.apply(CartesianProduct(right), ClaimJoin(instruction))
    except PlanError as exc:
        raise LotusArgumentError("sem_join", "join_instruction", str(exc)) from None
    clashes = [c for c in right.columns if c in left]
    names = {left[c]: f"{c}:left" for c in clashes} | {
        right_names[c]: f"{c}:right" for c in clashes
    }
    lotus_left = [names.get(left[c], c) for c in left]

    def explanations(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(**{f"explanation{suffix}": ""})[
            [
                *lotus_left,
                f"explanation{suffix}",
                *[c for c in frame.columns if c not in (*lotus_left, f"explanation{suffix}")],
            ]
        ]

    return chain.then(table, explanations if return_explanations else None, names, reset_index=True)


def sem_sim_join(
    chain: Chain,
    other: Any,
    left_on: Any,
    right_on: Any,
    K: Any,
    *,
    lsuffix: str,
    rsuffix: str,
    score_suffix: str,
) -> Chain:
    """Each left row with its ``K`` most similar right rows (by the embeddings of
    ``left_on`` and ``right_on``), a ``_scores<score_suffix>`` column of cosine
    similarity, best first; rows keep their left row's label."""
    right = right_frame("sem_sim_join", other)
    left = chain.column_map()
    if left_on not in left:
        raise LotusArgumentError(
            "sem_sim_join", "left_on", f"column {left_on!r} not found in DataFrame"
        )
    if right_on not in right.columns:
        raise LotusArgumentError(
            "sem_sim_join", "right_on", f"column {right_on!r} not found in other"
        )
    k = check_positive_int("sem_sim_join", "K", K)
    clashes = [c for c in right.columns if c in left]
    if clashes and lsuffix == rsuffix == "":
        raise LotusArgumentError(
            "sem_sim_join", "lsuffix/rsuffix", f"columns overlap but no suffix specified: {clashes}"
        )
    right_names = _right_plan_names(chain, right)
    score = f"_scores{score_suffix}"
    query = "{" + left[left_on].replace("{", "{{").replace("}", "}}") + "}"
    product = CartesianProduct(right, IndexJoin(left=query, right_column=right_on, k=k))
    table = extend(chain, "sem_sim_join", "other", product)
    names = {left[c]: f"{c}{lsuffix}" for c in clashes} | {
        right_names[c]: f"{c}{rsuffix}" for c in clashes
    }
    lotus_left = [names.get(left[c], c) for c in left]

    def scores(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.assign(**{score: 1.0 - frame.pop(DISTANCE_COLUMN)})
        rest = [c for c in frame.columns if c not in (*lotus_left, score, ROW_COLUMN)]
        frame = frame[[*lotus_left, score, *rest, ROW_COLUMN]]
        return frame.sort_values([ROW_COLUMN, score], ascending=[True, False], kind="stable")

    return chain.then(table, scores, names)
