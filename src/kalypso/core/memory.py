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
released and its parent is told, recursively.

**Shared blocks.** When a task's prompt is known, its full blocks are identified by their
chained keys (``TaskMemory.hashes``), as vLLM's prefix cache identifies them: running
tasks whose prompts start alike share those blocks in the engine, so the manager charges
each key once, however many tasks reference it (a system prompt read by every running
call, a query's context read by its several calls, a parent's prefix read by its
children). A task is then charged its private blocks (the rest of its prompt, the
outputs of its calls) plus the keys no other task holds; after it completes it keeps
references only to the keys of its prefix, until its children are done.

The holding relation is a forest over the data-dependency DAG: each task names at most
one parent, the one whose prompt its own extends::

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
    """Private blocks this task holds right now (total while running, own prefix while
    waiting on children, 0 when released)."""
    running: bool = False
    hashes: tuple[int, ...] = ()
    """Chained keys of the full blocks of the task's first prompt, when known: then
    ``total_blocks`` counts every block, and the shared ones are charged once."""
    held_hashes: tuple[int, ...] = ()
    """The keys this task references right now."""

    @property
    def private_blocks(self) -> int:
        return max(0, self.total_blocks - len(self.hashes))


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
        self._refs: dict[int, int] = {}
        """Key -> tasks referencing it (a key is charged once while any does)."""
        self._payer: dict[int, int] = {}
        """Key -> the stage whose budget it is charged to (the first to reference it)."""

    def charge(self, task: TaskMemory) -> int:
        """Blocks admitting ``task`` would reserve now: all of them, or with known keys,
        its private blocks and the keys no running or holding task references."""
        if not task.hashes:
            return task.total_blocks
        return task.private_blocks + sum(1 for key in task.hashes if key not in self._refs)

    def admits(self, task: TaskMemory, *, stage_idle: bool, query_idle: bool) -> bool:
        """Whether ``task`` may start now.

        It fits when its stage's budget and the engine-wide ledger (within the owner's share,
        on a fair-sharing ledger) both have room. Two
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
        blocks = self.charge(task)
        in_budget = self.budgets.free_blocks(task.stage) >= blocks
        if (in_budget or stage_idle) and self.ledger.fits_for(self.owner, blocks):
            return True
        return query_idle and self.ledger.running_tasks == 0

    def allocate(self, task: TaskMemory) -> None:
        self._tasks.add(task)
        if task.hashes:
            self._hold(task, task.private_blocks)
            self._reference(task, task.hashes)
        else:
            self._hold(task, task.total_blocks)
        task.running = True
        self.ledger.task_started(self.owner)

    def complete(
        self, task: TaskMemory, *, children: int, reserve_prefix: bool = True
    ) -> list[TaskMemory]:
        """``task`` finished with ``children`` new child tasks (0 if filtered or last).

        Until they are done it holds its prefix for them (its first prompt's full blocks
        up to ``prefix_blocks``), or with ``reserve_prefix=False`` nothing: it only waits
        for them (what it holds is kept elsewhere, by a soft pin in the engine). Returns
        the tasks that became *done* (their memory is fully released), in order.
        """
        task.completed = True
        task.pending_children = children
        self._stop(task)
        if children > 0:
            if not reserve_prefix:
                self._hold(task, 0)
                self._reference(task, ())
            elif task.hashes:
                self._hold(task, 0)
                self._reference(task, task.hashes[: task.prefix_blocks])
            else:
                own_prefix = task.prefix_blocks - task.shared_blocks
                self._hold(task, max(0, min(own_prefix, task.total_blocks)))
            return []
        return self._finish(task)

    def requeue(self, task: TaskMemory, total_blocks: int) -> None:
        """Release a task that will run again (it needs a larger reservation)."""
        self._hold(task, 0)
        self._reference(task, ())
        self._stop(task)
        task.total_blocks = total_blocks

    def release_all(self) -> int:
        """Give back every block this pipeline holds (failure or cancellation); returns
        the blocks released. The manager must not be used afterwards."""
        released = 0
        for task in self._tasks:
            released += task.held_blocks
            self._hold(task, 0)
            released += sum(1 for key in task.held_hashes if self._refs.get(key) == 1)
            self._reference(task, ())
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
            self._reference(current, ())
            self._tasks.discard(current)
            done.append(current)
            parent = current.parent
            if parent is None:
                break
            parent.pending_children -= 1
            current = parent
        return done

    def _reference(self, task: TaskMemory, keys: tuple[int, ...]) -> None:
        """Set the keys ``task`` references to ``keys``: a key gets charged (to the ledger
        and to this task's stage) when its first reference comes, released at its last."""
        kept = set(keys)
        for key in task.held_hashes:
            if key in kept:
                continue
            count = self._refs[key] - 1
            if count:
                self._refs[key] = count
                continue
            del self._refs[key]
            self.ledger.release(self.owner, 1)
            self.budgets.used_blocks[self._payer.pop(key)] -= 1
        previous = set(task.held_hashes)
        for key in keys:
            if key in previous:
                continue
            if key in self._refs:
                self._refs[key] += 1
                continue
            self._refs[key] = 1
            self._payer[key] = task.stage
            self.ledger.reserve(self.owner, 1)
            self.budgets.used_blocks[task.stage] += 1
        task.held_hashes = keys

    def _hold(self, task: TaskMemory, blocks: int) -> None:
        """Set what ``task`` holds to ``blocks`` (charged to its stage and the ledger)."""
        delta = blocks - task.held_blocks
        if delta > 0:
            self.ledger.reserve(self.owner, delta)
        elif delta < 0:
            self.ledger.release(self.owner, -delta)
        self.budgets.used_blocks[task.stage] += delta
        task.held_blocks = blocks
