"""Scheduling policies, by name (each is one module; see :mod:`kalypso.core.policies.base`).

==================== =================================================================
name                 behaviour
==================== =================================================================
adaptive             Algorithm 1: every stage but the last starts with its minimum
(alias: pipelined)   budget, the last gets the rest; budgets are rebalanced online
                     (saturated stages give to the last, starving stages upstream)
parallel-dfs         the same initial split, never rebalanced (paper section 5.3)
parallel-bfs         the first stage gets everything but the later stages' minimums
static:R             the first stage gets fraction R of the memory, the last the rest,
                     stages between their minimums (``static:0.3`` = a 3:7 split)
sequential           one task at a time, deepest stage first (sequential depth-first)
operator-at-a-time   the baseline: each operator over the whole table, materialized
cache-aware          workflows: Helium's order over the templated radix tree; its
                     instance window chosen by predicted time under the engine's
                     cost model (:mod:`kalypso.core.time_model`)
(alias: helium)
querywise, opwise,   workflow baselines (:mod:`.workflow_baselines`)
opwise-stream,
all-ready, lspf
==================== =================================================================

Every budget-based policy starts each stage at or above its minimum budget and Rebalance
never moves a stage below it. A minimum can grow during a run (a task larger than those
sampled); a stage then below it still runs one task at a time (the idle-stage rule).
"""

from kalypso.core.policies import (
    adaptive,
    cache_aware,
    operator_at_a_time,
    parallel_bfs,
    parallel_dfs,
    sequential,
    static_split,
    workflow_baselines,
)
from kalypso.core.policies.base import (
    PlanInfo,
    Policy,
    PolicyError,
    RebalanceView,
    RunInfo,
    TaskInfo,
    get_policy,
    policy_names,
    register_policy,
)

BUILTIN_MODULES = (
    adaptive,
    cache_aware,
    operator_at_a_time,
    parallel_bfs,
    parallel_dfs,
    sequential,
    static_split,
    workflow_baselines,
)

__all__ = [
    "BUILTIN_MODULES",
    "PlanInfo",
    "Policy",
    "PolicyError",
    "RebalanceView",
    "RunInfo",
    "TaskInfo",
    "get_policy",
    "policy_names",
    "register_policy",
]
