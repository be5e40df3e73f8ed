"""The user-facing API: a lazy, immutable plan over a table.

    import kalypso
    reviews = kalypso.table(df, name="reviews")
    plan = (reviews
            .sem_filter("Does the {text} discuss battery life?")
            .sem_map("What does the {text} say about the battery?", "battery_summary"))
    print(plan.explain())
    result = plan.run(engine, policy="pipelined")
    result.frame        # the output table
    result.stats        # per-operator calls, prompt/cached tokens, retries, time

Every method returns a new :class:`Table`; nothing runs until :meth:`Table.run`. Plans are
validated as they are built: a missing column, an empty instruction or an unknown
operator raises :class:`~kalypso.query.templates.PlanError` at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kalypso.engine.protocol import Engine
from kalypso.prompts import DEFAULT_SYSTEM_PROMPT, PromptLayout
from kalypso.query.blocking_ops import SemAgg, SemTopK
from kalypso.query.context import ExecContext
from kalypso.query.executor import ExecutionOptions, execute
from kalypso.query.join_ops import CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemClassify, SemExtract, SemFilter, SemMap
from kalypso.query.operators import Operator, build_operator
from kalypso.query.planner import PhysicalPlan, explain, plan, validate
from kalypso.query.python_ops import IndexSearch, PyFilter, PyMap
from kalypso.query.rows import Row
from kalypso.query.stats import OperatorStats, stats_frame
from kalypso.query.templates import PlanError
from kalypso.scheduler.estimator import TokenBoundEstimator
from kalypso.scheduler.memory import KVLedger
from kalypso.scheduler.pipeline import PipelineReport
from kalypso.scheduler.progress import ProgressView


@dataclass(frozen=True)
class QueryResult:
    """The output table and what it cost."""

    frame: pd.DataFrame
    stats: pd.DataFrame
    policy: str
    engine: str
    time_s: float
    operator_stats: tuple[OperatorStats, ...]
    pipeline_reports: tuple[PipelineReport, ...] = ()
    """Scheduler reports (admission order, budget moves, peak KV) per pipeline."""

    @property
    def llm_calls(self) -> int:
        return sum(s.calls for s in self.operator_stats)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.operator_stats)

    @property
    def cached_tokens(self) -> int:
        return sum(s.cached_tokens for s in self.operator_stats)

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def retries(self) -> int:
        return sum(s.retries for s in self.operator_stats)

    @property
    def min_prefill_tokens(self) -> int:
        """Prefill the run's prompts need at the least: every distinct full-block prefix
        computed once (an unbounded prefix cache, :mod:`kalypso.query.ideal_cache`)."""
        return sum(s.min_prefill_tokens for s in self.operator_stats)

    @property
    def lost_prefixes(self) -> int:
        """Dependent calls that did not find the prefix their tuple's previous call left."""
        return sum(s.lost_prefixes for s in self.operator_stats)

    @property
    def dependent_hit_rate(self) -> float:
        """Cached tokens found / expected over dependent calls (1.0 when there are none)."""
        expected = sum(s.expected_prefix_tokens for s in self.operator_stats)
        found = sum(s.found_prefix_tokens for s in self.operator_stats)
        return found / expected if expected else 1.0

    @property
    def peak_reserved_blocks(self) -> int:
        return max((r.peak_reserved_blocks for r in self.pipeline_reports), default=0)

    def report(self) -> str:
        """A short per-query report."""
        return (
            f"{self.policy} on {self.engine}: {self.time_s:.2f} s, {self.llm_calls} calls,"
            f" {self.prompt_tokens} prompt tokens, {self.cached_tokens} cached,"
            f" {self.prefill_tokens} computed, {self.retries} retries,"
            f" {self.lost_prefixes} needed prefixes lost"
            f" (dependent hit rate {self.dependent_hit_rate:.2f}),"
            f" peak KV reserved {self.peak_reserved_blocks} blocks"
        )


