"""The prompt/result cache: a greedy call's answer, kept by what decides it.

A greedy call is a deterministic function of the model and its exact prompt token ids
(in the deterministic mode; in bf16 up to near-ties), so its answer can be reused
instead of recomputed - across the queries of a batch, across workflows run together,
and across runs on one cache (the Trading workflow's second day). Sampled calls are never
cached: two samples are meant to differ.

The key is ``(model, decoding parameters, prompt token ids)``; entries are evicted least
recently used when the cache holds more than ``max_tokens`` tokens (prompts plus
answers). :attr:`PromptResultCache.hits` reports what it saved.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from kalypso.engine.protocol import GenerateRequest, GenerateResult

logger = logging.getLogger(__name__)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    saved_prompt_tokens: int = 0
    saved_output_tokens: int = 0


class PromptResultCache:
    """Bounded LRU of greedy results (see the module docstring)."""

    def __init__(self, model: str, max_tokens: int = 2_000_000) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.model = model
        self.max_tokens = max_tokens
        self.stats = CacheStats()
        self._entries: OrderedDict[Hashable, tuple[GenerateResult, int]] = OrderedDict()
        self._size_tokens = 0

    @staticmethod
    def cacheable(request: GenerateRequest) -> bool:
        return request.greedy and request.pin_key is None

    def _key(self, request: GenerateRequest) -> Hashable:
        digest = hashlib.blake2b(repr(request.prompt_token_ids).encode(), digest_size=16)
        return (
            self.model,
            request.max_tokens,
            request.stop,
            request.ignore_eos,
            request.allowed_token_ids,
            request.logprobs,
            len(request.prompt_token_ids),
            digest.digest(),
        )

    def get(self, request: GenerateRequest) -> GenerateResult | None:
        """The cached result for ``request`` (renamed to its id), or None."""
        if not self.cacheable(request):
            return None
        key = self._key(request)
        found = self._entries.get(key)
        if found is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        result = found[0]
        self.stats.hits += 1
        self.stats.saved_prompt_tokens += result.prompt_tokens
        self.stats.saved_output_tokens += result.output_tokens
        return GenerateResult(
            request.request_id,
            result.output_token_ids,
            result.text,
            result.finish_reason,
            result.prompt_tokens,
            result.prompt_tokens,  # nothing computed: all of it was "cached"
            result.timings,
            result.logprobs,
        )

    def put(self, request: GenerateRequest, result: GenerateResult) -> None:
        if not self.cacheable(request):
            return
        key = self._key(request)
        size = len(request.prompt_token_ids) + result.output_tokens
        if key in self._entries:
            return
        self._entries[key] = (result, size)
        self._size_tokens += size
        while self._size_tokens > self.max_tokens and self._entries:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._size_tokens -= dropped

    def __len__(self) -> int:
        return len(self._entries)
