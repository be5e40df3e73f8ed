"""Bring a job server database to the current schema with Alembic (idempotent)."""

from __future__ import annotations

import logging
from importlib import resources

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

logger = logging.getLogger(__name__)


def upgrade(engine: Engine) -> None:
    """Apply every migration ``engine``'s database lacks (none: nothing happens)."""
    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("kalypso.service") / "migrations")
    )
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    logger.info("database schema at head")
