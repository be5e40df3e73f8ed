"""The workflow baselines of the Helium paper (section 7.1), as ranked policies.

==================  =================================================================
``querywise``       one query at a time (vLLM serving one request's workflow after
                    another): a query's calls run as they become ready, the next query
                    starts when it is done
``opwise``          operator at a time with a barrier (each operator over the whole
                    batch, in topological order, the next one after it is done)
``opwise-stream``   operator order without the barrier (the reference code's streaming
                    pipeline): calls are admitted operator by operator as they get ready
``all-ready``       every ready call at once, the engine queueing them (LangGraph's batch
                    runnables, and the paper's Random schedule: no order of its own)
``lspf``            every ready call at once, and the *engine* takes its waiting requests
                    longest cached prefix first: run it on an engine opened with that
                    order (``EngineSpec(lspf=True)``: vLLM's scheduler class
                    :mod:`kalypso.engine.vllm_lspf`, or the simulator's
                    ``waiting_order="lspf"``); on another engine it is ``all-ready``
==================  =================================================================

All but ``all-ready`` and ``lspf`` are memory-aware (the ledger decides how many calls run
at once), so they differ from ``cache-aware`` only in their order; ``all-ready`` and
``lspf`` reserve nothing and leave admission to the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kalypso.core.graph import LLMNode, TaskGraph
from kalypso.core.policies.base import (
    PlanInfo,
    Policy,
    PolicyError,
    RunInfo,
    TaskInfo,
    no_argument,
    register_policy,
)


class _Ranked(Policy):
    ranked = True

    def __init__(self) -> None:
        self.position: dict[str, int] = {}
        self.keys: list[tuple[int, ...]] = []

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        return [max(capacity_blocks, m) for m in min_blocks]

    def prepare(self, plan: PlanInfo) -> None:
        if not isinstance(plan.graph, TaskGraph):
            raise PolicyError(f"{self.name} needs a task graph")
        ops = [n.node_id for n in plan.graph.nodes if isinstance(n, LLMNode)]
        self.position = {op: i for i, op in enumerate(ops)}
        self.keys = sorted(plan.instance_keys)


class QueryWise(_Ranked):
    """One query at a time: its calls as they become ready, the next query when it is done."""

    name = "querywise"

    def rank(self, task: TaskInfo) -> tuple[Any, ...]:
        return (task.key, self.position.get(task.op, -1))

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        current = next((k for k in self.keys if k not in run.finished), None)
        return current is None or task.key == current


class OpWise(_Ranked):
    """Operator at a time over the whole batch, in topological order, with a barrier."""

    name = "opwise"

    def rank(self, task: TaskInfo) -> tuple[Any, ...]:
        return (self.position.get(task.op, -1), task.key)

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        mine = self.position.get(task.op, -1)
        return all(
            len(run.completed.get(op, ())) >= len(self.keys)
            for op, position in self.position.items()
            if position < mine
        )


class OpWiseStream(OpWise):
    """Operator order without the barrier: calls admitted operator by operator as they get ready."""

    name = "opwise-stream"

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        return True


class AllReady(Policy):
    """Every ready call at once, the engine queueing them (no order of its own)."""

    name = "all-ready"
    memory_aware = False

    def priority(self, stage: int, num_stages: int) -> int:
        return 0


class LSPF(AllReady):
    """Every ready call at once; the engine takes its waiting requests longest cached
    prefix first (on an LSPF engine)."""

    name = "lspf"


def _factory(cls: type[Policy]) -> Any:
    def make(argument: str | None) -> Policy:
        no_argument(cls.name, argument)
        return cls()

    return make


for _cls in (QueryWise, OpWise, OpWiseStream, AllReady, LSPF):
    register_policy(_cls.name, _factory(_cls))
