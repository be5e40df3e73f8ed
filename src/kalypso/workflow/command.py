"""``kalypso workflow run NAME``: one library workflow end to end, with a live progress
view and a per-node report.

    kalypso workflow run debate                       # vLLM on CPU, the bundled model
    kalypso workflow run trading --policy opwise      # a baseline
    kalypso workflow run mapred --engine sim --scale paper --sim-profile qwen3-8b-h100
    kalypso workflow run debate --explain             # print the plan, then run it
    kalypso workflow explain trading --engine sim     # the plan only: nothing is run
    kalypso workflow run mapred --engine sim --scale paper --replicas 4   # a replica set
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from kalypso.core.options import RunOptions
from kalypso.core.policies import policy_names
from kalypso.core.replicas import ReplicaSet
from kalypso.core.result_cache import PromptResultCache
from kalypso.engine.open import (
    add_engine_arguments,
    close_engines,
    engine_spec,
    open_engines,
    replica_count,
    replica_urls,
)
from kalypso.models import cache_dir
from kalypso.workflow.library import BUILDERS, workload
from kalypso.workflow.plan import WorkflowOptions, plan
from kalypso.workflow.run import WorkflowResult, arun

DEFAULT_KV_CACHE_BYTES = 128 * 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BUILDERS), help="the workflow to run")
    parser.add_argument(
        "--policy",
        default="cache-aware",
        help=f"scheduling policy (default %(default)s; one of {', '.join(policy_names())})",
    )
    parser.add_argument("--scale", choices=("small", "paper"), default="small")
    add_engine_arguments(parser, replicas=True)
    for switch, what in (
        ("merge", "common-subgraph elimination"),
        ("result-cache", "the prompt/result cache"),
        ("warm", "proactive prefix caching"),
    ):
        parser.add_argument(f"--no-{switch}", action="store_true", help=f"turn off {what}")
    parser.add_argument(
        "--kv-overcommit",
        type=float,
        default=None,
        help="admit against a ledger this many times the KV cache (1.0-4.0; 1.0: never"
        " more than it holds; above, the engine preempts to make room; default: the"
        " policy's choice by predicted time)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress view")
    parser.add_argument(
        "--verbose", action="store_true", help="vLLM's own log on the terminal (else in a file)"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print each run's plan first (the DAG, the optimizer's rewrites, the templated"
        " radix tree, the prefixes warmed and the schedule)",
    )


def node_report(result: WorkflowResult) -> Table:
    """One row per LLM node: calls, tokens, prefix-cache hits, time."""
    table = Table(title="per node", title_justify="left")
    for header in ("node", "calls", "prompt", "cached", "computed", "output", "time (s)"):
        table.add_column(header, justify="left" if header == "node" else "right", no_wrap=True)
    for s in result.operator_stats:
        if not s.requests:
            continue
        table.add_row(
            s.operator,
            str(s.calls),
            str(s.prompt_tokens),
            str(s.cached_tokens),
            str(s.prefill_tokens),
            str(s.output_tokens),
            f"{s.llm_time_s:.1f}",
        )
    return table


def accuracy(result: WorkflowResult, expected: dict[str, Any]) -> dict[str, float]:
    """Per output with known answers: the fraction whose first number is the answer."""
    out = {}
    for name, answers in expected.items():
        if name not in result.outputs:
            continue
        right = 0
        for text, answer in zip(result.outputs[name], answers, strict=False):
            found = re.search(r"-?\d+(?:\.\d+)?", str(text or ""))
            right += found is not None and float(found.group()) == float(answer)
        out[name] = right / max(1, len(answers))
    return out


async def run(args: argparse.Namespace, console: Console, *, execute: bool = True) -> int:
    """``kalypso workflow run`` (``execute``) or ``kalypso workflow explain`` (plans
    only: the engine is opened for its tokenizer and cache size, and sent nothing)."""
    job = workload(args.name, args.scale)
    spec = engine_spec(args)
    switches = WorkflowOptions(
        merge=not args.no_merge, result_cache=not args.no_result_cache, warm=not args.no_warm
    )
    options = RunOptions(
        policy=args.policy,
        progress=not args.no_progress,
        system_prompt="",
        kv_overcommit=args.kv_overcommit,
    )
    count = replica_count(args)  # bad flags are refused before anything starts
    log_path = None
    if args.engine != "sim" and not args.verbose:
        log_path = cache_dir() / "logs" / f"workflow-vllm-{int(time.time())}.log"
    engines = await open_engines(spec, count, urls=replica_urls(args), log_path=log_path)
    if log_path is not None:
        console.print(f"vLLM's log: {log_path}")
    # replicas place the queries themselves and keep no cache across the days
    replicas = ReplicaSet(engines) if count > 1 else None
    engine = engines[0]
    cache = PromptResultCache(engine.name) if replicas is None else None
    simulated = args.engine == "sim"

    def now_s() -> float:  # virtual time on the simulator: the latest replica's
        return max(e.now_s for e in engines) if simulated else time.monotonic()  # type: ignore[attr-defined]

    try:
        result = None
        for number, (flow, inputs) in enumerate(zip(job.workflows, job.inputs, strict=True)):
            if len(job.workflows) > 1:
                console.print(
                    f"{flow.name}: {job.queries} queries"
                    + (" (timed)" if flow is job.workflows[-1] else " (warms the caches)")
                )
            if args.explain or not execute:
                if replicas is not None:
                    console.print(f"the plan of one engine; the run places the queries on {count}")
                console.print(
                    plan(flow, engine, inputs, options, workflow_options=switches).explain(),
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            if not execute:
                continue
            started = now_s()
            result = await arun(
                flow, replicas or engine, inputs, options, workflow_options=switches, cache=cache
            )
            ended = now_s()
            console.print(f"  {result.summary()}")
            if number + 1 == len(job.workflows):
                console.print(f"  engine time: {ended - started:.2f} s")
    finally:
        await close_engines(engines)
    if replicas is not None and result is not None:
        console.print(replicas.explain(), markup=False, highlight=False, soft_wrap=True)
    if result is None:
        return 0
    console.print(node_report(result))
    if result.rewrites.merged:
        console.print("optimizer: " + "; ".join(result.rewrites.describe()))
    scores = accuracy(result, dict(job.expected))
    if scores:
        console.print(
            "accuracy (first number = answer): "
            + ", ".join(f"{k} {v:.0%}" for k, v in scores.items())
        )
    first = result.outputs.iloc[0].to_dict()
    for name, text in first.items():
        shown = (text or "").replace("\n", " ")
        console.print(f"query 0 {name}: {shown[:200]}")
    return 0
