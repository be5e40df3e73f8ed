"""The user-facing API: a lazy, immutable plan over a table.

    import kalypso
    reviews = kalypso.table(df, name="reviews")
    plan = (reviews
            .sem_filter("Does the {text} discuss battery life?")
            .sem_map("What does the {text} say about the battery?", "battery_summary"))
    print(plan.explain())
    result = plan.run(engine, policy="adaptive")
    result.frame        # the output table
    result.stats        # per-operator calls, requests, continuations, tokens, time

Every method returns a new :class:`Table`; nothing runs until :meth:`Table.run`. Plans are
validated as they are built: a missing column, an empty instruction or an unknown
operator raises :class:`~kalypso.query.templates.PlanError` at once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from kalypso.core.errors import PlanError, QueryError
from kalypso.core.graph import TaskGraph
from kalypso.core.hooks import RunHooks
from kalypso.core.ledger import KVLedger
from kalypso.core.options import RELATIONAL_POLICY, RunOptions, run_options
from kalypso.core.progress import ProgressView
from kalypso.core.prompt import ChatLayout
from kalypso.core.replicas import ReplicaSet
from kalypso.core.report import PipelineReport
from kalypso.core.result_cache import PromptResultCache
from kalypso.core.runner import RunState
from kalypso.core.stats import OperatorStats, RunTotals, stats_frame
from kalypso.engine.protocol import Engine
from kalypso.query.blocking_ops import SemAgg, SemTopK
from kalypso.query.executor import Execution, execute
from kalypso.query.join_ops import CartesianProduct, IndexJoin, JoinPredicate
from kalypso.query.llm_ops import SemClassify, SemExtract, SemFilter, SemMap
from kalypso.query.lower import lower
from kalypso.query.operators import LoweringContext, Operator, build_operator
from kalypso.query.planner import PhysicalPlan, explain, plan, validate
from kalypso.query.python_ops import IndexSearch, PyFilter, PyMap
from kalypso.query.rows import input_instances
from kalypso.query.templates import check_text

if TYPE_CHECKING:
    from kalypso.query.spec import TableSpec
    from kalypso.query.spec_source import SourceFormat

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """One decision a run made: which operator, on which tuple, what, and by how much."""

    op_id: str
    key: tuple[int, ...]
    choice: str
    margin: float


@dataclass(frozen=True)
class QueryResult(RunTotals):
    """The output table and what it cost."""

    frame: pd.DataFrame
    stats: pd.DataFrame
    policy: str
    engine: str
    time_s: float
    operator_stats: tuple[OperatorStats, ...]
    pipeline_reports: tuple[PipelineReport, ...] = ()
    """Scheduler reports (admission order, budget moves, peak KV) per pipeline."""
    decisions: tuple[Decision, ...] = field(default=(), repr=False)
    """Every constrained decision with its margin, in (operator, key) order."""
    near_tie_margin: float = 0.1
    longest_chain_tokens: int = 0
    """The most tokens one row's chain of dependent calls generated, summed over the
    plan's pipelines and barriers: the least engine steps any schedule of these calls
    needs."""

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

    @property
    def near_ties(self) -> tuple[Decision, ...]:
        """Decisions whose margin is below the run's ``near_tie_margin``."""
        return tuple(d for d in self.decisions if d.margin < self.near_tie_margin)

    def report(self) -> str:
        """A short per-query report."""
        return (
            f"{self.policy} on {self.engine}: {self.time_s:.2f} s, {self.llm_calls} calls"
            f" ({self.continuations} continued), {self.prompt_tokens} prompt tokens,"
            f" {self.cached_tokens} cached, {self.prefill_tokens} computed,"
            f" {self.lost_prefixes} needed prefixes lost"
            f" (dependent hit rate {self.dependent_hit_rate:.2f}),"
            f" {len(self.near_ties)} near-tie decisions,"
            f" peak KV reserved {self.peak_reserved_blocks} blocks"
        )


