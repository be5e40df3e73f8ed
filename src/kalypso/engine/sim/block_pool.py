"""The KV block pool: fixed-size blocks, chained prefix hashes, reference counts, an LRU
free queue, and pins. It mirrors vLLM v1's ``BlockPool`` (``vllm/v1/core/block_pool.py``).

* A *full* block of tokens is identified by the hash of (parent block hash, its tokens),
  so a block hash stands for the whole prefix up to the end of that block
  (:func:`kalypso.engine.blocks.hash_full_blocks`).
* A block is referenced by every running request that uses it (``ref_count``). A block
  with no reference sits in the *free queue*, which is also the eviction order: blocks
  are allocated from its head and a cached block taken from there loses its hash then
  ("eviction on allocation"). A cache hit on a free block takes it out of the queue.
* Freed blocks enter the queue in the order given, the first to be evicted first. Blocks
  with a hash go to the tail (least recently used evicted first); blocks without a hash
  hold nothing reusable and go to the head, to be reused first (vLLM 0.32 does the same).
* A pin keeps one extra reference on blocks under a key until :meth:`BlockPool.unpin`.
  A *soft* pin does too, but the pool gives it up by itself, newest first, when an
  allocation finds too few free blocks (:meth:`BlockPool.release_soft_pins`), as
  Kalypso's pinning scheduler does in vLLM (:mod:`kalypso.engine.vllm_pinning`).

The pool has no null block: all ``num_blocks`` blocks are usable.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from kalypso.engine.blocks import BlockHash


@dataclass(frozen=True)
class BlockStored:
    """A block became reusable under ``block_hash`` (vLLM's ``BlockStored`` event)."""

    block_hash: BlockHash
    block_id: int


@dataclass(frozen=True)
class BlockRemoved:
    """A block lost its hash: evicted, or dropped by a prefix-cache reset."""

    block_hash: BlockHash
    block_id: int


@dataclass(frozen=True)
class AllBlocksCleared:
    """The whole prefix cache was reset while no block was in use."""


KVEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared
KVEventSink: TypeAlias = Callable[[KVEvent], None]


@dataclass(eq=False)
class KVBlock:
    """One block of KV cache. ``block_hash`` is set while the block is reusable."""

    block_id: int
    ref_count: int = 0
    block_hash: BlockHash | None = None


class BlockPool:
    """``num_blocks`` KV blocks with prefix caching; see the module docstring."""

    def __init__(self, num_blocks: int, on_event: KVEventSink | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self._blocks = [KVBlock(block_id) for block_id in range(num_blocks)]
        self._free: OrderedDict[int, KVBlock] = OrderedDict((b.block_id, b) for b in self._blocks)
        self._cached: dict[BlockHash, dict[int, KVBlock]] = {}
        """Hash -> the blocks holding it (two requests may compute the same block)."""
        self._pins: dict[str, list[KVBlock]] = {}
        self._soft: OrderedDict[str, None] = OrderedDict()
        """Keys pinned softly, in pinning order (the last is released first)."""
        self.num_soft_released_blocks = 0
        """Block references soft pins gave up to make room."""
        self._on_event = on_event
        self.num_evicted_blocks = 0
        """Cached blocks whose hash was dropped to reuse them (resets not counted)."""

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request or pin references (cached or not): all can be allocated."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return len(self._blocks) - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return sum(len(blocks) for blocks in self._cached.values())

    def pin_keys(self) -> list[str]:
        """The keys that pin blocks now."""
        return list(self._pins)

    @property
    def num_pinned_blocks(self) -> int:
        return sum(len(blocks) for blocks in self._pins.values())

    def block(self, block_id: int) -> KVBlock:
        return self._blocks[block_id]

    def free_queue_block_ids(self) -> list[int]:
        """Free block ids in eviction order (the first is allocated next)."""
        return list(self._free)

    def get_cached_block(self, block_hash: BlockHash) -> KVBlock | None:
        """A block holding ``block_hash``, or None."""
        blocks = self._cached.get(block_hash)
        return next(iter(blocks.values())) if blocks else None

    def get_new_blocks(self, num_blocks: int) -> list[KVBlock]:
        """Take ``num_blocks`` blocks from the head of the free queue, evicting their
        hashes; each returned block has ``ref_count == 1``.

        Raises:
            ValueError: fewer than ``num_blocks`` blocks are free.
        """
        if num_blocks > len(self._free):
            raise ValueError(f"cannot get {num_blocks} blocks: only {len(self._free)} are free")
        taken: list[KVBlock] = []
        for _ in range(num_blocks):
            _, block = self._free.popitem(last=False)
            if block.block_hash is not None:
                self.num_evicted_blocks += 1
                self._drop_hash(block)
            block.ref_count = 1
            taken.append(block)
        return taken

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Add a reference to each block (a cache hit); free ones leave the free queue."""
        for block in blocks:
            if block.ref_count == 0:
                del self._free[block.block_id]
            block.ref_count += 1

    def cache_block(self, block: KVBlock, block_hash: BlockHash) -> None:
        """Make a full, referenced, not yet hashed block reusable under ``block_hash``."""
        if block.block_hash is not None:
            raise ValueError(f"block {block.block_id} is already cached")
        block.block_hash = block_hash
        self._cached.setdefault(block_hash, {})[block.block_id] = block
        self._emit(BlockStored(block_hash, block.block_id))

    def free_blocks(self, ordered_blocks: Iterable[KVBlock]) -> None:
        """Drop one reference from each block. Blocks left unreferenced join the free
        queue in the given order, the first to be evicted first: hashed ones at the tail,
        unhashed ones at the head."""
        to_head: list[KVBlock] = []
        for block in ordered_blocks:
            if block.ref_count < 1:
                raise ValueError(f"block {block.block_id} freed more often than referenced")
            block.ref_count -= 1
            if block.ref_count > 0:
                continue
            if block.block_hash is None:
                to_head.append(block)
            else:
                self._free[block.block_id] = block
        for block in reversed(to_head):
            self._free[block.block_id] = block
            self._free.move_to_end(block.block_id, last=False)

    def pin(self, pin_key: str, blocks: Sequence[KVBlock], *, soft: bool = False) -> None:
        """Keep an extra reference on ``blocks`` under ``pin_key`` (added to any blocks
        already pinned under it). A key is soft while every pin under it was soft."""
        self.touch(blocks)
        known = pin_key in self._pins
        self._pins.setdefault(pin_key, []).extend(blocks)
        if soft and not known:
            self._soft[pin_key] = None
        elif not soft:
            self._soft.pop(pin_key, None)

    def unpin(self, pin_key: str) -> int:
        """Release every block pinned under ``pin_key``, last pinned first to the free
        queue; returns how many references were released (0 for an unknown key)."""
        self._soft.pop(pin_key, None)
        blocks = self._pins.pop(pin_key, [])
        self.free_blocks(reversed(blocks))
        return len(blocks)

    def release_soft_pins(self, num_free_blocks: int) -> int:
        """Unpin soft keys, newest first, until ``num_free_blocks`` blocks are free or no
        soft pin is left; returns the block references released."""
        released = 0
        while self._soft and len(self._free) < num_free_blocks:
            pin_key, _ = self._soft.popitem(last=True)
            released += self.unpin(pin_key)
        self.num_soft_released_blocks += released
        return released

    def reset_prefix_cache(self) -> int:
        """Drop the hashes of all free blocks (blocks in use keep theirs); returns how
        many were dropped. Emits :class:`AllBlocksCleared` when no block is in use, as
        vLLM does, else one :class:`BlockRemoved` per dropped hash."""
        all_free = self.num_used_blocks == 0
        dropped = 0
        for block in self._free.values():
            if block.block_hash is not None:
                dropped += 1
                self._drop_hash(block, emit=not all_free)
        if all_free:
            self._emit(AllBlocksCleared())
        return dropped

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (for tests)."""
        for block in self._blocks:
            in_queue = block.block_id in self._free
            assert block.ref_count >= 0, f"block {block.block_id}: negative ref count"
            assert in_queue == (block.ref_count == 0), (
                f"block {block.block_id}: ref_count={block.ref_count} but"
                f" {'in' if in_queue else 'not in'} the free queue"
            )
            if block.block_hash is not None:
                assert self._cached[block.block_hash].get(block.block_id) is block
        assert self.num_cached_blocks == sum(b.block_hash is not None for b in self._blocks)
        for pin_key, pinned in self._pins.items():
            for block in pinned:
                assert block.ref_count > 0, f"pin {pin_key!r}: block {block.block_id} unreferenced"

    def _drop_hash(self, block: KVBlock, emit: bool = True) -> None:
        assert block.block_hash is not None
        block_hash, block.block_hash = block.block_hash, None
        holders = self._cached[block_hash]
        del holders[block.block_id]
        if not holders:
            del self._cached[block_hash]
        if emit:
            self._emit(BlockRemoved(block_hash, block.block_id))

    def _emit(self, event: KVEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)
