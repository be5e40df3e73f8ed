"""Small factories for the scheduler tests: synthetic tables and a recording simulator.

Every synthetic word is unique to its row (``w<row>x<j>``), so rows share no tokens and
the simulator's word tokenizer gives exactly one token per word. The simulator answers a
prompt by a hash of its token ids, so every run of a test sees the same answers, batches
and completions: tests assert exact values.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kalypso.core.ledger import KVLedger
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.query import QueryResult

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


@dataclass
class CheckingLedger(KVLedger):
    """A :class:`KVLedger` (passed to ``arun(ledger=...)``) that records every reservation
    that took it above its capacity, with the tasks of any owner running at that moment.

    The memory manager reserves a task's blocks before it counts the task as running, so
    ``running`` is what ran *beside* it: the documented last-resort rule allows going
    above the capacity only when it is 0.
    """

    over_commits: list[OverCommit] = field(default_factory=list)

    def reserve(self, owner: str, blocks: int) -> None:
        running = self.running_tasks
        super().reserve(owner, blocks)
        if blocks > 0 and self.reserved_blocks > self.admit_blocks:
            self.over_commits.append(OverCommit(owner, blocks, self.reserved_blocks, running))


@dataclass(frozen=True)
class OverCommit:
    owner: str
    blocks: int
    reserved_after: int
    running: int
    """Tasks of any owner running when it was admitted."""


def check_run(result: QueryResult, ledger: CheckingLedger | None = None, owner: str = "q") -> None:
    """What every run must satisfy, read from its reports (and the ledger it ran on, where
    it is ``owner``):

    * every task is admitted once, plus once per continuation, each admission with its
      launch record;
    * budgets are conserved, and no stage ends below its minimum;
    * the ledger went above its capacity only by the last-resort rule (nothing of any
      owner running), and exactly those admissions are flagged ``over_commit``;
    * the query holds nothing in the ledger once the run is over.
    """
    for report in result.pipeline_reports:
        admitted = Counter(report.admitted)
        assert sum(admitted.values()) == len(admitted) + report.continuations
        assert [(launch.stage, launch.key) for launch in report.launches] == report.admitted
        assert sum(report.final_budgets_blocks) == sum(report.initial_budgets_blocks)
        for final, minimum in zip(
            report.final_budgets_blocks, report.min_budgets_blocks, strict=True
        ):
            assert final >= minimum
    if ledger is None:
        return
    assert ledger.held_by(owner) == 0
    assert owner not in ledger.owners
    mine = [o for o in ledger.over_commits if o.owner == owner]
    assert all(over.running == 0 for over in mine), mine
    flagged = [
        launch.ledger_blocks
        for report in result.pipeline_reports
        for launch in report.launches
        if launch.over_commit
    ]
    assert flagged == [over.reserved_after for over in mine]
    if not ledger.over_commits:
        assert ledger.peak_reserved_blocks <= ledger.capacity_blocks
