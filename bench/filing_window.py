"""An experiment, not a policy of the product: Reflect held filing by filing.

Reflect's twelve small queries ask three questions each about four filings, so three
queries share the analyst's prefix (its system prompt, then the filing). Under
``cache-aware`` the first query of each filing finds that prefix evicted when its final
answer runs, after every query's critics. This runs ``cache-aware`` with a gate that lets
a new filing's queries start only while fewer than ``N`` filings are in flight, on the
simulator at the real CPU runs' size (44 blocks of 32 tokens, 16 sequences), and prints
each window's virtual time and prefill beside plain ``cache-aware``::

    python -m bench.filing_window            # windows of 1, 2 and 3 filings

The filing of query ``q`` is ``q // 3`` (the library's ``_qa_inputs`` puts three
questions per filing in a row).
"""

from __future__ import annotations

import argparse
import asyncio

from kalypso.core.instance_window import InstanceWindow
from kalypso.core.policies import PlanInfo, Policy, RunInfo, TaskInfo
from kalypso.core.policies.cache_aware import CacheAware
from kalypso.engine.sim import SimEngine
from kalypso.workflow.library import workload
from kalypso.workflow.run import arun

QUESTIONS_PER_FILING = 3


class FilingWindow(CacheAware):
    """``cache-aware`` order; a query of a filing not yet started waits while ``filings``
    filings are in flight (started, some query of it unfinished) and one of them runs."""

    def __init__(self, filings: int) -> None:
        super().__init__("off")
        self.filings = filings
        self._in_flight: set[int] = set()

    def prepare(self, plan: PlanInfo) -> None:
        super().prepare(plan)
        self.window = InstanceWindow(self.filings, "filings (experiment)")
        self._in_flight = set()

    def gate(self, task: TaskInfo, run: RunInfo) -> bool:
        if task.op not in self.position:
            return True
        running = {t.key[0] // QUESTIONS_PER_FILING for t in run.running}
        finished = {
            f
            for f in self._in_flight
            if all(
                (q,) in run.finished
                for q in range(f * QUESTIONS_PER_FILING, (f + 1) * QUESTIONS_PER_FILING)
            )
        }
        self._in_flight = (self._in_flight | running) - finished
        filing = task.key[0] // QUESTIONS_PER_FILING
        return not running or filing in self._in_flight or len(self._in_flight) < self.filings


async def _run(policy: Policy) -> tuple[float, int, int]:
    """Reflect (small) on a fresh simulator: virtual seconds, prefill and its minimum."""
    engine = SimEngine("smollm2-cpu-f32", num_blocks=44, block_size_tokens=32, max_num_seqs=16)
    try:
        job = workload("reflect", "small")
        start_s = engine.now_s
        result = await arun(
            job.workflows[0], engine, job.inputs[0], system_prompt="", policy=policy
        )
        return engine.now_s - start_s, result.prefill_tokens, result.min_prefill_tokens
    finally:
        await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="1,2,3", help="comma-separated filings in flight")
    args = parser.parse_args()
    runs: list[tuple[str, Policy]] = [("cache-aware", CacheAware())]
    parts = args.windows.split(",")
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        parser.error(f"--windows takes whole numbers of at least 1, got {args.windows!r}")
    runs += [(f"{n} filing(s)", FilingWindow(n)) for n in map(int, parts)]
    for label, policy in runs:
        seconds, prefill, least = asyncio.run(_run(policy))
        print(f"reflect  {label:14s} {seconds:7.2f} virtual s  prefill {prefill} (min {least})")


if __name__ == "__main__":
    main()
