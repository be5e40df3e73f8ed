"""A plan run over a replica set (:mod:`kalypso.core.replicas`): each input row's whole
pipeline on one replica, the outputs merged in row order.

The rows are the units (weighted by the length of their text, the prompt tokens they
bring); each chunk is an ordinary run of the plan over its rows on its replica's engine
and ledger, its rows keeping their numbers as instance keys (so a journal of calls, keyed
by them, answers a chunk run again elsewhere). The result equals the run on one engine:
its rows in input order, the operators' statistics summed over the chunks.

A plan with a blocking operator (``sem_topk``, ``sem_agg``) needs all its rows in one
place and is refused: run it on one engine.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from kalypso.core.errors import PlanError
from kalypso.core.hooks import RunHooks
from kalypso.core.options import RunOptions
from kalypso.core.placement import Unit
from kalypso.core.replicas import ChunkUnits, Replica, ReplicaSet
from kalypso.core.runner import RunState
from kalypso.core.stats import OperatorStats, merged_stats
from kalypso.query.executor import Execution

if TYPE_CHECKING:
    from kalypso.query.plan import QueryResult, Table

logger = logging.getLogger(__name__)


def blocking_operators(table: Table) -> list[str]:
    """The plan's operators that need all its rows in one place (none: it runs on a
    replica set)."""
    return [p.barrier.op_id for p in table.physical_plan().pipelines if p.barrier is not None]


def row_units(table: Table) -> list[Unit]:
    """One unit per input row, weighted by the characters of its values."""
    return [
        Unit(index, weight=1.0 + sum(len(str(v)) for v in row.values()))
        for index, row in enumerate(table.source.to_dict("records"))
    ]


async def arun_replicated(
    table: Table, replicas: ReplicaSet, options: RunOptions, hooks: RunHooks | None
) -> QueryResult:
    """Run ``table`` on ``replicas`` (see the module docstring).

    Raises:
        PlanError: a blocking operator in the plan, or any check a run makes first.
        QueryError: a chunk failed for the run's own reason (``partial``: that chunk's
            completed rows).
        ReplicaSetError: every replica failed.
    """
    from kalypso.query.plan import query_result

    blocking = blocking_operators(table)
    if blocking:
        raise PlanError(
            f"a plan with a blocking operator ({', '.join(blocking)}) needs all its rows on"
            " one engine; run it with arun(engine)"
        )
    owner = options.query_id or f"q{uuid.uuid4().hex[:8]}"
    merged = hooks.merged() if hooks is not None else None  # the chunks' progress summed
    started = time.monotonic()
    chunk_numbers = iter(range(1 << 62))

    async def run_chunk(replica: Replica, units: ChunkUnits) -> tuple[Execution, RunState]:
        chunk_id = f"{owner}.r{replica.number}.c{next(chunk_numbers)}"
        chunk_options = replace(options, query_id=chunk_id, progress=False)
        chunk_hooks = merged.for_run(chunk_id) if merged is not None else RunHooks()
        try:
            done, state, _, _ = await table._execute(
                replica.engine,
                chunk_options,
                replica.ledger,
                None,
                None,
                replace(chunk_hooks, chunk=units.link),  # rows not started may be taken back
                rows=[unit.index for unit in units],
            )
        except BaseException:
            if merged is not None:
                merged.drop_run(chunk_id)  # its rows are done again (or the run fails)
            raise
        return done, state

    physical = table.physical_plan()
    logger.info(
        "query %s: %d rows on %d replicas", owner, len(table.source), len(replicas.replicas)
    )
    chunks = await replicas.map_units(row_units(table), run_chunk)
    instances = sorted(
        (i for chunk in chunks for i in chunk.value[0].instances), key=lambda i: i.key
    )
    reports = [report for chunk in chunks for report in chunk.value[0].reports]
    states = [chunk.value[1] for chunk in chunks]
    by_operator: dict[str, list[OperatorStats]] = {}
    for state in states:
        for op_id, stats in state.stats.items():
            by_operator.setdefault(op_id, []).append(stats)
    operator_stats = tuple(merged_stats(parts) for parts in by_operator.values())
    decisions = [d for state in states for d in state.decisions]
    engine_name = f"{len(replicas.replicas)} replicas of {replicas.replicas[0].engine.name}"
    chain_tokens = max((chunk.value[0].longest_chain_tokens for chunk in chunks), default=0)
    result = query_result(
        Execution(instances, reports, chain_tokens),
        physical,
        operator_stats,
        decisions,
        options,
        engine_name,
        started,
    )
    logger.info("query %s done on replicas: %s", owner, result.report())
    return result
