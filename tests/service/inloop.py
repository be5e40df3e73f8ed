"""The job server on the caller's own event loop, for tests whose engine lives there (a
real vLLM engine shared by a test module)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn

from kalypso.engine.protocol import Engine
from kalypso.service import Database, ServiceSettings, create_app

from .conftest import free_port


@contextlib.asynccontextmanager
async def serving(database: Database, engine: Engine) -> AsyncIterator[str]:
    """Serve jobs on ``engine`` while the block runs; yields the server's URL. Clients
    must run in threads (``asyncio.to_thread``): this loop is the server's."""
    app = create_app(database, engine, ServiceSettings(progress_interval_s=0.1))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
