"""The job server under test: a real uvicorn server on a free loopback port, in a thread
of the test process, on the simulator (so calls and results are exact), with an SQLite
database in a temporary folder (or the PostgreSQL server named by
``KALYPSO_TEST_POSTGRES_URL``)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from sqlalchemy import create_engine, make_url, text

from kalypso.engine.open import close_engines
from kalypso.engine.protocol import Engine
from kalypso.engine.sim import SimEngine
from kalypso.service import Database, ServiceSettings, create_app
from kalypso.service.manager import JobManager
from kalypso.service.tokens import create_token

POSTGRES_URL_VARIABLE = "KALYPSO_TEST_POSTGRES_URL"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class LiveServer:
    """A running server: its URL, database, engine, and the manager once started."""

    url: str
    database: Database
    engine: Engine
    app: Any
    server: uvicorn.Server
    thread: threading.Thread
    tokens: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    """The tokens' names on the server (unique per server)."""

    @property
    def manager(self) -> JobManager:
        manager: JobManager = self.app.state.manager
        return manager

    def token(self, name: str, *, max_running_jobs: int = 4) -> str:
        """A new token named ``name`` (unique per server), its secret."""
        if name not in self.tokens:
            self.names[name] = f"{name}-{uuid.uuid4().hex[:6]}"
            with self.database.session() as session:
                self.tokens[name] = create_token(
                    session, self.names[name], max_running_jobs=max_running_jobs
                )
        return self.tokens[name]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the server thread did not stop"


def start_server(
    database: Database,
    make_engine: Callable[[], Engine | list[Engine]],
    settings: ServiceSettings | None = None,
) -> LiveServer:
    """Start uvicorn in a thread with its own event loop; the engine (or the replicas'
    engines) is made on that loop and closed when the server stops."""
    port = free_port()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            made = make_engine()
            engines = made if isinstance(made, list) else [made]
            app = create_app(database, made, settings or ServiceSettings(progress_interval_s=0.05))
            config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
            server = uvicorn.Server(config)
            server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            holder.update(engine=engines[0], app=app, server=server)
            ready.set()
            try:
                await server.serve()
            finally:
                await close_engines(engines)

        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=serve, name="kalypso-test-server", daemon=True)
    thread.start()
    assert ready.wait(30)
    server: uvicorn.Server = holder["server"]
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    return LiveServer(
        f"http://127.0.0.1:{port}", database, holder["engine"], holder["app"], server, thread
    )


def database_url(tmp_path: Path) -> str:
    """A fresh database: SQLite in ``tmp_path``, or a new, empty PostgreSQL database on
    the server ``KALYPSO_TEST_POSTGRES_URL`` names (``scripts/with-postgres`` sets it)."""
    base = os.environ.get(POSTGRES_URL_VARIABLE)
    if not base:
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    name = f"kalypso_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(base).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = Database(database_url(tmp_path))
    yield db
    db.close()


def sim_engine(**kwargs: Any) -> Engine:
    return SimEngine("smollm2-cpu", **kwargs)


@pytest.fixture
def live(database: Database) -> Iterator[LiveServer]:
    server = start_server(database, sim_engine)
    yield server
    server.stop()
