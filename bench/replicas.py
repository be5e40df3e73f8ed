"""Replicas on the simulator at paper scale: scaling and placement against per-request
routers.

Every cell runs one workload on N simulated engines that share one virtual clock
(:class:`~kalypso.engine.sim.clock.SharedClock`), so the times are those of N GPUs side
by side, exact and independent of this host:

* ``kalypso``: a :class:`~kalypso.core.replicas.ReplicaSet` (each row's pipeline, each
  workflow query's calls, each document's requests of a batch file on one replica,
  work stealing); with one replica, the plain one-engine run;
* ``round-robin`` and ``prefix-affinity``: the same plan on a
  :class:`~kalypso.core.routing.RoutedEngine`, each request routed as it comes.

A record per cell: virtual seconds, prefill tokens (and the one-engine run's minimum),
load imbalance (the busiest engine's step time over the mean), whether the table equals
the one-engine run's. ``python -m bench.report --write`` renders them in BENCHMARKS.md.

    python -m bench.replicas --out bench/results/replicas-sim.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.batch_files import BatchShape, batch_lines, write_batch
from bench.regimes import DEFAULT_LIMITS, MAX_NUM_SEQS, MAX_STEP_TOKENS, parse_engine_limits
from bench.stamp import run_stamp
from bench.workloads import WORKLOADS
from kalypso import workflow as wf
from kalypso.batch import arun_batch
from kalypso.core.replicas import ReplicaSet
from kalypso.core.routing import RoutedEngine
from kalypso.engine.cost_model import CostModel, Work
from kalypso.engine.sim.clock import SharedClock
from kalypso.engine.sim.costs import get_profile
from kalypso.engine.sim.engine import SimEngine
from kalypso.engine.sim.tokenizer import WordTokenizer
from kalypso.query.plan import Table
from kalypso.workflow.library import workload as library

ROUTERS = ("kalypso", "round-robin", "prefix-affinity")

BATCH_FILES = {
    "docqa": BatchShape(1000, 6, document_words=600, max_tokens=64),
}
"""Batch files (``batch:NAME``): documents each asked several questions, shuffled."""


def engines(
    profile: str,
    count: int,
    kv_fraction: float,
    limits: tuple[int, int] = DEFAULT_LIMITS,
) -> tuple[list[SimEngine], SharedClock]:
    blocks = max(1, int(get_profile(profile).capacity.num_blocks * kv_fraction))
    clock = SharedClock()
    # one tokenizer: a router sends a prompt encoded by one engine's to any other, and the
    # simulator decodes only pieces its tokenizer has seen (real tokenizers are fixed)
    # (and one record of cut outputs: a continuation routed elsewhere goes on alike)
    tokenizer = WordTokenizer()
    continuations: dict[int, tuple[tuple[int, ...], int]] = {}
    sims = [
        SimEngine(
            profile,
            num_blocks=blocks,
            clock=clock,
            tokenizer=tokenizer,
            continuations=continuations,
            max_num_seqs=limits[0],
            max_num_batched_tokens=limits[1],
        )
        for _ in range(count)
    ]
    return sims, clock


@dataclass(frozen=True)
class Job:
    """A relational plan, a library workflow's first day (``wf:NAME``) or a batch file
    (``batch:NAME``)."""

    name: str
    plan: Table | None = None
    flow: wf.Workflow | None = None
    inputs: Mapping[str, Sequence[str]] | None = None
    batch: BatchShape | None = None

    @classmethod
    def of(cls, name: str, scale: str, rows: int | None = None) -> Job:
        if name.startswith("wf:"):
            job = library(name[3:], scale)
            return cls(name, flow=job.workflows[0], inputs=job.inputs[0])
        if name.startswith("batch:"):
            return cls(name, batch=BATCH_FILES[name[6:]])
        workload = WORKLOADS[name](scale, n=rows)
        workload.plan.prepare()
        return cls(name, plan=workload.plan)

    async def run(self, target: Any) -> Outcome:
        if self.plan is not None:
            result = await self.plan.arun(target)
            return Outcome(
                result.frame,
                result.prefill_tokens,
                result.min_prefill_tokens,
                result.llm_calls,
                result.output_tokens,
                result.longest_chain_tokens,
            )
        if self.batch is not None:
            return await self._run_batch(self.batch, target)
        assert self.flow is not None and self.inputs is not None
        done = await wf.arun(self.flow, target, self.inputs)
        return Outcome(
            done.outputs,
            done.prefill_tokens,
            done.min_prefill_tokens,
            done.llm_calls,
            done.output_tokens,
            done.longest_chain_tokens,
        )

    @staticmethod
    async def _run_batch(shape: BatchShape, target: Any) -> Outcome:
        """The file in one chunk per replica share: the answers by custom id."""
        with tempfile.TemporaryDirectory() as tmp:
            source = write_batch(Path(tmp) / "in.jsonl", batch_lines(shape, "sim"))
            out = Path(tmp) / "out.jsonl"
            result = await arun_batch(source, out, target, chunk_requests=shape.requests)
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        frame = pd.DataFrame(
            {
                "custom_id": [r["custom_id"] for r in rows],
                "answer": [r["response"]["body"]["choices"][0]["message"]["content"] for r in rows],
            }
        )
        longest = max(r["response"]["body"]["usage"]["completion_tokens"] for r in rows)
        return Outcome(
            frame,
            result.prefill_tokens,
            result.min_prefill_tokens,
            result.distinct,
            result.output_tokens,
            longest,  # a request depends on no other: its own output is a chain
        )


@dataclass(frozen=True)
class Outcome:
    frame: pd.DataFrame
    prefill_tokens: int
    min_prefill_tokens: int
    llm_calls: int
    output_tokens: int
    chain_tokens: int
    """The most tokens one tuple's chain of dependent calls generated."""

    def share_least_s(self, model: CostModel, count: int) -> float:
        """The least time of one replica's share of this work on ``count`` replicas: a
        ``count``-th of the least prefill and of the generated tokens, and the steps of
        the longest chain (every share holds tuples like the longest: a share is
        hundreds of rows of one workload). No schedule runs the busiest share faster,
        so the efficiency on ``count`` replicas is at most ``one_s / (count * this)``."""
        return model.predict_s(
            Work(
                prefill_tokens=math.ceil(self.min_prefill_tokens / count),
                decode_tokens=math.ceil(self.output_tokens / count),
                concurrency=model.max_seqs or max(1, self.output_tokens),  # no limit
                chain_tokens=self.chain_tokens,
            )
        )


