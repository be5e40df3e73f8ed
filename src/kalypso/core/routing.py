"""Per-request routers over several engines: the baselines a replica set is compared with.

A :class:`RoutedEngine` is one engine made of several: it sends each request to one of
them as it comes, as a serving router in front of a fleet does, knowing nothing of the
run's later calls. A run on it is an ordinary run on one (large) engine. Two rules:

* ``"round-robin"``: the next engine in turn; no affinity.
* ``"prefix-affinity"``: the rule of Ray Serve LLM's ``PrefixCacheAffinityRouter`` (and,
  with other thresholds, SGLang's cache-aware router). If the engines' loads (requests in
  flight) differ by more than ``imbalance_threshold``, the least loaded engine. Otherwise
  the engine whose earlier prompts share the longest prefix with this one (a tree of
  block-hash chains per engine), if that prefix is at least ``match_rate_threshold`` of
  the prompt; else the engine that has seen the fewest prefix blocks. Ties: least loaded,
  then first.

Its capacity is the sum of the engines' (blocks, running requests); its tokenizer and
cost model are the first engine's (the replicas are meant to be alike). Pinning is not
supported: a pin key's later requests could land elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterator, Sequence

from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import (
    Engine,
    EngineCapacity,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    Tokenizer,
    host_work,
)

logger = logging.getLogger(__name__)

ROUTING_RULES = ("round-robin", "prefix-affinity")

IMBALANCE_THRESHOLD = 10
"""Ray Serve LLM's default: route by load when queue lengths differ by more than this."""

MATCH_RATE_THRESHOLD = 0.1
"""Ray Serve LLM's default: follow a prefix match of at least this share of the prompt."""


class RoutedEngine:
    """Several engines behind a per-request router (see the module docstring).

    Args:
        engines: at least one; the routed engine does not close them unless asked
            (:meth:`close` closes them all).
        rule: one of :data:`ROUTING_RULES`.
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        rule: str = "prefix-affinity",
        *,
        imbalance_threshold: int = IMBALANCE_THRESHOLD,
        match_rate_threshold: float = MATCH_RATE_THRESHOLD,
    ) -> None:
        if not engines:
            raise ValueError("a routed engine needs at least one engine")
        if rule not in ROUTING_RULES:
            raise ValueError(f"rule must be one of {ROUTING_RULES}, got {rule!r}")
        self.engines = list(engines)
        self.rule = rule
        self.imbalance_threshold = imbalance_threshold
        self.match_rate_threshold = match_rate_threshold
        self.routed = [0] * len(self.engines)
        """Requests sent to each engine so far."""
        self._in_flight = [0] * len(self.engines)
        self._seen: list[set[int]] = [set() for _ in self.engines]
        """Per engine, the hashes of the block-aligned prompt prefixes sent to it."""
        self._turn = itertools.cycle(range(len(self.engines)))
        first = self.engines[0].capacity
        self._capacity = EngineCapacity(
            sum(e.capacity.num_blocks for e in self.engines),
            first.block_size_tokens,
            min(e.capacity.max_model_len_tokens for e in self.engines),
            max_running_requests=(
                sum(e.capacity.max_running_requests or 0 for e in self.engines) or None
            ),
        )

    @property
    def name(self) -> str:
        return f"{self.rule} over {len(self.engines)} x {self.engines[0].name}"

    @property
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engines[0].tokenizer

    @property
    def supports_pinning(self) -> bool:
        return False

    @property
    def cost_model(self) -> CostModel | None:
        return self.engines[0].cost_model

    def _prefix_hashes(self, prompt: Sequence[int]) -> list[int]:
        size = self._capacity.block_size_tokens
        chain: list[int] = []
        previous = 0
        for start in range(0, len(prompt) - size + 1, size):
            previous = hash((previous, tuple(prompt[start : start + size])))
            chain.append(previous)
        return chain

    def choose(self, request: GenerateRequest) -> int:
        """The engine ``request`` goes to (see the module docstring)."""
        if self.rule == "round-robin":
            return next(self._turn)
        count = len(self.engines)
        least = min(range(count), key=lambda i: (self._in_flight[i], i))
        if max(self._in_flight) - self._in_flight[least] > self.imbalance_threshold:
            return least
        chain = self._prefix_hashes(request.prompt_token_ids)
        matched = [0] * count
        for i in range(count):
            for key in chain:
                if key not in self._seen[i]:
                    break
                matched[i] += 1
        best = max(matched)
        size = self._capacity.block_size_tokens
        prompt_tokens = max(len(request.prompt_token_ids), 1)
        if best and best * size / prompt_tokens >= self.match_rate_threshold:
            candidates = [i for i in range(count) if matched[i] == best]
        else:
            fewest = min(len(seen) for seen in self._seen)
            candidates = [i for i in range(count) if len(self._seen[i]) == fewest]
        return min(candidates, key=lambda i: (self._in_flight[i], i))

    @contextlib.contextmanager
    def host_work(self) -> Iterator[None]:
        """The caller's work off the event loop, told to every engine that must know."""
        with contextlib.ExitStack() as stack:
            for engine in self.engines:
                stack.enter_context(host_work(engine))
            yield

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        target = self.choose(request)
        self.routed[target] += 1
        self._seen[target].update(self._prefix_hashes(request.prompt_token_ids))
        self._in_flight[target] += 1
        try:
            return await self.engines[target].generate(request)
        finally:
            self._in_flight[target] -= 1

    async def stats(self) -> EngineStats:
        parts = await asyncio.gather(*(engine.stats() for engine in self.engines))
        return EngineStats(
            running_requests=sum(p.running_requests for p in parts),
            waiting_requests=sum(p.waiting_requests for p in parts),
            prefix_cache_queries_tokens=sum(p.prefix_cache_queries_tokens for p in parts),
            prefix_cache_hits_tokens=sum(p.prefix_cache_hits_tokens for p in parts),
            kv_usage_fraction=sum(p.kv_usage_fraction for p in parts) / len(parts),
            prefill_time_s=sum(p.prefill_time_s for p in parts),
            decode_time_s=sum(p.decode_time_s for p in parts),
            preemptions=sum(p.preemptions for p in parts),
        )

    async def reset_prefix_cache(self) -> None:
        await asyncio.gather(*(engine.reset_prefix_cache() for engine in self.engines))
        self._seen = [set() for _ in self.engines]

    async def unpin(self, pin_key: str) -> None:
        return None

    async def unpin_all(self) -> None:
        return None

    async def stalled_requests(self) -> int:
        return 0

    async def close(self) -> None:
        for engine in self.engines:
            await engine.close()
