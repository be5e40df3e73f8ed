"""Proactive prefix caching (the Helium paper's section 5, "Proactive Cache Management").

Before a workflow's calls reach them, the static prefixes of its LLM nodes - the tokens
before their first slot, the same for every query (system prompts, instructions) - are
prefilled with ``max_tokens=1`` requests at a low priority, so that the first calls of
each operator find them in the prefix cache instead of computing them side by side in
the same engine step. Only prefixes of at least ``min_tokens`` are warmed, cut to whole
KV blocks (what the cache can hold); each distinct prefix is warmed once.

A node marked ``warm_input`` (the DSL's ``cacheable``) also has each query's *known*
prefix warmed: its prompt up to the first slot whose value does not exist when the run
starts (another call's answer, a Python step's result), when that is longer than its
static prefix - a document or a question read before the call's other inputs are
ready. Those are warmed after the static prefixes, query by query in batch order, only
while they fit in half the cache together (:data:`QUERY_WARM_FRACTION`): warmed prefixes
that the cache cannot keep until their calls run would be computed twice.

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

from kalypso.core.graph import LLMNode, Slot
from kalypso.core.instance import Instance
from kalypso.core.prompt import ChatLayout, TokenIds
from kalypso.core.trt import TemplatedRadixTree, walk_prompt
from kalypso.engine.protocol import Engine, GenerateRequest

logger = logging.getLogger(__name__)

WARM_PRIORITY = 100
"""Engine priority of warm-up requests (vLLM: higher numbers are served after lower)."""

QUERY_WARM_FRACTION = 0.5
"""The share of the engine's KV blocks that warmed per-query prefixes may take together."""


def known_prefix_ids(node: LLMNode, instance: Instance, layout: ChatLayout) -> TokenIds | None:
    """The leading ids of ``node``'s prompt for ``instance`` that exist before the call's
    inputs are all ready: its boundaries and contents up to the first slot that is not
    ready. None when nothing waits (every slot is ready: the call can run at once) and
    for a call that continues another's conversation (its prefix is that call's
    prompt, which that call computes)."""
    if node.continue_from is not None:
        return None

    def ready_ids(part: Slot) -> TokenIds | None:
        return part.source.ids(instance, layout) if part.source.ready(instance) else None

    items, complete = walk_prompt(node, layout, ready_ids)
    return None if complete else tuple(int(i) for i in items if isinstance(i, int))


@dataclass
class WarmReport:
    prefixes: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    """Of those, what the engine already had (a warm-up that found its prefix)."""
    failed: int = 0


@dataclass(frozen=True)
class WarmChoice:
    """The prefixes a run warms: ``static`` ones, then each query's ``known`` ones; and
    how many known prefixes were ``skipped`` for room (:data:`QUERY_WARM_FRACTION`)."""

    static: list[tuple[int, ...]]
    known: list[tuple[int, ...]]
    skipped: int

    def describe(self, least_tokens: int, block_tokens: int) -> str:
        """One line for ``explain()``; ``least_tokens`` is the shortest prefix warmed."""
        if not self.static and not self.known and not self.skipped:
            return (
                f"nothing to warm: no prefix of {least_tokens} tokens or more"
                f" (whole {block_tokens}-token blocks)"
            )
        parts = [f"{len(self.static)} static prefixes ({sum(map(len, self.static))} tokens)"]
        if self.known or self.skipped:
            parts.append(
                f"{len(self.known)} known prefixes of cacheable calls"
                f" ({sum(map(len, self.known))} tokens"
                + (f"; {self.skipped} more left out for room" if self.skipped else "")
                + ")"
            )
        return " and ".join(parts) + ", prefilled at low priority (counted in the run's time)"


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

    def choose(
        self, tree: TemplatedRadixTree, nodes: Sequence[LLMNode], instances: Sequence[Instance]
    ) -> WarmChoice:
        """What to warm (see the module docstring): the distinct static prefixes of
        ``nodes`` (``tree`` is their templated radix tree), then the known prefixes of the
        ``warm_input`` nodes' calls, in batch order, all cut to whole blocks. A call whose
        every input exists at the start is left out: it can run at once."""
        capacity = self.engine.capacity
        block = capacity.block_size_tokens
        least = max(self.min_tokens, block)
        static: dict[tuple[int, ...], None] = {}
        for node in nodes:
            length = tree.static_prefix_tokens(node.node_id)
            length -= length % block
            if length >= least:
                items = tree.templates[node.node_id][:length]
                static[tuple(int(i) for i in items if isinstance(i, int))] = None
        room_blocks = int(capacity.num_blocks * QUERY_WARM_FRACTION)
        known: dict[tuple[int, ...], None] = {}
        known_blocks = skipped = 0
        for instance in instances:
            for node in nodes:
                if not node.warm_input:
                    continue
                ids = known_prefix_ids(node, instance, self.layout)
                if ids is None:
                    continue
                length = len(ids) - len(ids) % block
                if length < least or length <= tree.static_prefix_tokens(node.node_id):
                    continue  # too short, or nothing beyond the static warm-up
                prefix = ids[:length]
                if prefix in known:
                    continue
                if known_blocks + length // block > room_blocks:
                    skipped += 1
                    continue
                known[prefix] = None
                known_blocks += length // block
        return WarmChoice(list(static), list(known), skipped)

    def start(self, choice: WarmChoice) -> None:
        """Send the warm-up requests, static prefixes first (they run while the workflow
        starts)."""
        for number, prefix in enumerate([*choice.static, *choice.known]):
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
