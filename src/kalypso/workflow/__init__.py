"""Batch agentic workflows on Kalypso's core (the Helium paper): a lazy DSL, an optimizer
(pruning, common-subgraph elimination, a prompt/result cache), lowering to the core's
token-exact task graph, and scheduling by the core's policies.

    from kalypso import workflow as wf
    ...
    print(wf.plan(flow, engine, {"question": questions}).explain())
    result = await wf.arun(flow, engine, {"question": questions})
    spec = flow.to_spec()   # as JSON for a server: wf.workflow_from_spec(spec)
"""

from kalypso.workflow.dsl import (
    LLM,
    Conversation,
    Fn,
    Input,
    Message,
    Text,
    Value,
    Workflow,
    assistant,
    chat,
    cond,
    const,
    fmt,
    fn,
    input,
    llm,
    loop,
    system,
    user,
)
from kalypso.workflow.plan import WorkflowOptions, WorkflowPlan, plan
from kalypso.workflow.run import WorkflowResult, arun
from kalypso.workflow.spec import WorkflowSpec, workflow_from_spec

__all__ = [
    "LLM",
    "Conversation",
    "Fn",
    "Input",
    "Message",
    "Text",
    "Value",
    "Workflow",
    "WorkflowOptions",
    "WorkflowPlan",
    "WorkflowResult",
    "WorkflowSpec",
    "arun",
    "assistant",
    "chat",
    "cond",
    "const",
    "fmt",
    "fn",
    "input",
    "llm",
    "loop",
    "plan",
    "system",
    "user",
    "workflow_from_spec",
]
