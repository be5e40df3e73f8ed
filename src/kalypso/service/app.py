"""The job server's HTTP API (FastAPI): jobs under ``/v1`` behind bearer tokens, health,
metrics and the page.

Every ``/v1`` route needs ``Authorization: Bearer <token>`` (401 without a valid one). A
caller sees only its own jobs: another caller's job id answers 404, as an unknown one
does. A body over the size limit answers 413; a submission beyond the caller's limit of
unfinished jobs answers 429. Errors have one shape (:mod:`kalypso.service.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.orm import Session
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException

from kalypso.core.errors import PlanError
from kalypso.engine.protocol import Engine
from kalypso.jobspec import JobSpec, from_spec
from kalypso.query import Table
from kalypso.service import states
from kalypso.service.batch_files import batch_routes
from kalypso.service.bodies import json_body
from kalypso.service.database import Database
from kalypso.service.db import EventRow, JobRow
from kalypso.service.deps import CallerDep, caller_of, manager_of, request_cancel, start_job
from kalypso.service.errors import (
    ApiError,
    ErrorBody,
    on_api_error,
    on_http_error,
    on_validation_error,
    validation_response,
)
from kalypso.service.frames import from_parquet_bytes, json_records
from kalypso.service.jobrows import insert_job
from kalypso.service.manager import JobManager
from kalypso.service.metrics import metrics_text
from kalypso.service.objects import JobList, JobObject, job_object
from kalypso.service.page import page_routes
from kalypso.service.tokens import Caller

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 32 * 2**20
SSE_IDLE_CHECK_S = 1.0
"""An event stream with nothing new reads the database again after this long even when
not woken (events another process wrote)."""


@dataclass(frozen=True)
class ServiceSettings:
    """Limits of one server.

    Attributes:
        max_request_bytes: the largest request body (a job spec with its inline tables);
            larger ones answer 413.
        progress_interval_s: how often a running job's progress is stored and sent.
    """

    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    progress_interval_s: float = 0.5


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 404, 409, 413, 422, 429)
}


def create_app(
    database: Database, engine: Engine | Sequence[Engine], settings: ServiceSettings | None = None
) -> FastAPI:
    """The app serving jobs on ``engine`` (or on a replica set over several engines),
    stored in ``database``. Its lifespan starts the job manager (resuming unfinished jobs)
    and stops it; the engines and the database stay the caller's to close."""
    settings = settings or ServiceSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = JobManager(database, engine, progress_interval_s=settings.progress_interval_s)
        app.state.manager = manager
        await manager.resume()
        try:
            yield
        finally:
            await manager.close()

    app = FastAPI(
        title="Kalypso",
        summary="Semantic query plans and batch workflows as jobs on one engine",
        lifespan=lifespan,
        responses=ERRORS,
    )
    app.state.database = database
    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(ValidationError, on_validation_error)

    async def own_job(job_id: str, caller: Caller) -> JobRow:
        row = await database.run(lambda s: s.get(JobRow, job_id))
        if row is None or row.token_id != caller.token_id:
            raise ApiError(404, "job_not_found", f"no job {job_id!r}", param="job_id")
        return row

    @app.post("/v1/jobs", status_code=201, response_model=JobObject, tags=["jobs"])
    async def create_job(request: Request, caller: CallerDep) -> JobObject | Response:
        """Submit a job (a :class:`~kalypso.jobspec.JobSpec` as JSON). It is validated
        now (422 naming the field) and runs in the background."""
        document = await json_body(request, settings.max_request_bytes)
        try:
            spec = JobSpec.model_validate(document)
            requests_total = await asyncio.to_thread(_validate_plan, spec)
        except ValidationError as exc:
            return validation_response(list(exc.errors()))
        except PlanError as exc:
            raise ApiError(422, "invalid_plan", str(exc), param="plan") from None
        row = await start_job(
            request, caller, lambda s: insert_job(s, caller, spec, requests_total)
        )
        return job_object(row)

    @app.get("/v1/jobs", response_model=JobList, tags=["jobs"])
    async def list_jobs(
        caller: CallerDep,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        after: Annotated[str | None, Query(max_length=40)] = None,
    ) -> JobList:
        """The caller's jobs, newest first; ``after`` is the last id of the previous page."""
        rows = await database.run(lambda s: _page(s, caller, limit, after))
        data = [job_object(r) for r in rows[:limit]]
        return JobList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=len(rows) > limit,
        )

    @app.get("/v1/jobs/{job_id}", response_model=JobObject, tags=["jobs"])
    async def get_job(job_id: str, caller: CallerDep, request: Request) -> JobObject:
        row = await own_job(job_id, caller)
        live = manager_of(request).live(job_id)
        return job_object(row, live.snapshot() if live is not None else None)

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobObject, tags=["jobs"])
    async def cancel_job(job_id: str, caller: CallerDep, request: Request) -> JobObject:
        """Cancel the job: ``cancelling`` until its run has released everything, then
        ``cancelled``. A finished job is returned unchanged."""
        row = await own_job(job_id, caller)
        if row.status not in states.FINAL:
            await request_cancel(request, job_id)
            row = await own_job(job_id, caller)
        return job_object(row)

    @app.get("/v1/jobs/{job_id}/result", tags=["jobs"], response_model=None)
    async def get_result(
        job_id: str,
        caller: CallerDep,
        format: Annotated[Literal["json", "parquet"], Query()] = "json",
    ) -> Response | dict[str, Any]:
        """The result table (``format=parquet`` for Parquet bytes); a failed job's
        partial result (``partial`` true). 409 while none exists (a batch's result is
        its output file)."""
        row = await own_job(job_id, caller)
        if row.result_parquet is None:
            raise ApiError(
                409,
                "no_result",
                f"job {job_id} has no result (it is {row.status})",
                param="job_id",
            )
        if format == "parquet":
            return Response(
                row.result_parquet,
                media_type="application/vnd.apache.parquet",
                headers={"Kalypso-Partial": str(row.result_partial).lower()},
            )
        frame = from_parquet_bytes(row.result_parquet)
        return {
            "object": "job.result",
            "job_id": job_id,
            "status": row.status,
            "partial": row.result_partial,
            "columns": list(frame.columns),
            "rows": json_records(frame),
        }

    @app.get("/v1/jobs/{job_id}/events", tags=["jobs"], response_model=None)
    async def job_events(
        job_id: str,
        caller: CallerDep,
        request: Request,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        """Progress as Server-Sent Events (``status`` and ``progress``), ending after the
        job's final status. A reconnecting client sends ``Last-Event-ID`` and gets only
        what it missed."""
        await own_job(job_id, caller)
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
        return EventSourceResponse(_events(database, manager_of(request), job_id, after))

    @app.get("/healthz", tags=["server"])
    async def healthz(request: Request) -> dict[str, Any]:
        """200 while the database answers; the engine and the jobs running."""
        await database.run(lambda s: s.execute(text("SELECT 1")))
        manager = manager_of(request)
        return {
            "status": "ok",
            "engine": manager.engine.name,
            "replicas": len(manager.ledgers),
            "running_jobs": manager.running_jobs,
            "kv_capacity_blocks": sum(ledger.capacity_blocks for ledger in manager.ledgers),
        }

    @app.get("/metrics", tags=["server"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus: jobs by state, calls, tokens, KV blocks in use."""
        by_state = await database.run(_jobs_by_state)
        body, content_type = metrics_text(manager_of(request), by_state)
        return Response(body, media_type=content_type)

    batch_routes(app, database, settings.max_request_bytes)
    page_routes(app, caller_of)
    return app


def _validate_plan(spec: JobSpec) -> int:
    """Build the plan (raising what building raises); returns its rows or queries."""
    plan = from_spec(spec.plan)
    if isinstance(plan, Table):
        return len(plan.source)
    inputs = spec.inputs or {}
    return max((len(texts) for texts in inputs.values()), default=0)


def _page(session: Session, caller: Caller, limit: int, after: str | None) -> list[JobRow]:
    query = select(JobRow).where(JobRow.token_id == caller.token_id)
    if after is not None:
        cursor = session.get(JobRow, after)
        if cursor is None or cursor.token_id != caller.token_id:
            raise ApiError(404, "job_not_found", f"no job {after!r}", param="after")
        query = query.where(
            or_(
                JobRow.created_at < cursor.created_at,
                and_(JobRow.created_at == cursor.created_at, JobRow.id < cursor.id),
            )
        )
    order = query.order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit + 1)
    return list(session.scalars(order))


def _jobs_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(JobRow.status, func.count()).group_by(JobRow.status))
    return {status: int(count) for status, count in rows}


async def _events(
    database: Database, manager: JobManager, job_id: str, after: int
) -> AsyncIterator[dict[str, Any]]:
    """The job's events after id ``after``, as they are stored, until its final status;
    woken by the manager when one is written (and every second regardless)."""

    def newer(session: Session) -> list[EventRow]:
        query = (
            select(EventRow)
            .where(EventRow.job_id == job_id, EventRow.id > after)
            .order_by(EventRow.id)
            .limit(500)
        )
        return list(session.scalars(query))

    while True:
        written = manager.events_written()
        batch = await database.run(newer)
        for event in batch:
            after = event.id
            yield {"id": str(event.id), "event": event.type, "data": json.dumps(event.data)}
            if event.type == "status" and event.data.get("status") in states.FINAL:
                return
        if not batch:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SSE_IDLE_CHECK_S):
                    await written.wait()