async def run_cell(
    job: Job,
    profile: str,
    count: int,
    router: str,
    kv_fraction: float,
    replica_options: dict[str, Any] | None = None,
    limits: tuple[int, int] = DEFAULT_LIMITS,
) -> tuple[Outcome, float, list[SimEngine]]:
    """One cell: the outcome, the virtual seconds, the engines."""
    sims, clock = engines(profile, count, kv_fraction, limits)
    target: Any
    if router == "kalypso":
        target = sims[0] if count == 1 else ReplicaSet(sims, **(replica_options or {}))
    else:
        target = RoutedEngine(sims, router)
    outcome = await job.run(target)
    for sim in sims:
        await sim.close()
    return outcome, clock.now_s, sims


def placement(router: str, args: argparse.Namespace) -> str:
    """The placement's name in a record: the router, or the replica set and its chunking
    when not the default."""
    if router != "kalypso" or (args.chunks_in_flight == 1 and args.chunk_divisor == 1):
        return router
    return f"kalypso, {args.chunks_in_flight} in flight, divisor {args.chunk_divisor:g}"


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    stamp = run_stamp()
    records: list[dict[str, Any]] = []
    for name in args.workloads:
        job = Job.of(name, args.scale, args.rows)
        label = f"{name} ({args.scale}" + (f", {args.rows:,} rows)" if args.rows else ")")
        for profile in args.profiles:
            for kv_fraction in args.kv_fractions:
                one, one_s, (first,) = await run_cell(
                    job, profile, 1, "kalypso", kv_fraction, limits=args.engine_limits
                )
                model = first.cost_model
                for count in args.replicas:
                    for router in args.routers:
                        if count == 1 and router != "kalypso":
                            continue
                        if router != "kalypso" and count not in args.router_replicas:
                            continue
                        started = time.monotonic()
                        sims: list[SimEngine] = []
                        if count == 1:
                            result, seconds = one, one_s
                        else:
                            result, seconds, sims = await run_cell(
                                job,
                                profile,
                                count,
                                router,
                                kv_fraction,
                                {
                                    "chunks_in_flight": args.chunks_in_flight,
                                    "chunk_divisor": args.chunk_divisor,
                                },
                                args.engine_limits,
                            )
                        busy = [sim.busy_s for sim in sims] or [seconds]
                        share_least_s = one.share_least_s(model, count)
                        record = {
                            "kind": "replicas",
                            "workload": label,
                            "profile": profile,
                            "kv_fraction": kv_fraction,
                            "replicas": count,
                            "router": placement(router, args),
                            "time_s": round(seconds, 3),
                            "speedup": round(one_s / seconds, 3),
                            "efficiency": round(one_s / seconds / count, 3),
                            "prefill_tokens": result.prefill_tokens,
                            "min_prefill_tokens": one.min_prefill_tokens,
                            "llm_calls": result.llm_calls,
                            "imbalance": round(max(busy) / statistics.mean(busy), 3),
                            "steps_per_replica": round(
                                statistics.mean(sim.num_steps for sim in sims or [first]), 1
                            ),
                            "chain_tokens": one.chain_tokens,
                            "share_least_s": round(share_least_s, 3),
                            "most_efficiency": round(one_s / share_least_s / count, 3),
                            "same_result": result.frame.equals(one.frame),
                            "max_num_seqs": args.engine_limits[0],
                            "max_step_tokens": args.engine_limits[1],
                            "wall_s": round(time.monotonic() - started, 1),
                            "date": stamp.date,
                            "commit": stamp.commit,
                            "host": stamp.host,
                        }
                        records.append(record)
                        print(
                            f"{name} {profile} kv x{kv_fraction} {count} {router}:"
                            f" {seconds:.1f} s (x{record['speedup']}, efficiency"
                            f" {record['efficiency']}, at most {record['most_efficiency']}),"
                            f" prefill {result.prefill_tokens:,}"
                            f" (min {one.min_prefill_tokens:,}), imbalance"
                            f" {record['imbalance']}, same: {record['same_result']}",
                            flush=True,
                        )
    return records


