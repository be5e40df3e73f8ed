"""The prefill a plan's prompts need at the least: an unbounded prefix cache.

``min_prefill_tokens`` in query results and benchmark records is what this cache computes
for the prompts a run issued, in the order it issued them: every distinct full-block
prefix is computed once and found by every later prompt, as vLLM's prefix cache would with
unlimited memory and no two requests in the same step. Like vLLM, a hit covers whole
blocks only and never the prompt's last token, which is always computed. A real run can
compute more (eviction, requests that share a prefix computed in the same step), never less.
"""

from __future__ import annotations

from collections.abc import Sequence

from kalypso.engine.blocks import hash_full_blocks


class IdealPrefixCache:
    """Full-block prefixes seen so far, as chained block hashes (never evicted)."""

    def __init__(self, block_size_tokens: int) -> None:
        if block_size_tokens < 1:
            raise ValueError(f"block size must be positive, got {block_size_tokens}")
        self.block_size_tokens = block_size_tokens
        self._blocks: set[bytes] = set()

    def prefill_tokens(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` this cache would compute; then remembers its blocks."""
        block = self.block_size_tokens
        reusable_blocks = (len(prompt) - 1) // block if prompt else 0
        hits = 0
        for index, block_hash in enumerate(hash_full_blocks(prompt, block)):
            if index >= reusable_blocks or block_hash not in self._blocks:
                break
            hits += 1
        self.remember(prompt)
        return len(prompt) - hits * block

    def remember(self, token_ids: Sequence[int]) -> None:
        """Remember the full blocks of ``token_ids`` (a prompt followed by its output, which
        vLLM caches too: a continuation finds them)."""
        self._blocks.update(hash_full_blocks(token_ids, self.block_size_tokens))
