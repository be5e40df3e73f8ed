"""The KV memory a run's decoding must hold, step by step: bounds on its engine steps
that the cache's size sets, whatever the schedule.

While a request decodes, every token it has computed stays resident in the engine's
blocks. A full block that several calls' token sequences contain may be held once for
all of them, so each call is charged only its share of it: a block that ``n`` of the
run's calls contain weighs ``1 / n`` in each of them, and a block no other call contains
(the partial last block is always one) weighs 1. However the calls running in one step
overlap, their weights add up to at most the distinct blocks they hold, so to at most
the cache's blocks. The weights charge a shared block in full only when every call that
contains it runs in the same step, which keeps both bounds below the truth; so does
leaving out the prefill steps, which chunked prefill may split. A *decode step* of a
call is each step after its first, which is its prefill; its weight is that of the
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
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from kalypso.engine.blocks import chain_keys

Call = tuple[Sequence[int], Sequence[int]]
"""One call's prompt token ids and output token ids."""


def held_blocks(calls: Iterable[Call], block_size_tokens: int) -> Counter[Fraction]:
    """How many decode steps of ``calls`` have each weight in blocks (see the module's
    docstring). Identical calls (same prompt and output) count once: a merged call ran
    once.

    Raises:
        ValueError: the block size is not positive.
    """
    if block_size_tokens < 1:
        raise ValueError(f"block size must be positive, got {block_size_tokens}")
    distinct = list(dict.fromkeys((tuple(p), tuple(o)) for p, o in calls))
    keys = [chain_keys(p + o, block_size_tokens) for p, o in distinct]
    holders = Counter(key for call_keys in keys for key in set(call_keys))
    held: Counter[Fraction] = Counter()
    for (prompt, output), call_keys in zip(distinct, keys, strict=True):
        full_weight = Fraction(0)
        full_blocks = 0
        for step in range(2, len(output) + 1):
            held_tokens = len(prompt) + step - 1
            while full_blocks < held_tokens // block_size_tokens:
                full_weight += Fraction(1, holders[call_keys[full_blocks]])
                full_blocks += 1
            held[full_weight + (1 if held_tokens % block_size_tokens else 0)] += 1
    return held


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
