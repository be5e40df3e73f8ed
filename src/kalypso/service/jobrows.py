"""Job rows as the API creates and changes them (each change committed with its event)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kalypso.jobspec import JobSpec
from kalypso.service import states
from kalypso.service.db import EventRow, JobRow, utcnow
from kalypso.service.tokens import Caller


def caller_at_limit(session: Session, caller: Caller) -> bool:
    """Whether the caller already has its limit of unfinished jobs."""
    unfinished = session.scalar(
        select(func.count())
        .select_from(JobRow)
        .where(JobRow.token_id == caller.token_id, JobRow.status.in_(states.ACTIVE))
    )
    return (unfinished or 0) >= caller.max_running_jobs


def insert_job(session: Session, caller: Caller, spec: JobSpec, total: int) -> JobRow | None:
    """The new job, or None when the caller is at its limit of unfinished jobs."""
    return insert_row(
        session,
        caller,
        job_id=f"job_{uuid.uuid4().hex[:24]}",
        kind=spec.kind,
        spec=spec.model_dump(mode="json"),
        total=total,
        metadata=dict(spec.metadata),
    )


def insert_row(
    session: Session,
    caller: Caller,
    *,
    job_id: str,
    kind: str,
    spec: dict[str, Any],
    total: int,
    metadata: dict[str, str],
) -> JobRow | None:
    """A new job row of ``kind`` (a plan, a workflow, a batch) with ``total`` requests,
    validating, and its first status event, committed; None when the caller is at its
    limit of unfinished jobs."""
    if caller_at_limit(session, caller):
        return None
    row = JobRow(
        id=job_id,
        token_id=caller.token_id,
        kind=kind,
        spec=spec,
        status=states.VALIDATING,
        created_at=utcnow(),
        cancel_requested=False,
        requests_total=total,
        runs=0,
        progress={},
        errors=[],
        result_partial=False,
        metadata_=metadata,
    )
    session.add(row)
    session.flush()  # the job before its event (no ORM relationship orders them)
    session.add(
        EventRow(job_id=row.id, type="status", data={"status": row.status}, created_at=utcnow())
    )
    session.commit()
    return row


def mark_cancelling(session: Session, job_id: str) -> None:
    row = session.get(JobRow, job_id)
    if row is None or row.status in states.FINAL:
        return
    row.cancel_requested = True
    row.status = states.CANCELLING
    session.add(
        EventRow(job_id=job_id, type="status", data={"status": row.status}, created_at=utcnow())
    )
    session.commit()
