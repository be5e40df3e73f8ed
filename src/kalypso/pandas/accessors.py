"""The DataFrame methods, registered under Lotus's names with Lotus 1.2.4's arguments
and defaults (``df.sem_filter(...)``, ``df.sem_map(...)``, ...).

Each method checks its arguments at once (refusing, naming the argument, what Kalypso
does not do) and returns a pending :class:`~kalypso.pandas.lazy.LazyFrame`: the
operators of a chain run as one plan when the frame is first read. ``return_stats=True``
runs it at once and returns ``(frame, stats)``. ``group_by``, ``sem_search``,
``sem_index`` and ``load_sem_index`` need their input's rows, so they run what is
pending before them and return a plain DataFrame.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kalypso.pandas import blocking, pipelined, search
from kalypso.pandas.arguments import (
    answer_cap_tokens,
    check_absent,
    check_flags_off,
    check_strategy,
)
from kalypso.pandas.errors import LotusArgumentError, check_flag, unsupported
from kalypso.pandas.lazy import Chain, LazyFrame
from kalypso.pandas.runtime import current_options
from kalypso.query.plan import QueryResult

Result = LazyFrame | pd.DataFrame | tuple[pd.DataFrame, dict[str, Any]]


def chain_of(frame: pd.DataFrame) -> Chain:
    """The pending chain a method extends: a pending frame's own, else a new one over
    the frame's rows."""
    if isinstance(frame, LazyFrame) and frame.chain is not None:
        return frame.chain
    return Chain.over(frame)


def rows_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's rows (running what is pending)."""
    return frame.collect() if isinstance(frame, LazyFrame) else frame


def stats_of(result: QueryResult | None) -> dict[str, Any]:
    """Lotus's stats keys that Kalypso can fill, and Kalypso's token counts."""
    if result is None:
        return {}
    return {
        "total_llm_calls": result.llm_calls,
        "total_tokens": result.prompt_tokens + result.output_tokens,
        "prompt_tokens": result.prompt_tokens,
        "cached_tokens": result.cached_tokens,
        "prefill_tokens": result.prefill_tokens,
    }


def deliver(chain: Chain, return_stats: bool) -> Result:
    """The pending frame, or with ``return_stats`` the run's frame and stats."""
    lazy = LazyFrame(chain)
    if not return_stats:
        return lazy
    frame = lazy.collect()
    return frame, stats_of(lazy.result)


class _Accessor:
    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame


@pd.api.extensions.register_dataframe_accessor("sem_filter")
class SemFilterAccessor(_Accessor):
    def __call__(
        self,
        user_instruction: str,
        return_raw_outputs: bool = False,
        return_explanations: bool = False,
        return_all: bool = False,
        default: bool = True,
        suffix: str = "_filter",
        examples: pd.DataFrame | None = None,
        helper_examples: pd.DataFrame | None = None,
        strategy: Any = None,
        cascade_args: Any = None,
        return_stats: bool = False,
        safe_mode: bool = False,
        progress_bar_desc: str = "Filtering",
        additional_cot_instructions: str = "",
        system_prompt: str | None = None,
        output_tokens: tuple[str, str] = ("True", "False"),
        **model_kwargs: Any,
    ) -> Result:
        """Keep the rows for which the model holds the claim true (see the module)."""
        method = "sem_filter"
        check_strategy(method, strategy)
        check_absent(
            method, examples=examples, helper_examples=helper_examples, cascade_args=cascade_args,
            system_prompt=system_prompt,
        )  # fmt: skip
        check_flags_off(method, return_raw_outputs=return_raw_outputs)
        if additional_cot_instructions:
            raise unsupported(
                method,
                "additional_cot_instructions",
                additional_cot_instructions,
                "no chain-of-thought",
            )
        if tuple(output_tokens) != ("True", "False"):
            raise unsupported(method, "output_tokens", output_tokens, "a decision is Yes or No")
        check_flag(method, "default", default)
        answer_cap_tokens(method, model_kwargs, 1)
        chain = pipelined.sem_filter(
            chain_of(self._frame), user_instruction,
            return_explanations=check_flag(method, "return_explanations", return_explanations),
            return_all=check_flag(method, "return_all", return_all), suffix=_suffix(method, suffix),
        )  # fmt: skip
        return deliver(chain, check_flag(method, "return_stats", return_stats))


