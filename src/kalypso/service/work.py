"""What a job runs: a plan or workflow (a :class:`~kalypso.jobspec.JobSpec`), or an
OpenAI-format batch file. Either way it runs on the server's engine and shared ledger with
the job's hooks, or over its replica set (a plan with a blocking operator on the first
live replica), and gives a :class:`JobOutput`: a result table, or a batch's output and
error files. A run that fails raises :class:`JobFailed` with what it had completed."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kalypso.batch import arun_batch
from kalypso.core.errors import QueryError
from kalypso.core.hooks import RunHooks
from kalypso.core.ledger import KVLedger
from kalypso.core.options import RunOptions
from kalypso.core.prompt import ChatLayout
from kalypso.core.replicas import ReplicaSet, ReplicaSetError
from kalypso.engine.protocol import Engine
from kalypso.jobspec import JobSpec, from_spec
from kalypso.query import QueryResult, Table
from kalypso.query.replicated import blocking_operators
from kalypso.workflow import WorkflowResult
from kalypso.workflow import arun as run_workflow

logger = logging.getLogger(__name__)


@dataclass
class JobOutput:
    """A job's result: a table (plans and workflows) or files (batches: ``output`` and,
    when a line failed, ``errors``), and a batch's answered and failed lines."""

    frame: pd.DataFrame | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


class JobFailed(Exception):
    """The run failed after it started; ``partial`` is what it had completed."""

    def __init__(self, cause: QueryError, partial: JobOutput) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.partial = partial


@dataclass(frozen=True)
class Shared:
    """What every job on the server shares: the engine, its ledger and chat layout; on
    several engines, the replica set over them (``engine`` and ``ledger`` are then its
    first replica's)."""

    engine: Engine
    ledger: KVLedger
    layout: ChatLayout
    replicas: ReplicaSet | None = None

    def one_engine(self) -> tuple[Engine, KVLedger]:
        """The engine and ledger for a run that needs all its rows in one place: the
        first live replica's.

        Raises:
            ReplicaSetError: no replica is alive.
        """
        if self.replicas is None:
            return self.engine, self.ledger
        live = self.replicas.live
        if not live:
            raise ReplicaSetError("no replica of the set is alive")
        return live[0].engine, live[0].ledger


def _frame_of(result: QueryResult | WorkflowResult | Any) -> pd.DataFrame | None:
    if isinstance(result, QueryResult):
        return result.frame
    if isinstance(result, WorkflowResult):
        return result.outputs
    return None


async def run_plan(
    spec: JobSpec, shared: Shared, hooks: RunHooks, options: dict[str, Any]
) -> JobOutput:
    """The spec's plan or workflow (built again here: PlanError if it no longer builds),
    with the spec's run options and ``options`` (the server's: the query id, the
    priority)."""
    plan = from_spec(spec.plan)
    options = {**spec.options.run_options(), **options}
    replicas = shared.replicas
    try:
        if isinstance(plan, Table):
            if replicas is not None and not blocking_operators(plan):
                result: QueryResult | WorkflowResult = await plan.arun(
                    replicas, hooks=hooks, **options
                )
            else:
                engine, ledger = shared.one_engine()
                layout = shared.layout if replicas is None else None
                result = await plan.arun(
                    engine, ledger=ledger, layout=layout, hooks=hooks, **options
                )
        elif replicas is not None:
            assert spec.inputs is not None  # JobSpec requires a workflow's inputs
            result = await run_workflow(plan, replicas, spec.inputs, hooks=hooks, **options)
        else:
            assert spec.inputs is not None
            result = await run_workflow(
                plan, shared.engine, spec.inputs, ledger=shared.ledger, hooks=hooks, **options
            )
    except QueryError as error:
        raise JobFailed(error, JobOutput(frame=_frame_of(error.partial))) from error
    return JobOutput(frame=_frame_of(result))


async def run_batch_file(
    content: bytes, shared: Shared, hooks: RunHooks, options: dict[str, Any]
) -> JobOutput:
    """An OpenAI-format batch file's lines, answered in input order. The file is written to
    a temporary folder of the server's own (no client path is ever read)."""
    with tempfile.TemporaryDirectory(prefix="kalypso-batch-") as folder:
        source, target = Path(folder) / "input.jsonl", Path(folder) / "output.jsonl"
        errors = Path(folder) / "errors.jsonl"
        source.write_bytes(content)
        try:
            result = await arun_batch(
                source,
                target,
                shared.replicas or shared.engine,
                error_path=errors,
                options=RunOptions(**options),
                ledger=shared.ledger if shared.replicas is None else None,
                hooks=hooks,
            )
        except QueryError as error:
            partial = target.with_name(target.name + ".part")
            files = {"output": partial.read_bytes()} if partial.exists() else {}
            raise JobFailed(error, JobOutput(files=files)) from error
        files = {"output": target.read_bytes()}
        if errors.exists():
            files["errors"] = errors.read_bytes()
        return JobOutput(
            files=files, counts={"completed": result.answered, "failed": result.failed}
        )
