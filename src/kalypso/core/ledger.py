"""The KV ledger: every reservation against one engine's KV capacity, by owner.

Runs that share an engine share a ledger when the caller passes the same one to each
(``arun(..., ledger=...)``); a run given none makes its own, of the engine's capacity.

Each owner registers with a *ledger factor*: how many times the capacity it asks to admit
calls against (1.0, or more where its policy predicts the engine's own preemption is worth
it: :mod:`kalypso.core.ledger_size`). A ledger admits against its capacity times the
least factor of its registered owners (:attr:`KVLedger.admit_blocks`), so a run alone on
a ledger gets its choice and a run that asks for the cache's size brings every run beside
it down to it; a fair-sharing ledger always admits against its capacity. The sum of a
ledger's reservations never exceeds that limit at the time they are made, except through
the documented last-resort rule of :meth:`kalypso.core.memory.MemoryManager.admits` (a
limit lowered by an owner registering later is kept from then on: nothing is reserved
until the reservations fall below it).

Each reservation belongs to an *owner* (a query id). An owner that fails or is cancelled
gives everything back with :meth:`KVLedger.release_owner`, so nothing it held outlives it;
every release wakes the runners waiting for room (:meth:`KVLedger.wait_for_release`).

A ledger made with ``fair_share=True`` (the job server's) shares the engine between
owners, by their priority (:attr:`~kalypso.core.options.RunOptions.request_priority`,
given at :meth:`KVLedger.register`; lower first):

* an owner starts no new task while an owner of a lower priority number is registered,
  and sends no call while such an owner is registered and not waiting for room: the more
  urgent owner has the engine (the job server numbers jobs by size, so a job of ten rows
  started beside one of two thousand runs almost as fast as alone, and the large one goes
  on after it). Calls of an outranked owner already in the engine are *preempted*: the
  slot's :attr:`CallSlot.preempted` is set, the caller aborts the request and sends it
  again once it may (the engine's prefix cache keeps what its prompt computed, and a
  request sent again gives the same answer). An urgent owner waiting for room that
  outranked owners hold lets their admitted tasks call, so that they finish and free it;
* at most ``call_slots`` calls of all owners are in the engine at once (the engine's most
  running requests), so that calls wait here, where priority decides, and not in the
  engine's own queue, where a call already sent competes for every step;
* ``urgent_reserve_blocks`` of the capacity are kept for a more urgent owner's arrival: an
  owner may reserve them only while it outranks every other owner holding blocks (a large
  job alone admits tasks up to the rest, and a small job started beside it finds room at
  once instead of waiting for the large job's tasks to finish);
* among owners of one priority, while another is waiting for room, an owner admits no more
  than an equal share of the capacity among those holding or waiting for blocks. Without
  contention an owner may use the whole capacity (less the urgent reserve).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class LedgerError(RuntimeError):
    """A ledger invariant was about to break (a bug in the caller, never a user error)."""


@dataclass(eq=False)
class CallSlot:
    """One call of ``owner`` in the engine (see :meth:`KVLedger.call_slot`).

    Attributes:
        owner: whose call it is.
        preempted: set when a more urgent owner wants the engine: the caller should abort
            the request and ask for a slot again.
    """

    owner: str
    preempted: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class KVLedger:
    """All reservations against one engine's KV capacity (share one per engine).

    Attributes:
        capacity_blocks: the engine's KV blocks.
        fair_share: share the engine between owners by priority and the capacity between
            owners of one priority (see the module docstring); off, owners take room
            first come, first served and send calls as they come.
        call_slots: with fair sharing, the most calls of all owners in the engine at once
            (0: no limit).
        urgent_reserve_blocks: with fair sharing, blocks only an owner that outranks every
            other owner holding blocks may reserve.
        calls_in_engine: calls sent through :meth:`call_slot` and not finished.
        preempted_calls: calls preempted so far (:attr:`CallSlot.preempted` set).
        reserved_blocks: blocks reserved now, over all owners.
        peak_reserved_blocks: the most ever reserved at once.
    """

    capacity_blocks: int
    fair_share: bool = False
    call_slots: int = 0
    """With fair sharing, the most calls in the engine at once (0: no limit)."""
    urgent_reserve_blocks: int = 0
    calls_in_engine: int = 0
    preempted_calls: int = 0
    reserved_blocks: int = 0
    peak_reserved_blocks: int = 0
    _wanting: set[str] = field(default_factory=set)
    """Owners refused room since they last started a task (fair sharing)."""
    _priority: dict[str, int] = field(default_factory=dict)
    _factor: dict[str, float] = field(default_factory=dict)
    _held: dict[str, int] = field(default_factory=dict)
    _running: dict[str, int] = field(default_factory=dict)
    _owners: set[str] = field(default_factory=set)
    _waiters: list[asyncio.Event] = field(default_factory=list)
    _slots: set[CallSlot] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.capacity_blocks < 1:
            raise ValueError(f"a ledger needs at least one block, got {self.capacity_blocks}")
        if not 0 <= self.urgent_reserve_blocks < self.capacity_blocks:
            raise ValueError(
                f"urgent_reserve_blocks must be in [0, {self.capacity_blocks}),"
                f" got {self.urgent_reserve_blocks}"
            )

    # ---- owners ------------------------------------------------------------------
    def register(self, owner: str, priority: int = 0, ledger_factor: float = 1.0) -> None:
        """Start accounting for ``owner``, of engine priority ``priority`` (what fair
        sharing orders owners by), asking to admit against ``ledger_factor`` times the
        capacity (see the module docstring; ignored with fair sharing).

        Raises:
            ValueError: ``owner`` is already running on this ledger (two queries with one
                query id would release each other's blocks), or a factor below 1 or
                infinite.
        """
        if owner in self._owners:
            raise ValueError(f"a query with id {owner!r} is already running on this engine")
        if not 1.0 <= ledger_factor < math.inf:
            raise ValueError(f"a ledger factor must be >= 1.0 and finite, got {ledger_factor}")
        self._owners.add(owner)
        self._priority[owner] = priority
        self._factor[owner] = ledger_factor
        self._preempt_outranked()

    def unregister(self, owner: str) -> None:
        """Release whatever ``owner`` still holds and forget it (idempotent)."""
        self.release_owner(owner)
        self._owners.discard(owner)
        self._wanting.discard(owner)
        self._factor.pop(owner, None)
        if self._priority.pop(owner, None) is not None:
            self._notify()  # an outranked owner may go on, or the limit rose

    @property
    def owners(self) -> frozenset[str]:
        return frozenset(self._owners)

    # ---- blocks ------------------------------------------------------------------
    @property
    def admit_blocks(self) -> int:
        """What reservations may add up to now: the capacity times the least ledger
        factor of the registered owners (the capacity with fair sharing or no owner)."""
        if self.fair_share or not self._factor:
            return self.capacity_blocks
        return int(self.capacity_blocks * min(self._factor.values()))

    def fits(self, blocks: int) -> bool:
        return self.reserved_blocks + blocks <= self.admit_blocks

    def fits_for(self, owner: str, blocks: int) -> bool:
        """Whether ``owner`` may reserve ``blocks`` more now: they fit, and with fair
        sharing, no owner of a lower priority number is registered, the urgent reserve stays
        free unless ``owner`` outranks every other owner holding blocks, and ``owner`` stays
        within its share while another owner of its priority waits for room. A refusal for
        want of room marks ``owner`` as waiting until it starts a task."""
        if self.fair_share and self._outranked(owner, even_by_waiting=True):
            return False
        if not self.fits(blocks) or (self.fair_share and not self._fits_reserve(owner, blocks)):
            if self.fair_share and owner not in self._wanting:
                self._wanting.add(owner)
                self._notify()  # outranked owners' admitted tasks may call now
            return False
        if not self.fair_share or not self._wanting - {owner}:
            return True
        contenders = {o for o, held in self._held.items() if held > 0}
        contenders |= self._wanting | {owner}
        return self.held_by(owner) + blocks <= self.capacity_blocks // len(contenders)

    def _fits_reserve(self, owner: str, blocks: int) -> bool:
        """Whether ``blocks`` more leave the urgent reserve free, or ``owner`` may take it."""
        if self.reserved_blocks + blocks <= self.capacity_blocks - self.urgent_reserve_blocks:
            return True
        mine = self._priority.get(owner, 0)
        holders = [o for o, held in self._held.items() if held > 0 and o != owner]
        return bool(holders) and all(self._priority.get(o, 0) > mine for o in holders)

    def _outranked(self, owner: str, *, even_by_waiting: bool) -> bool:
        """Whether an owner of a lower priority number than ``owner`` is registered: any
        such owner with ``even_by_waiting``, else one that is not waiting for room."""
        mine = self._priority.get(owner, 0)
        return any(
            priority < mine and (even_by_waiting or other not in self._wanting)
            for other, priority in self._priority.items()
        )

    def _preempt_outranked(self) -> None:
        """Set :attr:`CallSlot.preempted` on the calls of owners that may no longer call."""
        if not self.fair_share:
            return
        for slot in self._slots:
            if not slot.preempted.is_set() and self._outranked(slot.owner, even_by_waiting=False):
                slot.preempted.set()
                self.preempted_calls += 1

    @property
    def free_blocks(self) -> int:
        return max(0, self.admit_blocks - self.reserved_blocks)

    def held_by(self, owner: str) -> int:
        """Blocks ``owner`` holds now."""
        return self._held.get(owner, 0)

    def held_under(self, owner: str) -> int:
        """Blocks ``owner`` and the owners named ``owner.<part>`` (its chunks on a replica
        set, its batch file's pieces) hold now."""
        prefix = owner + "."
        return sum(
            blocks
            for name, blocks in self._held.items()
            if name == owner or name.startswith(prefix)
        )

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
        if owner in self._wanting:
            self._wanting.discard(owner)
            self._preempt_outranked()

    def task_stopped(self, owner: str) -> None:
        count = self._running.get(owner, 0)
        if count < 1:
            raise LedgerError(f"{owner!r} stopping a task it never started")
        self._running[owner] = count - 1
        self._notify()

    # ---- calls -------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def call_slot(self, owner: str) -> AsyncIterator[CallSlot]:
        """Hold one of the engine's call slots while a call of ``owner`` runs: with fair
        sharing, wait until ``owner`` may call (no more urgent owner registered that is
        not waiting for room) and a slot is free; without, go at once. The slot's
        :attr:`CallSlot.preempted` is set if a more urgent owner wants the engine while
        the call runs."""
        if self.fair_share:
            while self._outranked(owner, even_by_waiting=False) or (
                self.call_slots and self.calls_in_engine >= self.call_slots
            ):
                await self.wait_for_release(timeout_s=1.0)
        slot = CallSlot(owner)
        self._slots.add(slot)
        self.calls_in_engine += 1
        try:
            yield slot
        finally:
            self._slots.discard(slot)
            self.calls_in_engine -= 1
            if self.fair_share:
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
