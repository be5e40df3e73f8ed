"""Where a run's time goes on a vLLM server: engine steps, queueing and client idle time.

    python -m bench.step_probe --workload contractnli --kv-tokens 5760 --policy adaptive --runs 2

starts a server (float32, as ``make bench``), runs the workload ``--runs`` times under one
policy (the prefix cache reset before each) and prints, per run, the wall time, the time
with no request outstanding from Kalypso (client idle), and the deltas of vLLM's
histograms around it: engine steps and the tokens they scheduled
(``vllm:iteration_tokens_total``), and the summed queue, prefill and decode seconds of the
requests. ``--no-warm-up`` skips the few warm-up requests, to see a fresh server's first
run. ``--trace PATH`` writes each run's requests (id, start and end seconds, prompt,
bound and output tokens, priority) to ``PATH.<run>.json`` and prints the share of the run
with 0, 1-3, 4-15 and 16+ requests outstanding from Kalypso (vLLM runs at most
``max_num_seqs`` = 16 of them at once). ``--decode-step`` then measures one engine step
with a full batch decoding over the workload's first document, and prints the least
decoding time the run's output tokens need at that rate (the decode floor, beside the
prefill floor of :mod:`bench.prefill_floor`). ``--engine-trace PATH`` runs the server
with the step-trace scheduler (:mod:`kalypso.engine.vllm_step_trace`, vLLM's own
scheduling), writes its steps to ``PATH`` and prints, per run, the engine's steps by kind
(prefill, mixed, decode), their seconds and tokens, its idle time and a least-squares
cost per step (:mod:`bench.engine_steps`); policies that pin explicitly cannot use it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench.cli import _engine_for, add_arguments
from bench.clock import engine_clock_s
from bench.engine_steps import load_steps, runs_path, summarise
from bench.runner import needs_pinning
from bench.workloads import WORKLOADS
from kalypso.engine.batch import generate_all
from kalypso.engine.protocol import Engine, GenerateRequest, GenerateResult
from kalypso.engine.vllm_http import parse_metrics
from kalypso.engine.vllm_step_trace import STEP_TRACE_ENV_VAR, STEP_TRACE_SCHEDULER_CLS
from kalypso.engine.warm_up import warm_up

HISTOGRAMS = (
    "vllm:iteration_tokens_total",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
)


def histogram_totals(metrics_text: str) -> dict[str, float]:
    """``<name>_sum`` and ``<name>_count`` of each of :data:`HISTOGRAMS` in a ``/metrics``
    text (summed over label sets; 0 when absent)."""
    samples = parse_metrics(metrics_text)
    return {
        name + suffix: sum(value for _, value in samples.get(name + suffix, []))
        for name in HISTOGRAMS
        for suffix in ("_sum", "_count")
    }


def busy_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the ``(start, end)`` intervals."""
    total, start, end = 0.0, None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if start is not None and end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if start is not None and end is not None:
        total += end - start
    return total


class _Timed:
    """Records each ``generate`` call's (start, end) on the wrapped engine, and a trace
    row per call (times relative to :meth:`clear`)."""

    def __init__(self, engine: Engine) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.trace: list[dict[str, object]] = []
        self._origin_s = time.monotonic()
        self._generate = engine.generate

    def clear(self) -> None:
        self.intervals.clear()
        self.trace.clear()
        self._origin_s = time.monotonic()

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        started = time.monotonic()
        output_tokens: int | None = None
        try:
            result = await self._generate(request)
            output_tokens = result.output_tokens
            return result
        finally:
            ended = time.monotonic()
            self.intervals.append((started, ended))
            self.trace.append(
                {
                    "request_id": request.request_id,
                    "start_s": round(started - self._origin_s, 4),
                    "end_s": round(ended - self._origin_s, 4),
                    "prompt_tokens": len(request.prompt_token_ids),
                    "max_tokens": request.max_tokens,
                    "output_tokens": output_tokens,
                    "priority": request.priority,
                }
            )


def concurrency_summary(trace: Sequence[dict[str, object]]) -> str:
    """Share of the traced span with 0, 1-3, 4-15 and 16+ requests outstanding."""
    events = sorted(
        [(float(str(row["start_s"])), 1) for row in trace]
        + [(float(str(row["end_s"])), -1) for row in trace]
    )
    spans = {"0": 0.0, "1-3": 0.0, "4-15": 0.0, "16+": 0.0}
    level, last = 0, 0.0
    for at, change in events:
        key = "0" if level == 0 else "1-3" if level <= 3 else "4-15" if level <= 15 else "16+"
        spans[key] += at - last
        level, last = level + change, at
    total = sum(spans.values()) or 1.0
    return ", ".join(f"{key}: {100 * span / total:.0f}%" for key, span in spans.items())


async def _metrics(engine: Engine) -> dict[str, float]:
    client = getattr(engine, "_client", None)
    if client is None:
        raise SystemExit("the step probe needs --engine http (it reads the server's /metrics)")
    return histogram_totals((await client.get("/metrics")).text)


DECODE_SHORT_TOKENS, DECODE_LONG_TOKENS = 4, 36


