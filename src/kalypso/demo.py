"""The main job: a real semantic query over the bundled reviews, run two ways.

    reviews -> sem_map     (which product is it about?)
            -> sem_map     (what does it say about the battery?)
            -> sem_filter  (does it talk about the battery?)

Each operator reads the whole review, as in the paper's ContractNLI shape (a long
document, then several dependent operators). The plan runs operator-at-a-time (what
today's systems do: every operator over the whole table before the next, so each review
is prefilled once per operator) and with the adaptive memory-aware scheduler (each
review's prefix is kept in the KV cache while its operators run), each after a
prefix-cache reset, on a KV cache a fraction of the table's size. Both use greedy decoding
in the deterministic mode (float32), so their decisions must be identical; the demo prints
whether they are, the speed-up, the prefill tokens saved, five result rows and a PNG.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table as RichTable

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import Engine, Tokenizer
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.engine.warm_up import warm_up
from kalypso.models import cache_dir, resolve_model
from kalypso.query.plan import QueryResult, compare_decisions

SYSTEM_PROMPT = "You answer questions about product reviews."
WIDTH = 100


def demo_plan(num_docs: int) -> kalypso.Table:
    reviews = load_bundled().reviews.head(num_docs)[["review_id", "product", "text"]]
    return (
        kalypso.table(reviews, name="reviews")
        .sem_map(
            "Name the product the {text} is about. Answer with its name only.",
            "named",
            max_tokens=16,
        )
        .sem_map(
            "What does the {text} say about the battery? Answer in a few words.",
            "battery",
            max_tokens=16,
        )
        .sem_filter("Does this {text} talk about the battery?")
    )


@dataclass(frozen=True)
class DemoSettings:
    """The knobs of ``kalypso demo`` (see ``kalypso demo --help``)."""

    docs: int = 20
    kv_fraction: float = 0.2
    """KV cache size as a fraction of the table's tokens (ignored with ``kv_cache_bytes``)."""
    kv_cache_bytes: int | None = None
    policies: tuple[str, ...] = ("operator-at-a-time", "adaptive")
    model: str = "bundled"
    url: str | None = None
    deterministic: bool = True
    verbose: bool = False
    plot_path: Path | None = None


def table_tokens(plan: kalypso.Table, tokenizer: Tokenizer) -> int:
    return sum(len(tokenizer.encode(str(t))) for t in plan.source["text"])


def vllm_settings(demo: DemoSettings, plan: kalypso.Table) -> VLLMSettings:
    """A KV cache of ``kv_fraction`` of the table (at least room for two reviews)."""
    from kalypso.engine.hf_tokenizer import load_hf_tokenizer

    model_path = resolve_model(demo.model)
    dtype = "float32" if demo.deterministic else "bfloat16"
    kv_bytes = demo.kv_cache_bytes
    if kv_bytes is None:
        per_token = kv_bytes_per_token(model_path, dtype) or 2 * 23_040
        tokens = table_tokens(plan, load_hf_tokenizer(model_path))
        kv_bytes = max(int(tokens * demo.kv_fraction), 2048) * per_token
    return VLLMSettings(
        model=demo.model,
        kv_cache_bytes=kv_bytes,
        block_size_tokens=32,
        max_num_seqs=16,
        deterministic=demo.deterministic,
    )


