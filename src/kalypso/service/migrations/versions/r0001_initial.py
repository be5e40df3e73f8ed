"""The first schema: tokens, jobs, files, events and the call journal.

Revision ID: r0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.Column("max_running_jobs", sa.Integer, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("token_id", sa.String(40), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("in_progress_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("requests_total", sa.Integer, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("progress", sa.JSON, nullable=False),
        sa.Column("errors", sa.JSON, nullable=False),
        sa.Column("result_parquet", sa.LargeBinary),
        sa.Column("result_rows", sa.Integer),
        sa.Column("result_partial", sa.Boolean, nullable=False),
        sa.Column("output_file_id", sa.String(40)),
        sa.Column("error_file_id", sa.String(40)),
        sa.Column("metadata", sa.JSON, nullable=False),
    )
    op.create_index("ix_jobs_token_id", "jobs", ["token_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])
    op.create_table(
        "files",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("token_id", sa.String(40), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("purpose", sa.String(20), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_files_token_id", "files", ["token_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(20), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_table(
        "calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("node_id", sa.String(200), nullable=False),
        sa.Column("instance_key", sa.String(200), nullable=False),
        sa.Column("request_sha256", sa.String(64), nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("job_id", "node_id", "instance_key", "request_sha256"),
    )
    op.create_index("ix_calls_job_id", "calls", ["job_id"])


def downgrade() -> None:
    op.drop_table("calls")
    op.drop_table("events")
    op.drop_table("files")
    op.drop_table("jobs")
    op.drop_table("tokens")
