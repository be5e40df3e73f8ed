"""The errors a run can end with, shared by every front end."""

from __future__ import annotations

from typing import Any


class PlanError(ValueError):
    """A plan, a workflow, its data or its run options are invalid. Raised while building
    or before any LLM call - never mid-run - naming the operator, row and column."""


class TaskFailed(RuntimeError):
    """A task failed: an engine error, a timeout, or a Python step that raised.

    Attributes:
        op_id: the operator (node) that failed.
        key: the instance it was running on.
    """

    def __init__(self, op_id: str, key: tuple[int, ...], cause: BaseException) -> None:
        where = ".".join(map(str, key))
        super().__init__(f"[{op_id}] row {where}: {type(cause).__name__}: {cause}")
        self.op_id = op_id
        self.key = key
        self.cause = cause


class QueryError(RuntimeError):
    """A run failed after it started. Nothing it held is left behind (KV reservations,
    pins, requests in flight), and what it completed is kept.

    Attributes:
        partial: the front end's partial result (for a query: the rows that had completed
            the whole plan, with statistics), or None when nothing had completed.
        op_id, key: where it failed, when a task failed (None otherwise).
    """

    def __init__(
        self,
        message: str,
        *,
        partial: Any = None,
        op_id: str | None = None,
        key: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.op_id = op_id
        self.key = key
