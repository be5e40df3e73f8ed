"""The policy interface and the registry that names policies.

A policy is a strategy object the scheduler core consults; it never touches the core's
state directly. It decides:

* **stage split** - :meth:`Policy.initial_budgets`: each stage's share of the KV capacity;
* **rebalance** - :meth:`Policy.rebalance`: budget moves after each batch of completions;
* **admission order** - :meth:`Policy.admission_stages`: which stage's queue is offered
  room first, :attr:`Policy.max_running_tasks`, and :attr:`Policy.paced_by_engine`
  (no more tasks in flight than the engine runs at once, when it says how many);
* **pinning** - :meth:`Policy.pins`: whether a task's prefix is pinned in the engine
  while its children run (explicit pinning);
* **ranked admission** - a policy with ``ranked = True`` sees the whole run first
  (:meth:`Policy.prepare`) and admits waiting tasks of every stage in :meth:`Policy.rank`
  order, each one its :meth:`Policy.gate` lets through and the memory admits (the
  workflow policies: cache-aware order, query-wise, operator-wise);
* **execution shape** - :attr:`Policy.memory_aware` (reserve KV blocks per task, or submit
  everything and let the engine queue), :attr:`Policy.bounded_outputs` (start generative
  calls below their cap and continue them when they reach it), and
  :attr:`Policy.operator_at_a_time` (one stage per operator, each materialized before the
  next starts).

Adding a policy is one module: subclass :class:`Policy`, then
``register_policy("name", factory)``; ``factory(argument)`` gets the text after a colon
(``"static:0.3"`` -> ``"0.3"``) or None.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from kalypso.core.instance_window import InstancePeak, InstanceWork
from kalypso.core.memory import StageBudgets
from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import EngineCapacity


class PolicyError(ValueError):
    """An unknown policy name or a bad policy argument."""


@dataclass(frozen=True)
class TaskInfo:
    """What a policy sees of a task."""

    task_id: int
    stage: int
    key: tuple[int, ...]
    op: str
    """The operator (task-graph node) the task runs: its LLM node, or its stage."""


@dataclass(frozen=True)
class RunInfo:
    """What a ranked policy may read when it ranks and gates tasks.

    Attributes:
        completed: per operator, the instances whose task of it has completed.
        finished: instances whose whole run is done.
        running: the tasks running now.
    """

    completed: Mapping[str, Set[tuple[int, ...]]]
    finished: frozenset[tuple[int, ...]]
    running: Sequence[TaskInfo]


@dataclass(frozen=True)
class PlanInfo:
    """The run a ranked policy prepares for: the task graph (``object`` here, so that
    policies may read any front end's graph), its instances' keys, and the chat layout
    (to measure prompts in tokens). ``capacity`` is the engine's KV cache and
    ``instance_peak`` an instance's largest working set at one dependency level
    (:func:`kalypso.core.instance_window.instance_peak`), when the front end measured
    them."""

    graph: object
    instance_keys: Sequence[tuple[int, ...]]
    layout: object
    block_size_tokens: int
    capacity: EngineCapacity | None = None
    instance_peak: InstancePeak | None = None
    instance_work: InstanceWork | None = None
    """What one instance asks of the engine (measured with the peak)."""
    cost_model: CostModel | None = None
    """The engine's step costs, when it knows them: the policy's options are weighed by
    their predicted time (:mod:`kalypso.core.time_model`)."""


@dataclass(frozen=True)
class RebalanceView:
    """What a policy may read and do during Rebalance.

    Attributes:
        waiting: tasks waiting per stage.
        budgets: budgets, minimums and usage per stage (read only: move with ``move``).
        alpha, beta: the saturation and starvation thresholds of the run's options.
        move: ``move(source, target, reason)`` transfers all of ``source``'s
            transferable budget to ``target`` and records it; returns the blocks moved.
    """

    waiting: Sequence[int]
    budgets: StageBudgets
    alpha: float
    beta: float
    move: Callable[[int, int, str], int]


class Policy:
    """How the scheduler core admits tasks (see the module docstring).

    The defaults describe a memory-aware policy with fixed budgets: every stage but the
    last at its minimum, the last the rest, no rebalancing, deepest stage first.
    """

    name: str = "policy"
    memory_aware: bool = True
    bounded_outputs: bool = True
    operator_at_a_time: bool = False
    max_running_tasks: int | None = None
    paced_by_engine: bool = False
    """Keep at most the engine's ``capacity.max_running_requests`` tasks in flight (when
    the engine knows it and the run sets no ``max_tasks_in_flight``): the rest wait in the
    core's queue, in its order, instead of in the engine's first-come queue, where
    requests sent together over concurrent connections arrive in any order."""
    ranked: bool = False
    holds_continued_prefixes: bool = False
    """In a DAG run with explicit pinning, a finished call's prompt and answer stay under
    a soft pin for the calls that continue its conversation, until they are done
    (:mod:`kalypso.core.dataflow`). A relational run always holds its prefixes for its
    children (Algorithm 1)."""
    reads_instance_peak: bool = False
    """:meth:`prepare` reads :attr:`PlanInfo.instance_peak`: the front end measures it
    only for policies that do (it renders sample prompts)."""
    ledger_factor: float = 1.0
    """How many times the engine's KV blocks the run asks its ledger to admit calls
    against, when the run's options leave that to the policy (``kv_overcommit=None``):
    set by :meth:`prepare` (:mod:`kalypso.core.ledger_size`). A ledger shared with other
    runs admits against the least of their factors
    (:attr:`kalypso.core.ledger.KVLedger.admit_blocks`)."""

    def prepare(self, plan: PlanInfo) -> None:
        """See the run before it starts (ranked policies build their order here)."""

    def rank(self, task: TaskInfo) -> tuple[Any, ...]:
        """The admission order of a ranked policy: smaller first."""
        return (task.task_id,)

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        """Whether a ranked policy lets ``task`` start now (memory aside)."""
        return True

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        """Initial per-stage budgets summing to ``capacity_blocks`` (each at or above its
        minimum when the capacity allows)."""
        head = list(min_blocks[:-1])
        return [*head, max(capacity_blocks - sum(head), min_blocks[-1])]

    def rebalance(self, view: RebalanceView) -> None:
        """Move budget after a batch of completions (default: never)."""

    def admission_stages(self, num_stages: int) -> Sequence[int]:
        """Stages in the order their waiting tasks are offered room (deepest first)."""
        return range(num_stages - 1, -1, -1)

    def priority(self, stage: int, num_stages: int) -> int:
        """The engine priority of a stage's calls (lower is served first): deeper stages
        first, so work that frees a prefix is not starved by work that adds one."""
        return num_stages - 1 - stage

    def pins(self, stage: int, num_stages: int, explicit_pinning: bool) -> bool:
        """Whether a task of ``stage`` pins its blocks in the engine until its children are
        done (only meaningful with explicit pinning; the last stage has no children)."""
        return explicit_pinning and stage + 1 < num_stages

    def explain(self) -> str:
        """How this policy orders and admits calls, as text (prepared policies may add
        their plan: :class:`~kalypso.core.policies.cache_aware.CacheAware` prints its
        order and window). By default, the first line of the class's docstring."""
        doc = inspect.getdoc(type(self)) or self.name
        return doc.splitlines()[0]


