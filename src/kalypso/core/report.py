"""What one pipeline run reports: admission order, budget moves, continuations, memory."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BudgetMove:
    """One transfer made by Rebalance."""

    iteration: int
    source: int
    target: int
    blocks: int
    reason: str


@dataclass(frozen=True)
class StageView:
    """What the live view shows per stage."""

    done: int = 0
    waiting: int = 0
    running: int = 0
    budget_blocks: int = 0
    used_blocks: int = 0


@dataclass(frozen=True)
class Launch:
    """One task as it was admitted: its reservation and the ledger then."""

    stage: int
    key: tuple[int, ...]
    total_blocks: int
    parent_prefix_blocks: int
    ledger_blocks: int
    """What the ledger held once the task was admitted (its own reservation included)."""
    referenced_blocks: int = 0
    """Blocks of its prompt other tasks already held (shared, charged once)."""
    over_commit: bool = False
    """Admitted beyond the ledger's capacity by the last-resort rule (nothing of any
    owner was running; only running it could free anything)."""


@dataclass
class PipelineReport:
    """What one pipeline run did.

    Attributes:
        admitted: ``(stage, instance key)`` in admission order.
        launches: the same admissions with their reservations.
        moves: Rebalance's budget transfers.
        continuations: tasks re-admitted because a call reached its output bound.
        deadlocks: times the engine had waiting requests and none running (explicit
            pinning); each released all pins and fell back to virtual pinning.
    """

    policy: str = ""
    admitted: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    moves: list[BudgetMove] = field(default_factory=list)
    continuations: int = 0
    deadlocks: int = 0
    initial_budgets_blocks: list[int] = field(default_factory=list)
    final_budgets_blocks: list[int] = field(default_factory=list)
    min_budgets_blocks: list[int] = field(default_factory=list)
    peak_reserved_blocks: int = 0
