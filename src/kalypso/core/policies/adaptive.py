"""``adaptive`` (alias ``pipelined``): Algorithm 1 of the Kalypso paper.

Every stage but the last starts with its minimum budget, the last gets the rest.
Rebalance runs once before anything is admitted (Algorithm 1 rebalances in every
iteration of its loop, the first included: the stages below the first have nothing to
run yet, so they lend their free budget upstream) and after each batch of completions,
with ``tasks(s) = budget(s) / minBudget(s)``, stage ``s`` is
*saturated* when more than ``alpha * tasks(s)`` tasks wait for it and *starving* when
fewer than ``beta * tasks(s)`` do:

* a saturated stage other than the first: the stage that feeds it (``s - 1``) has
  admitted more upstream work than the downstream stages can consume; the feeder's free
  budget goes to the last stage;
* a starving stage gives its free budget to the nearest upstream stage that is not
  starving (walking up through starving stages).

Only free budget moves (never below a stage's minimum or what it holds), so nothing
admitted is ever over-committed.

Reading of the paper: Algorithm 1 writes ``transferMem(from=stage, to=lastStage)`` for a
saturated stage and measures saturation on "its queue". Its Figure 4 places the queue
after a stage (its outputs), the rest of the text before it (its waiting tasks). We keep
waiting queues and therefore move budget from the stage *feeding* the saturated queue -
the same transfer under the other reading, and the only one that, in a two-stage
pipeline, ever gives budget back to the last stage as the paper's Figure 6 requires.
"""

from __future__ import annotations

from kalypso.core.policies.base import Policy, RebalanceView, no_argument, register_policy


def thresholds(view: RebalanceView, stage: int) -> tuple[float, float]:
    """(saturated above, starving below) for ``stage``."""
    budgets = view.budgets
    tasks_fitting = budgets.budget_blocks[stage] / max(1, budgets.min_budget_blocks[stage])
    return view.alpha * tasks_fitting, view.beta * tasks_fitting


def starving(view: RebalanceView, stage: int) -> bool:
    return view.waiting[stage] < thresholds(view, stage)[1]


def saturated(view: RebalanceView, stage: int) -> bool:
    return view.waiting[stage] > thresholds(view, stage)[0]


class Adaptive(Policy):
    """Algorithm 1: minimum budgets upstream, the rest to the last stage, rebalanced."""

    name = "adaptive"

    def rebalance(self, view: RebalanceView) -> None:
        last = len(view.waiting) - 1
        if last == 0:
            return
        for stage in range(1, last + 1):
            if saturated(view, stage):
                view.move(stage - 1, last, "saturated")
        for stage in range(last, 0, -1):
            if not starving(view, stage):
                continue
            upstream = stage - 1
            while upstream > 0 and starving(view, upstream):
                upstream -= 1
            if not starving(view, upstream):
                view.move(stage, upstream, "starving")


def _factory(argument: str | None) -> Policy:
    no_argument("adaptive", argument)
    return Adaptive()


register_policy("adaptive", _factory, aliases=("pipelined",))
