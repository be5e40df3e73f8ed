"""Proactive prefix caching (the Helium paper's section 5, "Proactive Cache Management").

Before a workflow's calls reach them, the static prefixes of its LLM nodes - the tokens
before their first slot, the same for every query (system prompts, instructions) - are
prefilled with ``max_tokens=1`` requests at a low priority, so that the first calls of
each operator find them in the prefix cache instead of computing them side by side in
the same engine step. Only prefixes of at least ``min_tokens`` are warmed, cut to whole
KV blocks (what the cache can hold); each distinct prefix is warmed once.

The warm-up runs inside the timed run (the paper's reference code warms before it and
does not report the time). With an engine that supports explicit pinning, ``pin=True``
(the workflow front end sets it under ``pinning="explicit"``) keeps the warmed blocks
resident under one *soft* pin until :meth:`Warmer.release` (the run's end): the engine
gives them up when a request cannot get its blocks, newest pins first, so the run's
shared prefixes, pinned before anything else, are the last to go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from kalypso.core.graph import LLMNode
from kalypso.core.prompt import ChatLayout
from kalypso.core.trt import TemplatedRadixTree
from kalypso.engine.protocol import Engine, GenerateRequest

logger = logging.getLogger(__name__)

WARM_PRIORITY = 100
"""Engine priority of warm-up requests (vLLM: higher numbers are served after lower)."""


@dataclass
class WarmReport:
    prefixes: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    """Of those, what the engine already had (a warm-up that found its prefix)."""
    failed: int = 0


@dataclass
class Warmer:
    """Warms the static prefixes of ``nodes`` on ``engine`` (see the module docstring)."""

    engine: Engine
    layout: ChatLayout
    owner: str
    min_tokens: int = 64
    pin: bool = False
    report: WarmReport = field(default_factory=WarmReport)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def prefixes(self, nodes: Sequence[LLMNode]) -> list[tuple[int, ...]]:
        """The distinct static prefixes worth warming, cut to whole blocks."""
        tree = TemplatedRadixTree.of(nodes, self.layout)
        block = self.engine.capacity.block_size_tokens
        out: dict[tuple[int, ...], None] = {}
        for node in nodes:
            length = tree.static_prefix_tokens(node.node_id)
            length -= length % block
            if length >= max(self.min_tokens, block):
                ids = tree.templates[node.node_id][:length]
                out[tuple(int(i) for i in ids if isinstance(i, int))] = None
        return list(out)

    def start(self, nodes: Sequence[LLMNode]) -> None:
        """Send the warm-up requests (they run while the workflow starts)."""
        for number, prefix in enumerate(self.prefixes(nodes)):
            self._tasks.append(asyncio.create_task(self._warm(number, prefix)))

    async def _warm(self, number: int, prefix: tuple[int, ...]) -> None:
        request = GenerateRequest(
            request_id=f"{self.owner}:warm:{number}",
            prompt_token_ids=prefix,
            max_tokens=1,
            priority=WARM_PRIORITY,
            pin_key=f"{self.owner}:warm" if self.pinned else None,
            pin_soft=self.pinned,
        )
        try:
            result = await self.engine.generate(request)
        except Exception as exc:  # a warm-up is an optimization: never a failure
            self.report.failed += 1
            logger.debug("warm-up %s failed: %r", request.request_id, exc)
            return
        self.report.prefixes += 1
        self.report.tokens += result.prompt_tokens
        self.report.cached_tokens += result.cached_tokens

    async def release(self) -> None:
        """Wait for (or cancel) the warm-ups still running, and unpin what they pinned."""
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.pinned:
            await self.engine.unpin(f"{self.owner}:warm")

    @property
    def pinned(self) -> bool:
        """Whether the warm-ups pin what they warm (asked for, and the engine can)."""
        return self.pin and self.engine.supports_pinning
