"""The API's job object, as OpenAI's batch object reads (times in Unix seconds)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from kalypso.service import states
from kalypso.service.db import JobRow


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class JobObject(BaseModel):
    id: str
    object: str = "job"
    kind: str
    status: str
    created_at: int
    in_progress_at: int | None
    completed_at: int | None
    failed_at: int | None
    cancelled_at: int | None
    expired_at: int | None
    cancelling: bool
    request_counts: RequestCounts
    progress: dict[str, Any]
    """Per stage: done, waiting, running, budget and KV blocks; for the job: calls (those
    the engine answered and those the journal did), prompt and prefill tokens, the prefix
    hit rate, the KV blocks it holds and KV use over time."""
    errors: list[dict[str, Any]]
    result_rows: int | None
    result_partial: bool
    runs: int
    """How often its run started (more than once after a resume)."""
    metadata: dict[str, Any]


class JobList(BaseModel):
    object: str = "list"
    data: list[JobObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


def unix_s(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # SQLite returns naive UTC
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def job_object(row: JobRow, live: dict[str, Any] | None = None) -> JobObject:
    """``row`` as the API shows it; ``live`` is a running job's newest progress."""
    finished = unix_s(row.finished_at)
    completed = row.requests_total if row.status == states.COMPLETED else 0
    failed = row.requests_total if row.status == states.FAILED else 0
    return JobObject(
        id=row.id,
        kind=row.kind,
        status=row.status,
        created_at=unix_s(row.created_at) or 0,
        in_progress_at=unix_s(row.in_progress_at),
        completed_at=finished if row.status == states.COMPLETED else None,
        failed_at=finished if row.status == states.FAILED else None,
        cancelled_at=finished if row.status == states.CANCELLED else None,
        expired_at=finished if row.status == states.EXPIRED else None,
        cancelling=row.cancel_requested and row.status not in states.FINAL,
        request_counts=RequestCounts(total=row.requests_total, completed=completed, failed=failed),
        progress=live if live is not None else dict(row.progress),
        errors=list(row.errors),
        result_rows=row.result_rows,
        result_partial=row.result_partial,
        runs=row.runs,
        metadata=dict(row.metadata_),
    )
