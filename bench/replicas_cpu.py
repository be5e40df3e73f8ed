"""Replicas on real vLLM (CPU) through Ray: the quick plans on one actor, then on two.

Each replica's engine computes on a half of the host's cores of its own
(``cpu_actor_options``; here one core each), and the single replica is the first of the
two; the engines' front ends, Ray and this driver share all the cores (``--vllm-binding``:
vLLM's own choice, the same cores for both engines). Each plan runs on one replica (a
replica set of one) and on two, alternating, with the prefix caches reset before each run;
the tables are compared.

    python -m bench.replicas_cpu --out bench/results/replicas-cpu-<host>.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import ray

from bench.service_bench import quick_vllm_settings
from bench.stamp import run_stamp
from bench.workloads import WORKLOADS
from kalypso.core.replicas import ReplicaSet
from kalypso.engine.open import EngineSpec
from kalypso.ray import astart_replicas, astop_replicas, cpu_actor_options


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    stamp = run_stamp()
    settings = quick_vllm_settings(args.kv_tokens)
    ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, log_to_driver=False)
    records: list[dict[str, Any]] = []
    try:
        pair = await astart_replicas(
            EngineSpec(kind="vllm", settings=settings),
            2,
            actor_options=[{"num_cpus": 1}] * 2 if args.vllm_binding else cpu_actor_options(2),
        )
        try:
            one = ReplicaSet(pair.engines[:1])
            for name in args.workloads:
                plan = WORKLOADS[name]("quick").plan
                plan.prepare()
                for repeat in range(args.repeats):
                    times: dict[int, float] = {}
                    frames = {}
                    for count, replicas in ((1, one), (2, pair)):
                        for engine in pair.engines:
                            await engine.reset_prefix_cache()
                        started = time.monotonic()
                        result = await plan.arun(replicas)
                        times[count] = time.monotonic() - started
                        frames[count] = result.frame
                    record = {
                        "kind": "replicas-cpu",
                        "workload": f"{name} (quick)",
                        "repeat": repeat,
                        "one_s": round(times[1], 2),
                        "two_s": round(times[2], 2),
                        "same_result": frames[1].equals(frames[2]),
                        "engine": f"vLLM CPU on Ray actors, float32, {args.kv_tokens:,} KV tokens",
                        "cores": "vLLM's binding" if args.vllm_binding else "a slice each",
                        "date": stamp.date,
                        "commit": stamp.commit,
                        "host": stamp.host,
                    }
                    records.append(record)
                    print(
                        f"{name} repeat {repeat}: one replica {times[1]:.1f} s, two"
                        f" {times[2]:.1f} s (x{times[1] / times[2]:.2f}), same:"
                        f" {record['same_result']}",
                        flush=True,
                    )
        finally:
            await astop_replicas(pair)
    finally:
        ray.shutdown()
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workloads", type=lambda s: s.split(","), default=["contractnli", "medec"]
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--kv-tokens", type=int, default=6144)
    parser.add_argument(
        "--vllm-binding",
        action="store_true",
        help="leave each engine's cores to vLLM (the same for both) instead of a slice each",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    records = asyncio.run(bench(args))
    previous = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*previous, *records], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
