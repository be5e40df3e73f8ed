"""The web page at ``/``: plain HTML and one vendored charting library (uPlot), no build
step. The page asks for an API token, keeps it in the browser's session storage, and reads
the same ``/v1`` API as any client; it has no access of its own.

The page and its files are sent with a Content-Security-Policy allowing only this
server's own scripts, styles and API (no inline script, no other origin), and
``Cache-Control: no-cache`` so a new version shows up on the next load."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, Response

STATIC_DIR = resources.files("kalypso.service") / "static"

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class _PageFiles(StaticFiles):
    """Static files sent with :data:`PAGE_HEADERS`."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        return response


def page_routes(app: FastAPI, caller_of: Callable[..., Any]) -> None:
    """Serve the page at ``/`` and its files under ``/static``."""
    directory = str(STATIC_DIR)
    app.mount("/static", _PageFiles(directory=directory), name="static")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(f"{directory}/index.html", media_type="text/html", headers=PAGE_HEADERS)
