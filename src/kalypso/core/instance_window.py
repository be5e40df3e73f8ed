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
no conversation waits to be continued, and the window would only cost concurrency. A
*loose* continuation (a reflection's final answer, which continues the analysis after
critics that read it) forms a group too, but gets a window only when one is set
(``cache-aware:N``): at the Helium paper's scale a window of 256 keeps Reflect's
conversations and is 1.21x faster than none under a GPU's costs, and at the size of the
real CPU runs every window is slower, because it breaks the sharing across queries that
running each critic for every query in a row gives, which the time model does not price.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence, Set
from dataclasses import dataclass

from kalypso.core.cost import CallCost, Token
from kalypso.core.time_model import Option
from kalypso.core.trt import common_length
from kalypso.engine.blocks import blocks_for
from kalypso.engine.cost_model import Work


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
    together; ``mean_blocks``, its working set over its levels on average (a unit in
    flight is at any one of them: what units in flight hold together)."""

    blocks: int
    calls: int
    mean_blocks: float = 0.0

    def __post_init__(self) -> None:
        if not self.mean_blocks:
            object.__setattr__(self, "mean_blocks", float(self.blocks))


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
    sizes = {g: len(shared[g]) + own[g] for g in own}
    blocks, calls_at_peak = max((sizes[g], count[g]) for g in own)
    return InstancePeak(blocks, calls_at_peak, statistics.fmean(sizes.values()))


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


@dataclass(frozen=True)
class InstanceWork:
    """What one instance asks of the engine, as the time model sees it: means over
    consecutive sample instances (the ones a query-ordered schedule runs side by side),
    every answer at its cap.

    Attributes:
        prefill_tokens: the prompt tokens its calls compute at the least: each distinct
            prefix once, a prefix its neighbours share (a system prompt, a document
            several questions ask about) divided among them.
        decode_tokens: the tokens its calls generate.
        continued_tokens: the conversation tokens its continuations read back from
            the calls they continue, beyond what its neighbours' calls share: computed
            again when evicted meanwhile.
        call_blocks: the blocks a running call holds, shared prefixes divided as above.
        chain_tokens: the tokens its longest chain of dependent calls generates, one step
            each.
        calls: its calls.
    """

    prefill_tokens: float
    decode_tokens: float
    continued_tokens: float
    call_blocks: float
    chain_tokens: int
    calls: float = 1.0

    def of_batch(self, instances: int, again_tokens: float, concurrency: int) -> Work:
        """The work of ``instances`` instances with ``concurrency`` calls at once, and
        ``again_tokens`` prompt tokens computed again (evicted or preempted)."""
        return Work(
            prefill_tokens=round(instances * self.prefill_tokens + again_tokens),
            decode_tokens=round(instances * self.decode_tokens),
            concurrency=concurrency,
            chain_tokens=self.chain_tokens,
        )


def _trie_tokens(prompts: Sequence[tuple[Token, ...]]) -> int:
    """Distinct prefixes of ``prompts`` in tokens: what an ideal prefix cache computes."""
    keyed = sorted(
        tuple((1, repr(t)) if isinstance(t, tuple) else (0, t) for t in p) for p in prompts
    )
    total = 0
    for previous, prompt in zip([(), *keyed], keyed, strict=False):
        total += len(prompt) - common_length(prompt, previous)
    return total


def instance_work(
    calls: Sequence[CallCost],
    sites: Sequence[tuple[str, Hashable]],
    continued_from: Mapping[str, str],
    block_size_tokens: int,
) -> InstanceWork:
    """The mean :class:`InstanceWork` of the consecutive instances ``calls`` belong to
    (``sites[i]`` is call ``i``'s (LLM node id, instance key); ``continued_from`` maps
    each continuation to the node it continues:
    :meth:`~kalypso.core.graph.TaskGraph.continuations`). What a node's prompts
    share from one instance to the next is their mean common prefix (nothing with one
    instance).

    Raises:
        ValueError: no calls, ``sites`` not one per call, or a block size below 1.
    """
    if block_size_tokens < 1:
        raise ValueError(f"block size must be >= 1 token, got {block_size_tokens}")
    if not calls or len(sites) != len(calls):
        raise ValueError(f"{len(sites)} sites for {len(calls)} calls: one each, at least one")
    by_op: dict[str, list[tuple[Token, ...]]] = {}
    for call, (op, _) in zip(calls, sites, strict=True):
        by_op.setdefault(op, []).append(call.prompt)
    shared = {
        op: statistics.fmean([common_length(a, b) for a, b in itertools.pairwise(ps)] or [0])
        for op, ps in by_op.items()
    }
    where = {site: i for i, site in enumerate(sites)}
    instances = len({key for _, key in sites})
    decode = sum(call.out_tokens for call in calls)
    unique = _trie_tokens([call.prompt for call in calls])
    continued = 0.0
    chain: dict[int, int] = {}
    for i, (call, (op, key)) in enumerate(zip(calls, sites, strict=True)):
        chain[i] = call.out_tokens + max((chain[p] for p in call.preds), default=0)
        producer = continued_from.get(op)
        if producer is not None:
            source = calls[where[(producer, key)]]
            continued += len(source.prompt) - shared[producer] + source.out_tokens
    return InstanceWork(
        prefill_tokens=unique / instances,
        decode_tokens=decode / instances,
        continued_tokens=continued / instances,
        call_blocks=(unique + decode) / len(calls) / block_size_tokens,
        chain_tokens=max(chain.values()),
        calls=len(calls) / instances,
    )


WINDOW_MULTIPLES = (1, 2, 3, 4, 6, 8)
"""The windows weighed, in multiples of the memory window."""


def window_options(
    capacity_blocks: int,
    peak: InstancePeak,
    work: InstanceWork,
    instances: int,
    max_running_requests: int | None,
    groups_per_instance: int = 1,
) -> list[tuple[int | None, Option]]:
    """The windows worth weighing, narrowest first, each with the work it asks of the
    engine: the memory window (as many groups as fill the cache at their peak) and its
    multiples (:data:`WINDOW_MULTIPLES`) below the batch's groups (``instances`` times
    ``groups_per_instance``: a trading desk's debate and each trader's risk analysts are
    groups of their own), and none.

    A window of ``g`` groups keeps ``g`` groups in flight; none lets every instance
    start. Calls run ``g`` times a group's calls at once, at most what the engine runs
    and what fits beside each other. The groups in flight hold ``g`` times a group's
    working set (its mean over its levels): beyond the cache, that share of the continued
    conversations is evicted before its continuation and computed again. When the cache
    holds every call the engine runs (the engine is bound by its sequences, not its
    memory), a continuation starts as soon as its inputs exist and the groups in flight
    are the ones running: a window then saves only what their working sets exceed the
    cache by."""
    seqs = max_running_requests or instances * peak.calls
    fit_calls = max(1, int(capacity_blocks / max(work.call_blocks, 1.0)))
    at_once = max(1, min(seqs, fit_calls))
    units = instances * groups_per_instance
    base = math.ceil(capacity_blocks / peak.blocks)
    windows: list[int | None] = [
        size for size in (base * k for k in WINDOW_MULTIPLES) if size < units
    ]
    windows.append(None)
    options: list[tuple[int | None, Option]] = []
    for window in windows:
        groups = units if window is None else window
        running = max(1, min(at_once, groups * peak.calls))
        if fit_calls >= seqs:  # bound by sequences: the groups in flight are those running
            groups = min(groups, math.ceil(running / peak.calls))
        held = groups * peak.mean_blocks
        evicted = max(0.0, 1.0 - capacity_blocks / held)
        lost = instances * work.continued_tokens * evicted
        label = "no window" if window is None else f"window of {window} groups"
        options.append(
            (
                window,
                Option(
                    label,
                    work.of_batch(instances, lost, running),
                    f"{groups} groups in flight, {evicted:.0%} of the continued"
                    f" conversations computed again",
                ),
            )
        )
    return options