def plot(records: Sequence[dict[str, Any]], out: Path) -> Path:
    """Speed-up over one engine against replicas, per workload and profile (full cache),
    with the ideal line: ``out`` as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.4))
    lines: dict[tuple[str, str], dict[int, float]] = {}  # a cell run again: the later
    for r in records:
        if r["router"] == "kalypso" and r["kv_fraction"] == 1.0 and "rows" not in r["workload"]:
            lines.setdefault((r["workload"], r["profile"]), {})[r["replicas"]] = r["speedup"]
    most = 1
    for (workload, profile), speedups in sorted(lines.items()):
        points = sorted(speedups.items())
        most = max(most, points[-1][0])
        axes.plot(*zip(*points, strict=True), marker="o", label=f"{workload}, {profile}")
    axes.plot([1, most], [1, most], color="grey", linestyle="--", label="ideal")
    axes.set_xlabel("replicas")
    axes.set_ylabel("speed-up over one engine")
    axes.set_title("Replica set on the simulator, paper scale (full KV cache)")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split = lambda s: s.split(",")  # noqa: E731
    parser.add_argument(
        "--workloads",
        type=split,
        default=["contractnli", "medec"],
        help="relational workloads, library workflows as wf:NAME (wf:debate), or batch files"
        f" as batch:NAME ({', '.join(f'batch:{n}' for n in BATCH_FILES)})",
    )
    parser.add_argument("--scale", default="paper")
    parser.add_argument(
        "--rows", type=int, help="rows of a relational workload (default: the scale's)"
    )
    parser.add_argument("--profiles", type=split, default=["qwen3-8b-h100", "llama-3.3-70b-4xgpu"])
    parser.add_argument(
        "--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8]
    )
    parser.add_argument("--routers", type=split, default=list(ROUTERS))
    parser.add_argument(
        "--router-replicas",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[4],
        help="replica counts at which the per-request routers run too",
    )
    parser.add_argument(
        "--kv-fractions",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 0.25],
        help="each engine's KV capacity, as fractions of the profile's",
    )
    parser.add_argument(
        "--engine-limits",
        type=parse_engine_limits,
        default=DEFAULT_LIMITS,
        help=f"each engine's sequences and tokens a step (default {MAX_NUM_SEQS},"
        f"{MAX_STEP_TOKENS}; vLLM's own on an 80 GB H100: 1024,8192); the page shows the"
        " default's records only",
    )
    parser.add_argument("--chunks-in-flight", type=int, default=1)
    parser.add_argument("--chunk-divisor", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--plot-only", action="store_true", help="only draw --out's records as a PNG beside it"
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        print(plot(json.loads(args.out.read_text()), args.out.with_suffix(".png")))
        return 0
    unknown = set(args.routers) - set(ROUTERS)
    if unknown:
        raise SystemExit(f"--routers: unknown {sorted(unknown)} (known: {', '.join(ROUTERS)})")
    records = asyncio.run(bench(args))
    previous = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*previous, *records], indent=1) + "\n")
    plot([*previous, *records], args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
