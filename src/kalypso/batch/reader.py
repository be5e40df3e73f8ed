"""Reading a batch file: validate every line before anything runs, then read it again
in chunks of requests that share prefixes.

:func:`check_file` reads the whole file once and raises :class:`BatchFileError` with every
refused line (up to ``max_errors``): a file with one bad line runs nothing. Of a valid file
it keeps an index (:class:`FileIndex`: per line its number, byte offset and prefix key,
and the custom ids), never the requests: a file of a million lines is never held whole.
:meth:`FileIndex.chunks` then reads the requests ``chunk_requests`` at a time, in the
order of their prefix keys, so that the questions asked of one document land in one
chunk wherever they are in the file.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kalypso.batch.lower import prefix_key
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


@dataclass
class FileIndex:
    """What :func:`check_file` keeps of a valid file: the one model its lines name, and
    per request its line number, byte offset and prefix key (a few dozen bytes a line,
    whatever the line's length)."""

    path: Path
    model: str
    lines: array[int] = field(default_factory=lambda: array("Q"))
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    keys: list[bytes] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return len(self.lines)

    def prefix_order(self) -> list[int]:
        """The requests' positions in the order of their prefix keys (those sharing a
        system prompt, then a document, adjacent; ties in file order)."""
        return sorted(range(len(self.keys)), key=lambda i: (self.keys[i], i))

    def line_bytes(self, position: int) -> int:
        """The bytes from request ``position``'s line to the next request's (its size)."""
        end = (
            self.offsets[position + 1]
            if position + 1 < len(self.offsets)
            else self.path.stat().st_size
        )
        return end - self.offsets[position]

    def read(self, positions: Iterable[int]) -> list[BatchRequest]:
        """The requests at ``positions``, in file order, read from the file by offset."""
        chunk = []
        with self.path.open("rb") as handle:
            for position in sorted(positions):
                handle.seek(self.offsets[position])
                text = handle.readline().decode("utf-8")
                chunk.append(parse_line(text, self.lines[position]))
        return chunk

    def chunks(self, chunk_requests: int) -> Iterator[list[BatchRequest]]:
        """The requests in :meth:`prefix_order`, ``chunk_requests`` at a time, each chunk
        in file order.

        Raises:
            ValueError: ``chunk_requests`` below 1.
        """
        if chunk_requests < 1:
            raise ValueError(f"chunk_requests must be >= 1, got {chunk_requests}")
        order = self.prefix_order()
        for start in range(0, len(order), chunk_requests):
            yield self.read(order[start : start + chunk_requests])


def _lines(path: Path) -> Iterator[tuple[int, int, str]]:
    """``(line number, byte offset, text)`` of each non-blank line."""
    with path.open("rb") as handle:
        offset = 0
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BatchFileError(
                    path, [LineError(number, "(line)", f"not UTF-8 ({exc.reason})")]
                ) from None
            if text.strip():
                yield number, offset, text
            offset += len(raw)


def check_file(path: Path, max_errors: int = MAX_ERRORS) -> FileIndex:
    """Validate every line of ``path``: the request on each, custom ids unique, one model;
    index the valid file.

    Raises:
        BatchFileError: one or more lines are refused (each with its line and field), the
            file has no request, or it cannot be read.
    """
    if not path.is_file():
        raise BatchFileError(path, [LineError(0, "(file)", "no such file")])
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    index: FileIndex | None = None
    more = False
    for number, offset, text in _lines(path):
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
            elif index is None:
                index = FileIndex(path, request.model)
            elif request.model != index.model:
                error = LineError(
                    number,
                    "body.model",
                    f"{request.model!r}: the file's lines name {index.model!r}",
                )
            if error is None and not errors:
                assert index is not None
                index.lines.append(number)
                index.offsets.append(offset)
                index.keys.append(prefix_key(request))
        if error is not None:
            if len(errors) == max_errors:
                more = True
                break
            errors.append(error)
    if errors:
        raise BatchFileError(path, errors, more)
    if index is None:
        raise BatchFileError(path, [LineError(0, "(file)", "no request in the file")])
    logger.info("%s: %d requests for model %s", path, index.requests, index.model)
    return index
