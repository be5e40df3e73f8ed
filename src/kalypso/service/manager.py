"""Running jobs: every job's plan or workflow on the server's engine, all sharing one
:class:`~kalypso.core.ledger.KVLedger` and one chat layout. A server on several engines
(replicas) keeps one such ledger per engine, shared by every job's chunks on it, and runs
each job over the replica set (:mod:`kalypso.core.replicas`).

A job's life (states from :mod:`kalypso.service.states`): submitted ``validating``;
``in_progress`` once its run starts; ``finalizing`` while its result is stored;
``completed``. A run that fails ends ``failed`` with the rows that had finished the whole
plan as a partial result. A cancel request makes it ``cancelling``, and ``cancelled`` once
its run has stopped and released everything it held. A job that outlives its
``completion_window_s`` ends ``expired`` in the same way.

Every call the engine answers is journaled (:mod:`kalypso.service.journal`). When the
server stops (or dies), its unfinished jobs stay ``in_progress`` in the database;
:meth:`JobManager.resume` starts them again on the next start, and their journaled calls
are answered from the journal instead of the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from kalypso.core.errors import PlanError
from kalypso.core.hooks import RunHooks
from kalypso.core.ledger import KVLedger
from kalypso.core.prompt import ChatLayout
from kalypso.core.replicas import ReplicaSet, ReplicaSetError
from kalypso.engine.protocol import Engine, EngineCapacity, EngineError
from kalypso.jobspec import JobSpec
from kalypso.service import states
from kalypso.service.batch_store import BatchSpec, file_content, store_batch_files
from kalypso.service.database import Database
from kalypso.service.db import EventRow, JobRow, utcnow
from kalypso.service.frames import to_parquet_bytes
from kalypso.service.journal import DatabaseJournal
from kalypso.service.progress import LiveProgress
from kalypso.service.work import JobFailed, JobOutput, Shared, run_batch_file, run_plan

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5

URGENT_RESERVE_PARTS = 8
"""An eighth of the engine's KV blocks is kept for a smaller job's arrival (the ledger's
``urgent_reserve_blocks``)..."""

URGENT_RESERVE_MIN_TOKENS = 8192
"""...when that eighth holds at least this many tokens (several prompts); on a smaller
cache (vLLM on a CPU) none is kept: the room would not hold a new job's first tasks, and
a job alone would lose it."""


def urgent_reserve_blocks(capacity: EngineCapacity) -> int:
    """The ledger's ``urgent_reserve_blocks`` for an engine of ``capacity`` (see
    :data:`URGENT_RESERVE_PARTS`)."""
    reserve = capacity.num_blocks // URGENT_RESERVE_PARTS
    return reserve if reserve * capacity.block_size_tokens >= URGENT_RESERVE_MIN_TOKENS else 0


class JobExpired(Exception):
    """A job's completion window passed before it finished."""


@dataclass
class ServiceTotals:
    """Counters over every job this process ran (for ``/metrics``)."""

    engine_calls: int = 0
    journal_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


