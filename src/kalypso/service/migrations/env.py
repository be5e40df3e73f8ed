"""Alembic's environment for the job server's database: the URL and the connection come
from :func:`kalypso.service.migrate.upgrade` (``config.attributes["connection"]``)."""

from __future__ import annotations

from alembic import context

from kalypso.service.db import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
