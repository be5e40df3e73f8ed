"""The KV ledger: every reservation against one engine's KV capacity, by owner.

Runs that share an engine share a ledger when the caller passes the same one to each
(``arun(..., ledger=...)``); a run given none makes its own, of the engine's capacity. The
sum of a ledger's reservations never exceeds the capacity it was given (no over-commit),
except through the documented last-resort rule of
:meth:`kalypso.core.memory.MemoryManager.admits`.

Each reservation belongs to an *owner* (a query id). An owner that fails or is cancelled
gives everything back with :meth:`KVLedger.release_owner`, so nothing it held outlives it;
every release wakes the runners waiting for room (:meth:`KVLedger.wait_for_release`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class LedgerError(RuntimeError):
    """A ledger invariant was about to break (a bug in the caller, never a user error)."""


@dataclass
class KVLedger:
    """All reservations against one engine's KV capacity (share one per engine).

    Attributes:
        capacity_blocks: the engine's KV blocks.
        reserved_blocks: blocks reserved now, over all owners.
        peak_reserved_blocks: the most ever reserved at once.
    """

    capacity_blocks: int
    reserved_blocks: int = 0
    peak_reserved_blocks: int = 0
    _held: dict[str, int] = field(default_factory=dict)
    _running: dict[str, int] = field(default_factory=dict)
    _owners: set[str] = field(default_factory=set)
    _waiters: list[asyncio.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.capacity_blocks < 1:
            raise ValueError(f"a ledger needs at least one block, got {self.capacity_blocks}")

    # ---- owners ------------------------------------------------------------------
    def register(self, owner: str) -> None:
        """Start accounting for ``owner``.

        Raises:
            ValueError: ``owner`` is already running on this ledger (two queries with one
                query id would release each other's blocks).
        """
        if owner in self._owners:
            raise ValueError(f"a query with id {owner!r} is already running on this engine")
        self._owners.add(owner)

    def unregister(self, owner: str) -> None:
        """Release whatever ``owner`` still holds and forget it (idempotent)."""
        self.release_owner(owner)
        self._owners.discard(owner)

    @property
    def owners(self) -> frozenset[str]:
        return frozenset(self._owners)

    # ---- blocks ------------------------------------------------------------------
    def fits(self, blocks: int) -> bool:
        return self.reserved_blocks + blocks <= self.capacity_blocks

    @property
    def free_blocks(self) -> int:
        return self.capacity_blocks - self.reserved_blocks

    def held_by(self, owner: str) -> int:
        """Blocks ``owner`` holds now."""
        return self._held.get(owner, 0)

    def reserve(self, owner: str, blocks: int) -> None:
        if blocks < 0:
            raise LedgerError(f"reserving {blocks} blocks")
        self._held[owner] = self._held.get(owner, 0) + blocks
        self.reserved_blocks += blocks
        self.peak_reserved_blocks = max(self.peak_reserved_blocks, self.reserved_blocks)

    def release(self, owner: str, blocks: int) -> None:
        held = self._held.get(owner, 0)
        if blocks < 0 or blocks > held:
            raise LedgerError(f"{owner!r} releasing {blocks} blocks, holds {held}")
        self._held[owner] = held - blocks
        self.reserved_blocks -= blocks
        if blocks:
            self._notify()

    def release_owner(self, owner: str) -> int:
        """Give back everything ``owner`` holds and forget its running tasks; returns the
        blocks released."""
        blocks = self._held.pop(owner, 0)
        self.reserved_blocks -= blocks
        running = self._running.pop(owner, 0)
        if blocks or running:
            logger.debug("released %d blocks and %d running tasks of %s", blocks, running, owner)
            self._notify()
        return blocks

    # ---- running tasks -----------------------------------------------------------
    @property
    def running_tasks(self) -> int:
        """Tasks running now, over all owners."""
        return sum(self._running.values())

    def task_started(self, owner: str) -> None:
        self._running[owner] = self._running.get(owner, 0) + 1

    def task_stopped(self, owner: str) -> None:
        count = self._running.get(owner, 0)
        if count < 1:
            raise LedgerError(f"{owner!r} stopping a task it never started")
        self._running[owner] = count - 1
        self._notify()

    # ---- waiting for room --------------------------------------------------------
    async def wait_for_release(self, timeout_s: float | None = None) -> None:
        """Wait until some owner releases blocks or stops a task (or ``timeout_s``)."""
        event = asyncio.Event()
        self._waiters.append(event)
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            if event in self._waiters:
                self._waiters.remove(event)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()
