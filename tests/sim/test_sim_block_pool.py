"""Block hashes, the LRU free queue, eviction, pins and resets of the simulated block pool."""

from __future__ import annotations

import pytest

from kalypso.engine.blocks import hash_block_tokens, hash_full_blocks
from kalypso.engine.sim import block_pool
from kalypso.engine.sim.block_pool import (
    AllBlocksCleared,
    BlockPool,
    BlockRemoved,
    BlockStored,
    KVBlock,
    KVEvent,
)


def make_pool(num_blocks: int = 6) -> tuple[BlockPool, list[KVEvent]]:
    events: list[KVEvent] = []
    return BlockPool(num_blocks, on_event=events.append), events


def allocate_cached(pool: BlockPool, token_ids: list[int], block_size: int = 4) -> list[KVBlock]:
    """Allocate one block per full block of ``token_ids`` and cache each under its hash."""
    hashes = hash_full_blocks(token_ids, block_size)
    blocks = pool.get_new_blocks(len(hashes))
    for block, block_hash in zip(blocks, hashes, strict=True):
        pool.cache_block(block, block_hash)
    return blocks


def test_same_prefix_gives_same_hashes() -> None:
    a = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44, 45], 4)
    assert len(a) == 2  # the partial tail [9] is not hashed
    assert len(b) == 3
    assert a == b[:2]


def test_hashes_are_chained_on_the_parent() -> None:
    hashes = hash_full_blocks(list(range(8)), 4)
    assert hashes[0] == hash_block_tokens(None, [0, 1, 2, 3])
    assert hashes[1] == hash_block_tokens(hashes[0], [4, 5, 6, 7])


def test_different_first_block_changes_every_later_hash() -> None:
    a = hash_full_blocks(list(range(16)), 4)
    b = hash_full_blocks([99, *range(1, 16)], 4)
    # blocks 1..3 hold the same tokens in both, yet their hashes differ
    assert all(x != y for x, y in zip(a, b, strict=True))


def test_freed_blocks_are_evicted_tail_first_in_lru_order() -> None:
    pool, events = make_pool(6)
    hashes = hash_full_blocks(list(range(12)), 4)
    blocks = allocate_cached(pool, list(range(12)))
    assert [b.block_id for b in blocks] == [0, 1, 2]

    pool.free_blocks(reversed(blocks))  # as a finishing request does
    assert pool.free_queue_block_ids() == [3, 4, 5, 2, 1, 0]

    events.clear()
    pool.get_new_blocks(4)  # 3, 4, 5 are uncached; 2 holds the prefix's last block
    assert events == [BlockRemoved(hashes[2], 2)]
    pool.get_new_blocks(2)
    assert events == [
        BlockRemoved(hashes[2], 2),
        BlockRemoved(hashes[1], 1),
        BlockRemoved(hashes[0], 0),
    ]
    assert pool.num_evicted_blocks == 3
    assert pool.get_cached_block(hashes[0]) is None


def test_unhashed_freed_blocks_are_reused_first() -> None:
    pool, _ = make_pool(6)
    blocks = allocate_cached(pool, list(range(8)))  # blocks 0, 1 cached
    partial = pool.get_new_blocks(1)[0]  # block 2: a partial block, never hashed
    pool.free_blocks(reversed([*blocks, partial]))
    assert pool.free_queue_block_ids() == [2, 3, 4, 5, 1, 0]


def test_cache_hit_on_free_block_takes_it_out_of_the_free_queue() -> None:
    pool, _ = make_pool(4)
    (block,) = allocate_cached(pool, [1, 2, 3, 4])
    pool.free_blocks([block])
    assert block.ref_count == 0 and pool.num_free_blocks == 4

    hit = pool.get_cached_block(hash_full_blocks([1, 2, 3, 4], 4)[0])
    assert hit is block
    pool.touch([block])
    assert block.ref_count == 1
    assert pool.num_free_blocks == 3
    assert block.block_id not in pool.free_queue_block_ids()
    pool.check_invariants()


def test_cache_events() -> None:
    pool, events = make_pool(4)
    hashes = hash_full_blocks(list(range(8)), 4)
    allocate_cached(pool, list(range(8)))
    assert events == [BlockStored(hashes[0], 0), BlockStored(hashes[1], 1)]


def test_pin_holds_blocks_until_unpinned() -> None:
    pool, _ = make_pool(4)
    blocks = allocate_cached(pool, list(range(8)))
    pool.pin("k", blocks)
    pool.free_blocks(reversed(blocks))  # the request finishes
    assert [b.ref_count for b in blocks] == [1, 1]
    assert pool.num_pinned_blocks == 2
    assert pool.free_queue_block_ids() == [2, 3]

    assert pool.unpin("k") == 2
    assert pool.free_queue_block_ids() == [2, 3, 1, 0]
    assert pool.unpin("k") == 0  # unknown key: no-op
    pool.check_invariants()


def test_reset_drops_hashes_of_free_blocks_only() -> None:
    pool, events = make_pool(4)
    in_use = allocate_cached(pool, [1, 2, 3, 4])
    freed = allocate_cached(pool, [5, 6, 7, 8])
    pool.free_blocks(freed)
    events.clear()

    assert pool.reset_prefix_cache() == 1
    assert events == [BlockRemoved(hash_full_blocks([5, 6, 7, 8], 4)[0], freed[0].block_id)]
    assert in_use[0].block_hash is not None

    pool.free_blocks(in_use)
    events.clear()
    assert pool.reset_prefix_cache() == 1
    assert events == [AllBlocksCleared()]
    assert pool.num_cached_blocks == 0
    assert pool.num_evicted_blocks == 0  # resets are not evictions


def test_freeing_an_unreferenced_block_is_an_error() -> None:
    pool, _ = make_pool(2)
    (block,) = pool.get_new_blocks(1)
    pool.free_blocks([block])
    with pytest.raises(ValueError, match="freed more often"):
        pool.free_blocks([block])


def test_cannot_allocate_more_than_free() -> None:
    pool, _ = make_pool(2)
    with pytest.raises(ValueError, match="only 2 are free"):
        pool.get_new_blocks(3)


def test_block_pool_has_no_hashing_of_its_own() -> None:
    """One implementation of block hashing (kalypso.engine.blocks) for every layer."""
    assert not hasattr(block_pool, "hash_block_tokens")
    assert not hasattr(block_pool, "hash_full_blocks")
