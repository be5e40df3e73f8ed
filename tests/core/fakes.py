"""Step-test doubles for the scheduler core: programs with fixed sizes, no engine, no
event loop. A test describes a pipeline by its stages' sizes in tokens and which tuples
are kept, then steps the core (``schedule`` / ``update_from_output``) by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kalypso.core.bounds import BoundPolicy
from kalypso.core.graph import Decision, LLMNode
from kalypso.core.instance import Instance
from kalypso.core.ledger import KVLedger
from kalypso.core.policies import get_policy
from kalypso.core.program import HoldKind, PlannedCall, TaskProgram
from kalypso.core.prompt import ChatLayout, Prompt
from kalypso.core.scheduler import CoreSettings, SchedulerCore, TaskOutcome
from kalypso.engine.sim import WordTokenizer

BLOCK = 16
"""Tokens per KV block in every step test."""
LAYOUT = ChatLayout(WordTokenizer())


@dataclass(frozen=True)
class StageSize:
    """One stage's task, in tokens: its prompt, output bound, the prefix its children
    reuse, and the tokens its prompt shares with its parent's (all full blocks)."""

    prompt_tokens: int
    bound_tokens: int
    prefix_tokens: int = 0
    shared_tokens: int = 0


@dataclass
class Workload:
    """A pipeline of stages: ``sizes[s]`` per stage (or ``size_of(stage, key)``), the
    fan-out into each later stage, and the keys the predicate keeps (None: all)."""

    sizes: Sequence[StageSize]
    fanouts: Sequence[int] = ()
    kept: set[tuple[int, ...]] | None = None
    size_of: Callable[[int, tuple[int, ...]], StageSize] | None = None

    def size(self, stage: int, key: tuple[int, ...]) -> StageSize:
        return self.size_of(stage, key) if self.size_of else self.sizes[stage]

    def node(self, stage: int) -> LLMNode:
        bound = self.sizes[stage].bound_tokens
        return LLMNode(f"s{stage}", (), bound, f"{stage}:op", decision=Decision(("Yes", "No")))


@dataclass
class FakeProgram:
    """A task of ``workload``: one call of the stage's size; children when kept."""

    workload: Workload
    stage: int
    key_: tuple[int, ...]
    ran_parent: bool = False
    parent: FakeProgram | None = None
    instance: Instance | None = field(init=False)

    def __post_init__(self) -> None:
        self.instance = Instance(self.key_, {}, last_prompt=(0,) if self.ran_parent else None)

    @property
    def key(self) -> tuple[int, ...]:
        return self.key_

    @property
    def stage_index(self) -> int:
        return self.stage

    @property
    def op_key(self) -> str:
        return f"stage{self.stage}"

    @property
    def prefix_parent(self) -> FakeProgram | None:
        return self.parent

    def prefix_holders(self, children: Sequence[TaskProgram]) -> int:
        return len(children)

    @property
    def holds_with(self) -> HoldKind:
        return "ledger"

    def output(self) -> Instance | None:
        last = self.stage + 1 == len(self.workload.sizes)
        return self.instance if last else None

    @property
    def origin(self) -> Instance:
        return Instance(self.key_, {}, last_prompt=(0,) if self.ran_parent else None)

    def planned_calls(self) -> list[PlannedCall]:
        size = self.workload.size(self.stage, self.key_)
        prompt = Prompt.from_ids(LAYOUT, tuple(range(size.prompt_tokens)), size.prefix_tokens)
        return [PlannedCall(self.workload.node(self.stage), prompt, True)]

    def expected_cached_tokens(self, prompt: Prompt) -> int:
        return self.workload.size(self.stage, self.key_).shared_tokens if self.ran_parent else 0

    def _children(self, ran: bool) -> list[TaskProgram]:
        if self.stage + 1 >= len(self.workload.sizes):
            return []
        fanout = self.workload.fanouts[self.stage]
        return [
            FakeProgram(self.workload, self.stage + 1, (*self.key_, j), ran_parent=ran, parent=self)
            for j in range(fanout)
        ]

    def children(self) -> Sequence[TaskProgram]:
        kept = self.workload.kept
        if kept is not None and self.key_ not in kept:
            self.instance = None
            return []
        return self._children(ran=True)

    def sample_children(self, limit: int) -> Sequence[TaskProgram]:
        return self._children(ran=False)[:limit]


def make_core(
    workload: Workload,
    policy: str,
    *,
    capacity_blocks: int = 64,
    ledger: KVLedger | None = None,
    owner: str = "q",
    **settings: object,
) -> SchedulerCore:
    ledger = ledger or KVLedger(capacity_blocks)
    ledger.register(owner)
    settings.setdefault("share_blocks", False)  # the fakes' prompts are placeholders
    return SchedulerCore(
        len(workload.sizes),
        ledger,
        owner,
        get_policy(policy),
        BoundPolicy(bounded=True),
        BLOCK,
        CoreSettings(**settings),  # type: ignore[arg-type]
    )


@dataclass
class StepLog:
    """What a stepped run did, step by step."""

    max_running: dict[int, int] = field(default_factory=dict)
    steps: int = 0


def run_steps(core: SchedulerCore, workload: Workload, num_inputs: int) -> StepLog:
    """Start ``num_inputs`` first-stage tasks and step until done: each step is one
    Launch, then every running task completes (one batch of completions, in task order)."""
    core.start([FakeProgram(workload, 0, (i,)) for i in range(num_inputs)])
    log = StepLog()
    while core.has_work:
        core.schedule()
        for stage, count in enumerate(core.running_per_stage):
            log.max_running[stage] = max(log.max_running.get(stage, 0), count)
        core.update_from_output([TaskOutcome(task) for task in core.running.values()])
        log.steps += 1
    core.finish()
    return log


JOIN_AND_NOTE = (
    StageSize(prompt_tokens=88, bound_tokens=8, prefix_tokens=64),
    StageSize(prompt_tokens=104, bound_tokens=8, prefix_tokens=64, shared_tokens=64),
)
"""A predicate on a note (6 blocks, a 4-block prefix) and a join predicate on its pairs (3
blocks of its own)."""
