"""The API's one error shape, as OpenAI's APIs have it::

    {"error": {"type": "invalid_request_error", "code": "invalid_spec",
               "message": "...", "param": "plan.operators.0.k"}}

``type`` is the HTTP class (``invalid_request_error``, ``authentication_error``,
``not_found_error``, ``conflict_error``, ``request_too_large``, ``rate_limit_error``,
``server_error``); ``code`` says what exactly; ``param`` names the field, when one is at
fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


class ErrorDetail(BaseModel):
    type: str
    code: str
    message: str
    param: str | None = None


class ErrorBody(BaseModel):
    """Every error response's body."""

    error: ErrorDetail


class ApiError(Exception):
    """An error answered with ``status`` and the shape above."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers


def error_response(
    status: int,
    code: str,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    detail = ErrorDetail(
        type=_TYPES.get(status, "server_error"), code=code, message=message, param=param
    )
    return JSONResponse(ErrorBody(error=detail).model_dump(), status_code=status, headers=headers)


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """A pydantic error location as a dotted path (``plan.operators.0.k``), without the
    request part FastAPI adds and without pydantic's union-member names."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts)


def validation_response(errors: list[Any], code: str = "invalid_spec") -> JSONResponse:
    """422 naming the first field at fault, with every problem in the message."""
    problems = [f"{field_path(e['loc']) or '(body)'}: {e['msg']}" for e in errors]
    first = field_path(errors[0]["loc"]) if errors else None
    return error_response(422, code, "; ".join(problems), first or None)


async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.param, exc.headers)


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), None, exc.headers)


async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError | ValidationError)
    return validation_response(list(exc.errors()), "invalid_request")
