"""How many KV blocks a task reserves, and each stage's minimum budget.

A task reserves its largest prompt plus output bound (outputs of earlier calls of the
stage count toward later prompts), rounded up to blocks, minus the full blocks its first
prompt shares with its parent's last prompt (the parent holds those)::

    parent:  [ system | context ............ | task A ] + bound A
    child:   [ system | context ............ | right | task B ] + bound B
              '-- shared full blocks --'  '--- the child's own reservation ---'

Its *prefix* (what its own children will reuse) is the full blocks of its prompts up to
their last slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kalypso.core.graph import LLMNode
from kalypso.core.memory import TaskMemory
from kalypso.core.program import PlannedCall, TaskProgram
from kalypso.engine.blocks import blocks_for

SAMPLE_INSTANCES = 32
"""Input instances sampled to estimate each stage's minimum budget."""
SAMPLE_PARENTS = 4
"""Of those, the ones whose children are sampled for the next stage."""

BoundOf = Callable[[LLMNode, int], int]


@dataclass(frozen=True)
class Sizing:
    """A task's reservation: ``total_blocks`` now, ``prefix_blocks`` kept for its
    children, the output ``bounds`` it assumed per operator (its calls use exactly
    these), and ``shared_blocks`` of its parent's prefix subtracted from the total.

    With ``hashes`` (the keys of its first prompt's full blocks, see
    :class:`~kalypso.core.memory.MemoryManager`), ``total_blocks`` counts every block and
    nothing is subtracted: the memory manager charges shared blocks once.
    ``net_blocks`` is the reservation net of the parent's prefix either way (what the
    stage minimums are measured in)."""

    total_blocks: int
    prefix_blocks: int
    bounds: dict[str, int]
    shared_blocks: int
    hashes: tuple[int, ...] = ()
    net_blocks: int = 0


def size_task(
    program: TaskProgram,
    parent: TaskMemory | None,
    bound_of: BoundOf,
    overrides: dict[str, int],
    block_size_tokens: int,
    *,
    share_blocks: bool = False,
) -> Sizing:
    """The reservation of ``program`` from its current node on (see the module docstring).

    ``overrides`` are bounds already fixed for some operators (a continued call's larger
    bound); the others come from ``bound_of(node, prompt_tokens)``. With
    ``share_blocks``, the keys of the first prompt's full blocks are returned, for the
    memory manager to charge shared blocks once.
    """
    total_tokens = 0
    prefix_tokens = 0
    produced_tokens = 0
    shared_tokens: int | None = None
    first: PlannedCall | None = None
    bounds = dict(overrides)
    for planned in program.planned_calls():
        if first is None:
            first = planned
        if shared_tokens is None and planned.ready:
            shared_tokens = program.expected_cached_tokens(planned.prompt)
        prompt_tokens = planned.prompt.length_tokens + produced_tokens
        bound = bounds.get(planned.node.op_id) or bound_of(planned.node, prompt_tokens)
        bounds[planned.node.op_id] = bound
        total_tokens = max(total_tokens, prompt_tokens + bound)
        prefix_tokens = max(prefix_tokens, planned.prompt.prefix_tokens)
        produced_tokens += bound
    shared = 0
    if parent is not None:
        shared = parent.prefix_blocks
        if program.origin.last_prompt is not None:  # the parent has run: count what is shared
            shared = min(shared, (shared_tokens or 0) // block_size_tokens)
    gross = blocks_for(total_tokens, block_size_tokens)
    net = max(gross - shared, 1 if total_tokens else 0)
    prefix_blocks = prefix_tokens // block_size_tokens
    if share_blocks and first is not None and first.ready and not first.generated_tokens:
        keys = first.prompt.block_keys(block_size_tokens)
        return Sizing(gross, prefix_blocks, bounds, 0, keys, net)
    return Sizing(net, prefix_blocks, bounds, shared, (), net)


def min_budgets(
    programs: Sequence[TaskProgram], num_stages: int, bound_of: BoundOf, block_size_tokens: int
) -> list[int]:
    """Each stage's minimum budget: the largest reservation among sampled tasks (the
    first :data:`SAMPLE_INSTANCES` inputs, and the children of the first
    :data:`SAMPLE_PARENTS` of them that can already be paired)."""
    minimums: list[int] = []
    level: list[tuple[TaskProgram, TaskMemory | None]] = [
        (p, None) for p in programs[:SAMPLE_INSTANCES]
    ]
    for stage in range(num_stages):
        if stage > 0:
            children: list[tuple[TaskProgram, TaskMemory | None]] = []
            for program, memory in level[:SAMPLE_PARENTS]:
                for child in program.sample_children(SAMPLE_INSTANCES):
                    children.append((child, memory))
            level = children
        sized: list[tuple[TaskProgram, TaskMemory | None]] = []
        largest = 1
        for program, parent in level:
            size = size_task(program, parent, bound_of, {}, block_size_tokens)
            memory = TaskMemory(
                stage, size.total_blocks, size.prefix_blocks, parent, size.shared_blocks
            )
            sized.append((program, memory))
            largest = max(largest, size.net_blocks)
        minimums.append(largest)
        level = sized
    return minimums
