"""The KV memory a run's decoding must hold, step by step: bounds on its engine steps
that the cache's size sets, whatever the schedule.

While a request decodes, every token it has computed stays resident in the engine's
blocks. A full block that several calls' token sequences contain may be held once for
all of them, so each call is charged only its share of it: a block that at most ``n``
calls can hold in one step weighs ``1 / n`` in each call that contains it, and a block
no other call contains (the partial last block is always one) weighs 1. ``n`` is the
number of calls that contain the block, or fewer when some of them depend on others
and so never run together (:func:`held_blocks`). However the calls running in one step
overlap, their weights add up to at most the distinct blocks they hold, so to at most
the cache's blocks. The weights charge a shared block in full only when ``n`` of the
calls that contain it run in the same step, which keeps both bounds below the truth; so
does leaving out the prefill steps, which chunked prefill may split. A *decode step* of
a call is each step after its first, which is its prefill; its weight is that of the
tokens the call then holds. Two bounds follow:

* :func:`block_steps`: the weights summed over every decode step of every call. Over the
  cache's blocks, a least number of steps.
* :func:`least_decode_steps`: decode steps of weight ``w`` or more belong to different
  calls within one step, so no step runs more of them than ``cache_blocks / w`` (nor
  more than the engine's most running requests). Their number over that width is a
  least number of steps, for every ``w``. Where a few large calls fill the cache this
  bound is the tighter one: fractions of a call do not run.

Both are computed from :func:`held_blocks`, how many decode steps have each weight. A
call continued over several requests counts the step that prefills a continuation as a
decode step: it generates a token and holds at least as much.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from fractions import Fraction

from kalypso.core.instance import InstanceKey
from kalypso.engine.blocks import chain_keys

Call = tuple[Sequence[int], Sequence[int]]
"""One call's prompt token ids and output token ids."""

Site = tuple[InstanceKey, str]
"""Where a call ran: its instance's key and its LLM node's id."""


def held_blocks(
    calls: Sequence[Call],
    block_size_tokens: int,
    sites: Sequence[Site] | None = None,
    ancestors: Mapping[str, AbstractSet[str]] | None = None,
) -> Counter[Fraction]:
    """How many decode steps of ``calls`` have each weight in blocks (see the module's
    docstring). Identical calls (same prompt and output) count once: a merged call ran
    once.

    With ``sites`` (where each call ran) and ``ancestors`` (each LLM node's LLM
    ancestors, through any chain of nodes), a shared block is divided only among the
    calls that can run at the same time: of two calls of one instance, one of which
    depends on the other, at most one holds it in any step. A call that ran at several
    sites (merged) is taken to run beside any other.

    Raises:
        ValueError: the block size is not positive, or ``sites`` does not match ``calls``.
    """
    if block_size_tokens < 1:
        raise ValueError(f"block size must be positive, got {block_size_tokens}")
    if sites is not None and len(sites) != len(calls):
        raise ValueError(f"{len(sites)} sites for {len(calls)} calls")
    occurrences: dict[Call, list[int]] = {}
    for index, (prompt, output) in enumerate(calls):
        occurrences.setdefault((tuple(prompt), tuple(output)), []).append(index)
    distinct = list(occurrences)
    site_of = [
        sites[found[0]] if sites is not None and len(found) == 1 else None
        for found in occurrences.values()
    ]
    keys = [chain_keys([*p, *o], block_size_tokens) for p, o in distinct]
    holders: dict[int, list[int]] = {}
    for index, call_keys in enumerate(keys):
        for key in call_keys:
            holders.setdefault(key, []).append(index)
    together: dict[tuple[int, ...], int] = {}

    def at_once(key: int) -> int:
        """The most holders of block ``key`` that can run in one step, or more."""
        found = tuple(holders[key])
        if found not in together:
            together[found] = _most_at_once([site_of[i] for i in found], ancestors or {})
        return together[found]

    held: Counter[Fraction] = Counter()
    for (prompt, output), call_keys in zip(distinct, keys, strict=True):
        # its decode steps hold from len(prompt) + 1 to len(prompt) + len(output) - 1
        # tokens; those with the same full blocks weigh the same, plus 1 when a partial
        # block follows them
        least, most = len(prompt) + 1, len(prompt) + len(output) - 1
        full_weight = Fraction(0)
        for full_blocks in range(most // block_size_tokens + 1):
            first = max(least, full_blocks * block_size_tokens)
            last = min(most, (full_blocks + 1) * block_size_tokens - 1)
            if first == full_blocks * block_size_tokens and first <= last:
                held[full_weight] += 1  # exactly full blocks, no partial one
                first += 1
            if first <= last:
                held[full_weight + 1] += last - first + 1
            if full_blocks < len(call_keys):
                full_weight += Fraction(1, at_once(call_keys[full_blocks]))
    return held


def _most_at_once(sites: Sequence[Site | None], ancestors: Mapping[str, AbstractSet[str]]) -> int:
    """At least the most of calls at ``sites`` that can run in one step: the calls of each
    instance are put in sequences, each call after one it depends on, and each sequence
    runs one call at a time; a call without a site runs beside any other."""
    by_instance: dict[InstanceKey, list[str]] = {}
    unplaced = 0
    for site in sites:
        if site is None:
            unplaced += 1
        else:
            by_instance.setdefault(site[0], []).append(site[1])
    sequences = 0
    for nodes in by_instance.values():
        lasts: list[str] = []  # each sequence's last call so far
        for node in sorted(nodes, key=lambda n: len(ancestors.get(n, ()))):
            before = ancestors.get(node, set())
            for position, last in enumerate(lasts):
                if last in before:
                    lasts[position] = node
                    break
            else:
                lasts.append(node)
        sequences += len(lasts)
    return sequences + unplaced


def block_steps(held: Mapping[Fraction, int]) -> Fraction:
    """The weights summed over every decode step (``held`` as :func:`held_blocks` counts
    them). Over the cache's blocks, a least number of steps."""
    return sum((weight * steps for weight, steps in held.items()), Fraction(0))


def least_decode_steps(
    held: Mapping[Fraction, int], cache_blocks: int, max_running: int | None = None
) -> int:
    """The least steps in which decode steps of the weights ``held`` counts (as
    :func:`held_blocks` does) fit a cache of ``cache_blocks`` blocks, at most
    ``max_running`` requests a step (no limit when None): for each weight ``w``, the
    decode steps of weight ``w`` or more over the most of them one step can run, which is
    ``cache_blocks / w`` rounded down (each is another call's).

    Raises:
        ValueError: the cache has no blocks, ``max_running`` is below 1, or a decode step
            weighs nothing or more than the cache (it could not have run).
    """
    if cache_blocks < 1:
        raise ValueError(f"the cache must have blocks, got {cache_blocks}")
    if max_running is not None and max_running < 1:
        raise ValueError(f"max_running must be >= 1, got {max_running}")
    weights = sorted((weight for weight, steps in held.items() if steps > 0), reverse=True)
    if weights and weights[-1] <= 0:
        raise ValueError(f"a decode step holds at least one block, got a weight of {weights[-1]}")
    if weights and weights[0] > cache_blocks:
        raise ValueError(
            f"a decode step holds {float(weights[0]):.2f} blocks, more than the cache's"
            f" {cache_blocks}"
        )
    least = 0
    steps_at_or_above = 0
    for weight in weights:
        steps_at_or_above += held[weight]
        width = math.floor(cache_blocks / weight)
        if max_running is not None:
            width = min(width, max_running)
        least = max(least, math.ceil(steps_at_or_above / width))
    return least