def _as_frame(data: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        frame = data
    elif isinstance(data, Sequence) and all(isinstance(r, dict) for r in data):
        frame = pd.DataFrame(list(data))
    else:
        raise PlanError("a table is a pandas DataFrame or a list of dicts")
    if any(not isinstance(c, str) for c in frame.columns):
        raise PlanError(f"column names must be strings, got {list(frame.columns)}")
    return frame.reset_index(drop=True)


class Table:
    """A lazy query plan: a source table and the operators applied to it, in order."""

    def __init__(
        self,
        source: pd.DataFrame | Sequence[dict[str, Any]],
        name: str = "table",
        operators: tuple[Operator, ...] = (),
    ) -> None:
        self._source = _as_frame(source)
        self._name = name
        self._operators = operators
        self._schema = validate(operators, tuple(self._source.columns))

    @property
    def name(self) -> str:
        return self._name

    @property
    def source(self) -> pd.DataFrame:
        return self._source

    @property
    def operators(self) -> tuple[Operator, ...]:
        return self._operators

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the plan will output."""
        return self._schema

    # ---- building -------------------------------------------------------------------
    def apply(self, *operators: Operator) -> Table:
        """A new plan with ``operators`` appended (any :class:`Operator`, including yours)."""
        for operator in operators:
            if not isinstance(operator, Operator):
                raise PlanError(f"{operator!r} is not a kalypso Operator")
        return Table(self._source, self._name, self._operators + tuple(operators))

    def op(self, name: str, *args: Any, **kwargs: Any) -> Table:
        """Append a registered operator by name (see ``register_operator``)."""
        return self.apply(build_operator(name, *args, **kwargs))

    def sem_filter(self, instruction: str, **kwargs: Any) -> Table:
        return self.apply(SemFilter(instruction, **kwargs))

    def sem_map(self, instruction: str, output_column: str, **kwargs: Any) -> Table:
        return self.apply(SemMap(instruction, output_column, **kwargs))

    def sem_extract(self, instruction: str, fields: list[str], **kwargs: Any) -> Table:
        return self.apply(SemExtract(instruction, fields, **kwargs))

    def sem_classify(
        self, instruction: str, labels: list[str], output_column: str = "label", **kwargs: Any
    ) -> Table:
        return self.apply(SemClassify(instruction, labels, output_column, **kwargs))

    def sem_join(
        self,
        right: Table | pd.DataFrame,
        instruction: str,
        *,
        index: IndexJoin | None = None,
        **kwargs: Any,
    ) -> Table:
        """Cartesian product with ``right`` (or its index candidates), then a predicate."""
        try:
            thresholds = index.thresholds() if index is not None else None
        except ValueError as exc:
            raise PlanError(f"sem_join index: {exc}") from exc
        return self.apply(
            CartesianProduct(right, index),
            JoinPredicate(instruction, thresholds=thresholds, **kwargs),
        )

    def index_search(
        self, corpus: Sequence[str] | pd.Series, query: str, k: int, output_column: str = "evidence"
    ) -> Table:
        return self.apply(IndexSearch(corpus, query, k, output_column))

    def sem_topk(self, instruction: str, k: int) -> Table:
        return self.apply(SemTopK(instruction, k))

    def sem_agg(self, instruction: str, output_column: str = "aggregate", **kwargs: Any) -> Table:
        return self.apply(SemAgg(instruction, output_column, **kwargs))

    def map(self, fn: Callable[[dict[str, Any]], Any], output_column: str) -> Table:
        return self.apply(PyMap(fn, output_column))

    def filter(self, predicate: Callable[[dict[str, Any]], bool]) -> Table:
        return self.apply(PyFilter(predicate))

    # ---- inspecting and running -----------------------------------------------------
    def physical_plan(self) -> PhysicalPlan:
        return plan(self._operators, self._name, len(self._source), tuple(self._source.columns))

    def explain(self) -> str:
        """Pipelines, stages and operators with their contracts."""
        return explain(self.physical_plan())

    def prepare(self) -> Table:
        """Build the plan's vector indexes (and load the embedding model) now instead of on
        the first tuple that needs them; returns the plan. Indexes are shared by every plan
        over the same texts, so this is done once per process. Benchmarks call it before
        timing so that no policy pays the one-off work."""
        for operator in self._operators:
            operator.prepare()
        return self

    async def arun(
        self,
        engine: Engine,
        *,
        policy: str = "adaptive",
        max_tasks_in_flight: int | None = None,
        max_retries: int = 2,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        query_id: str | None = None,
        ledger: KVLedger | None = None,
        progress: bool = False,
        alpha: float = 1.0,
        beta: float = 0.5,
        pinning: str = "virtual",
        estimate_bounds: bool = True,
        fixed_bound_tokens: int | None = None,
    ) -> QueryResult:
        """Run the plan on ``engine`` (async). See :meth:`run`."""
        if fixed_bound_tokens is not None and fixed_bound_tokens < 1:
            raise PlanError(f"fixed_bound_tokens must be at least 1, got {fixed_bound_tokens}")
        options = ExecutionOptions(policy, max_tasks_in_flight, max_retries, alpha, beta, pinning)
        physical = self.physical_plan()
        ctx = ExecContext(
            engine,
            PromptLayout(engine.tokenizer, system_prompt),
            max_retries=max_retries,
            query_id=query_id or f"q{uuid.uuid4().hex[:8]}",
            estimator=TokenBoundEstimator() if estimate_bounds else None,
            fixed_bound_tokens=fixed_bound_tokens,
        )
        for planned in physical.operators():
            ctx.stats_for(planned.op_id)
        records = self._source.to_dict("records")
        rows = [Row((i,), {str(k): v for k, v in r.items()}) for i, r in enumerate(records)]
        started = time.monotonic()
        with ProgressView(physical, enabled=progress) as view:
            out_rows, reports = await execute(
                physical, rows, ctx, options, ledger=ledger, on_update=view.update
            )
        elapsed_s = time.monotonic() - started
        frame = pd.DataFrame([r.values for r in out_rows], columns=list(physical.output_schema))
        operator_stats = tuple(ctx.stats.values())
        return QueryResult(
            frame=frame,
            stats=stats_frame(list(operator_stats)),
            policy=policy,
            engine=engine.name,
            time_s=elapsed_s,
            operator_stats=operator_stats,
            pipeline_reports=tuple(reports),
        )

    def run(self, engine: Engine, **kwargs: Any) -> QueryResult:
        """Run the plan on ``engine`` and return the output table with statistics.

        Args:
            policy: ``"adaptive"`` (default; alias ``"pipelined"``), ``"parallel-dfs"``,
                ``"parallel-bfs"``, ``"static:R"``, ``"sequential"`` or
                ``"operator-at-a-time"`` (see :mod:`kalypso.scheduler.policies`).
            max_tasks_in_flight: optional cap on tasks running at once.
            max_retries: re-issues of a call that hit its token bound (operator-at-a-time).
            ledger: share one :class:`~kalypso.scheduler.memory.KVLedger` between queries
                running at once on the same engine (default: one for this query).
            progress: show a live per-stage view while running.
            alpha, beta: Algorithm 1's thresholds.
            pinning: ``"virtual"`` (default) or ``"explicit"`` (engine pins; deadlocks
                are detected and broken by releasing all pins).
            estimate_bounds: learn generative operators' output bounds online (default);
                when false they always start at their fixed ``first_bound_tokens``.
            fixed_bound_tokens: start every generative operator's calls at this many output
                tokens (no estimator; retries double it up to the operator's cap), the
                fixed-budget ablation of the paper's Figure 12.

        Raises:
            PlanError: before any LLM call, for values that cannot enter a prompt or
                first-stage prompts larger than the context.
            kalypso.engine.protocol.EngineError: the engine failed.
        """
        return asyncio.run(self.arun(engine, **kwargs))


def table(data: pd.DataFrame | Sequence[dict[str, Any]], name: str = "table") -> Table:
    """Start a plan over ``data`` (a DataFrame or a list of dicts)."""
    return Table(data, name)
