"""Lowering: a physical plan becomes the core's task-graph IR, pipeline by pipeline.

Each pipelined operator lowers to its nodes (an LLM call and the step that reads its
answer, or one Python step); each Cartesian product to a fan-out that starts a new
stage. A tuple's chain of operators is then a path of LLM nodes that share its
``[system | context]`` prefix::

    sem_filter            sem_join(aspects)                 sem_map
    [1/call]->[1/answer]->[2:fan-out]->[3/call]->[3/answer]->[4/call]->[4/answer]
    '------- stage 0 ----'            '-------------- stage 1 -------------------'

Under a policy that runs operator-at-a-time, every operator is its own stage (the
barrier between stages materializes its output), over the same nodes and prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.core.graph import FanOutNode, FnNode, InputNode, LLMNode, Node, Stage, TaskGraph
from kalypso.query.operators import CartesianOperator, LoweringContext, PipelinedOperator
from kalypso.query.planner import PhysicalPlan, PlannedOperator


@dataclass(frozen=True)
class LoweredPipeline:
    """``barrier`` (a blocking operator, run on the materialized input first), then
    ``stages`` as scheduled tasks; ``graph`` is the same nodes as one task graph."""

    number: int
    barrier: PlannedOperator | None
    stages: tuple[Stage, ...]
    graph: TaskGraph


def _chain(nodes: list[Node], node: Node) -> Node:
    """``node`` depending on the node before it (a chain)."""
    if nodes and not isinstance(node, InputNode) and not node.deps:
        previous = nodes[-1].node_id
        if isinstance(node, LLMNode):
            node = LLMNode(**{**node.__dict__, "deps": (previous,)})
        elif isinstance(node, FnNode):
            node = FnNode(**{**node.__dict__, "deps": (previous,)})
        elif isinstance(node, FanOutNode):
            node = FanOutNode(**{**node.__dict__, "deps": (previous,)})
    nodes.append(node)
    return node


def lower(
    physical: PhysicalPlan, context: LoweringContext, *, operator_at_a_time: bool
) -> list[LoweredPipeline]:
    """The plan's pipelines as task-graph stages (see the module docstring)."""
    lowered: list[LoweredPipeline] = []
    for pipeline in physical.pipelines:
        stages: list[Stage] = []
        all_nodes: list[Node] = []
        source = "input" if pipeline.number == 1 else f"materialized input {pipeline.number}"
        _chain(all_nodes, InputNode(source, tuple(physical.output_schema), source))
        for planned_stage in pipeline.stages:
            fan_out: FanOutNode | None = None
            if planned_stage.product is not None:
                product = planned_stage.product
                assert isinstance(product.operator, CartesianOperator)
                fan_out = _chain(all_nodes, product.operator.fan_out(product.op_id))  # type: ignore[assignment]
            groups: list[tuple[LLMNode | FnNode, ...]] = []
            for planned in planned_stage.operators:
                operator = planned.operator
                assert isinstance(operator, PipelinedOperator)
                nodes = [_chain(all_nodes, n) for n in operator.lower(planned.op_id, context)]
                groups.append(tuple(n for n in nodes if isinstance(n, LLMNode | FnNode)))
            if operator_at_a_time and groups:  # one stage per operator
                for position, group in enumerate(groups):
                    stages.append(Stage(len(stages), fan_out if position == 0 else None, group))
            else:
                stages.append(Stage(len(stages), fan_out, tuple(n for g in groups for n in g)))
        graph = TaskGraph(
            tuple(all_nodes),
            (all_nodes[-1].node_id,),
            name=f"{physical.source_name}/{pipeline.number}",
        )
        lowered.append(LoweredPipeline(pipeline.number, pipeline.barrier, tuple(stages), graph))
    return lowered
