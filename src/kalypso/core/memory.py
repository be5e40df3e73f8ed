"""KV memory accounting for one pipeline: stage budgets, reservations and prefix holding.

Everything is in KV *blocks* of the engine's real capacity (never a constant).

A task reserves ``total_blocks``: its prompts (beyond the full blocks it shares with its
parent, which the parent already holds) plus its output bounds, rounded up to blocks. Of
those, ``prefix_blocks`` (the full blocks of what its children's prompts start with) are
what its children will reuse. When the task completes:

* with children: its working memory is released but its own prefix stays reserved
  (charged to its stage) until the last child is *done*;
* filtered, in the last stage, or with no children: everything is released, and it is done.

A task is *done* when it completed and all its children are done; then its prefix is
released and its parent is told, recursively. The holding relation is a forest over the
data-dependency DAG: each task names at most one parent, the one whose prompt its own
extends (the longest shared prefix)::

    parent (prefix held) --- child 1 (done)
                         \\-- child 2 (running)   -> parent released when child 2 is done

:class:`StageBudgets` splits one pipeline's view of the capacity among its stages; the
shared :class:`~kalypso.core.ledger.KVLedger` bounds the sum over every owner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kalypso.core.ledger import KVLedger

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class TaskMemory:
    """One task's reservation and its place in the prefix-holding forest."""

    stage: int
    total_blocks: int
    prefix_blocks: int
    parent: TaskMemory | None = None
    shared_blocks: int = 0
    """Full blocks of the parent's prefix this task's prompt starts with (the parent holds
    them; of this task's ``prefix_blocks`` it keeps only the rest)."""
    pending_children: int = 0
    completed: bool = False
    held_blocks: int = 0
    """What this task holds right now (total while running, own prefix while waiting on
    children, 0 when released)."""
    running: bool = False


@dataclass
class StageBudgets:
    """Per-stage budgets of one pipeline run, and what each stage holds against them."""

    budget_blocks: list[int]
    min_budget_blocks: list[int]
    used_blocks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.budget_blocks) != len(self.min_budget_blocks):
            raise ValueError("one budget and one minimum per stage")
        if not self.used_blocks:
            self.used_blocks = [0] * len(self.budget_blocks)

    @property
    def num_stages(self) -> int:
        return len(self.budget_blocks)

    def free_blocks(self, stage: int) -> int:
        return self.budget_blocks[stage] - self.used_blocks[stage]

    def transferable_blocks(self, stage: int) -> int:
        """Budget ``stage`` can give away: free, and never below its minimum."""
        keep = max(self.min_budget_blocks[stage], self.used_blocks[stage])
        return max(0, self.budget_blocks[stage] - keep)

    def transfer(self, source: int, target: int) -> int:
        """Move all transferable budget of ``source`` to ``target``; returns the blocks moved."""
        if source == target:
            return 0
        moved = self.transferable_blocks(source)
        self.budget_blocks[source] -= moved
        self.budget_blocks[target] += moved
        return moved


class MemoryManager:
    """Admission, allocation, release and prefix holding for one owner's pipeline.

    Every block it reserves is charged to ``owner`` in the shared ledger, so
    :meth:`release_all` (or the ledger's ``release_owner``) returns all of it.
    """

    def __init__(self, ledger: KVLedger, budgets: StageBudgets, owner: str) -> None:
        self.ledger = ledger
        self.budgets = budgets
        self.owner = owner
        self._tasks: set[TaskMemory] = set()

    def admits(self, task: TaskMemory, *, stage_idle: bool, query_idle: bool) -> bool:
        """Whether ``task`` may start now.

        It fits when its stage's budget and the engine-wide ledger both have room. Two
        rules let work through that would otherwise never start (each has a test named
        after the deadlock it prevents):

        * a stage with nothing running and nothing held admits a task larger than its
          budget if the ledger has room (estimates of a stage's minimum can be too small);
        * a pipeline with nothing running admits its next task even beyond the ledger when
          no task of any owner is running: what the ledger holds then are prefixes kept
          for children that do not fit beside them, or a task larger than the whole
          cache; the engine still runs it (evicting, or - with explicit pins - stalling
          until the deadlock handler unpins).
        """
        blocks = task.total_blocks
        if self.budgets.free_blocks(task.stage) >= blocks and self.ledger.fits(blocks):
            return True
        if stage_idle and self.ledger.fits(blocks):
            return True
        return query_idle and self.ledger.running_tasks == 0

    def allocate(self, task: TaskMemory) -> None:
        self._tasks.add(task)
        self._hold(task, task.total_blocks)
        task.running = True
        self.ledger.task_started(self.owner)

    def complete(self, task: TaskMemory, *, children: int) -> list[TaskMemory]:
        """``task`` finished with ``children`` new child tasks (0 if filtered or last).

        Returns the tasks that became *done* (their memory is fully released), in order.
        """
        task.completed = True
        task.pending_children = children
        self._stop(task)
        if children > 0:
            own_prefix = task.prefix_blocks - task.shared_blocks
            self._hold(task, max(0, min(own_prefix, task.total_blocks)))
            return []
        return self._finish(task)

    def requeue(self, task: TaskMemory, total_blocks: int) -> None:
        """Release a task that will run again (it needs a larger reservation)."""
        self._hold(task, 0)
        self._stop(task)
        task.total_blocks = total_blocks

    def release_all(self) -> int:
        """Give back every block this pipeline holds (failure or cancellation); returns
        the blocks released. The manager must not be used afterwards."""
        released = 0
        for task in self._tasks:
            released += task.held_blocks
            self._hold(task, 0)
            if task.running:
                self._stop(task)
        self._tasks.clear()
        return released

    def _stop(self, task: TaskMemory) -> None:
        task.running = False
        self.ledger.task_stopped(self.owner)

    def _finish(self, task: TaskMemory) -> list[TaskMemory]:
        done: list[TaskMemory] = []
        current: TaskMemory | None = task
        while current is not None and current.completed and current.pending_children == 0:
            self._hold(current, 0)
            self._tasks.discard(current)
            done.append(current)
            parent = current.parent
            if parent is None:
                break
            parent.pending_children -= 1
            current = parent
        return done

    def _hold(self, task: TaskMemory, blocks: int) -> None:
        """Set what ``task`` holds to ``blocks`` (charged to its stage and the ledger)."""
        delta = blocks - task.held_blocks
        if delta > 0:
            self.ledger.reserve(self.owner, delta)
        elif delta < 0:
            self.ledger.release(self.owner, -delta)
        self.budgets.used_blocks[task.stage] += delta
        task.held_blocks = blocks