def decode_floor_steps(output_tokens: int, max_num_seqs: int) -> int:
    """Engine steps no schedule can go below: each step decodes at most one token for each
    of at most ``max_num_seqs`` requests."""
    return -(-output_tokens // max_num_seqs)


async def _timed_batch(engine: Engine, prompts: Sequence[tuple[int, ...]], tokens: int) -> float:
    requests = [
        GenerateRequest(f"decode-step:{tokens}:{index}", prompt, tokens, ignore_eos=True)
        for index, prompt in enumerate(prompts)
    ]
    started = engine_clock_s(engine)
    await generate_all(engine, requests)
    return engine_clock_s(engine) - started


async def decode_step_s(engine: Engine, document: str, batch: int) -> tuple[float, int]:
    """(seconds per engine step, context tokens) with ``batch`` requests decoding together,
    each over ``document``'s tokens (a shared, cached prefix, then a token of its own), as
    the calls over one document share it; the prefix and the requests' own blocks take at
    most half the cache. The step time is the difference between the batch decoding
    :data:`DECODE_LONG_TOKENS` and :data:`DECODE_SHORT_TOKENS` tokens, over the difference:
    the prefills, equal in both, cancel out."""
    capacity = engine.capacity
    own_tokens = batch * (DECODE_LONG_TOKENS + 1 + capacity.block_size_tokens)
    room_tokens = capacity.total_tokens // 2 - own_tokens
    context = engine.tokenizer.encode(document)[: max(1, room_tokens - 1)]
    prefix = tuple(context)
    prompts = [(*prefix, prefix[index % len(prefix)]) for index in range(batch)]
    await _timed_batch(engine, [prefix], 1)  # the shared prefix, cached once
    short_s = await _timed_batch(engine, prompts, DECODE_SHORT_TOKENS)
    long_s = await _timed_batch(engine, prompts, DECODE_LONG_TOKENS)
    await engine.reset_prefix_cache()
    return (long_s - short_s) / (DECODE_LONG_TOKENS - DECODE_SHORT_TOKENS), len(prefix) + 1


async def probe(args: argparse.Namespace) -> None:
    workload = WORKLOADS[args.workload](args.scale)
    scheduler_cls = None
    if args.engine_trace:
        Path(args.engine_trace).unlink(missing_ok=True)
        runs_path(Path(args.engine_trace)).unlink(missing_ok=True)
        os.environ[STEP_TRACE_ENV_VAR] = str(Path(args.engine_trace).resolve())
        scheduler_cls = STEP_TRACE_SCHEDULER_CLS
    engine = await _engine_for(args, [args.policy], args.kv_tokens, scheduler_cls=scheduler_cls)
    try:
        timed = _Timed(engine)
        engine.generate = timed.generate  # type: ignore[method-assign]
        workload.plan.prepare()
        if not args.no_warm_up:
            await warm_up(engine, workload.table_text)
        windows: list[dict[str, float]] = []
        for run in range(1, args.runs + 1):
            await engine.reset_prefix_cache()
            before = await _metrics(engine)
            timed.clear()
            started = time.monotonic()
            result = await workload.plan.arun(engine, policy=args.policy)
            wall_s = time.monotonic() - started
            ended = time.monotonic()
            after = await _metrics(engine)
            delta = {k: after[k] - before[k] for k in after}
            print(
                f"run {run}: wall {wall_s:.1f} s, client idle"
                f" {wall_s - busy_s(timed.intervals):.1f} s, requests {len(timed.intervals)},"
                f" prefill {result.prefill_tokens:,} tokens; engine steps"
                f" {delta['vllm:iteration_tokens_total_count']:.0f} scheduling"
                f" {delta['vllm:iteration_tokens_total_sum']:,.0f} tokens; summed seconds:"
                f" queue {delta['vllm:request_queue_time_seconds_sum']:.1f},"
                f" prefill {delta['vllm:request_prefill_time_seconds_sum']:.1f},"
                f" decode {delta['vllm:request_decode_time_seconds_sum']:.1f}",
                flush=True,
            )
            if args.trace:
                path = Path(f"{args.trace}.{run}.json")
                path.write_text(json.dumps(timed.trace, indent=1))
                print(f"  trace: {path} ({concurrency_summary(timed.trace)})", flush=True)
            if args.engine_trace:
                windows.append({"run": run, "start_s": started, "end_s": ended})
                runs_path(Path(args.engine_trace)).write_text(json.dumps(windows))
                traced = load_steps(Path(args.engine_trace))
                print(summarise(traced, started, ended).explain(), flush=True)
        if args.decode_step:
            batch = engine.capacity.max_running_requests or 1
            step_s, context_tokens = await decode_step_s(engine, workload.table_text[0], batch)
            steps = decode_floor_steps(result.output_tokens, batch)
            print(
                f"decode step with {batch} requests over {context_tokens:,} tokens of context:"
                f" {step_s:.3f} s; the run's {result.output_tokens:,} decoded tokens need at"
                f" least {steps} steps, {steps * step_s:.1f} s at that rate",
                flush=True,
            )
    finally:
        await engine.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--policy", default="adaptive")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--no-warm-up", action="store_true")
    parser.add_argument(
        "--decode-step",
        action="store_true",
        help="after the runs, measure a full batch's decode step over the workload's first"
        " document, and the least decoding time the run's output tokens need at it",
    )
    parser.add_argument(
        "--trace",
        default=None,
        help="write each run's requests (start, end, tokens) to TRACE.<run>.json",
    )
    parser.add_argument(
        "--engine-trace",
        default=None,
        help="run vLLM with the step-trace scheduler, write its steps to ENGINE_TRACE and"
        " print each run's engine steps by kind",
    )
    parser.set_defaults(engine="http", deterministic=True)
    args = parser.parse_args(argv)
    if args.workload not in WORKLOADS:
        raise SystemExit(f"--workload: choose one of {sorted(WORKLOADS)}")
    if args.kv_tokens is None:
        raise SystemExit("--kv-tokens is required")
    if args.engine_trace and (args.engine == "sim" or needs_pinning([args.policy])):
        raise SystemExit(
            "--engine-trace needs a vLLM engine and a policy without explicit pins"
            f" (got --engine {args.engine}, --policy {args.policy})"
        )
    if args.runs < 1:
        raise SystemExit(f"--runs must be at least 1, got {args.runs}")
    asyncio.run(probe(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
