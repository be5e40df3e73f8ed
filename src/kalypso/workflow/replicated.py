"""Workflows run over a replica set (:mod:`kalypso.core.replicas`): each query's calls on
one replica, the outputs merged in query order.

The queries are the units, weighted by the length of their inputs. Queries that share an
input value with other queries (a context several questions are asked about) share that
prefix: the value of the longest input that repeats in the batch is their affinity key,
so they run on one replica. Each chunk is an ordinary run (:func:`~kalypso.workflow.run.arun`
with ``queries=``) on its replica's engine and ledger, the queries keeping their positions
as keys. The outputs equal the one-engine run's; the statistics are summed over the
chunks, the bounds (longest chain, least decode steps) are the largest of any chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from kalypso.core.errors import PlanError
from kalypso.core.hooks import RunHooks
from kalypso.core.options import RunOptions, run_options
from kalypso.core.placement import Unit
from kalypso.core.replicas import ChunkUnits, Replica, ReplicaSet
from kalypso.core.stats import OperatorStats, merged_stats, stats_frame
from kalypso.core.warm import WarmReport
from kalypso.workflow.dsl import Workflow
from kalypso.workflow.plan import DEFAULT_SYSTEM, WorkflowOptions

if TYPE_CHECKING:
    from kalypso.workflow.run import WorkflowResult

logger = logging.getLogger(__name__)


def query_units(inputs: Mapping[str, Sequence[Any]] | pd.DataFrame) -> list[Unit]:
    """One unit per query: weighted by its inputs' characters, keyed by its value of the
    longest input among those that repeat across the batch (the context several queries
    share; None when no input repeats)."""
    columns = (
        {str(c): list(inputs[c]) for c in inputs.columns}
        if isinstance(inputs, pd.DataFrame)
        else {name: list(values) for name, values in inputs.items()}
    )
    if not columns:
        raise PlanError("the batch has no inputs")
    size = len(next(iter(columns.values())))
    repeating = [name for name, values in columns.items() if len(set(map(str, values))) < size]
    context = max(repeating, key=lambda name: sum(len(str(v)) for v in columns[name]), default=None)
    units = []
    for q in range(size):
        key = str(columns[context][q]) if context is not None else None
        weight = 1.0 + sum(len(str(values[q])) for values in columns.values())
        units.append(Unit(q, affinity=key, weight=weight))
    return units


async def arun_replicated(
    workflows: Workflow | Sequence[Workflow],
    replicas: ReplicaSet,
    inputs: Mapping[str, Sequence[Any]] | pd.DataFrame,
    options: RunOptions | None,
    workflow_options: WorkflowOptions | None,
    hooks: RunHooks | None,
    option_values: dict[str, Any],
) -> WorkflowResult:
    """Run ``workflows`` on ``replicas`` (see the module docstring).

    Raises:
        PlanError: as a one-engine run, before any call.
        QueryError: a chunk failed for the run's own reason (``partial``: that chunk's
            finished queries).
        ReplicaSetError: every replica failed.
    """
    from kalypso.workflow.run import WorkflowResult, arun

    started = time.monotonic()
    base = run_options(options, option_values, system_prompt=DEFAULT_SYSTEM)
    owner = base.query_id or "w"
    merged = hooks.merged() if hooks is not None else None  # the chunks' progress summed
    counter = iter(range(1 << 62))

    async def run_chunk(replica: Replica, units: ChunkUnits) -> WorkflowResult:
        chunk_id = f"{owner}.r{replica.number}.c{next(counter)}"
        chunk = replace(base, query_id=chunk_id, progress=False)
        chunk_hooks = merged.for_run(chunk_id) if merged is not None else RunHooks()
        try:
            return await arun(
                workflows,
                replica.engine,
                inputs,
                chunk,
                workflow_options=workflow_options,
                ledger=replica.ledger,
                hooks=replace(chunk_hooks, chunk=units.link),  # queries not started may go
                queries=[unit.index for unit in units],
            )
        except BaseException:
            if merged is not None:
                merged.drop_run(chunk_id)  # its queries are run again (or the run fails)
            raise

    units = query_units(inputs)
    logger.info("workflow %s: %d queries on %d replicas", owner, len(units), len(replicas.replicas))
    chunks = await replicas.map_units(units, run_chunk)
    rows: list[tuple[int, pd.DataFrame]] = []
    for chunk in chunks:
        frame = chunk.value.outputs
        for position, unit in enumerate(chunk.units):
            rows.append((unit.index, frame.iloc[[position]]))
    outputs = pd.concat([row for _, row in sorted(rows, key=lambda r: r[0])], ignore_index=True)
    results = [chunk.value for chunk in chunks]
    by_operator: dict[str, list[OperatorStats]] = {}
    for result in results:
        for stats in result.operator_stats:
            by_operator.setdefault(stats.operator, []).append(stats)
    operator_stats = tuple(merged_stats(parts) for parts in by_operator.values())
    warms = [r.warm for r in results if r.warm is not None]
    first = results[0]
    return WorkflowResult(
        outputs=outputs,
        stats=stats_frame(list(operator_stats)),
        operator_stats=operator_stats,
        policy=first.policy,
        engine=f"{len(replicas.replicas)} replicas of {replicas.replicas[0].engine.name}",
        time_s=time.monotonic() - started,
        report=first.report,
        rewrites=first.rewrites,
        cache=None,
        warm=(
            WarmReport(
                prefixes=sum(w.prefixes for w in warms),
                tokens=sum(w.tokens for w in warms),
                cached_tokens=sum(w.cached_tokens for w in warms),
                failed=sum(w.failed for w in warms),
            )
            if warms
            else None
        ),
        planning_s=sum(r.planning_s for r in results),
        longest_chain_tokens=max(r.longest_chain_tokens for r in results),
        held_block_steps=max(r.held_block_steps for r in results),
        least_decode_steps=max(r.least_decode_steps for r in results),
    )
