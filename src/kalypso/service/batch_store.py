"""A batch job's spec and files in the database (no HTTP here: the manager and the routes
both use it)."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from kalypso.service import states
from kalypso.service.db import FileRow, JobRow, utcnow
from kalypso.service.errors import ApiError
from kalypso.service.objects import unix_s

WINDOW = re.compile(r"^([1-9][0-9]{0,3})h$")


class BatchSpec(BaseModel):
    """``POST /v1/batches``' body, as OpenAI's."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1, max_length=40)
    endpoint: Literal["/v1/chat/completions", "/v1/completions"]
    completion_window: str = Field(default="24h", pattern=WINDOW.pattern)
    metadata: (
        dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None
    ) = None

    @property
    def window_s(self) -> float:
        match = WINDOW.match(self.completion_window)
        assert match is not None  # the pattern was checked
        return int(match.group(1)) * 3600.0


def file_content(session: Session, file_id: str) -> bytes:
    row = session.get(FileRow, file_id)
    if row is None:
        raise ApiError(404, "file_not_found", f"no file {file_id!r}", param="input_file_id")
    return row.content


def store_batch_files(session: Session, job: JobRow, files: dict[str, bytes]) -> None:
    """Store a batch job's output (and error) file; the job names them."""
    for kind, content in files.items():
        row = FileRow(
            id=f"file-{uuid.uuid4().hex[:24]}",
            token_id=job.token_id,
            purpose="batch_output",
            filename=f"{job.id}_{'output' if kind == 'output' else 'error'}.jsonl",
            size_bytes=len(content),
            created_at=utcnow(),
            content=content,
        )
        session.add(row)
        if kind == "output":
            job.output_file_id = row.id
        else:
            job.error_file_id = row.id


def file_object(row: FileRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "file",
        "bytes": row.size_bytes,
        "created_at": unix_s(row.created_at),
        "filename": row.filename,
        "purpose": row.purpose,
    }


def batch_object(row: JobRow) -> dict[str, Any]:
    spec = BatchSpec.model_validate(row.spec["batch"])
    finished = unix_s(row.finished_at)
    created = unix_s(row.created_at) or 0
    counts = (row.progress or {}).get("batch_counts", {})
    errors = [
        {"code": e.get("code"), "message": e.get("message"), "line": e.get("line")}
        for e in row.errors
    ]
    return {
        "id": row.id,
        "object": "batch",
        "endpoint": spec.endpoint,
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": spec.input_file_id,
        "completion_window": spec.completion_window,
        "status": row.status,
        "output_file_id": row.output_file_id,
        "error_file_id": row.error_file_id,
        "created_at": created,
        "in_progress_at": unix_s(row.in_progress_at),
        "expires_at": created + int(spec.window_s),
        "completed_at": finished if row.status == states.COMPLETED else None,
        "failed_at": finished if row.status == states.FAILED else None,
        "expired_at": finished if row.status == states.EXPIRED else None,
        "cancelled_at": finished if row.status == states.CANCELLED else None,
        "request_counts": {
            "total": row.requests_total,
            "completed": counts.get("completed", 0),
            "failed": counts.get("failed", 0),
        },
        "metadata": row.metadata_ or None,
    }
