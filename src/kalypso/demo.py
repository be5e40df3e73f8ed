"""The main job: a real semantic query over the bundled reviews, run two ways.

    reviews -> sem_filter (does the review discuss the battery?)
            -> sem_join with a few aspect statements (is the statement true of the review?)
            -> sem_map on the matches (why, in a few words)

The plan runs operator-at-a-time (what today's systems do: every operator over the whole
table before the next), then with the adaptive memory-aware scheduler (tasks flow through
the stages while each review's prefix is still in the KV cache), each after a prefix-cache
reset. Both use greedy
decoding, so both return the same rows; the table printed at the end compares their time,
LLM calls, prompt tokens, cached tokens and prefill tokens computed.
"""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table as RichTable

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.protocol import Engine
from kalypso.engine.vllm_settings import VLLMSettings
from kalypso.engine.warm_up import warm_up
from kalypso.query.plan import QueryResult

DEMO_ASPECTS = ("A1", "A2", "A8")
"""The aspect statements joined against (battery complaints, battery praise, recommends)."""


def demo_plan(num_docs: int) -> kalypso.Table:
    data = load_bundled()
    reviews = data.reviews.head(num_docs)[["review_id", "product", "text"]]
    aspects = data.aspects[data.aspects["aspect_id"].isin(DEMO_ASPECTS)][["aspect"]]
    return (
        kalypso.table(reviews, name="reviews")
        .sem_filter("Does this {text} talk about the battery?")
        .sem_join(kalypso.table(aspects, name="aspects"), "Is this true of the {text}: {aspect}")
        .sem_map("In a few words, why is this true of the {text}: {aspect}", "why", max_tokens=24)
    )


def comparison_table(results: list[QueryResult], engine: Engine) -> RichTable:
    cap = engine.capacity
    table = RichTable(
        title=f"{engine.name}; KV cache {cap.num_blocks} blocks x {cap.block_size_tokens}"
        f" = {cap.total_tokens} tokens"
    )
    headers = (
        "policy",
        "time (s)",
        "LLM calls",
        "prompt tokens",
        "cached tokens",
        "prefill tokens",
        "speed-up",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right", no_wrap=True)
    baseline_s = results[0].time_s
    for r in results:
        table.add_row(
            r.policy,
            f"{r.time_s:.1f}",
            str(r.llm_calls),
            str(r.prompt_tokens),
            str(r.cached_tokens),
            str(r.prefill_tokens),
            f"{baseline_s / r.time_s:.2f}x",
        )
    return table


async def run_plan_both_ways(plan: kalypso.Table, engine: Engine) -> list[QueryResult]:
    """Operator-at-a-time, then the adaptive scheduler, each from an empty prefix cache,
    after untimed warm-up requests (a fresh engine's first requests are slower)."""
    await warm_up(engine, [str(t) for t in plan.source["text"]])
    results = []
    for policy in ("operator-at-a-time", "adaptive"):
        await engine.reset_prefix_cache()
        results.append(await plan.arun(engine, policy=policy))
    return results


async def run_demo(
    settings: VLLMSettings, *, num_docs: int, url: str | None, console: Console
) -> list[QueryResult]:
    """Start the engine (or connect to ``url``), run the plan both ways, print the results."""
    plan = demo_plan(num_docs)
    out = Console(width=max(Console().width, 120))
    out.print(plan.explain())
    engine: Engine
    if url:
        from kalypso.engine.vllm_http import HTTPVLLMEngine

        engine = await HTTPVLLMEngine.connect(url)
    else:
        from kalypso.engine.vllm_local import LocalVLLMEngine

        console.print(
            f"starting vLLM in-process ({settings.model}, KV {settings.kv_cache_bytes} B)"
        )
        engine = await LocalVLLMEngine.start(settings)
    try:
        with console.status("running operator-at-a-time, then adaptive ..."):
            results = await run_plan_both_ways(plan, engine)
    finally:
        await engine.close()
    with pd.option_context("display.max_colwidth", 60, "display.width", 160):
        out.print(results[-1].frame[["review_id", "product", "aspect", "why"]].head(12).to_string())
        out.print(f"({len(results[-1].frame)} rows)")
        out.print(results[-1].stats.to_string(index=False))
    out.print(comparison_table(results, engine))
    for result in results:
        out.print(result.report())
    same = results[0].frame.equals(results[1].frame)
    out.print(f"same rows and values under both policies: {same}")
    return results
