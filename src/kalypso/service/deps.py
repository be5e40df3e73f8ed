"""What every route depends on: the job manager, and the caller named by the request's
bearer token (401 without a valid one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from kalypso.service.database import Database
from kalypso.service.db import JobRow
from kalypso.service.errors import ApiError
from kalypso.service.jobrows import mark_cancelling
from kalypso.service.manager import JobManager
from kalypso.service.tokens import Caller, authenticate


def manager_of(request: Request) -> JobManager:
    manager: JobManager = request.app.state.manager
    return manager


async def start_job(
    request: Request, caller: Caller, insert: Callable[[Session], JobRow | None]
) -> JobRow:
    """The row ``insert`` adds (None: the caller is at its limit of unfinished jobs, 429),
    now started by the job manager."""
    database: Database = request.app.state.database
    row = await database.run(insert)
    if row is None:
        raise ApiError(
            429,
            "too_many_jobs",
            f"token {caller.name!r} has {caller.max_running_jobs} unfinished jobs, its"
            " limit; wait for one to finish or cancel one",
            headers={"Retry-After": "5"},
        )
    manager = manager_of(request)
    manager.notify()
    manager.start(row.id)
    return row


async def request_cancel(request: Request, job_id: str) -> None:
    """Mark the job cancelling and have its run stop and release what it holds (it
    becomes ``cancelled`` then); the caller checked that it is not finished."""
    database: Database = request.app.state.database
    await database.run(lambda s: mark_cancelling(s, job_id))
    manager = manager_of(request)
    manager.notify()
    await manager.cancel(job_id)


async def caller_of(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    """The caller a request's bearer token names (401 without a valid one)."""
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise ApiError(
            401,
            "missing_token",
            "send an API token as 'Authorization: Bearer <token>'"
            " (create one with `kalypso tokens create NAME`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    database: Database = request.app.state.database
    caller = await database.run(lambda s: authenticate(s, secret.strip()))
    if caller is None:
        raise ApiError(
            401,
            "invalid_token",
            "the API token is unknown or revoked",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return caller


CallerDep = Annotated[Caller, Depends(caller_of)]
