"""The prefill a plan's prompts need at the least: an unbounded prefix cache.

``min_prefill_tokens`` in query results and benchmark records is what this cache computes
for the prompts a run issued, in the order it issued them, and ``min_attention_pairs`` the
query-key pairs those tokens' attention computes (:mod:`kalypso.engine.attention`): every
distinct full-block prefix is computed once and found by every later prompt, as vLLM's
prefix cache would with unlimited memory and no two requests in the same step. Like vLLM,
a hit covers whole blocks only and never the prompt's last token, which is always
computed. A real run on an engine whose cache starts empty can compute more (eviction,
requests that share a prefix computed in the same step), never less. A call the result
cache answers computes nothing and adds nothing to the minimum."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from kalypso.engine.attention import attention_pairs
from kalypso.engine.blocks import chain_keys


class LeastPrefill(NamedTuple):
    """What one prompt computes at the least, given the prompts before it."""

    prefill_tokens: int
    attention_pairs: int
    """Pairs of the computed tokens, each against itself and every earlier prompt token."""
    chain_key: int
    """Chain key of the prompt's last full block (0 when it has none), for
    :meth:`IdealPrefixCache.remember`."""


class IdealPrefixCache:
    """Full-block prefixes seen so far, as chained block keys (never evicted).

    Keys chain Python's own tuple hash: fast, and only ever compared within one process
    (the engines' block hashes, which must be stable across processes, are
    :func:`kalypso.engine.blocks.hash_full_blocks`)."""

    def __init__(self, block_size_tokens: int) -> None:
        if block_size_tokens < 1:
            raise ValueError(f"block size must be positive, got {block_size_tokens}")
        self.block_size_tokens = block_size_tokens
        self._blocks: set[int] = set()

    def _keys(self, token_ids: Sequence[int], start_block: int = 0, chain: int = 0) -> list[int]:
        return chain_keys(token_ids, self.block_size_tokens, start_block=start_block, chain=chain)

    def prefill_tokens(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` this cache would compute; then remembers its blocks."""
        return self.measure(prompt).prefill_tokens

    def measure(self, prompt: Sequence[int]) -> LeastPrefill:
        """What this cache would compute for ``prompt``; then remembers its blocks. Pass
        the chain key to :meth:`remember` with the prompt's output, so the prompt is not
        hashed twice."""
        reusable_blocks = (len(prompt) - 1) // self.block_size_tokens if prompt else 0
        keys = self._keys(prompt)
        hits = 0
        for index, key in enumerate(keys):
            if index >= reusable_blocks or key not in self._blocks:
                break
            hits += 1
        self._blocks.update(keys)
        cached_tokens = hits * self.block_size_tokens
        computed_tokens = len(prompt) - cached_tokens
        return LeastPrefill(
            computed_tokens,
            attention_pairs(computed_tokens, cached_tokens),
            keys[-1] if keys else 0,
        )

    def remember(self, token_ids: Sequence[int], known_tokens: int = 0, chain: int = 0) -> None:
        """Remember the full blocks of ``token_ids`` (a prompt followed by its output, which
        vLLM caches too: a continuation finds them). When ``known_tokens`` leading tokens
        went through :meth:`measure`, ``chain`` is the key it returned: their blocks are
        not hashed again."""
        known_blocks = known_tokens // self.block_size_tokens if chain else 0
        self._blocks.update(self._keys(token_ids, known_blocks, chain if known_blocks else 0))
