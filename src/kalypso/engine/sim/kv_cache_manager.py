"""Per-request block tables over the block pool: prefix lookup, slot allocation, freeing
and pinning. It mirrors vLLM v1's ``KVCacheManager`` for one full-attention group
(``vllm/v1/core/kv_cache_manager.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.engine.blocks import blocks_for, cache_hit_tokens
from kalypso.engine.sim.block_pool import BlockPool, KVBlock
from kalypso.engine.sim.request import SimRequest


@dataclass(frozen=True)
class PrefixHit:
    """Cached blocks found for a waiting request's leading full blocks."""

    blocks: tuple[KVBlock, ...]
    num_tokens: int


@dataclass(frozen=True)
class Allocation:
    """A successful :meth:`KVCacheManager.allocate_slots` (vLLM returns None on failure)."""

    num_hit_blocks: int
    num_new_blocks: int


class KVCacheManager:
    """Block tables of the requests holding KV blocks."""

    def __init__(self, pool: BlockPool, block_size_tokens: int) -> None:
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens must be >= 1, got {block_size_tokens}")
        self.pool = pool
        self.block_size_tokens = block_size_tokens
        self._blocks: dict[str, list[KVBlock]] = {}
        self._num_hashed_blocks: dict[str, int] = {}

    def num_blocks_held(self, request_id: str) -> int:
        return len(self._blocks.get(request_id, ()))

    def blocks_of(self, request_id: str) -> tuple[KVBlock, ...]:
        """The blocks ``request_id`` references now (its block table)."""
        return tuple(self._blocks.get(request_id, ()))

    def get_computed_blocks(self, request: SimRequest) -> PrefixHit:
        """The longest run of leading full blocks already cached, capped so that at least
        the last token is computed (:func:`kalypso.engine.blocks.cache_hit_tokens`)."""
        max_tokens = cache_hit_tokens(
            request.num_tokens, request.num_tokens, self.block_size_tokens
        )
        max_blocks = max_tokens // self.block_size_tokens
        hit: list[KVBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hit.append(block)
        return PrefixHit(tuple(hit), len(hit) * self.block_size_tokens)

    def allocate_slots(
        self, request: SimRequest, num_new_tokens: int, hit: PrefixHit | None = None
    ) -> Allocation | None:
        """Give ``request`` the blocks to compute ``num_new_tokens`` more tokens after its
        computed ones (and after ``hit``, a prefix hit it is being admitted with).

        Soft pins are given up first, newest first, if the free blocks do not suffice
        (counting hit blocks that are free, since using them takes them out of the free
        queue). Returns None, changing nothing else, if they still do not. Otherwise
        references the hit blocks, takes new blocks from the free queue and caches every
        block the request's computed-or-scheduled tokens fill.
        """
        hit_blocks = hit.blocks if hit is not None else ()
        held = self._blocks.setdefault(request.request_id, [])
        num_computed = request.num_computed_tokens + len(hit_blocks) * self.block_size_tokens
        num_required = blocks_for(num_computed + num_new_tokens, self.block_size_tokens)
        num_new_blocks = max(num_required - len(held) - len(hit_blocks), 0)
        num_free_hits = sum(1 for block in hit_blocks if block.ref_count == 0)
        if num_new_blocks + num_free_hits > self.pool.num_free_blocks:
            self.pool.release_soft_pins(num_new_blocks + num_free_hits)
            num_free_hits = sum(1 for block in hit_blocks if block.ref_count == 0)
        if num_new_blocks + num_free_hits > self.pool.num_free_blocks:
            if not held:
                del self._blocks[request.request_id]
            return None
        self.pool.touch(hit_blocks)
        held.extend(hit_blocks)
        held.extend(self.pool.get_new_blocks(num_new_blocks))
        self._cache_full_blocks(request, min(num_computed + num_new_tokens, request.num_tokens))
        return Allocation(num_hit_blocks=len(hit_blocks), num_new_blocks=num_new_blocks)

    def free(self, request: SimRequest) -> None:
        """Release the request's blocks, last block first, so that a prefix's head blocks
        are evicted last."""
        blocks = self._blocks.pop(request.request_id, [])
        self._num_hashed_blocks.pop(request.request_id, None)
        self.pool.free_blocks(reversed(blocks))

    def pin(
        self,
        request: SimRequest,
        pin_key: str,
        *,
        max_blocks: int | None = None,
        soft: bool = False,
    ) -> None:
        """Pin the request's cached (full, hashed) blocks under ``pin_key``: all of them,
        or the first ``max_blocks``; ``soft`` as in :meth:`BlockPool.pin`."""
        num_hashed = self._num_hashed_blocks.get(request.request_id, 0)
        if max_blocks is not None:
            num_hashed = min(num_hashed, max_blocks)
        self.pool.pin(pin_key, self._blocks.get(request.request_id, [])[:num_hashed], soft=soft)

    def _cache_full_blocks(self, request: SimRequest, num_tokens: int) -> None:
        """Hash the request's blocks filled by its first ``num_tokens`` tokens (blocks
        from a prefix hit already carry their hash)."""
        held = self._blocks[request.request_id]
        start = self._num_hashed_blocks.get(request.request_id, 0)
        num_full = num_tokens // self.block_size_tokens
        for index in range(start, num_full):
            if held[index].block_hash is None:
                self.pool.cache_block(held[index], request.block_hashes[index])
        self._num_hashed_blocks[request.request_id] = max(start, num_full)
