"""``cache-aware``: the Helium paper's cache-aware scheduling (section 5, Alg. 1).

Before the run, the operators (LLM nodes) are ordered over the templated radix tree
(:mod:`kalypso.core.trt`): a depth-first walk that, at each tree node, takes first the
subtree with the longest chain of dependent calls below it (the critical path), then the
one that can start earliest; an operator is emitted once the operators it depends on
were. Operators whose shared prefix holds a placeholder (they share it only within a
query) form one *inner sequence*, run query by query; across inner sequences the order
is operator by operator, so a static prefix is reused by every query in a row.

Inner sequences are taken level by level in the dependency DAG (critical path first
within a level): a call that waits for another's answer comes after the independent
calls of every query, so its producer's decoding overlaps other work - the precedence
delay of the paper's cost model (:mod:`kalypso.core.cost`), which a query-by-query order
over dependent calls would pay in full. The exception is a call that continues its
producer's query-level prefix (a debate's next round extends the same conversation): it
joins its producer's inner sequence, ranked right behind that query's earlier calls, so
it runs while their prefix is still cached instead of after every other query has
pushed it out of a small cache. The calls of a conversation group of tight
continuations (:meth:`~kalypso.core.graph.TaskGraph.conversation_groups`: three risk
analysts, each continuing its own conversation and reading the other two) share one
inner sequence, so a query's next round follows its first instead of waiting for every
query's first.

At run time every ready call is ranked ``(inner sequence, query, operator)`` and
admitted in that order while the KV ledger has room (the core's memory-aware admission
decides how many run at once; no per-stage budgets). Calls become ready only when their
inputs exist, so the order is a soft one, as in the paper: a call whose turn has come
but is not ready lets the next ones through.

When the graph has conversation groups, an instance's group starts only while fewer
than a window of groups are in flight (:mod:`kalypso.core.instance_window`), so that
the conversations they continue stay cached. ``cache-aware:N`` sets the window to ``N``
groups, ``cache-aware:unbounded`` turns it off. A group of a loose continuation only (a
reflection's) is windowed only when the window is set, and keeps the level-major order.
Beside the window (or without one), the ledger the run admits against is sized by
predicted time (:mod:`kalypso.core.ledger_size`): the cache's, or the calls' mean
occupancy (:attr:`ledger_factor`).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any, Literal

from kalypso.core.graph import LLMNode, TaskGraph
from kalypso.core.instance_window import InstanceWindow, llm_levels, window_options
from kalypso.core.ledger_size import ledger_options
from kalypso.core.policies.base import (
    PlanInfo,
    Policy,
    PolicyError,
    RunInfo,
    TaskInfo,
    register_policy,
)
from kalypso.core.prompt import ChatLayout
from kalypso.core.time_model import TimedChoice, choose_by_time
from kalypso.core.trt import TemplatedRadixTree, TreeNode


def operator_order(
    trt: TemplatedRadixTree,
    deps: dict[str, set[str]],
    tied: Sequence[Set[str]] = (),
) -> tuple[list[str], dict[str, int]]:
    """The operators in cache-aware order, and each one's inner-sequence index. The
    inner sequences of each ``tied`` group's operators (a conversation group,
    :meth:`~kalypso.core.graph.TaskGraph.conversation_groups`) are one."""
    dependents: dict[str, set[str]] = {op: set() for op in deps}
    for op, ancestors in deps.items():
        for ancestor in ancestors:
            dependents[ancestor].add(op)
    height: dict[str, int] = {}

    def chain(op: str) -> int:  # longest chain of dependent calls from op
        if op not in height:
            height[op] = 1 + max((chain(d) for d in dependents[op]), default=0)
        return height[op]

    depth = {op: len(deps[op]) for op in deps}
    subtree: dict[int, list[str]] = {}

    def leaves(node: TreeNode) -> list[str]:
        if id(node) not in subtree:
            subtree[id(node)] = [*node.leaves, *(op for c in node.children for op in leaves(c))]
        return subtree[id(node)]

    order: list[str] = []
    emitted: set[str] = set()
    level = llm_levels(deps)

    def walk(node: TreeNode) -> None:
        for op in sorted(node.leaves):
            if op not in emitted and deps[op] <= emitted:
                emitted.add(op)
                order.append(op)
        children = sorted(
            node.children,
            key=lambda c: (
                -max(chain(op) for op in leaves(c)),
                min(depth[op] for op in leaves(c)),
                min(leaves(c)),
            ),
        )
        for child in children:
            walk(child)

    while len(emitted) < len(deps):
        before = len(emitted)
        walk(trt.root)
        if len(emitted) == before:  # stuck: force the earliest operator
            op = min((o for o in deps if o not in emitted), key=lambda o: (depth[o], o))
            emitted.add(op)
            order.append(op)
    groups: dict[int, int] = {}
    group_of: dict[str, int] = {}
    for op in order:
        anchor = trt.query_group(op)
        key = id(anchor) if anchor is not None else id(trt.leaf_of[op]) ^ hash(op)
        group_of[op] = groups.setdefault(key, len(groups))
    # level-major: the calls that depend on others come after every independent call of
    # the batch, so their producers' decode overlaps other work (the paper's delays) -
    # except a call that continues its producer's query-level prefix (a debate's next
    # round): it joins its producer's sequence, so it runs while that prefix is cached
    emitted_at = {op: i for i, op in enumerate(order)}
    sequence: dict[str, int] = {}
    for op in sorted(order, key=lambda o: (level[o], emitted_at[o])):
        continued = [a for a in deps[op] if group_of[a] == group_of[op]]
        sequence[op] = (
            min(sequence[a] for a in continued)
            if continued
            else level[op] * len(order) + group_of[op]
        )
    # a conversation group runs query by query as one sequence: a call that continues its
    # own conversation and reads the others' answers needs the whole group's round done
    merged: dict[int, int] = {}

    def root(index: int) -> int:
        while merged.get(index, index) != index:
            index = merged[index]
        return index

    for group in tied:
        roots = {root(sequence[op]) for op in group}
        for r in roots:
            merged[r] = min(roots)  # the earliest sequence of the group
    sequence = {op: root(index) for op, index in sequence.items()}
    order.sort(key=lambda op: (sequence[op], level[op], -chain(op), emitted_at[op]))
    return order, sequence


class CacheAware(Policy):
    """Cache-aware order over the templated radix tree (see the module docstring)."""

    name = "cache-aware"
    ranked = True
    holds_continued_prefixes = True
    reads_instance_peak = True

    def __init__(self, window: int | Literal["auto", "off"] = "auto") -> None:
        """``window``: a fixed number of conversation groups in flight, ``"auto"`` to size
        it from the plan, or ``"off"``.

        Raises:
            PolicyError: a fixed window below 1.
        """
        if window not in ("auto", "off") and (not isinstance(window, int) or window < 1):
            raise PolicyError(
                f"cache-aware takes a window of at least 1 group, 'auto' or 'off', got {window!r}"
            )
        self.position: dict[str, int] = {}
        self.sequence_of: dict[str, int] = {}
        self.tree: TemplatedRadixTree | None = None
        self.window_setting = window
        self.window = InstanceWindow(None, "not prepared")
        self.choice: TimedChoice | None = None
        """The windows weighed by predicted time, when the window was chosen so."""
        self.ledger_choice: TimedChoice | None = None
        """The ledgers weighed by predicted time, when the ledger was chosen so."""
        self.groups: list[frozenset[str]] = []
        """The conversation groups the window holds: every one when the window is set,
        else those of tight continuations."""
        self.group_of_op: dict[str, int] = {}
        self._started: set[tuple[int, tuple[int, ...]]] = set()
        self._running: set[tuple[int, tuple[int, ...]]] = set()
        self._seen_run: RunInfo | None = None

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        return [max(capacity_blocks, m) for m in min_blocks]  # the ledger alone bounds

    def priority(self, stage: int, num_stages: int) -> int:
        """With a window (the cache is what binds), deeper calls first, so that the
        conversations in flight finish and free their room; without one, every call
        alike: the engine takes them in the order this policy sends them, and a deeper
        call that jumped the queue would leave the earlier calls of later queries, and
        the chains behind them, to a tail of nearly empty steps."""
        return super().priority(stage, num_stages) if self.window.groups is not None else 0

    def prepare(self, plan: PlanInfo) -> None:
        graph, layout = plan.graph, plan.layout
        if not isinstance(graph, TaskGraph) or not isinstance(layout, ChatLayout):
            raise PolicyError("cache-aware scheduling needs a task graph and a chat layout")
        nodes = [n for n in graph.nodes if isinstance(n, LLMNode)]
        self.tree = TemplatedRadixTree.of(nodes, layout)
        tight = graph.conversation_groups(tight_only=True)
        # a set window holds every group; the automatic one only those of tight
        # continuations (see the module docstring), which alone are one inner sequence
        set_window = isinstance(self.window_setting, int)
        self.groups = graph.conversation_groups() if set_window else tight
        self.group_of_op = {op: index for index, group in enumerate(self.groups) for op in group}
        order, self.sequence_of = operator_order(self.tree, graph.llm_ancestors(), tight)
        self.position = {op: i for i, op in enumerate(order)}
        self.choice = None
        self.window = self._window(plan, graph)
        self.ledger_choice, self.ledger_factor = None, 1.0
        self._size_ledger(plan)
        self._started, self._running, self._seen_run = set(), set(), None

    def _window(self, plan: PlanInfo, graph: TaskGraph) -> InstanceWindow:
        if self.window_setting == "off":
            return InstanceWindow(None, "turned off")
        if isinstance(self.window_setting, int):
            return InstanceWindow(self.window_setting, "set")
        if not self.groups and graph.continuations():  # every continuation is loose
            return InstanceWindow(
                None,
                "loose continuations only: a window breaks the sharing across queries,"
                " which the time model does not price; cache-aware:N sets one",
            )
        if not self.groups:
            return InstanceWindow(None, "no conversation group")
        if plan.capacity is None or plan.instance_peak is None:
            return InstanceWindow(None, "sizes not measured")
        capacity = plan.capacity
        memory = InstanceWindow.sized(
            capacity.num_blocks, plan.instance_peak, capacity.max_running_requests
        )
        if memory.groups is None or plan.instance_work is None:
            return memory  # nothing would be evicted, or nothing to weigh
        options = window_options(
            capacity.num_blocks,
            plan.instance_peak,
            plan.instance_work,
            len(plan.instance_keys),
            capacity.max_running_requests,
            groups_per_instance=len(self.groups),
        )
        self.choice = choose_by_time([option for _, option in options], plan.cost_model)
        window = options[self.choice.chosen][0]
        return InstanceWindow(window, f"by predicted time, of {len(options)} options")

    def _size_ledger(self, plan: PlanInfo) -> None:
        """Weigh the cache's ledger against the calls' mean occupancy by predicted time
        (:mod:`kalypso.core.ledger_size`); without a cost model or the sizes, the cache's.
        Beside conversation groups the larger ledger must be faster beyond the tolerance:
        its preempted calls evict conversations, which the prediction does not price."""
        if plan.capacity is None or plan.instance_work is None or plan.cost_model is None:
            return
        capacity = plan.capacity
        options = ledger_options(
            capacity.num_blocks,
            plan.instance_work,
            len(plan.instance_keys),
            capacity.max_running_requests,
            capacity.block_size_tokens,
        )
        self.ledger_choice = choose_by_time(
            [option for _, option in options],
            plan.cost_model,
            ties_to="narrowest" if self.groups else "widest",
        )
        self.ledger_factor = options[self.ledger_choice.chosen][0]

    def rank(self, task: TaskInfo) -> tuple[Any, ...]:
        if task.op not in self.position:  # a root task: run at once
            return (-1, task.key, 0)
        return (self.sequence_of[task.op], task.key, self.position[task.op])

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        """A call of a conversation group that an instance has not started waits while
        the window is full: an instance's group is in flight from its first call's start
        until every call of the group has completed. Calls outside the groups never wait,
        and no call waits when no group in flight has a call running (none could free its
        place; a group left unfinished would otherwise hold one for good)."""
        group = self.group_of_op.get(task.op)
        if self.window.groups is None or group is None:
            return True
        if run is not self._seen_run:  # the scheduler asks of every waiting call per state
            self._seen_run = run
            self._running = {
                (self.group_of_op[t.op], t.key) for t in run.running if t.op in self.group_of_op
            }
            self._started = {u for u in self._started | self._running if not self._done(u, run)}
        if not self._running:
            return True
        return self.window.admits(self._started, (group, task.key))

    def _done(self, unit: tuple[int, tuple[int, ...]], run: RunInfo) -> bool:
        group, key = unit
        return all(key in run.completed.get(op, ()) for op in self.groups[group])

    def explain(self) -> str:
        order = sorted(self.position, key=self.position.__getitem__)
        lines = [self.window.describe()]
        if self.choice is not None:
            lines += [f"  {line}" for line in self.choice.explain()]
        if self.ledger_choice is not None:
            lines.append(
                f"ledger: {self.ledger_choice.option.label} (shared with other runs, the"
                " least of their choices)"
            )
            lines += [f"  {line}" for line in self.ledger_choice.explain()]
        lines += [
            f"  conversation group {i}: {', '.join(sorted(g))}" for i, g in enumerate(self.groups)
        ]
        lines.append("cache-aware order (inner sequence: operators):")
        current = -1
        for op in order:
            if self.sequence_of[op] != current:
                current = self.sequence_of[op]
                lines.append(f"  sequence {current}:")
            lines.append(f"    {op}")
        return "\n".join(lines)


def _factory(argument: str | None) -> Policy:
    if argument is None:
        return CacheAware()
    if argument == "unbounded":
        return CacheAware("off")
    if not argument.isdigit() or int(argument) < 1:
        raise PolicyError(
            f"cache-aware takes a window of at least 1 group or 'unbounded', got {argument!r}"
        )
    return CacheAware(int(argument))


register_policy("cache-aware", _factory, aliases=("helium",))
