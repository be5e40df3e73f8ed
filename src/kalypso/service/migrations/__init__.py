"""Alembic migrations of the job server's database (run by :mod:`kalypso.service.migrate`)."""
