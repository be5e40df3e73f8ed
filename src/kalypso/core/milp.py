"""The exact optimum of the token-steps model (:mod:`kalypso.core.cost`) on small
instances, as a mixed-integer program solved by HiGHS (``highspy``).

One engine; calls form one sequence from a start depot::

    y[i, j] in {0, 1}   call i runs immediately before call j (i may be the depot 0)
    b[j], c[j] >= 0     start and end of call j;  T >= c[j]  (the makespan, minimised)

    sum_i y[i, j] = 1  (each call one predecessor);  sum_j y[i, j] <= 1;  sum_j y[0, j] = 1
    c[j] = b[j] + sum_i U[i, j] y[i, j]           U[i, j]: j's cost right after i
    b[j] >= c[i] - H (1 - y[i, j])                 sequencing (also rules out subtours)
    b[j] >= c[i] + d[i]                            for each dependency i -> j

``U[i, j] = alpha (out_j (len_j - shared(i, j)) + out_j (out_j + 1) / 2)`` and
``d[i] = out_i`` (``alpha = 1 / M``), exactly as :func:`kalypso.core.cost.token_steps`
charges them, so the optimum's value is comparable with any order's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from kalypso.core.cost import CallCost, shared_tokens, token_steps


@dataclass(frozen=True)
class Optimum:
    makespan: float
    order: list[int]
    proven: bool
    """True when HiGHS proved optimality within the time limit (else the best found)."""
    lower_bound: float


def optimal_order(
    calls: Sequence[CallCost],
    capacity_tokens: int,
    *,
    time_limit_s: float = 120.0,
    warm_start: Sequence[int] | None = None,
) -> Optimum:
    """Solve the MILP of the module docstring.

    Raises:
        ImportError: ``highspy`` is not installed (``pip install highspy``).
    """
    import highspy

    n = len(calls)
    alpha = 1.0 / capacity_tokens

    def cost(previous: int | None, j: int) -> float:
        call = calls[j]
        up = len(call.prompt) - (
            shared_tokens(calls[previous].prompt, call.prompt) if previous is not None else 0
        )
        return alpha * (call.out_tokens * up + call.out_tokens * (call.out_tokens + 1) / 2)

    depot = n
    arcs = [(i, j) for i in [*range(n), depot] for j in range(n) if i != j]
    unit = {(i, j): cost(None if i == depot else i, j) for i, j in arcs}
    horizon = sum(max(unit[i, j] for i in [*range(n), depot] if i != j) for j in range(n))
    horizon += sum(c.out_tokens for c in calls) + 1.0

    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    y = {arc: h.addVariable(0, 1, type=highspy.HighsVarType.kInteger) for arc in arcs}
    b = [h.addVariable(0, horizon) for _ in range(n)]
    c = [h.addVariable(0, horizon) for _ in range(n)]
    makespan = h.addVariable(0, horizon)
    for j in range(n):
        h.addConstr(sum(y[i, jj] for i, jj in arcs if jj == j) == 1)
        h.addConstr(c[j] - b[j] - sum(unit[i, jj] * y[i, jj] for i, jj in arcs if jj == j) == 0)
        h.addConstr(makespan - c[j] >= 0)
        for p in calls[j].preds:
            h.addConstr(b[j] - c[p] >= calls[p].out_tokens)
    for i in range(n):
        h.addConstr(sum(y[ii, j] for ii, j in arcs if ii == i) <= 1)
    h.addConstr(sum(y[depot, j] for j in range(n)) == 1)
    for i, j in arcs:
        if i != depot:
            h.addConstr(b[j] - c[i] - horizon * y[i, j] >= -horizon)
    h.minimize(makespan)
    if warm_start is not None:
        solution = highspy.HighsSolution()
        values = [0.0] * h.getNumCol()
        sequence = [depot, *warm_start]
        for i, j in itertools.pairwise(sequence):
            values[y[i, j].index] = 1.0
        solution.col_value = values
        h.setSolution(solution)
    h.run()
    info = h.getInfo()
    chosen = {(i, j) for (i, j) in arcs if h.val(y[i, j]) > 0.5}
    order: list[int] = []
    current = depot
    while True:
        following = [j for (i, j) in chosen if i == current]
        if not following:
            break
        current = following[0]
        order.append(current)
    status = h.getModelStatus()
    proven = status == highspy.HighsModelStatus.kOptimal
    value = token_steps(calls, order, capacity_tokens) if len(order) == n else float("inf")
    return Optimum(value, order, proven, float(info.mip_dual_bound))
