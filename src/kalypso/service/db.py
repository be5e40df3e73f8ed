"""The job server's tables (SQLAlchemy 2) and how to open its database.

Five tables: ``tokens`` (API tokens, stored as SHA-256 hashes), ``jobs`` (a spec, its
state, progress and result), ``files`` (batch files, in and out), ``events`` (each job's
progress events, numbered for Server-Sent Events and ``Last-Event-ID``) and ``calls``
(the journal: every completed LLM call, committed before its answer is used, so a job
resumed after a crash sends none again).

The schema is created and upgraded by Alembic (:mod:`kalypso.service.migrate`), never by
``create_all``. SQLite opens in WAL mode with ``synchronous=NORMAL``: a commit survives
the process being killed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 10_000


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    max_running_jobs: Mapped[int] = mapped_column(Integer, default=4)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    token_id: Mapped[str] = mapped_column(ForeignKey("tokens.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), index=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    requests_total: Mapped[int] = mapped_column(Integer, default=0)
    """Input rows (a table job) or queries (a workflow job)."""
    runs: Mapped[int] = mapped_column(Integer, default=0)
    """How often the job was started (a resume after a restart counts one more)."""
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    errors: Mapped[list[Any]] = mapped_column(JSON, default=list)
    result_parquet: Mapped[bytes | None] = mapped_column(LargeBinary)
    result_rows: Mapped[int | None] = mapped_column(Integer)
    result_partial: Mapped[bool] = mapped_column(Boolean, default=False)
    output_file_id: Mapped[str | None] = mapped_column(String(40))
    """A batch job's answers, as a file (OpenAI's ``output_file_id``)."""
    error_file_id: Mapped[str | None] = mapped_column(String(40))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)


class FileRow(Base):
    """An uploaded batch input, or a batch's output or error file (OpenAI's Files API)."""

    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    token_id: Mapped[str] = mapped_column(ForeignKey("tokens.id"), index=True)
    purpose: Mapped[str] = mapped_column(String(20))
    filename: Mapped[str] = mapped_column(String(255))
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    content: Mapped[bytes] = mapped_column(LargeBinary)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    type: Mapped[str] = mapped_column(String(20))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class CallRow(Base):
    __tablename__ = "calls"
    __table_args__ = (UniqueConstraint("job_id", "node_id", "instance_key", "request_sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(String(200))
    instance_key: Mapped[str] = mapped_column(String(200))
    request_sha256: Mapped[str] = mapped_column(String(64))
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def open_database(url: str) -> Engine:
    """A SQLAlchemy engine for ``url`` (SQLite files in WAL mode; PostgreSQL through
    psycopg 3, ``postgresql+psycopg://...``)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    logger.info("database %s", engine.url.render_as_string(hide_password=True))
    return engine


def session_factory(engine: Engine) -> sessionmaker[Any]:
    return sessionmaker(engine, expire_on_commit=False)


__all__ = [
    "Base",
    "CallRow",
    "EventRow",
    "JobRow",
    "TokenRow",
    "open_database",
    "session_factory",
    "utcnow",
]
