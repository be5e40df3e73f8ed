"""The KV memory a run's decoding must hold, step by step: a bound on its engine steps
that the cache's size sets, whatever the schedule.

While a request decodes, every token it has computed stays resident in the engine's
blocks. Blocks that another call's prompt or output also starts with may be held once
for several requests at a time, so only a call's *private* blocks count here: those after
the leading full blocks that some other call's token sequence shares. Private blocks of
two requests are never the same block, so the requests running in one step hold at most
the cache's blocks between them. Summed over every decode step of every call (each step
of a call after its first, which is its prefill), these *private block-steps* divided by
the cache's blocks are a lower bound on the steps any schedule needs. Counting every
shared block out, even one shared only with a call that runs later, keeps the bound
below the truth; so does leaving out the prefill steps, which chunked prefill may split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from kalypso.engine.blocks import chain_keys

Call = tuple[Sequence[int], Sequence[int]]
"""One call's prompt token ids and output token ids."""


def private_block_steps(calls: Iterable[Call], block_size_tokens: int) -> int:
    """The blocks ``calls`` hold privately, summed over each decode step of each call
    (see the module's docstring). Identical calls (same prompt and output) count once: a
    merged call ran once.

    Raises:
        ValueError: the block size is not positive.
    """
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
    total = 0
    for (prompt, output), call_keys in zip(distinct, keys, strict=True):
        shared_blocks = 0
        for key in call_keys:
            if key not in shared:
                break
            shared_blocks += 1
        for step in range(2, len(output) + 1):
            held_tokens = len(prompt) + step - 1
            total += max(math.ceil(held_tokens / block_size_tokens) - shared_blocks, 0)
    return total
