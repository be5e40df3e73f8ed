"""The fair-sharing ledger (the job server's): owners ordered by priority, an equal share
of the KV capacity within one priority while another waits, and call slots."""

from __future__ import annotations

import asyncio

import pytest

from kalypso.core.ledger import KVLedger


def test_an_outranked_owner_may_not_reserve_until_the_urgent_one_leaves() -> None:
    ledger = KVLedger(100, fair_share=True)
    ledger.register("large", priority=11_000)
    assert ledger.fits_for("large", 60)
    ledger.register("small", priority=4_000)
    assert not ledger.fits_for("large", 1)
    assert ledger.fits_for("small", 30)
    ledger.unregister("small")
    assert ledger.fits_for("large", 60)


def test_without_fair_sharing_priorities_change_nothing() -> None:
    ledger = KVLedger(100)
    ledger.register("large", priority=11_000)
    ledger.register("small", priority=4_000)
    assert ledger.fits_for("large", 100)


def test_owners_of_one_priority_split_the_capacity_while_one_waits() -> None:
    ledger = KVLedger(100, fair_share=True)
    ledger.register("a")
    ledger.register("b")
    ledger.reserve("a", 90)
    assert ledger.fits_for("a", 10)  # nobody waits: a may take everything
    assert not ledger.fits_for("b", 20)  # no room: b now waits
    ledger.release("a", 40)  # a holds 50
    assert not ledger.fits_for("a", 1)  # beyond its half while b waits
    assert ledger.fits_for("b", 20)
    ledger.task_started("b")  # b got going: it no longer waits
    assert ledger.fits_for("a", 1)


@pytest.mark.asyncio
async def test_calls_wait_for_a_slot_and_for_more_urgent_owners() -> None:
    ledger = KVLedger(100, fair_share=True, call_slots=2)
    ledger.register("large", priority=2)
    order: list[str] = []
    release = asyncio.Event()

    async def call(owner: str, name: str) -> None:
        async with ledger.call_slot(owner):
            order.append(name)
            await release.wait()

    first = [asyncio.create_task(call("large", f"large{i}")) for i in range(3)]
    await asyncio.sleep(0)
    assert order == ["large0", "large1"] and ledger.calls_in_engine == 2
    ledger.register("small", priority=1)
    urgent = asyncio.create_task(call("small", "small0"))
    await asyncio.sleep(0)
    release.set()  # the two running calls end; the small one goes before large2
    await asyncio.sleep(0.01)
    assert order[2] == "small0"
    ledger.unregister("small")
    await asyncio.wait_for(asyncio.gather(*first, urgent), timeout=5)
    assert order[-1] == "large2" and ledger.calls_in_engine == 0


@pytest.mark.asyncio
async def test_a_more_urgent_owner_preempts_the_calls_in_the_engine() -> None:
    ledger = KVLedger(100, fair_share=True, call_slots=4)
    ledger.register("large", priority=2)
    entered = asyncio.Event()
    slots = []

    async def call() -> None:
        async with ledger.call_slot("large") as slot:
            slots.append(slot)
            entered.set()
            await slot.preempted.wait()

    running = asyncio.create_task(call())
    await entered.wait()
    assert not slots[0].preempted.is_set()
    ledger.register("small", priority=1)
    await asyncio.wait_for(running, timeout=5)
    assert slots[0].preempted.is_set() and ledger.preempted_calls == 1
    assert ledger.calls_in_engine == 0


@pytest.mark.asyncio
async def test_an_urgent_owner_waiting_for_room_lets_outranked_tasks_call() -> None:
    """The deadlock it prevents: the large owner's admitted tasks hold the room the small
    owner needs, and could not call (so never finish) while the small one is registered."""
    ledger = KVLedger(100, fair_share=True)
    ledger.register("large", priority=2)
    ledger.reserve("large", 90)
    ledger.task_started("large")
    ledger.register("small", priority=1)
    slot_taken = asyncio.Event()

    async def call() -> None:
        async with ledger.call_slot("large"):
            slot_taken.set()

    waiting = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    assert not slot_taken.is_set()  # the small owner has not asked for room yet
    assert not ledger.fits_for("small", 20)  # now it waits for room
    await asyncio.wait_for(waiting, timeout=5)
    assert not ledger.fits_for("large", 1)  # it still starts no new task
    ledger.release("large", 90)
    ledger.task_stopped("large")
    assert ledger.fits_for("small", 20)


def test_the_urgent_reserve_is_only_for_an_owner_that_outranks_every_holder() -> None:
    ledger = KVLedger(100, fair_share=True, urgent_reserve_blocks=20)
    ledger.register("large", priority=9)
    assert not ledger.fits_for("large", 81)  # alone, it leaves the reserve free
    ledger.reserve("large", 80)
    ledger.task_started("large")
    ledger.register("peer", priority=9)
    assert not ledger.fits_for("peer", 10)  # a peer does not outrank it
    ledger.unregister("peer")
    ledger.register("small", priority=3)
    assert ledger.fits_for("small", 20)  # a more urgent owner finds room at once
    ledger.reserve("small", 20)
    assert not ledger.fits_for("small", 1)  # but never beyond the capacity


def test_the_urgent_reserve_must_leave_room() -> None:
    with pytest.raises(ValueError, match="urgent_reserve_blocks"):
        KVLedger(100, fair_share=True, urgent_reserve_blocks=100)