@pd.api.extensions.register_dataframe_accessor("sem_map")
class SemMapAccessor(_Accessor):
    def __call__(
        self,
        user_instruction: str,
        system_prompt: str | None = None,
        postprocessor: Any = None,
        return_explanations: bool = False,
        return_raw_outputs: bool = False,
        suffix: str = "_map",
        examples: pd.DataFrame | None = None,
        strategy: Any = None,
        safe_mode: bool = False,
        progress_bar_desc: str = "Mapping",
        **model_kwargs: Any,
    ) -> Result:
        """A column ``suffix`` with the model's answer to the instruction for each row."""
        method = "sem_map"
        check_strategy(method, strategy)
        check_absent(
            method, system_prompt=system_prompt, postprocessor=postprocessor, examples=examples
        )
        cap = answer_cap_tokens(method, model_kwargs, current_options().max_tokens)
        chain = pipelined.sem_map(
            chain_of(self._frame), user_instruction, suffix=_suffix(method, suffix), max_tokens=cap,
            return_explanations=check_flag(method, "return_explanations", return_explanations),
            return_raw_outputs=check_flag(method, "return_raw_outputs", return_raw_outputs),
        )  # fmt: skip
        return deliver(chain, False)


@pd.api.extensions.register_dataframe_accessor("sem_extract")
class SemExtractAccessor(_Accessor):
    def __call__(
        self,
        input_cols: list[str],
        output_cols: dict[str, str | None],
        extract_quotes: bool = False,
        postprocessor: Any = None,
        return_raw_outputs: bool = False,
        safe_mode: bool = False,
        progress_bar_desc: str = "Extracting",
        return_explanations: bool = False,
        strategy: Any = None,
    ) -> Result:
        """One column per ``output_cols`` key, read from the ``input_cols``."""
        method = "sem_extract"
        check_strategy(method, strategy)
        check_absent(method, postprocessor=postprocessor)
        if return_raw_outputs:
            raise unsupported(
                method, "return_raw_outputs", True, "the answer is parsed into its fields"
            )
        chain = pipelined.sem_extract(
            chain_of(self._frame), input_cols, output_cols,
            extract_quotes=check_flag(method, "extract_quotes", extract_quotes),
            max_tokens=current_options().max_tokens,
            return_explanations=check_flag(method, "return_explanations", return_explanations),
        )  # fmt: skip
        return deliver(chain, False)


@pd.api.extensions.register_dataframe_accessor("sem_join")
class SemJoinAccessor(_Accessor):
    def __call__(
        self,
        other: pd.DataFrame | pd.Series,
        join_instruction: str,
        return_explanations: bool = False,
        how: str = "inner",
        suffix: str = "_join",
        examples: pd.DataFrame | None = None,
        strategy: Any = None,
        default: bool = True,
        cascade_args: Any = None,
        return_stats: bool = False,
        safe_mode: bool = False,
        progress_bar_desc: str = "Join comparisons",
    ) -> Result:
        """The pairs of rows for which the model holds the claim true."""
        method = "sem_join"
        check_strategy(method, strategy)
        check_absent(method, examples=examples, cascade_args=cascade_args)
        check_flag(method, "default", default)
        check_flag(method, "return_stats", return_stats)  # Lotus: stats only from a cascade
        chain = pipelined.sem_join(
            chain_of(self._frame), other, join_instruction,
            return_explanations=check_flag(method, "return_explanations", return_explanations),
            how=how, suffix=_suffix(method, suffix),
        )  # fmt: skip
        return deliver(chain, False)


@pd.api.extensions.register_dataframe_accessor("sem_sim_join")
class SemSimJoinAccessor(_Accessor):
    def __call__(
        self,
        other: pd.DataFrame,
        left_on: str,
        right_on: str,
        K: int,
        lsuffix: str = "",
        rsuffix: str = "",
        score_suffix: str = "",
        keep_index: bool = False,
    ) -> Result:
        """Each row with its ``K`` most similar rows of ``other``."""
        method = "sem_sim_join"
        check_flags_off(method, keep_index=keep_index)
        for name, value in (
            ("lsuffix", lsuffix),
            ("rsuffix", rsuffix),
            ("score_suffix", score_suffix),
        ):
            if not isinstance(value, str):
                raise LotusArgumentError(method, name, f"a string, got {value!r}")
        chain = pipelined.sem_sim_join(
            chain_of(self._frame), other, left_on, right_on, K,
            lsuffix=lsuffix, rsuffix=rsuffix, score_suffix=score_suffix,
        )  # fmt: skip
        return deliver(chain, False)


