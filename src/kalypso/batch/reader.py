"""Reading a batch file: validate every line before anything runs, then stream it in
chunks.

:func:`check_file` reads the whole file once, in constant memory apart from the set of
custom ids, and raises :class:`BatchFileError` with every refused line (up to
``max_errors``): a file with one bad line runs nothing. :func:`chunks` then reads it again,
``chunk_requests`` requests at a time, so a file of a million lines is never held whole.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kalypso.batch.schema import BatchRequest, LineError, parse_line
from kalypso.core.errors import PlanError

logger = logging.getLogger(__name__)

MAX_ERRORS = 20
"""Refused lines reported at most (the file is refused at the first anyway)."""


class BatchFileError(PlanError):
    """The file cannot run: every refused line found (at most :data:`MAX_ERRORS`)."""

    def __init__(self, path: Path, errors: list[LineError], more: bool = False) -> None:
        lines = "\n".join(f"  {e}" for e in errors)
        tail = "\n  ... (more lines refused)" if more else ""
        super().__init__(f"{path}: {len(errors)} line(s) refused, nothing was run:\n{lines}{tail}")
        self.path = path
        self.errors = errors


@dataclass(frozen=True)
class FileSummary:
    """What :func:`check_file` found: the requests and the one model they name."""

    requests: int
    model: str


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8", errors="strict") as handle:
        number = 0
        while True:
            try:
                text = handle.readline()
            except UnicodeDecodeError as exc:
                raise BatchFileError(
                    path, [LineError(number + 1, "(line)", f"not UTF-8 ({exc.reason})")]
                ) from None
            if not text:
                return
            number += 1
            if text.strip():
                yield number, text


def check_file(path: Path, max_errors: int = MAX_ERRORS) -> FileSummary:
    """Validate every line of ``path``: the request on each, custom ids unique, one model.

    Raises:
        BatchFileError: one or more lines are refused (each with its line and field), the
            file has no request, or it cannot be read.
    """
    if not path.is_file():
        raise BatchFileError(path, [LineError(0, "(file)", "no such file")])
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    model: str | None = None
    count = 0
    more = False
    for number, text in _lines(path):
        try:
            request = parse_line(text, number)
        except LineError as exc:
            error: LineError | None = exc
        else:
            error = None
            first = seen.setdefault(request.custom_id, number)
            if first != number:
                error = LineError(
                    number, "custom_id", f"{request.custom_id!r} repeats line {first}"
                )
            elif model is None:
                model = request.model
            elif request.model != model:
                error = LineError(
                    number, "body.model", f"{request.model!r}: the file's lines name {model!r}"
                )
            count += 1
        if error is not None:
            if len(errors) == max_errors:
                more = True
                break
            errors.append(error)
    if errors:
        raise BatchFileError(path, errors, more)
    if count == 0 or model is None:
        raise BatchFileError(path, [LineError(0, "(file)", "no request in the file")])
    logger.info("%s: %d requests for model %s", path, count, model)
    return FileSummary(count, model)


def chunks(path: Path, chunk_requests: int) -> Iterator[list[BatchRequest]]:
    """The file's requests in order, ``chunk_requests`` at a time (after
    :func:`check_file` passed: a line refused now raises :class:`LineError`)."""
    if chunk_requests < 1:
        raise ValueError(f"chunk_requests must be >= 1, got {chunk_requests}")
    chunk: list[BatchRequest] = []
    for number, text in _lines(path):
        chunk.append(parse_line(text, number))
        if len(chunk) == chunk_requests:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
