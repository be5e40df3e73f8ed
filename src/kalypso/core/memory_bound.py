"""The KV memory a run's decoding must hold, step by step: bounds on its engine steps
that the cache's size sets, whatever the schedule.

While a request decodes, every token it has computed stays resident in the engine's
blocks. Blocks that another call's prompt or output also starts with may be held once
for several requests at a time, so only a call's *private* blocks count here: those after
the leading full blocks that some other call's token sequence shares. Private blocks of
two requests are never the same block, so the requests running in one step hold at most
the cache's blocks between them. Counting every shared block out, even one shared only
with a call that runs later, keeps both bounds below the truth; so does leaving out the
prefill steps, which chunked prefill may split. Two bounds follow:

* :func:`private_block_steps`: the private blocks summed over every decode step of every
  call (each step of a call after its first, which is its prefill). Over the cache's
  blocks, a least number of steps.
* :func:`least_decode_steps`: the decode steps that hold ``t`` blocks or more are each
  another call's within one step, so no step runs more of them than ``cache_blocks //
  t`` (nor more than the engine's most running requests). Their number over that width
  is a least number of steps, for every ``t``. Where a few large calls fill the cache
  this bound is the tighter one: fractions of a call do not run.

Both are computed from :func:`held_blocks`, how many decode steps hold each number of
private blocks. A call continued over several requests counts the step that prefills a
continuation as a decode step: it generates a token and holds at least as much.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from kalypso.engine.blocks import chain_keys

Call = tuple[Sequence[int], Sequence[int]]
"""One call's prompt token ids and output token ids."""


def _private_calls(
    calls: Iterable[Call], block_size_tokens: int
) -> Iterator[tuple[Sequence[int], Sequence[int], int]]:
    """Each distinct call's prompt, output and leading blocks shared with another call.
    Identical calls (same prompt and output) count once: a merged call ran once."""
    if block_size_tokens < 1:
        raise ValueError(f"block size must be positive, got {block_size_tokens}")
    distinct = list(dict.fromkeys((tuple(p), tuple(o)) for p, o in calls))
    keys = [chain_keys(p + o, block_size_tokens) for p, o in distinct]
    owners: dict[int, int] = {}
    shared: set[int] = set()
    for index, call_keys in enumerate(keys):
        for key in call_keys:
            if owners.setdefault(key, index) != index:
                shared.add(key)
    for (prompt, output), call_keys in zip(distinct, keys, strict=True):
        shared_blocks = 0
        for key in call_keys:
            if key not in shared:
                break
            shared_blocks += 1
        yield prompt, output, shared_blocks


def _private_blocks_at(
    prompt_tokens: int, step: int, shared_blocks: int, block_size_tokens: int
) -> int:
    """Private blocks at decode step ``step`` (2 for the first decode step)."""
    held_tokens = prompt_tokens + step - 1
    return max(math.ceil(held_tokens / block_size_tokens) - shared_blocks, 0)


def held_blocks(calls: Iterable[Call], block_size_tokens: int) -> Counter[int]:
    """How many decode steps of ``calls`` hold each number of private blocks (see the
    module's docstring): one count per step of each call after its prefill step.

    Raises:
        ValueError: the block size is not positive.
    """
    return Counter(
        _private_blocks_at(len(prompt), step, shared, block_size_tokens)
        for prompt, output, shared in _private_calls(calls, block_size_tokens)
        for step in range(2, len(output) + 1)
    )


def private_block_steps(held: Mapping[int, int]) -> int:
    """The private blocks held, summed over every decode step (``held`` as
    :func:`held_blocks` counts them). Over the cache's blocks, a least number of steps."""
    return sum(blocks * steps for blocks, steps in held.items())


def least_decode_steps(
    held: Mapping[int, int], cache_blocks: int, max_running: int | None = None
) -> int:
    """The least steps in which decode steps holding ``held`` private blocks (as
    :func:`held_blocks` counts them) fit a cache of ``cache_blocks`` blocks, at most
    ``max_running`` requests a step (no limit when None): for each size ``t``, the decode
    steps holding ``t`` blocks or more over the most of them one step can run, which is
    ``cache_blocks // t`` (each is another call's).

    Raises:
        ValueError: the cache has no blocks, ``max_running`` is below 1, or a decode step
            holds more blocks than the cache (it could not have run).
    """
    if cache_blocks < 1:
        raise ValueError(f"the cache must have blocks, got {cache_blocks}")
    if max_running is not None and max_running < 1:
        raise ValueError(f"max_running must be >= 1, got {max_running}")
    sizes = sorted((blocks for blocks, steps in held.items() if steps > 0), reverse=True)
    if sizes and sizes[0] > cache_blocks:
        raise ValueError(
            f"a decode step holds {sizes[0]} private blocks, more than the cache's {cache_blocks}"
        )
    least = 0
    steps_at_or_above = 0
    for blocks in sizes:
        steps_at_or_above += held[blocks]
        width = cache_blocks // blocks if blocks else steps_at_or_above
        if max_running is not None:
            width = min(width, max_running)
        least = max(least, math.ceil(steps_at_or_above / width))
    return least
