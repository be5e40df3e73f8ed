"""What every route depends on: the job manager, and the caller named by the request's
bearer token (401 without a valid one)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from kalypso.service.database import Database
from kalypso.service.errors import ApiError
from kalypso.service.manager import JobManager
from kalypso.service.tokens import Caller, authenticate


def manager_of(request: Request) -> JobManager:
    manager: JobManager = request.app.state.manager
    return manager


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