PolicyFactory = Callable[[str | None], Policy]
_REGISTRY: dict[str, PolicyFactory] = {}
_ALIASES: dict[str, str] = {}


def register_policy(
    name: str, factory: PolicyFactory, *, aliases: Sequence[str] = (), replace: bool = False
) -> None:
    """Make ``name`` (and ``aliases``) resolve to ``factory(argument)``."""
    for key in (name, *aliases):
        if not key or ":" in key:
            raise ValueError(f"policy name {key!r} must be non-empty and have no colon")
        if (key in _REGISTRY or key in _ALIASES) and not replace:
            raise ValueError(f"policy {key!r} is already registered (pass replace=True)")
    _REGISTRY[name] = factory
    for alias in aliases:
        _ALIASES[alias] = name


def policy_names() -> list[str]:
    """Registered names and aliases."""
    return sorted([*_REGISTRY, *_ALIASES])


def get_policy(spec: str | Policy) -> Policy:
    """The policy ``spec`` names (``"adaptive"``, ``"static:0.3"``), or ``spec`` itself.

    Raises:
        PolicyError: unknown name, or a bad argument.
    """
    if isinstance(spec, Policy):
        return spec
    if not isinstance(spec, str) or not spec:
        raise PolicyError(f"a policy is a name from {policy_names()}, got {spec!r}")
    name, sep, argument = spec.partition(":")
    name = _ALIASES.get(name, name)
    factory = _REGISTRY.get(name)
    if factory is None:
        raise PolicyError(f"unknown execution policy {spec!r}; choose from {policy_names()}")
    policy = factory(argument if sep else None)
    policy.name = spec
    return policy


def no_argument(name: str, argument: str | None) -> None:
    """Raise :class:`PolicyError` if a policy that takes no argument got one."""
    if argument is not None:
        raise PolicyError(f"policy {name!r} takes no argument, got {name}:{argument}")
