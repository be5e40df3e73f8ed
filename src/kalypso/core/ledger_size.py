"""How many blocks a run's own ledger admits calls against: the cache, or what the
calls occupy on average.

The ledger reserves a running call's output at its cap from the call's first step, but
the output grows one token a step: over its life a call holds its prompt and, on
average, half its output. A ledger of ::

    factor = call_tokens / (call_tokens - output_tokens / 2)

times the cache (``call_tokens``: a call's blocks in tokens, shared prefixes divided
among the calls that share them; ``output_tokens``: its output at the cap) admits as
many calls as the cache holds on average. Calls admitted together grow together,
though: when their outputs near their caps at once, the engine preempts the excess and
computes those calls again. The prediction takes that worst case: a share
``1 - 1 / factor`` of the calls computes its prompt and half its output again.

:func:`ledger_options` describes both ledgers as the work they ask of the engine, and
the policy takes the faster under the engine's cost model
(:func:`~kalypso.core.time_model.choose_by_time`). The larger ledger pays where the
cache, not the engine's sequences, bounds the batch, and a step's fixed part costs more
than the prefill computed again: a GPU with a small cache (MapRed on the Helium paper's
shapes P3 and P5 at 88,000 KV tokens, ``qwen3-8b-h100``: 1.04x faster than with the
cache's ledger, BENCHMARKS.md). Under 2 CPU cores' costs, where prefill is most of a
step's cost, the cache's ledger won in every cell of the regime benchmark.

A run whose calls continue conversations (``cache-aware`` with conversation groups)
weighs it too, beside its instance window, but there a tie keeps the cache's ledger (the
larger must be predicted faster beyond the tolerance): a preempted call of a conversation
group evicts the conversation its continuation reads, which the prediction does not
price. On Debate's shapes (``qwen3-8b-h100``) that takes the mean occupancy (1.19-1.20x)
at P3, P5 and P6 at 88,000 KV tokens and P6 at 176,000, 1.02-1.07x faster than the
cache's ledger at P3 and P6, 1.5% slower at P5 (BENCHMARKS.md). A ledger of 1.5x the
cache, beyond the mean occupancy, was slower in seven of the nine cells where the cache
binds (docs/benchmarks.md).
"""

from __future__ import annotations

import math

from kalypso.core.instance_window import InstanceWork
from kalypso.core.time_model import Option


def _call_tokens(work: InstanceWork, block_size_tokens: int) -> tuple[float, float]:
    """A call's tokens at the end of its output, and on average over its life."""
    call_tokens = work.call_blocks * block_size_tokens
    return call_tokens, call_tokens - work.decode_tokens / max(work.calls, 1.0) / 2


def occupancy_factor(work: InstanceWork, block_size_tokens: int) -> float:
    """How many times the cache a ledger may reserve so that the calls it admits occupy
    the cache on average (1.0 when the calls generate nothing)."""
    call_tokens, occupied_tokens = _call_tokens(work, block_size_tokens)
    if occupied_tokens >= call_tokens or occupied_tokens <= 0:
        return 1.0
    return call_tokens / occupied_tokens


def ledger_options(
    capacity_blocks: int,
    work: InstanceWork,
    instances: int,
    max_running_requests: int | None,
    block_size_tokens: int,
) -> list[tuple[float, Option]]:
    """The ledgers worth weighing, narrowest first, each as (times the cache, the work
    it asks of the engine): the cache's own, and the calls' mean occupancy
    (:func:`occupancy_factor`) when that runs more calls at once. A ledger of ``f`` times the cache
    runs ``f`` times as many calls at once as fit beside each other in the cache, at
    most the engine's sequences; beyond the cache, a share ``1 - 1 / f`` of the calls is
    preempted and computes its prompt and half its output again (see the module
    docstring).

    Raises:
        ValueError: a capacity, an instance count or a block size below 1.
    """
    if min(capacity_blocks, instances, block_size_tokens) < 1:
        raise ValueError(
            f"capacity ({capacity_blocks} blocks), instances ({instances}) and block size"
            f" ({block_size_tokens} tokens) must be >= 1"
        )
    factor = occupancy_factor(work, block_size_tokens)
    calls = instances * work.calls
    seqs = max_running_requests or max(1, math.ceil(calls))
    occupied_tokens = _call_tokens(work, block_size_tokens)[1]
    options: list[tuple[float, Option]] = []
    for times in (1.0, factor) if factor > 1.0 else (1.0,):
        blocks = int(capacity_blocks * times)
        running = max(1, min(seqs, int(blocks / max(work.call_blocks, 1.0))))
        if options and running <= options[0][1].work.concurrency:
            break  # the engine's sequences bind, not the cache: nothing to gain
        preempted = 1.0 - 1.0 / times
        again_tokens = calls * preempted * occupied_tokens
        label = "the cache's ledger" if times == 1.0 else "the calls' mean occupancy"
        options.append(
            (
                times,
                Option(
                    f"{label}: {blocks:,} blocks ({times:.2f}x the cache)",
                    work.of_batch(instances, again_tokens, running),
                    (
                        f"{preempted:.0%} of the calls preempted and computed again at worst"
                        if preempted
                        else "nothing preempted"
                    ),
                ),
            )
        )
    return options