@pd.api.extensions.register_dataframe_accessor("sem_topk")
class SemTopKAccessor(_Accessor):
    def __call__(
        self,
        user_instruction: str,
        K: int,
        method: str = "quick",
        strategy: Any = None,
        group_by: list[str] | None = None,
        cascade_threshold: float | None = None,
        return_stats: bool = False,
        safe_mode: bool = False,
        return_explanations: bool = False,
    ) -> Result:
        """The ``K`` rows that best satisfy the instruction, best first."""
        name = "sem_topk"
        check_strategy(name, strategy)
        check_absent(name, cascade_threshold=cascade_threshold)
        check_flag(name, "return_explanations", return_explanations)  # Lotus: only with ZS_COT
        stats = check_flag(name, "return_stats", return_stats)
        if group_by is not None:
            frame = rows_of(self._frame)
            columns = blocking.check_group_by(name, group_by, frame)
            out = blocking.topk_by_group(frame, columns, user_instruction, K, method=method)
            return (out, {}) if stats else out
        chain = blocking.sem_topk(chain_of(self._frame), user_instruction, K, method=method)
        return deliver(chain, stats)


@pd.api.extensions.register_dataframe_accessor("sem_agg")
class SemAggAccessor(_Accessor):
    def __call__(
        self,
        user_instruction: str,
        all_cols: bool = False,
        suffix: str = "_output",
        group_by: list[str] | None = None,
        safe_mode: bool = False,
        progress_bar_desc: str = "Aggregating",
        long_context_strategy: Any = "chunk",
        split_fields_into_cols: bool = True,
        response_format: Any = None,
    ) -> Result:
        """One row with the model's answer over all rows (one per group with ``group_by``)."""
        method = "sem_agg"
        check_absent(method, response_format=response_format)
        strategy = str(getattr(long_context_strategy, "name", long_context_strategy)).lower()
        if strategy != "chunk":
            raise unsupported(
                method, "long_context_strategy", long_context_strategy,
                "rows are folded in chunks (CHUNK); truncating is not built",
            )  # fmt: skip
        all_cols = check_flag(method, "all_cols", all_cols)
        cap = current_options().max_tokens
        if group_by is not None:
            frame = rows_of(self._frame)
            columns = blocking.check_group_by(method, group_by, frame)
            return blocking.agg_by_group(
                frame, columns, user_instruction, all_cols=all_cols, suffix=suffix, max_tokens=cap
            )
        chain = blocking.sem_agg(
            chain_of(self._frame),
            user_instruction,
            all_cols=all_cols,
            suffix=suffix,
            max_tokens=cap,
        )
        return deliver(chain, False)


@pd.api.extensions.register_dataframe_accessor("sem_search")
class SemSearchAccessor(_Accessor):
    def __call__(
        self,
        col_name: str,
        query: str,
        K: int | None = None,
        n_rerank: int | None = None,
        return_scores: bool = False,
        suffix: str = "_sim_score",
    ) -> pd.DataFrame:
        """The ``K`` rows most similar to ``query`` (see :mod:`kalypso.pandas.search`)."""
        check_absent("sem_search", n_rerank=n_rerank)
        return search.sem_search(
            rows_of(self._frame), col_name, query, K,
            return_scores=check_flag("sem_search", "return_scores", return_scores), suffix=suffix,
        )  # fmt: skip


@pd.api.extensions.register_dataframe_accessor("sem_index")
class SemIndexAccessor(_Accessor):
    def __call__(self, col_name: str, index_dir: str) -> pd.DataFrame:
        """Build the column's index now (see :mod:`kalypso.pandas.search`)."""
        return search.sem_index(rows_of(self._frame), col_name, index_dir)


@pd.api.extensions.register_dataframe_accessor("load_sem_index")
class LoadSemIndexAccessor(_Accessor):
    def __call__(self, col_name: str, index_dir: str) -> pd.DataFrame:
        """Record the column's index directory (see :mod:`kalypso.pandas.search`)."""
        return search.load_sem_index(rows_of(self._frame), col_name, index_dir)


NOT_BUILT = {
    "sem_cluster_by": "clustering (FAISS k-means over the shared index) is not built yet",
    "sem_dedup": "deduplication (a self similarity join) is not built yet",
    "sem_partition_by": "partitions for sem_agg are not built; use group_by",
    "llm_as_judge": "evaluation helpers are not built",
    "pairwise_judge": "evaluation helpers are not built",
}
"""Lotus methods registered only to refuse clearly (instead of an AttributeError)."""


def _refusing(name: str, why: str) -> type:
    def __call__(self: _Accessor, *args: Any, **kwargs: Any) -> Any:
        raise LotusArgumentError(name, "the method", f"not supported by kalypso.pandas: {why}")

    accessor = type(
        f"{name.title().replace('_', '')}Accessor", (_Accessor,), {"__call__": __call__}
    )
    return pd.api.extensions.register_dataframe_accessor(name)(accessor)


for _name, _why in NOT_BUILT.items():
    _refusing(_name, _why)


def _suffix(method: str, suffix: Any) -> str:
    if not isinstance(suffix, str) or not suffix:
        raise LotusArgumentError(method, "suffix", f"a non-empty string, got {suffix!r}")
    return suffix
