"""Request bodies read within the server's size limit."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from kalypso.service.errors import ApiError


def too_large(limit_bytes: int) -> ApiError:
    """The 413 for a body over ``limit_bytes``."""
    return ApiError(
        413,
        "request_too_large",
        f"the request body is over the server's limit of {limit_bytes} bytes; split the"
        " work over several jobs, or raise --max-request-bytes",
    )


async def read_body(request: Request, limit_bytes: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``limit_bytes``: from its
    declared length, else while it streams in, so an oversized body is never held whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise too_large(limit_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit_bytes:
            raise too_large(limit_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request, limit_bytes: int) -> Any:
    """The body parsed as JSON (400 ``invalid_json`` if it is not; 413 if over the limit)."""
    raw = await read_body(request, limit_bytes)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not JSON: {exc}") from None