def summary_table(results: Sequence[QueryResult]) -> RichTable:
    table = RichTable(width=WIDTH, box=None, pad_edge=False, header_style="bold")
    for header in ("policy", "time (s)", "speed-up", "calls", "prompt", "prefill", "cache hits"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    base = results[0]
    for r in results:
        hits = r.cached_tokens / r.prompt_tokens if r.prompt_tokens else 0.0
        table.add_row(
            r.policy,
            f"{r.time_s:.1f}",
            f"{base.time_s / r.time_s:.2f}x",
            str(r.llm_calls),
            f"{r.prompt_tokens:,}",
            f"{r.prefill_tokens:,}",
            f"{hits:.0%}",
        )
    return table


def rows_table(result: QueryResult, rows: int = 5) -> RichTable:
    table = RichTable(width=WIDTH, box=None, pad_edge=False, header_style="bold")
    table.add_column("product (data)", no_wrap=True, max_width=22)
    table.add_column("named by the model", max_width=26)
    table.add_column("what it says about the battery", max_width=48)
    for _, row in result.frame.head(rows).iterrows():
        table.add_row(str(row["product"]), str(row["named"]), str(row["battery"]))
    return table


def save_plot(results: Sequence[QueryResult], path: Path) -> Path | None:
    """Time and prefill per policy, side by side (needs matplotlib: the bench extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [r.policy for r in results]
    figure, (left, right) = plt.subplots(1, 2, figsize=(7, 2.8))
    left.bar(names, [r.time_s for r in results], color=["#999999", "#1f77b4"][: len(names)])
    left.set_ylabel("time (s)")
    right.bar(
        names, [r.prefill_tokens for r in results], color=["#999999", "#1f77b4"][: len(names)]
    )
    right.set_ylabel("prefill tokens computed")
    for axes in (left, right):
        axes.tick_params(axis="x", labelsize=8)
    figure.suptitle("Kalypso demo: the same plan, two schedules", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


async def run_policies(
    plan: kalypso.Table, engine: Engine, policies: Sequence[str], console: Console
) -> list[QueryResult]:
    """Each policy from an empty prefix cache, after untimed warm-up requests, with a live
    progress view."""
    await warm_up(engine, [str(t) for t in plan.source["text"]])
    results = []
    for policy in policies:
        await engine.reset_prefix_cache()
        console.print(f"running {policy} ...")
        results.append(
            await plan.arun(engine, policy=policy, progress=True, system_prompt=SYSTEM_PROMPT)
        )
    return results


async def run_demo(demo: DemoSettings, console: Console) -> list[QueryResult]:
    """Start the engine (or connect to ``demo.url``), run the plan under each policy,
    print the comparison."""
    out = Console(width=WIDTH, highlight=False)
    plan = demo_plan(demo.docs)
    log_path = None if demo.verbose else cache_dir() / "logs" / f"demo-vllm-{int(time.time())}.log"
    if demo.url:
        spec = EngineSpec(kind="http", url=demo.url)
    else:
        spec = EngineSpec(kind="vllm", settings=vllm_settings(demo, plan))
    started = time.monotonic()
    with out.status("starting vLLM (CPU) with the bundled model ..."):
        engine = await open_engine(spec, log_path=log_path)
    try:
        cap = engine.capacity
        tokens = table_tokens(plan, engine.tokenizer)
        mode = "float32, deterministic" if demo.deterministic else "bf16"
        out.print(
            f"[bold]Kalypso demo[/bold]: {demo.docs} reviews ({tokens:,} tokens) x 3 operators,"
            f" {engine.name} ({mode})"
        )
        out.print(
            f"KV cache {cap.total_tokens:,} tokens ({cap.total_tokens / tokens:.0%} of the"
            f" table); engine started in {time.monotonic() - started:.0f} s"
        )
        if log_path:
            out.print(f"vLLM's log: {log_path}")
        for planned in plan.physical_plan().operators():
            line = f"  [{planned.op_id}] {planned.operator.describe()}"
            out.print(line if len(line) <= WIDTH else line[: WIDTH - 3] + "...")
        results = await run_policies(plan, engine, demo.policies, out)
    finally:
        await engine.close()
    out.print(summary_table(results))
    base, best = results[0], results[-1]
    saved = base.prefill_tokens - best.prefill_tokens
    out.print(
        f"[bold]{best.policy} is {base.time_s / best.time_s:.2f}x faster[/bold] and computes"
        f" {saved:,} fewer prefill tokens ({saved / max(1, base.prefill_tokens):.0%})"
    )
    differing, ties = compare_decisions(base, best)
    same_text = _same_text(base.frame, best.frame, ("battery", "named"))
    near = f", {len(ties)} near-ties among them" if ties else ""
    out.print(
        f"same decisions: {differing == 0} ({len(best.decisions)} decisions,"
        f" {differing} differ{near}); generated answers equal: {same_text}"
    )
    out.print(f"the filter vs the data's battery labels: {_filter_agreement(best, demo.docs)}")
    out.print(rows_table(best))
    path = demo.plot_path or cache_dir() / "demo.png"
    if save_plot(results, path) is not None:
        out.print(f"plot: {path}")
    return results


def _filter_agreement(result: QueryResult, num_docs: int) -> str:
    """How many reviews the filter kept or dropped as the bundled labels say (the bundled
    135M model answers yes/no questions about long text little better than chance)."""
    labels = load_bundled().reviews.head(num_docs)
    kept = set(result.frame["review_id"])
    agree = sum(
        int((rid in kept) == bool(m))
        for rid, m in zip(labels["review_id"], labels["mentions_battery"], strict=True)
    )
    return f"{agree} of {num_docs} agree"


def _same_text(a: pd.DataFrame, b: pd.DataFrame, columns: Sequence[str]) -> str:
    if len(a) != len(b):
        return "n/a (different rows)"
    equal = sum(int(x == y) for c in columns for x, y in zip(a[c], b[c], strict=True))
    return f"{equal}/{len(a) * len(columns)}"