def compare_decisions(a: QueryResult, b: QueryResult) -> tuple[int, list[Decision]]:
    """How two runs of one plan agree: ``(differing decisions, near-ties among them)``.

    A decision differs when both runs made it and chose differently; every differing
    decision must be a near-tie in one of the runs for the same-answers guarantee to
    hold (see the README). Decisions only one run made (a tuple filtered earlier in the
    other) count as differing too.
    """
    mine = {(d.op_id, d.key): d for d in a.decisions}
    theirs = {(d.op_id, d.key): d for d in b.decisions}
    differing = 0
    ties: list[Decision] = []
    for key in mine.keys() | theirs.keys():
        x, y = mine.get(key), theirs.get(key)
        if x is None or y is None or x.choice != y.choice:
            differing += 1
            tie = [d for d in (x, y) if d is not None and d.margin < a.near_tie_margin]
            ties.extend(tie[:1])
    return differing, ties


DECISION_OPERATORS = ("sem_filter", "sem_join", "sem_classify")
"""Operators whose LLM answer is one constrained token (no output bound to set)."""


def _build(name: str, factory: Callable[..., Operator], *args: Any, **kwargs: Any) -> Operator:
    """``factory(*args, **kwargs)``, with arguments it does not take refused as a
    :class:`PlanError` naming the operator (instead of a bare TypeError)."""
    if name in DECISION_OPERATORS:
        for option in ("max_tokens", "first_bound_tokens"):
            if option in kwargs:
                raise PlanError(
                    f"{name}: its answer is one constrained token (a decision), so it takes"
                    f" no {option}"
                )
    try:
        inspect.signature(factory).bind(*args, **kwargs)
    except TypeError as exc:
        raise PlanError(f"{name}: {exc}") from None
    return factory(*args, **kwargs)


