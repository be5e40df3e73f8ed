"""Kalypso's own CPU cost per task, with an engine that answers instantly.

The scheduler, operators and prompt building run as usual; the engine returns at once
(``Yes`` to predicates, a short answer otherwise) without simulating KV memory, so the
CPU time measured is Kalypso's alone. Run::

    python -m bench.overhead --left 5000 --right 20

(5,000 left tuples joined with 20 right tuples: 105,000 tasks.)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections.abc import Sequence

import pandas as pd

import kalypso
from kalypso.engine.protocol import (
    EngineCapacity,
    EngineStats,
    GenerateRequest,
    GenerateResult,
    RequestTimings,
    Tokenizer,
)
from kalypso.engine.sim.tokenizer import WordTokenizer


class InstantEngine:
    """Answers every request immediately; reports no cache hits."""

    def __init__(self, num_blocks: int = 100_000, block_size_tokens: int = 16) -> None:
        self._capacity = EngineCapacity(num_blocks, block_size_tokens, 8192)
        self._tokenizer = WordTokenizer()
        self._answer = tuple(self._tokenizer.encode("a short answer"))
        self.requests = 0

    @property
    def name(self) -> str:
        return "instant"

    @property
    def capacity(self) -> EngineCapacity:
        return self._capacity

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def supports_pinning(self) -> bool:
        return False

    @property
    def cost_model(self) -> None:
        return None

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests += 1
        await asyncio.sleep(0)
        logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
        if request.allowed_token_ids:  # a decision: the first choice, by a wide margin
            output = request.allowed_token_ids[:1]
            logprobs = (
                tuple((t, -0.1 - 2.0 * i) for i, t in enumerate(request.allowed_token_ids)),
            )
        else:
            output = self._answer
        return GenerateResult(
            request.request_id,
            output,
            self._tokenizer.decode(output),
            "stop",
            len(request.prompt_token_ids),
            0,
            RequestTimings(0.0, 0.0, 0.0),
            logprobs,
        )

    async def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0, 0, 0.0)

    async def reset_prefix_cache(self) -> None:
        return None

    async def unpin(self, pin_key: str) -> None:
        return None

    async def unpin_all(self) -> None:
        return None

    async def stalled_requests(self) -> int:
        return 0

    async def close(self) -> None:
        return None


def _texts(n: int, words: int, seed: int) -> list[str]:
    vocab = ["clause", "party", "term", "notice", "breach", "remedy", "law", "date"]
    cycle = itertools.cycle(vocab)
    return [" ".join(f"{next(cycle)}{(i * seed + j) % 97}" for j in range(words)) for i in range(n)]


async def measure(left: int, right: int, policy: str) -> tuple[int, float]:
    """Run filter -> join -> map; returns (tasks, CPU seconds)."""
    docs = pd.DataFrame({"text": _texts(left, 200, 7)})
    hyps = pd.DataFrame({"h": _texts(right, 12, 3)})
    plan = (
        kalypso.table(docs)
        .sem_filter("Is the {text} relevant?")
        .sem_join(kalypso.table(hyps), "Does the {text} state {h}?")
        .sem_map("Why does the {text} state {h}?", "why", max_tokens=16)
    )
    engine = InstantEngine()
    started = time.process_time()
    await plan.arun(engine, policy=policy)
    return left + left * right, time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--left", type=int, default=5000)
    parser.add_argument("--right", type=int, default=20)
    parser.add_argument("--policy", default="adaptive")
    args = parser.parse_args(argv)
    tasks, cpu_s = asyncio.run(measure(args.left, args.right, args.policy))
    per_task_ms = 1000 * cpu_s / tasks
    print(f"{tasks} tasks, {cpu_s:.1f} s CPU, {per_task_ms:.3f} ms CPU per task ({args.policy})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
