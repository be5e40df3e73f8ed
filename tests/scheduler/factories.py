"""Small factories for the scheduler tests: synthetic tables, a recording simulator, and a
scheduler that fails at once when it can never make progress again.

Every synthetic word is unique to its row (``w<row>x<j>``), so rows share no tokens and
the simulator's word tokenizer gives exactly one token per word. The simulator answers a
prompt by a hash of its token ids, so every run of a test sees the same answers, batches
and completions: tests assert exact values.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.query.rows import Row
from kalypso.scheduler.pipeline import PipelineScheduler, Task

BLOCK = 16
"""Tokens per KV block in every engine of these tests."""


def blocks(tokens: int) -> int:
    """KV blocks for ``tokens`` tokens (the scheduler's rounding: up)."""
    return -(-tokens // BLOCK)


def notes(n: int, words: int | list[int]) -> pd.DataFrame:
    """``n`` notes of ``words`` words each (or ``words[i]`` for note ``i``)."""
    counts = [words] * n if isinstance(words, int) else words
    return pd.DataFrame(
        {
            "note_id": range(n),
            "text": [" ".join(f"w{i}x{j}" for j in range(counts[i])) for i in range(n)],
        }
    )


def right_table(column: str, n: int, words: int = 2) -> pd.DataFrame:
    """A right-side table of ``n`` rows with one column of ``words`` unique words each."""
    tag = column[0]
    return pd.DataFrame(
        {column: [" ".join(f"{tag}{k}y{j}" for j in range(words)) for k in range(n)]}
    )


def key_of(request_id: str) -> tuple[int, ...]:
    """``"q:3:sem_join:0.1:7"`` -> ``(0, 1)``."""
    return tuple(int(part) for part in request_id.split(":")[3].split("."))


def op_of(request_id: str) -> str:
    """``"q:3:sem_join:0.1:7"`` -> ``"3:sem_join"``."""
    return ":".join(request_id.split(":")[1:3])


class RecordingSim(SimEngine):
    """The simulator, keeping every request and result it served, and per operator the
    most calls it ever had in flight at once."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("block_size_tokens", BLOCK)
        super().__init__(**kwargs)
        self.requests: list[GenerateRequest] = []
        self.results: list[GenerateResult] = []
        self._in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        op = op_of(request.request_id)
        self.requests.append(request)
        self._in_flight[op] += 1
        self.max_in_flight[op] = max(self.max_in_flight[op], self._in_flight[op])
        try:
            result = await super().generate(request)
        finally:
            self._in_flight[op] -= 1
        self.results.append(result)
        return result

    def answers(self, op: str) -> dict[tuple[int, ...], str]:
        """The last answer to ``op`` per tuple key."""
        return {key_of(r.request_id): r.text for r in self.results if op_of(r.request_id) == op}

    def requests_of(self, op: str) -> list[GenerateRequest]:
        return [r for r in self.requests if op_of(r.request_id) == op]


class SchedulerDeadlock(AssertionError):
    """The scheduler is idle with work waiting and holds every reserved block itself."""


@dataclass(frozen=True)
class OverCommit:
    """One Launch that took the ledger above its capacity."""

    query_was_idle: bool
    admitted: int
    reserved_before: int
    reserved_after: int


@dataclass(frozen=True)
class Launch:
    """One task as it was launched: its reservation and what its parent held."""

    stage: int
    key: tuple[int, ...]
    next_op: int
    total_blocks: int
    parent_prefix_blocks: int
    ledger_blocks: int
    """What the ledger held when the task started (its own reservation included)."""


class CheckingScheduler(PipelineScheduler):
    """:class:`PipelineScheduler` that records every launch and every Launch that took the
    ledger above its capacity, and fails instead of polling forever when it can never
    make progress again.

    The real scheduler sleeps and retries when nothing it waits on may start; that is
    right when other queries hold ledger memory (they will release it). When the query
    itself holds every reserved block and nothing runs, nothing can ever change: this
    raises :class:`SchedulerDeadlock` (deterministic, no timeout needed).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.launches: list[Launch] = []
        self.over_commits: list[OverCommit] = []

    def _launch(self) -> None:
        was_idle = not self.running
        before = self.ledger.reserved_blocks
        admitted = len(self.report.admitted)
        super()._launch()
        after = self.ledger.reserved_blocks
        if after > self.ledger.capacity_blocks and after > before:
            count = len(self.report.admitted) - admitted
            self.over_commits.append(OverCommit(was_idle, count, before, after))
        assert self.memory is not None
        own = sum(self.memory.budgets.used_blocks)
        if not self.running and any(self.waiting) and self.ledger.reserved_blocks == own:
            heads = [
                (s, q[0].row.key, q[0].memory.total_blocks) for s, q in enumerate(self.waiting) if q
            ]
            raise SchedulerDeadlock(
                f"idle with waiting tasks (stage, key, blocks) {heads}; the query holds all"
                f" {own} reserved blocks of {self.ledger.capacity_blocks}"
            )

    async def _run_task(self, task: Task) -> Row | None:
        parent = task.memory.parent
        self.launches.append(
            Launch(
                task.stage,
                task.row.key,
                task.next_op,
                task.memory.total_blocks,
                parent.prefix_blocks if parent is not None else 0,
                self.ledger.reserved_blocks,
            )
        )
        return await super()._run_task(task)
