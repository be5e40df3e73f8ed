"""The web page at ``/``: plain HTML and one vendored charting library (uPlot), no build
step. The page asks for an API token, keeps it in the browser's session storage, and reads
the same ``/v1`` API as any client; it has no access of its own."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse

STATIC_DIR = resources.files("kalypso.service") / "static"


def page_routes(app: FastAPI, caller_of: Callable[..., Any]) -> None:
    """Serve the page at ``/`` and its files under ``/static``."""
    directory = str(STATIC_DIR)
    app.mount("/static", StaticFiles(directory=directory), name="static")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(f"{directory}/index.html", media_type="text/html")
