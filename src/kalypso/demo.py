"""The main job until the query API lands: one two-operator job, two execution orders.

For each review: a filter ("does it discuss the battery? yes or no"), then, for the reviews
that pass, a map ("the main complaint in one sentence"). Both prompts share the
``[system | review]`` prefix token for token.

* operator-at-a-time: every filter call, then every map call (what today's systems do);
  with a KV cache smaller than the table, each review's prefix is evicted before its map.
* per-tuple: up to ``tuples_in_flight`` reviews at a time, each running its filter and then
  its map, so the map finds the review's prefix in the cache.

Same calls, same greedy answers, different order: the table printed at the end shows the
prompt tokens, cached tokens and time of each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from kalypso.datasets.reviews import load_bundled
from kalypso.engine.protocol import Engine, GenerateRequest, GenerateResult
from kalypso.engine.vllm_settings import VLLMSettings
from kalypso.prompts import PromptLayout

FILTER_TASK = "Does this review discuss battery life? Answer yes or no."
MAP_TASK = "In one sentence, what is the reviewer's main complaint?"
FILTER_MAX_TOKENS = 4
MAP_MAX_TOKENS = 24


@dataclass
class RunReport:
    policy: str
    time_s: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    answers: dict[int, tuple[bool, str]] = field(default_factory=dict)

    def add(self, result: GenerateResult) -> None:
        self.calls += 1
        self.prompt_tokens += result.prompt_tokens
        self.cached_tokens += result.cached_tokens


def is_yes(text: str) -> bool:
    return text.strip().lower().startswith("yes")


class _Job:
    def __init__(self, engine: Engine, contexts: list[str]) -> None:
        self.engine = engine
        self.layout = PromptLayout(engine.tokenizer)
        self.prefixes = [self.layout.prefix_ids(self.layout.encode_context(c)) for c in contexts]

    async def call(self, report: RunReport, row: int, task: str, max_tokens: int) -> str:
        request = GenerateRequest(
            f"{report.policy}-{row}-{task[:8]}",
            self.layout.prompt_ids(self.prefixes[row], task),
            max_tokens=max_tokens,
        )
        result = await self.engine.generate(request)
        report.add(result)
        return result.text

    async def operator_at_a_time(self, report: RunReport, tick: Callable[[], None]) -> None:
        async def filter_row(row: int) -> bool:
            passed = is_yes(await self.call(report, row, FILTER_TASK, FILTER_MAX_TOKENS))
            tick()
            return passed

        passed = await asyncio.gather(*(filter_row(r) for r in range(len(self.prefixes))))

        async def map_row(row: int) -> None:
            report.answers[row] = (True, await self.call(report, row, MAP_TASK, MAP_MAX_TOKENS))

        await asyncio.gather(*(map_row(r) for r, ok in enumerate(passed) if ok))
        for row, ok in enumerate(passed):
            if not ok:
                report.answers[row] = (False, "")

    async def per_tuple(
        self, report: RunReport, tick: Callable[[], None], tuples_in_flight: int
    ) -> None:
        slots = asyncio.Semaphore(tuples_in_flight)

        async def run_tuple(row: int) -> None:
            async with slots:
                passed = is_yes(await self.call(report, row, FILTER_TASK, FILTER_MAX_TOKENS))
                answer = await self.call(report, row, MAP_TASK, MAP_MAX_TOKENS) if passed else ""
                report.answers[row] = (passed, answer)
                tick()

        await asyncio.gather(*(run_tuple(r) for r in range(len(self.prefixes))))


async def _timed(
    report: RunReport, work: Callable[[RunReport], Awaitable[None]]
) -> RunReport:
    started = time.monotonic()
    await work(report)
    report.time_s = time.monotonic() - started
    return report


async def run_job(
    engine: Engine, contexts: list[str], *, tuples_in_flight: int = 4, console: Console
) -> list[RunReport]:
    """Run the job operator-at-a-time, then per tuple, resetting the prefix cache between."""
    job = _Job(engine, contexts)
    reports = []
    with Progress(console=console, transient=True) as progress:
        for policy in ("operator-at-a-time", "per-tuple"):
            await engine.reset_prefix_cache()
            task = progress.add_task(policy, total=len(contexts))

            def tick(task_id: object = task) -> None:
                progress.advance(task_id)  # type: ignore[arg-type]

            report = RunReport(policy)
            if policy == "operator-at-a-time":
                await _timed(report, lambda r: job.operator_at_a_time(r, tick))
            else:
                await _timed(report, lambda r: job.per_tuple(r, tick, tuples_in_flight))
            reports.append(report)
    return reports


def render(reports: list[RunReport], engine: Engine) -> Table:
    cap = engine.capacity
    table = Table(
        title=f"{engine.name}, KV cache {cap.num_blocks} blocks x {cap.block_size_tokens}"
        f" = {cap.total_tokens} tokens"
    )
    for column in ("policy", "time (s)", "LLM calls", "prompt tokens", "cached tokens",
                   "prefill tokens", "speed-up"):  # fmt: skip
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)
    baseline = reports[0].time_s
    for r in reports:
        table.add_row(
            r.policy, f"{r.time_s:.1f}", str(r.calls), str(r.prompt_tokens),
            str(r.cached_tokens), str(r.prompt_tokens - r.cached_tokens),
            f"{baseline / r.time_s:.2f}x",
        )  # fmt: skip
    return table


async def run_demo(
    settings: VLLMSettings, *, num_docs: int, url: str | None, console: Console
) -> list[RunReport]:
    """Start the engine (or connect to ``url``), run the job both ways, print the table."""
    reviews = load_bundled().reviews.head(num_docs)
    engine: Engine
    if url:
        from kalypso.engine.vllm_http import HTTPVLLMEngine

        engine = await HTTPVLLMEngine.connect(url)
    else:
        from kalypso.engine.vllm_local import LocalVLLMEngine

        console.print(f"starting vLLM in-process ({settings.model}, KV {settings.kv_cache_bytes} B)")
        engine = await LocalVLLMEngine.start(settings)
    try:
        reports = await run_job(engine, list(reviews["text"]), console=console)
    finally:
        await engine.close()
    out = Console(width=max(Console().width, 110))
    out.print(render(reports, engine))
    same = reports[0].answers == reports[1].answers
    out.print(f"answers identical in both orders: {same}")
    return reports
