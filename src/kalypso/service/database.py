"""The job server's handle on its database: sessions for request handlers, and one writer
thread for the job runner's many small commits (journaled calls, progress, events), so
that the event loop never waits on the database and SQLite sees one writer at a time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from kalypso.service.db import open_database, session_factory
from kalypso.service.migrate import upgrade

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Database:
    """An upgraded database at ``url``; :meth:`close` disposes of its connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = open_database(url)
        upgrade(self.engine)
        self._sessions = session_factory(self.engine)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kalypso-db")
        self._pending: list[tuple[object, asyncio.Future[None]]] = []
        self._committing = False
        self._committer: asyncio.Task[None] | None = None
        self.group_commits = 0
        """Commits :meth:`add_soon` made (each of one or more rows)."""

    def session(self) -> Session:
        """A new session (use it in a ``with`` block)."""
        session: Session = self._sessions()
        return session

    async def run(self, work: Callable[[Session], T]) -> T:
        """``work(session)`` on the writer thread, in its own session; its commits are
        the caller's to make. Returns its result."""

        def in_session() -> T:
            with self.session() as session:
                return work(session)

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, in_session)

    async def add_soon(self, row: object) -> None:
        """Insert ``row`` in the next group commit and return once it is committed. Rows
        added while a commit is under way wait for the next one, so a burst of small
        writes (journaled calls) costs one commit instead of one each."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append((row, done))
        if not self._committing:
            self._committing = True
            self._committer = loop.create_task(self._commit_pending())
        await done

    async def _commit_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self.run(_inserter([row for row, _ in batch]))
                except Exception as exc:  # every writer waiting on this commit learns of it
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
                self.group_commits += 1
        finally:
            self._committing = False

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self.engine.dispose()


def _inserter(rows: list[object]) -> Callable[[Session], None]:
    def insert(session: Session) -> None:
        session.add_all(rows)
        session.commit()

    return insert


def database_url_for(path: Any) -> str:
    """The SQLAlchemy URL of an SQLite file at ``path``."""
    return f"sqlite:///{path}"
