"""OpenAI's Files and Batch APIs on the job server: ``/v1/files`` and ``/v1/batches``,
over :func:`kalypso.batch.arun_batch`, so that code written for OpenAI's batches (the
``openai`` client's ``files.create``, ``batches.create``, ``batches.retrieve``,
``files.content``) runs against Kalypso with only its base URL and key changed.

A batch is a job (kind ``batch``): it shares the engine, the journal and resume, fair
sharing, cancellation and the states of every job, and ``/v1/jobs`` lists it too. Its
answers and failed lines become files (``output_file_id``, ``error_file_id``).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request, UploadFile
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from kalypso.batch.reader import BatchFileError, check_file
from kalypso.service import states
from kalypso.service.batch_store import BatchSpec, batch_object, file_object
from kalypso.service.bodies import json_body
from kalypso.service.database import Database
from kalypso.service.db import FileRow, JobRow, utcnow
from kalypso.service.deps import CallerDep, request_cancel, start_job
from kalypso.service.errors import ApiError, validation_response
from kalypso.service.jobrows import insert_row
from kalypso.service.tokens import Caller

MAX_FILENAME_CHARS = 255


def _check_batch_file(content: bytes) -> int:
    """The file's request count; BatchFileError (line and field named) if it cannot run."""
    with tempfile.TemporaryDirectory(prefix="kalypso-check-") as folder:
        path = Path(folder) / "input.jsonl"
        path.write_bytes(content)
        return check_file(path).requests


def batch_routes(app: FastAPI, database: Database, max_request_bytes: int) -> None:
    """Add ``/v1/files`` and ``/v1/batches`` to ``app``."""

    async def own_file(file_id: str, caller: Caller) -> FileRow:
        row = await database.run(lambda s: s.get(FileRow, file_id))
        if row is None or row.token_id != caller.token_id:
            raise ApiError(404, "file_not_found", f"no file {file_id!r}", param="file_id")
        return row

    async def own_batch(batch_id: str, caller: Caller) -> JobRow:
        row = await database.run(lambda s: s.get(JobRow, batch_id))
        if row is None or row.token_id != caller.token_id or row.kind != "batch":
            raise ApiError(404, "batch_not_found", f"no batch {batch_id!r}", param="batch_id")
        return row

    @app.post("/v1/files", tags=["batches"])
    async def upload_file(
        caller: CallerDep, file: UploadFile, purpose: Annotated[str, Form()]
    ) -> dict[str, Any]:
        """Upload a batch input file (``purpose=batch``), as OpenAI's Files API."""
        if purpose != "batch":
            raise ApiError(422, "invalid_purpose", "purpose must be 'batch'", param="purpose")
        content = await file.read(max_request_bytes + 1)
        if len(content) > max_request_bytes:
            raise ApiError(413, "request_too_large", f"the file is over {max_request_bytes} bytes")
        name = Path(file.filename or "input.jsonl").name[:MAX_FILENAME_CHARS] or "input.jsonl"
        row = FileRow(
            id=f"file-{uuid.uuid4().hex[:24]}",
            token_id=caller.token_id,
            purpose=purpose,
            filename=name,
            size_bytes=len(content),
            created_at=utcnow(),
            content=content,
        )

        def insert(session: Session) -> FileRow:
            session.add(row)
            session.commit()
            return row

        return file_object(await database.run(insert))

    @app.get("/v1/files", tags=["batches"])
    async def list_files(caller: CallerDep) -> dict[str, Any]:
        def mine(session: Session) -> list[FileRow]:
            query = select(FileRow).where(FileRow.token_id == caller.token_id)
            return list(session.scalars(query.order_by(FileRow.created_at.desc())))

        return {"object": "list", "data": [file_object(r) for r in await database.run(mine)]}

    @app.get("/v1/files/{file_id}", tags=["batches"])
    async def get_file(file_id: str, caller: CallerDep) -> dict[str, Any]:
        return file_object(await own_file(file_id, caller))

    @app.get("/v1/files/{file_id}/content", tags=["batches"], response_class=Response)
    async def get_file_content(file_id: str, caller: CallerDep) -> Response:
        row = await own_file(file_id, caller)
        return Response(row.content, media_type="application/jsonl")

    @app.post("/v1/batches", tags=["batches"])
    async def create_batch(request: Request, caller: CallerDep) -> Any:
        """Start a batch over an uploaded file, as OpenAI's Batch API; the file is checked
        now (422 naming the line and field)."""
        document = await json_body(request, max_request_bytes)
        try:
            spec = BatchSpec.model_validate(document)
        except ValidationError as exc:
            return validation_response(list(exc.errors()), "invalid_batch")
        source = await own_file(spec.input_file_id, caller)
        if source.purpose != "batch":
            raise ApiError(
                422,
                "invalid_file",
                "the input file's purpose is not 'batch'",
                param="input_file_id",
            )
        try:
            total = await asyncio.to_thread(_check_batch_file, source.content)
        except BatchFileError as exc:
            raise ApiError(422, "invalid_batch_file", str(exc), param="input_file_id") from None
        row = await start_job(request, caller, lambda s: _insert_batch(s, caller, spec, total))
        return batch_object(row)

    @app.get("/v1/batches", tags=["batches"])
    async def list_batches(caller: CallerDep, limit: int = 20) -> dict[str, Any]:
        def mine(session: Session) -> list[JobRow]:
            query = select(JobRow).where(JobRow.token_id == caller.token_id, JobRow.kind == "batch")
            return list(
                session.scalars(query.order_by(JobRow.created_at.desc()).limit(min(limit, 100)))
            )

        rows = await database.run(mine)
        data = [batch_object(r) for r in rows]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": False,
        }

    @app.get("/v1/batches/{batch_id}", tags=["batches"])
    async def get_batch(batch_id: str, caller: CallerDep) -> dict[str, Any]:
        return batch_object(await own_batch(batch_id, caller))

    @app.post("/v1/batches/{batch_id}/cancel", tags=["batches"])
    async def cancel_batch(batch_id: str, caller: CallerDep, request: Request) -> dict[str, Any]:
        row = await own_batch(batch_id, caller)
        if row.status not in states.FINAL:
            await request_cancel(request, batch_id)
            row = await own_batch(batch_id, caller)
        return batch_object(row)


def _insert_batch(session: Session, caller: Caller, spec: BatchSpec, total: int) -> JobRow | None:
    return insert_row(
        session,
        caller,
        job_id=f"batch_{uuid.uuid4().hex[:24]}",
        kind="batch",
        spec={"batch": spec.model_dump(mode="json")},
        total=total,
        metadata=dict(spec.metadata or {}),
    )