class JobManager:
    """Runs the server's jobs (see the module docstring). All methods run on the server's
    event loop."""

    def __init__(
        self,
        database: Database,
        engine: Engine | Sequence[Engine],
        *,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        engines = [engine] if not isinstance(engine, Sequence) else list(engine)
        if not engines:
            raise ValueError("a job server needs at least one engine")
        self.database = database
        self.engine = engines[0]
        self.ledgers = [
            KVLedger(
                one.capacity.num_blocks,
                fair_share=True,
                call_slots=one.capacity.max_running_requests or 0,
                urgent_reserve_blocks=urgent_reserve_blocks(one.capacity),
            )
            for one in engines
        ]
        self.ledger = self.ledgers[0]
        replicas = ReplicaSet(engines, ledgers=self.ledgers) if len(engines) > 1 else None
        self.shared = Shared(self.engine, self.ledger, ChatLayout(self.engine.tokenizer), replicas)
        self.totals = ServiceTotals()
        self.progress_interval_s = progress_interval_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, LiveProgress] = {}
        self._cancelled: set[str] = set()
        self._closing = False
        self._events_written = asyncio.Event()

    # ---- events ---------------------------------------------------------------------
    def events_written(self) -> asyncio.Event:
        """An event set once any job's event is next written. Take it *before* reading
        the events, then wait on it: nothing written in between is missed."""
        return self._events_written

    def notify(self) -> None:
        """Wake every reader waiting for events (call after writing one)."""
        self._events_written.set()
        self._events_written = asyncio.Event()

    # ---- what the API reads ---------------------------------------------------------
    def live(self, job_id: str) -> LiveProgress | None:
        """The running job's progress, or None when it is not running here."""
        return self._live.get(job_id)

    @property
    def running_jobs(self) -> int:
        return len(self._tasks)

    # ---- starting, cancelling, stopping ---------------------------------------------
    def start(self, job_id: str) -> None:
        """Run the job (already stored, ``validating`` or unfinished) in the background."""
        if job_id in self._tasks or self._closing:
            return
        task = asyncio.create_task(self._run(job_id), name=f"job {job_id}")
        self._tasks[job_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job_id, None))

    async def resume(self) -> list[str]:
        """Start every unfinished job in the database (after a restart); a job whose
        cancellation was asked for ends ``cancelled`` instead. Returns the jobs started."""

        def unfinished(session: Session) -> list[tuple[str, bool]]:
            rows = session.execute(
                select(JobRow.id, JobRow.cancel_requested)
                .where(JobRow.status.in_(states.ACTIVE))
                .order_by(JobRow.created_at)
            )
            return [(job_id, bool(cancel)) for job_id, cancel in rows]

        started = []
        for job_id, cancel in await self.database.run(unfinished):
            if cancel:
                await self._finish(job_id, states.CANCELLED, None, [])
            else:
                started.append(job_id)
                self.start(job_id)
        if started:
            logger.info("resuming %d unfinished jobs: %s", len(started), ", ".join(started))
        return started

    async def cancel(self, job_id: str) -> None:
        """Stop the job's run (it was marked ``cancelling``); it ends ``cancelled`` once
        its run has released everything. A job not running here ends ``cancelled`` now."""
        task = self._tasks.get(job_id)
        if task is None:
            await self._finish(job_id, states.CANCELLED, None, [])
            return
        self._cancelled.add(job_id)
        task.cancel()

    async def close(self) -> None:
        """Stop every run without changing its state (each resumes on the next start)."""
        self._closing = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- one job ----------------------------------------------------------------------
    async def _run(self, job_id: str) -> None:
        try:
            await self._run_job(job_id)
        except asyncio.CancelledError:
            if self._closing:
                raise
            await self._finish(job_id, states.CANCELLED, None, [])
        except Exception as exc:  # a bug of ours: the job fails, the server stays up
            logger.exception("job %s: unexpected error", job_id)
            await self._finish(job_id, states.FAILED, None, [_error("server_error", exc)])
        finally:
            self._cancelled.discard(job_id)

    async def _run_job(self, job_id: str) -> None:
        row = await self.database.run(lambda s: s.get(JobRow, job_id))
        if row is None or row.status in states.FINAL:
            return
        window_s: float | None
        if row.kind == "batch":
            batch = BatchSpec.model_validate(row.spec["batch"])
            content = await self.database.run(lambda s: file_content(s, batch.input_file_id))
            window_s = batch.window_s

            async def work(hooks: RunHooks, options: dict[str, Any]) -> JobOutput:
                return await run_batch_file(content, self.shared, hooks, options)
        else:
            spec = JobSpec.model_validate(row.spec)
            window_s = spec.completion_window_s

            async def work(hooks: RunHooks, options: dict[str, Any]) -> JobOutput:
                return await run_plan(spec, self.shared, hooks, options)

        journal = DatabaseJournal(self.database, job_id)
        journaled = await journal.load()
        live = LiveProgress(job_id, self.ledgers, journal.counts, time.monotonic())
        self._live[job_id] = live
        live.sample_kv(time.monotonic())
        await self._set_in_progress(job_id, journaled)
        flusher = asyncio.create_task(self._flush_progress(job_id, live))
        hooks = RunHooks(journal=journal, on_progress=live.on_progress)
        options = {"query_id": job_id, "request_priority": size_priority(row.requests_total)}
        status, output, errors = states.COMPLETED, JobOutput(), []
        try:
            async with asyncio.timeout(window_s) as window:
                output = await work(hooks, options)
        except JobFailed as failure:
            status, output = states.FAILED, failure.partial
            errors = [_error("run_failed", failure.cause)]
        except (PlanError, EngineError, ReplicaSetError) as error:
            status = states.FAILED
            errors = [
                _error("invalid_plan" if isinstance(error, PlanError) else "engine_error", error)
            ]
        except TimeoutError as error:
            if not window.expired():
                raise
            status = states.EXPIRED
            errors = [_error("expired", JobExpired(f"not finished within {window_s} s"))]
            del error
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            live.sample_kv(time.monotonic())
            self._count(journal)
        if status == states.COMPLETED:
            await self._set_status(job_id, states.FINALIZING, live)
        await self._finish(job_id, status, output, errors, live=live)
        if status == states.COMPLETED:
            await journal.compact()

    def _count(self, journal: DatabaseJournal) -> None:
        counts = journal.counts
        self.totals.engine_calls += counts.recorded_calls
        self.totals.journal_calls += counts.replayed_calls
        self.totals.prompt_tokens += counts.prompt_tokens
        self.totals.cached_tokens += counts.cached_tokens

    async def _flush_progress(self, job_id: str, live: LiveProgress) -> None:
        seen = -1
        while True:
            await asyncio.sleep(self.progress_interval_s)
            live.sample_kv(time.monotonic())
            if live.updates != seen:
                seen = live.updates
                snapshot = live.snapshot()
                await self.database.run(_store_progress(job_id, snapshot))
                self.notify()

    # ---- state changes (each one committed, with its event) --------------------------
    async def _set_in_progress(self, job_id: str, journaled_calls: int) -> None:
        def write(session: Session) -> None:
            row = session.get(JobRow, job_id)
            assert row is not None
            if not row.cancel_requested:  # a cancel that came first stays visible
                row.status = states.IN_PROGRESS
            row.runs += 1
            row.in_progress_at = row.in_progress_at or utcnow()
            data = {"status": row.status, "run": row.runs, "journaled_calls": journaled_calls}
            session.add(EventRow(job_id=job_id, type="status", data=data, created_at=utcnow()))
            session.commit()

        await self.database.run(write)
        self.notify()
        logger.info("job %s in progress (%d calls journaled)", job_id, journaled_calls)

    async def _set_status(self, job_id: str, status: str, live: LiveProgress) -> None:
        snapshot = live.snapshot()

        def write(session: Session) -> None:
            changed = session.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.cancel_requested.is_(False))
                .values(status=status, progress=snapshot)
            )
            if not getattr(changed, "rowcount", 1):
                return
            session.add(
                EventRow(job_id=job_id, type="status", data={"status": status}, created_at=utcnow())
            )
            session.commit()

        await self.database.run(write)
        self.notify()

    async def _finish(
        self,
        job_id: str,
        status: str,
        output: JobOutput | None,
        errors: list[dict[str, str]],
        *,
        live: LiveProgress | None = None,
    ) -> None:
        """Store the job's final state, result (partial unless completed) and errors, and
        its last progress (what it holds then: nothing, once its run has ended)."""
        live = self._live.pop(job_id, None) or live
        output = output or JobOutput()
        frame = output.frame
        parquet = to_parquet_bytes(frame) if frame is not None else None
        snapshot = live.snapshot() if live is not None else None
        if snapshot is not None and output.counts:
            snapshot["batch_counts"] = output.counts

        def write(session: Session) -> None:
            row = session.get(JobRow, job_id)
            if row is None or row.status in states.FINAL:
                return
            row.status = status
            row.finished_at = utcnow()
            row.errors = [*row.errors, *errors]
            if snapshot is not None:
                row.progress = snapshot
            if parquet is not None and frame is not None:
                row.result_parquet = parquet
                row.result_rows = len(frame)
                row.result_partial = status != states.COMPLETED
            if output.files:
                store_batch_files(session, row, output.files)
                row.result_partial = status != states.COMPLETED
            data: dict[str, Any] = {"status": status, "errors": errors}
            session.add(EventRow(job_id=job_id, type="status", data=data, created_at=utcnow()))
            session.commit()

        await self.database.run(write)
        self.notify()
        logger.info("job %s %s", job_id, status)


PRIORITY_PER_SIZE_CLASS = 1000
"""Far more than the priorities a policy gives its own stages, so size classes never mix."""


def size_priority(requests_total: int) -> int:
    """The engine priority of a job's requests by its size: one class per power of two of
    its rows (or queries), smaller first. Jobs of one class share the engine by the
    ledger's fair share; a larger class waits for the engine's free slots."""
    return max(requests_total, 1).bit_length() * PRIORITY_PER_SIZE_CLASS


def _store_progress(job_id: str, snapshot: dict[str, Any]) -> Callable[[Session], None]:
    def write(session: Session) -> None:
        session.execute(update(JobRow).where(JobRow.id == job_id).values(progress=snapshot))
        compact = {k: v for k, v in snapshot.items() if k != "kv_samples"}
        session.add(EventRow(job_id=job_id, type="progress", data=compact, created_at=utcnow()))
        session.commit()

    return write


def _error(code: str, exc: BaseException) -> dict[str, str]:
    return {"code": code, "message": f"{type(exc).__name__}: {exc}"}
