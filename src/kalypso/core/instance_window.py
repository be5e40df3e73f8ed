"""How many instances' conversation groups a run keeps in flight.

A call that continues its producer's conversation (a debate's next round) finds that
conversation in the prefix cache only while it stays resident. When every ready call is
admitted as soon as the ledger has room, the light first rounds of many instances fill a
small cache; their heavier next rounds then fit one instance at a time, and the
conversations of the instances waiting their turn are evicted and computed again (Debate
on 44 blocks of 32 tokens computed 1.13x to 1.31x its minimum prefill).

The calls that such continuations tie together form a *conversation group*
(:meth:`~kalypso.core.graph.TaskGraph.conversation_groups`): a debate's rounds, or a
trading desk's three risk analysts, each continuing its own conversation and reading
the other two. A *window* admits the first call of an instance's group only while fewer
than ``window`` groups of instances are in flight (started, and not every call
completed). Calls outside the groups are never held. It is::

    window = ceil(capacity_blocks / peak_blocks)

where ``peak_blocks`` is one instance's group at its largest working set at one
dependency level (its calls at that level together: the full prompt blocks they share
counted once, each call's partial last block and its output at its cap): as many groups
as fill the cache at their peak. The window never holds back calls that the cache could
hold at their peak. (One more, to start while another finishes, was measured too: on
real vLLM it was no faster on Debate and computed 5% more prefill.) There is no window
when:

* a group's peak does not fit in the cache: its own calls evict its conversations,
  whatever the window;
* the engine's most running calls (its sequences), each the size of a call at a group's
  peak, fit in the cache: then nothing is evicted to make room for running calls, and
  the window would only cost concurrency (Trading at paper scale on the simulator: 0.6%
  slower with one, the same prefill).

A cache-aware run uses a window only for a graph with conversation groups: without them
no conversation waits to be continued, and the window would only cost concurrency.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence, Set
from dataclasses import dataclass

from kalypso.core.cost import CallCost
from kalypso.engine.blocks import blocks_for


def llm_levels(ancestors: Mapping[str, Set[str]]) -> dict[str, int]:
    """Each LLM node's dependency level: 0 without LLM ancestors, else one more than the
    deepest of them (``ancestors`` as :meth:`TaskGraph.llm_ancestors` gives them)."""
    level: dict[str, int] = {}
    for op in sorted(ancestors, key=lambda o: len(ancestors[o])):  # ancestors have fewer
        level[op] = 1 + max((level[a] for a in ancestors[op]), default=-1)
    return level


@dataclass(frozen=True)
class InstancePeak:
    """The largest working set of one unit of the window (an instance's conversation
    group) at one dependency level: ``blocks`` held by its ``calls`` at that level
    together."""

    blocks: int
    calls: int


def instance_peak(
    calls: Sequence[CallCost],
    sites: Sequence[tuple[str, Hashable]],
    levels: Mapping[str, int],
    block_size_tokens: int,
) -> InstancePeak:
    """The largest working set of one unit's calls at one level, over the units the
    calls belong to.

    ``calls`` are as the cost model sees them (:mod:`kalypso.core.cost`: prompts as
    tokens, another call's answer as placeholder tokens, outputs at their cap) and
    ``sites[i]`` is call ``i``'s (LLM node id, unit key): the unit is what the window
    counts, an instance's conversation group. Calls of one unit and level hold the full
    blocks their prompts share once, identified as the prefix cache identifies them (a
    key chained over every block up to it), and each its partial last block and its
    output.

    Raises:
        ValueError: a block size below 1, no calls, or ``sites`` not one per call.
    """
    if block_size_tokens < 1:
        raise ValueError(f"block size must be >= 1 token, got {block_size_tokens}")
    if not calls or len(sites) != len(calls):
        raise ValueError(f"{len(sites)} sites for {len(calls)} calls: one each, at least one")
    shared: dict[tuple[Hashable, int], set[int]] = {}
    own: dict[tuple[Hashable, int], int] = {}
    count: dict[tuple[Hashable, int], int] = {}
    for call, (op, key) in zip(calls, sites, strict=True):
        group = (key, levels[op])
        full = len(call.prompt) // block_size_tokens
        keys = shared.setdefault(group, set())
        chained = 0
        for start in range(0, full * block_size_tokens, block_size_tokens):
            chained = hash((chained, call.prompt[start : start + block_size_tokens]))
            keys.add(chained)
        total = blocks_for(len(call.prompt) + call.out_tokens, block_size_tokens)
        own[group] = own.get(group, 0) + total - full
        count[group] = count.get(group, 0) + 1
    blocks, calls_at_peak = max((len(shared[g]) + own[g], count[g]) for g in own)
    return InstancePeak(blocks, calls_at_peak)


@dataclass(frozen=True)
class InstanceWindow:
    """A run's window: at most ``groups`` units (instances' conversation groups) in
    flight (None: no window), and why."""

    groups: int | None
    reason: str

    @classmethod
    def sized(
        cls, capacity_blocks: int, peak: InstancePeak, max_running_requests: int | None = None
    ) -> InstanceWindow:
        """The window for a cache of ``capacity_blocks``, a unit's ``peak`` and an
        engine that runs at most ``max_running_requests`` calls at once (None: unknown).

        Raises:
            ValueError: no capacity, an empty peak, or ``max_running_requests`` below 1.
        """
        if capacity_blocks < 1 or peak.blocks < 1 or peak.calls < 1:
            raise ValueError(f"capacity {capacity_blocks} and {peak} must be >= 1")
        if max_running_requests is not None and max_running_requests < 1:
            raise ValueError(f"max_running_requests must be >= 1, got {max_running_requests}")
        if peak.blocks >= capacity_blocks:
            return cls(
                None,
                f"a conversation group peaks at {peak.blocks} blocks, more than the"
                f" cache's {capacity_blocks}: its own calls evict its conversations",
            )
        if max_running_requests is not None:
            running_blocks = max_running_requests * peak.blocks // peak.calls
            if running_blocks <= capacity_blocks:
                return cls(
                    None,
                    f"the engine's {max_running_requests} sequences of calls like a"
                    f" conversation group's peak hold {running_blocks} of the cache's"
                    f" {capacity_blocks} blocks: nothing evicts a conversation for room",
                )
        groups = math.ceil(capacity_blocks / peak.blocks)
        return cls(
            groups,
            f"a conversation group peaks at {peak.blocks} blocks of the cache's {capacity_blocks}",
        )

    def admits(self, started: Set[Hashable], key: Hashable) -> bool:
        """Whether a call of unit ``key`` may start beside the in-flight ``started``."""
        return self.groups is None or key in started or len(started) < self.groups

    def describe(self) -> str:
        if self.groups is None:
            return f"instance window: none ({self.reason})"
        return f"instance window: {self.groups} conversation groups in flight ({self.reason})"