def _as_frame(data: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The table as a DataFrame, refused (:class:`PlanError`) when it is not one, or its
    column names are not distinct strings on one line each."""
    if isinstance(data, pd.DataFrame):
        frame = data
    elif (
        isinstance(data, Sequence)
        and not isinstance(data, str | bytes)
        and all(isinstance(r, dict) for r in data)
    ):
        records = list(data)
        try:
            frame = pd.DataFrame(records)
        except UnicodeEncodeError:  # pandas' string columns refuse invalid text: say where
            for row, record in enumerate(records):
                for key, value in record.items():
                    if isinstance(key, str):
                        check_text(key, f"row {row}: column name {key!a}")
                    if isinstance(value, str):
                        check_text(value, f"column {key!a}, row {row}")
            raise
    else:
        raise PlanError(
            f"a table is a pandas DataFrame or a list of dicts, got {type(data).__name__}"
        )
    columns = list(frame.columns)
    if any(not isinstance(c, str) for c in columns):
        raise PlanError(f"column names must be strings, got {columns}")
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise PlanError(
            f"the table has duplicate column names {duplicates}; rename them (a tuple has"
            " one value per column name)"
        )
    for column in columns:
        check_text(column, f"column name {column!r}")
        if not column or "\n" in column or "\r" in column:
            raise PlanError(
                f"column name {column!r} must be a non-empty name on one line (it heads"
                " its value in prompts as [column])"
            )
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
        if not isinstance(name, str) or not name:
            raise PlanError(f"a table name is a non-empty string, got {name!r}")
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
        return self.apply(_build("sem_filter", SemFilter, instruction, **kwargs))

    def sem_map(self, instruction: str, output_column: str, **kwargs: Any) -> Table:
        return self.apply(_build("sem_map", SemMap, instruction, output_column, **kwargs))

    def sem_extract(self, instruction: str, fields: list[str], **kwargs: Any) -> Table:
        return self.apply(_build("sem_extract", SemExtract, instruction, fields, **kwargs))

    def sem_classify(
        self, instruction: str, labels: list[str], output_column: str = "label", **kwargs: Any
    ) -> Table:
        return self.apply(
            _build("sem_classify", SemClassify, instruction, labels, output_column, **kwargs)
        )

    def sem_join(
        self,
        right: Table | pd.DataFrame,
        instruction: str,
        *,
        index: IndexJoin | None = None,
        **kwargs: Any,
    ) -> Table:
        """Cartesian product with ``right`` (or its index candidates), then a predicate."""
        if "thresholds" in kwargs:
            raise PlanError(
                "sem_join: give the cascade thresholds as index=IndexJoin(...,"
                " accept_below=..., reject_above=...)"
            )
        product = CartesianProduct(right, index)  # validates the index first
        thresholds = index.thresholds() if index is not None else None
        predicate = _build("sem_join", JoinPredicate, instruction, thresholds=thresholds, **kwargs)
        return self.apply(product, predicate)

    def index_search(
        self, corpus: Sequence[str] | pd.Series, query: str, k: int, output_column: str = "evidence"
    ) -> Table:
        return self.apply(IndexSearch(corpus, query, k, output_column))

    def sem_topk(self, instruction: str, k: int) -> Table:
        return self.apply(SemTopK(instruction, k))

    def sem_agg(self, instruction: str, output_column: str = "aggregate", **kwargs: Any) -> Table:
        return self.apply(_build("sem_agg", SemAgg, instruction, output_column, **kwargs))

    def map(self, fn: Callable[[dict[str, Any]], Any], output_column: str) -> Table:
        return self.apply(PyMap(fn, output_column))

    def filter(self, predicate: Callable[[dict[str, Any]], bool]) -> Table:
        return self.apply(PyFilter(predicate))

    # ---- inspecting and running -----------------------------------------------------
    def to_spec(self, *, source_format: SourceFormat = "rows") -> TableSpec:
        """The plan as data (:class:`~kalypso.query.spec.TableSpec`; ``model_dump_json()``
        is what travels, :func:`~kalypso.query.spec.table_from_spec` rebuilds it). Tables
        (the source, a join's right table) travel as JSON rows, or as base64 Parquet with
        ``source_format="parquet"``.

        Raises:
            PlanError: naming the operator and the fix, for a step that cannot travel (a
                custom operator, a ``map``/``filter`` function not registered with
                ``kalypso.register_function``), or rows JSON cannot carry.
        """
        from kalypso.query.spec import table_spec

        return table_spec(self, source_format)

    def physical_plan(self) -> PhysicalPlan:
        return plan(self._operators, self._name, len(self._source), tuple(self._source.columns))

    def explain(self, engine: Engine | None = None) -> str:
        """Pipelines, stages and operators with their contracts; with ``engine``, first
        the engine and what a step costs on it (the cost model the policies weigh their
        options with: :mod:`kalypso.engine.cost_model`)."""
        text = explain(self.physical_plan())
        if engine is None:
            return text
        model = engine.cost_model
        cost = model.explain() if model is not None else "none (the widest options)"
        return f"engine {engine.name}: cost model {cost}\n{text}"

    def prepare(self) -> Table:
        """Build the plan's vector indexes (and load the embedding model) now instead of on
        the first tuple that needs them; returns the plan. Indexes are shared by every plan
        over the same texts, so this is done once per process. Benchmarks call it before
        timing so that no policy pays the one-off work."""
        for operator in self._operators:
            operator.prepare()
        return self

    def task_graphs(self, engine: Engine, *, policy: str = "adaptive") -> list[TaskGraph]:
        """The plan lowered to the core's task graph, one per pipeline (``explain()`` on
        each renders it): what :meth:`arun` will run with ``engine``'s chat template."""
        options = RunOptions(policy=policy)
        context = LoweringContext(options.system_prompt, ChatLayout(engine.tokenizer))
        operator_at_a_time = options.resolved_policy().operator_at_a_time
        lowered = lower(self.physical_plan(), context, operator_at_a_time=operator_at_a_time)
        return [p.graph for p in lowered]

    async def arun(
        self,
        engine: Engine | ReplicaSet,
        options: RunOptions | None = None,
        *,
        ledger: KVLedger | None = None,
        layout: ChatLayout | None = None,
        result_cache: PromptResultCache | None = None,
        hooks: RunHooks | None = None,
        **option_values: Any,
    ) -> QueryResult:
        """Run the plan on ``engine`` (async). See :meth:`run`.

        ``layout`` is the chat layout prompts are built with (default: a new one for the
        engine's tokenizer). Pass one to share its memoized message boundaries and static
        texts between runs on one engine; its ``builds`` counter counts the prompts built
        (each call's prompt is built exactly once, its continuations reuse it).
        ``result_cache`` answers a greedy call whose exact prompt an earlier run sharing
        the cache sent (default: none, every call is sent). ``hooks`` attach a journal of
        calls and a progress listener (:mod:`kalypso.core.hooks`; the job server's)."""
        if "max_retries" in option_values:
            raise PlanError(
                "arun: max_retries is now max_continuations (a call that reaches its"
                " output bound is continued, not retried from scratch)"
            )
        options = run_options(options, option_values)
        for name in ("alpha", "beta", "near_tie_margin", "deadlock_check_s"):
            if not math.isfinite(getattr(options, name)):
                raise PlanError(f"{name} must be a finite number, got {getattr(options, name)!r}")
        if isinstance(engine, ReplicaSet):
            if ledger is not None or layout is not None or result_cache is not None:
                raise PlanError(
                    "a run on a replica set takes no ledger, layout or result_cache: each"
                    " replica has its own"
                )
            from kalypso.query.replicated import arun_replicated

            return await arun_replicated(self, engine, options, hooks)
        if engine is None or isinstance(engine, type) or not isinstance(engine, Engine):
            raise PlanError(
                f"arun needs an engine (kalypso.engine.protocol.Engine), got {engine!r}"
            )
        if ledger is not None and not isinstance(ledger, KVLedger):
            raise PlanError(f"ledger must be a KVLedger, got {ledger!r}")
        if layout is not None and (
            not isinstance(layout, ChatLayout) or layout.tokenizer is not engine.tokenizer
        ):
            raise PlanError(
                f"layout must be a ChatLayout of the engine's own tokenizer, got {layout!r}"
            )
        done, state, physical, started = await self._execute(
            engine, options, ledger, layout, result_cache, hooks
        )
        result = self._result(done, state, physical, started)
        logger.info("query %s done: %s", state.owner, result.report())
        return result

    async def _execute(
        self,
        engine: Engine,
        options: RunOptions,
        ledger: KVLedger | None,
        layout: ChatLayout | None,
        result_cache: PromptResultCache | None,
        hooks: RunHooks | None,
        rows: Sequence[int] | None = None,
    ) -> tuple[Execution, RunState, PhysicalPlan, float]:
        """Run the plan over the input rows numbered ``rows`` (default: all), each keeping
        its number as its instance key; what the run produced and its state.

        Raises:
            PlanError, QueryError: as :meth:`run` (``error.partial`` a QueryResult).
        """
        options = options.with_default_policy(RELATIONAL_POLICY)
        policy = options.resolved_policy()
        physical = self.physical_plan()
        owner = options.query_id or f"q{uuid.uuid4().hex[:8]}"
        state = RunState.create(
            engine, options, owner, ledger, policy, layout, result_cache=result_cache, hooks=hooks
        )
        try:
            state.register_owner()
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        for planned in physical.operators():
            state.stats_for(planned.op_id)
        if rows is None:
            instances = input_instances(self._source.to_dict("records"))
        else:  # only these rows converted: a replica's chunk of a large table
            picked = self._source.iloc[list(rows)].to_dict("records")
            instances = input_instances(picked, rows)
        started = time.monotonic()
        logger.info(
            "query %s: %d rows, %d operators, policy %s, on %s",
            owner,
            len(instances),
            len(self._operators),
            policy.name,
            engine.name,
        )

        try:
            with ProgressView(
                enabled=options.progress,
                hit_rate=state.cache_tokens,
                listener=state.hooks.on_progress,
            ) as view:
                done = await execute(physical, instances, state, on_update=view.update)
        except QueryError as error:
            if isinstance(error.partial, Execution):
                error.partial = self._result(error.partial, state, physical, started)
            raise
        finally:
            state.ledger.unregister(owner)
        return done, state, physical, started

    def _result(
        self, done: Execution, state: RunState, physical: PhysicalPlan, started: float
    ) -> QueryResult:
        return query_result(
            done,
            physical,
            tuple(state.stats.values()),
            state.decisions,
            state.options,
            state.engine.name,
            started,
        )

    def run(
        self, engine: Engine | ReplicaSet, options: RunOptions | None = None, **kwargs: Any
    ) -> QueryResult:
        """Run the plan on ``engine`` and return the output table with statistics.

        ``engine`` may be a :class:`~kalypso.core.replicas.ReplicaSet`: each row's pipeline
        then runs on one replica, and the table equals the one-engine run's
        (:mod:`kalypso.query.replicated`; a plan with ``sem_topk`` or ``sem_agg`` is
        refused there).

        Options (a :class:`~kalypso.core.options.RunOptions`, or its fields as keywords):
        ``policy`` (``"adaptive"`` by default; see :mod:`kalypso.core.policies`),
        ``pinning``, ``max_tasks_in_flight``, ``max_continuations``, ``alpha``/``beta``,
        ``estimate_bounds``, ``fixed_bound_tokens``, ``call_timeout_s``,
        ``near_tie_margin``, ``system_prompt``, ``query_id``, ``progress``. ``ledger=``
        shares one :class:`~kalypso.core.ledger.KVLedger` between runs on one engine;
        ``layout=`` one :class:`~kalypso.core.prompt.ChatLayout` (see :meth:`arun`).

        Raises:
            PlanError: before any LLM call, for bad options, values that cannot enter a
                prompt, or prompts that cannot fit.
            QueryError: the run failed after it started (the engine failed or timed out,
                a Python step raised). Everything it held is released; ``error.partial``
                is a :class:`QueryResult` of the rows that had completed the whole plan.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(engine, options, **kwargs))
        raise PlanError(
            "Table.run() was called inside a running event loop; use `await plan.arun(engine)`"
        )


def query_result(
    done: Execution,
    physical: PhysicalPlan,
    operator_stats: tuple[OperatorStats, ...],
    decisions: Sequence[tuple[str, tuple[int, ...], str, float]],
    options: RunOptions,
    engine_name: str,
    started: float,
) -> QueryResult:
    """The result of a run that produced ``done`` (its instances in key order)."""
    frame = pd.DataFrame(
        [[i.values.get(c) for c in physical.output_schema] for i in done.instances],
        columns=list(physical.output_schema),
    )
    return QueryResult(
        frame=frame,
        stats=stats_frame(list(operator_stats)),
        policy=options.resolved_policy().name,
        engine=engine_name,
        time_s=time.monotonic() - started,
        operator_stats=operator_stats,
        pipeline_reports=tuple(done.reports),
        decisions=tuple(
            Decision(op, key, choice, margin)
            for op, key, choice, margin in sorted(decisions, key=lambda d: (d[0], d[1]))
        ),
        near_tie_margin=options.near_tie_margin,
        longest_chain_tokens=done.longest_chain_tokens,
    )


def table(data: pd.DataFrame | Sequence[dict[str, Any]], name: str = "table") -> Table:
    """Start a plan over ``data`` (a DataFrame or a list of dicts)."""
    return Table(data, name)
