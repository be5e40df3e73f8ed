"""Kalypso as a service: ``kalypso serve`` runs every job's plan or workflow on one engine,
sharing one KV ledger, with jobs kept in a database (SQLite by default, PostgreSQL too),
calls journaled for crash-safe resume, progress streamed, and a web page.

See ``docs/service.md``. The pieces: :mod:`~kalypso.service.app` (the HTTP API),
:mod:`~kalypso.service.manager` (running jobs), :mod:`~kalypso.service.journal` (the
call journal), :mod:`~kalypso.service.db` and :mod:`~kalypso.service.migrate` (the
database), :mod:`~kalypso.service.tokens` (API tokens).
"""

from kalypso.service.app import ServiceSettings, create_app
from kalypso.service.database import Database

__all__ = ["Database", "ServiceSettings", "create_app"]
