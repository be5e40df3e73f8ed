"""Block arithmetic of a paged prefix cache, in one place (engines, scheduler and the ideal
cache all use it).

vLLM's prefix cache works in whole blocks of ``block_size_tokens`` tokens::

    prompt   |-- block 0 --|-- block 1 --|-- block 2 --|-- partial --|
    hashes    h0 = H(None, b0)  h1 = H(h0, b1)  h2 = H(h1, b2)   (none: not full)

A block's hash chains over every token before it, so two prompts share a cached block
only when they agree on every token up to its end. A hit covers whole blocks and never the
prompt's last token (it is always computed, to produce the first output token).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

BlockHash = bytes
"""A 16-byte blake2b digest standing for a full block and every token before it."""


def blocks_for(num_tokens: int, block_size_tokens: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens (rounded up)."""
    return -(-num_tokens // block_size_tokens)


def cache_hit_tokens(shared_tokens: int, prompt_tokens: int, block_size_tokens: int) -> int:
    """Prompt tokens a prefix cache can serve when ``shared_tokens`` leading tokens of a
    ``prompt_tokens``-token prompt are cached: whole blocks only, never the last token."""
    if prompt_tokens <= 0:
        return 0
    usable = min(shared_tokens, prompt_tokens - 1)
    return (usable // block_size_tokens) * block_size_tokens


def shared_full_blocks(a: Sequence[int], b: Sequence[int], block_size_tokens: int) -> int:
    """Leading full blocks two token sequences have in common (compared block by block)."""
    limit = min(len(a), len(b)) // block_size_tokens
    for index in range(limit):
        start = index * block_size_tokens
        end = start + block_size_tokens
        if a[start:end] != b[start:end]:
            return index
    return limit


def hash_block_tokens(parent_hash: BlockHash | None, block_token_ids: Sequence[int]) -> BlockHash:
    """The hash of one full block, chained on its parent's (None for the first block); the
    same in every process (no dependence on ``PYTHONHASHSEED``)."""
    payload = repr((parent_hash, tuple(block_token_ids))).encode()
    return hashlib.blake2b(payload, digest_size=16).digest()


def hash_full_blocks(
    token_ids: Sequence[int], block_size_tokens: int, parent_hash: BlockHash | None = None
) -> list[BlockHash]:
    """Chained hashes of every full block of ``token_ids`` (a partial tail is not hashed)."""
    hashes: list[BlockHash] = []
    for start in range(0, len(token_ids) - block_size_tokens + 1, block_size_tokens):
        parent_hash = hash_block_tokens(parent_hash, token_ids[start : start + block_size_tokens])
        hashes.append(parent_hash)
    return hashes


def chain_keys(
    token_ids: Sequence[int], block_size_tokens: int, *, start_block: int = 0, chain: int = 0
) -> list[int]:
    """Chained keys of full blocks, fast (Python's tuple hash: compare them only within one
    process; :func:`hash_full_blocks` is the stable one). ``start_block`` and ``chain``
    continue a chain computed before (the key of the block before ``start_block``)."""
    keys: list[int] = []
    for index in range(start_block, len(token_ids) // block_size_tokens):
        chain = hash(
            (chain, tuple(token_ids[index * block_size_tokens : (index + 1) * block_size_tokens]))
        )
        keys.append(chain)
    return keys
