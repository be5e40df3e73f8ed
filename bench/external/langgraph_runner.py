"""Run a library workflow with the real LangGraph library against a running vLLM server.

This script runs in LangGraph's own virtual environment (``make langgraph-venv``: langgraph
1.2, langchain-openai, and Kalypso without its engine extras, for the workflow library's
definitions and data). Each workflow becomes a ``StateGraph``: one node per LLM call
(``ChatOpenAI`` against the server's chat completions, temperature 0, the call's own
``max_tokens``; the server applies the model's chat template) and per Python step, an edge
from every value a node reads (a node reading several waits for all of them), the batch
run with ``graph.abatch`` (every query at once, LangGraph's batch runnables: the
``all-ready`` discipline). No common-subgraph elimination, no result cache, no order of
its own: what LangGraph users get.

    .venv-langgraph/bin/python bench/external/langgraph_runner.py JOB.json OUT.json

JOB: ``{"workflow", "scale", "base_url", "model"}``; OUT: time of the timed run (Trading:
its second day), LLM calls, the server's counters over it (``server_counters.py``: prompt,
cached and generated tokens, prefill and decode seconds, preemptions), the outputs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from server_counters import counters, run_record  # beside this script

from kalypso.workflow.dsl import LLM, Fn, Input, Text, Value, Workflow
from kalypso.workflow.library import workload


def text_of(value: Value, state: dict[str, Any]) -> str | None:
    if isinstance(value, Input):
        return str(state[value.name])
    if isinstance(value, Text):
        parts = []
        for part in value.parts():
            piece = part if isinstance(part, str) else text_of(part, state)
            parts.append("" if piece is None else piece)
        return "".join(parts)
    if isinstance(value, LLM | Fn):
        return state.get(value.name)
    raise TypeError(value)


def refs(value: Value) -> list[str]:
    """Names of the LLM calls and Python steps ``value`` reads."""
    out: list[str] = []
    for dep in value.deps():
        if isinstance(dep, LLM | Fn):
            out.append(dep.name)
        elif isinstance(dep, Text):
            out.extend(refs(dep))
    if isinstance(value, LLM) and value.conversation.continues is not None:
        out.append(value.conversation.continues.name)
    return sorted(set(out))


ROLES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def build(flow: Workflow, base_url: str, model: str) -> Any:
    clients: dict[int, ChatOpenAI] = {}
    calls = {"n": 0}

    def client(max_tokens: int) -> ChatOpenAI:
        if max_tokens not in clients:
            clients[max_tokens] = ChatOpenAI(
                model=model, base_url=f"{base_url}/v1", api_key="EMPTY",
                temperature=0.0, max_tokens=max_tokens, max_retries=2, timeout=600,
            )  # fmt: skip
        return clients[max_tokens]

    steps = [v for v in flow.values if isinstance(v, LLM | Fn)]
    inputs = [v.name for v in flow.values if isinstance(v, Input)]
    # one channel per input and per step: parallel nodes write different keys
    fields: dict[str, Any] = {n: str | None for n in [*inputs, *(s.name for s in steps)]}
    state = TypedDict("State", fields, total=False)  # type: ignore[misc]
    graph = StateGraph(state)

    def llm_node(call: LLM) -> Any:
        async def run(state: dict[str, Any]) -> dict[str, Any]:
            guard = call.guard
            if guard is not None and state.get(guard.decider.name) != (
                "1" if guard.expected else "0"
            ):
                return {call.name: None}
            messages: list[BaseMessage] = []
            for message in call.conversation.messages:
                content = "".join(
                    (p if isinstance(p, str) else (text_of(p, state) or "")) for p in message.parts
                )
                messages.append(ROLES[message.role](content=content))
            calls["n"] += 1
            answer = await client(call.max_tokens).ainvoke(messages)
            return {call.name: str(answer.content)}

        return run

    def fn_node(step: Fn) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            guard = step.guard
            if guard is not None and state.get(guard.decider.name) != (
                "1" if guard.expected else "0"
            ):
                return {step.name: None}
            result = step.function(*[text_of(v, state) for v in step.inputs])
            return {step.name: None if result is None else str(result)}

        return run

    for step in steps:
        graph.add_node(step.name, llm_node(step) if isinstance(step, LLM) else fn_node(step))
    readers: set[str] = set()
    for step in steps:
        sources = refs(step)
        readers.update(sources)
        if not sources:
            graph.add_edge(START, step.name)
        elif len(sources) == 1:
            graph.add_edge(sources[0], step.name)
        else:
            graph.add_edge(sources, step.name)  # waits for all of them
    for step in steps:
        if step.name not in readers:
            graph.add_edge(step.name, END)
    return graph.compile(), calls


async def run_job(job: dict[str, Any]) -> dict[str, Any]:
    work = workload(job["workflow"], job.get("scale", "small"))
    record: dict[str, Any] = {}
    for flow, inputs in zip(work.workflows, work.inputs, strict=True):
        compiled, calls = build(flow, job["base_url"], job["model"])
        queries = [
            dict(zip(inputs, values, strict=True)) for values in zip(*inputs.values(), strict=True)
        ]
        before = counters(job["base_url"])
        started = time.monotonic()
        states = await compiled.abatch(queries)
        elapsed = time.monotonic() - started
        after = counters(job["base_url"])
        outputs = [
            {name: text_of(value, state) for name, value in flow.outputs.items()}
            for state in states
        ]
        record = run_record(
            before, after, elapsed, len(outputs), llm_calls=calls["n"], outputs=outputs
        )
    return record


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    record = asyncio.run(run_job(job))
    Path(sys.argv[2]).write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
