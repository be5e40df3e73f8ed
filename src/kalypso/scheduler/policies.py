"""Scheduling policies, chosen by name (no source editing to switch).

==================== =================================================================
name                 behaviour
==================== =================================================================
adaptive             Algorithm 1: every stage but the last starts with its minimum
(alias: pipelined)   budget, the last gets the rest; budgets are rebalanced online
                     (saturated stages give to the last, starving stages upstream)
parallel-dfs         the same initial split, never rebalanced (paper section 5.3)
parallel-bfs         the first stage gets everything but the later stages' minimums
static:R             the first stage gets fraction R of the memory, the last the rest,
                     stages between their minimums (``static:0.3`` = a 3:7 split)
sequential           one task at a time, deepest stage first (sequential depth-first)
operator-at-a-time   the baseline: each operator over the whole table, materialized
==================== =================================================================

Every budget-based policy starts each stage at or above its minimum budget and Rebalance
never moves a stage below it. A minimum can grow during a run (a task larger than those
sampled); a stage then below it still runs one task at a time (the idle-stage rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.query.templates import PlanError

POLICY_NAMES = (
    "adaptive",
    "pipelined",
    "parallel-dfs",
    "parallel-bfs",
    "static:R",
    "sequential",
    "operator-at-a-time",
)


@dataclass(frozen=True)
class SchedulingPolicy:
    """How a budget-based policy splits memory among stages and whether it adapts.

    Attributes:
        name: as the user gave it.
        split: "adaptive", "dfs", "bfs" or "static".
        first_stage_fraction: for "static".
        rebalance: run Algorithm 1's Rebalance after completions.
        max_running_tasks: a cap on tasks running at once (1 for sequential).
    """

    name: str
    split: str
    first_stage_fraction: float = 0.0
    rebalance: bool = False
    max_running_tasks: int | None = None

    def initial_budgets(self, capacity_blocks: int, min_blocks: list[int]) -> list[int]:
        """Initial per-stage budgets summing to ``capacity_blocks`` (each >= its minimum
        when the capacity allows)."""
        stages = len(min_blocks)
        if stages == 1:
            return [max(capacity_blocks, min_blocks[0])]
        if self.split == "bfs":
            rest = sum(min_blocks[1:])
            return [max(capacity_blocks - rest, min_blocks[0]), *min_blocks[1:]]
        if self.split == "static":
            first = max(int(capacity_blocks * self.first_stage_fraction + 1e-9), min_blocks[0])
            middle = min_blocks[1:-1]
            last = max(capacity_blocks - first - sum(middle), min_blocks[-1])
            return [first, *middle, last]
        head = min_blocks[:-1]  # adaptive and dfs start the same way
        return [*head, max(capacity_blocks - sum(head), min_blocks[-1])]


def parse_policy(name: str) -> SchedulingPolicy | None:
    """The policy called ``name``; None for ``operator-at-a-time`` (not budget-based).

    Raises:
        PlanError: unknown name or a bad static fraction.
    """
    if name in ("adaptive", "pipelined"):
        return SchedulingPolicy(name, "adaptive", rebalance=True)
    if name == "parallel-dfs":
        return SchedulingPolicy(name, "dfs")
    if name == "parallel-bfs":
        return SchedulingPolicy(name, "bfs")
    if name == "sequential":
        return SchedulingPolicy(name, "dfs", max_running_tasks=1)
    if name == "operator-at-a-time":
        return None
    if name.startswith("static:"):
        try:
            fraction = float(name.split(":", 1)[1])
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction < 1.0:
            raise PlanError(
                f"policy {name!r}: the static fraction must be in (0, 1), e.g. static:0.3"
            )
        return SchedulingPolicy(name, "static", first_stage_fraction=fraction)
    raise PlanError(f"unknown execution policy {name!r}; choose from {list(POLICY_NAMES)}")
