"""A what-if admission for studies: an engine that knows every request's output length.

vLLM admits a waiting request when its next prompt chunk fits the free blocks now, and
preempts (recomputes) running requests when their growing outputs no longer fit. An
engine that knew how many tokens each request will generate could instead admit a request
only if, at every future step, the running requests' blocks plus its own fit the cache:
each running request grows by one token a step until its output is complete, then frees
the blocks only it references. Nothing it admits is then ever preempted.

No real engine knows output lengths; the simulator does (its outputs are fixed by the
prompt). ``SimEngine(admission="known-lengths")`` runs this admission, so a study can
measure what knowing lengths ahead would be worth against vLLM's optimistic admission
(``"vllm"``, the default). The peak over future steps is evaluated just before each
running request's end, where the sum of the requests' needs is largest (it only grows
between ends and falls at each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kalypso.engine.blocks import blocks_for

ADMISSIONS = ("vllm", "known-lengths")
"""The simulator's admission rules: vLLM's, and :func:`fits_at_every_step`'s."""


@dataclass(frozen=True)
class Growth:
    """One request's future use of the free blocks.

    Attributes:
        tokens: its tokens now (prompt and output so far).
        held_blocks: blocks it references now (for a waiting request: the cached blocks
            it would reuse that others reference, which cost no free block).
        remaining_tokens: output tokens it has yet to generate.
        end_steps: steps until it finishes (its prompt chunks left, then its output).
        freed_blocks: free blocks it gives back at its end beyond what it took: the
            blocks only it references now (0 for a waiting request, whose own blocks are
            counted by its need and returned with it).
    """

    tokens: int
    held_blocks: int
    remaining_tokens: int
    end_steps: int
    freed_blocks: int

    def need_blocks(self, steps: int, block_size_tokens: int) -> int:
        """Free blocks it has taken ``steps`` steps from now (negative once it ended and
        gave back more than it took)."""
        if steps >= self.end_steps:
            return -self.freed_blocks
        grown = self.tokens + min(steps, self.remaining_tokens)
        return max(0, blocks_for(grown, block_size_tokens) - self.held_blocks)


def fits_at_every_step(
    running: Sequence[Growth], candidate: Growth, free_blocks: int, block_size_tokens: int
) -> bool:
    """Whether ``candidate`` can start now and the running requests and it never need
    more than ``free_blocks`` at any future step."""
    everyone = [*running, candidate]
    times = {0} | {g.end_steps - 1 for g in everyone if g.end_steps >= 1}
    return all(
        sum(g.need_blocks(t, block_size_tokens) for g in everyone) <= free_blocks for t in times
    )
