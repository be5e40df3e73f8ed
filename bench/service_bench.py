"""The job server's cost, side by side: the same plans run in-process (``Table.arun``) and
as jobs through ``kalypso serve`` (HTTP, the database, the call journal, progress
events), on one engine, alternating, the prefix cache reset before each run.

Reported per workload: both end-to-end times (a job's from its submission to its result
downloaded), the overhead as a share of the in-process time and per call, and whether the
results are equal. Then jobs per minute: ``--stream-jobs`` small jobs submitted at once by
three callers, their wall time to all completed.

    make bench-service     # python -m bench.service_bench --out bench/results/service-...json

``--engine vllm`` (the default) runs the bundled model in-process in float32;
``--engine sim`` the simulator with a GPU profile paced on wall-clock time (each step
takes its cost in real seconds), the regime where the server's own work is largest
against the engine's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import uvicorn

from bench.stamp import run_stamp
from bench.workloads import Workload, contractnli, medec
from kalypso.client import Client
from kalypso.engine.protocol import Engine
from kalypso.engine.sim import SimEngine
from kalypso.engine.vllm_local import LocalVLLMEngine
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model
from kalypso.query import Table
from kalypso.service import Database, ServiceSettings, create_app
from kalypso.service.tokens import create_token

WORKLOADS = {"contractnli": contractnli, "medec": medec}


async def open_bench_engine(args: argparse.Namespace) -> tuple[Engine, str]:
    if args.engine == "sim":
        engine: Engine = SimEngine(args.sim_profile, wall_s_per_virtual_s=1.0)
        return engine, f"simulator {args.sim_profile}, paced in real time"
    return await LocalVLLMEngine.start(
        quick_vllm_settings(args.kv_tokens)
    ), f"vLLM CPU in-process, float32, {args.kv_tokens:,} KV tokens"


def quick_vllm_settings(kv_tokens: int) -> VLLMSettings:
    """The bundled model in float32 (deterministic) with ``kv_tokens`` of KV cache, 32-token
    blocks and 16 requests at once: the quick benchmarks' vLLM engine on a CPU."""
    per_token = kv_bytes_per_token(resolve_model(), "float32") or 23_040
    return VLLMSettings(
        kv_cache_bytes=kv_tokens * per_token,
        max_num_seqs=16,
        block_size_tokens=32,
        deterministic=True,
    )


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return list(a.columns) == list(b.columns) and a.astype(str).reset_index(drop=True).equals(
        b.astype(str).reset_index(drop=True)
    )


async def run_in_process(plan: Table, engine: Engine) -> tuple[float, pd.DataFrame, int]:
    await engine.reset_prefix_cache()
    started = time.monotonic()
    result = await plan.arun(engine)
    return time.monotonic() - started, result.frame, result.llm_calls


async def run_as_job(
    plan: Table, engine: Engine, client: Client
) -> tuple[float, pd.DataFrame, dict[str, Any]]:
    await engine.reset_prefix_cache()

    def job() -> tuple[float, pd.DataFrame, dict[str, Any]]:
        started = time.monotonic()
        job_id = client.submit(plan)["id"]
        done = client.wait(job_id)
        frame = client.result(job_id)
        return time.monotonic() - started, frame, done

    return await asyncio.to_thread(job)


async def stream(plans: list[Table], url: str, tokens: list[str]) -> float:
    """Submit every plan at once (callers in turn); seconds until all completed."""

    def submit_and_wait(index: int) -> str:
        with Client(url, tokens[index % len(tokens)]) as client:
            job_id = client.submit(plans[index])["id"]
            status: str = client.wait(job_id)["status"]
            return status

    loop = asyncio.get_running_loop()
    started = time.monotonic()
    # the clients' own threads: the server (on this event loop) needs the default pool
    with ThreadPoolExecutor(max_workers=len(plans)) as clients:
        statuses = await asyncio.gather(
            *(loop.run_in_executor(clients, submit_and_wait, i) for i in range(len(plans)))
        )
    if set(statuses) != {"completed"}:
        raise SystemExit(f"stream jobs ended {statuses}")
    return time.monotonic() - started


async def fairness(url: str, tokens: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """A job of ``--small-rows`` reviews alone, then submitted once a job of
    ``--large-rows`` has started: its time both ways, and the large job's."""

    def run() -> dict[str, Any]:
        with Client(url, tokens[0]) as small, Client(url, tokens[1]) as large:
            started = time.monotonic()
            small.wait(small.submit(medec("quick", n=args.small_rows, seed=7).plan)["id"])
            alone_s = time.monotonic() - started
            started = time.monotonic()
            big = large.submit(medec("quick", n=args.large_rows, seed=8).plan)["id"]
            while (large.status(big)["progress"] or {}).get("calls", 0) < 20:
                time.sleep(0.02)
            beside = time.monotonic()
            small.wait(small.submit(medec("quick", n=args.small_rows, seed=9).plan)["id"])
            beside_s = time.monotonic() - beside
            large.wait(big)
            return {
                "kind": "fairness",
                "workload": f"medec: {args.small_rows} notes beside {args.large_rows}",
                "small_alone_s": round(alone_s, 2),
                "small_beside_large_s": round(beside_s, 2),
                "large_s": round(time.monotonic() - started, 2),
            }

    record = await asyncio.to_thread(run)
    print(
        f"fairness: {record['small_alone_s']} s alone, {record['small_beside_large_s']} s"
        f" beside a job of {args.large_rows} rows that took {record['large_s']} s",
        flush=True,
    )
    return record


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    stamp = run_stamp()
    engine, engine_name = await open_bench_engine(args)
    folder = tempfile.mkdtemp(prefix="kalypso-service-bench-")
    database = Database(f"sqlite:///{folder}/jobs.db")
    callers = []
    with database.session() as session:
        for name in ("a", "b", "c"):
            callers.append(
                create_token(session, f"bench-{name}", max_running_jobs=args.stream_jobs)
            )
    port = free_port()
    app = create_app(database, engine, ServiceSettings())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    records: list[dict[str, Any]] = []
    common = {"engine": engine_name, "date": stamp.date, "commit": stamp.commit, "host": stamp.host}
    try:
        with Client(url, callers[0]) as client:
            warm_up = WORKLOADS["medec"]("quick", n=1, seed=99).plan
            await run_in_process(warm_up, engine)  # first-use costs of both paths, not timed
            await run_as_job(warm_up, engine, client)
            for name in args.workloads:
                workload: Workload = WORKLOADS[name]("quick")
                workload.plan.prepare()
                for repeat in range(args.repeats):
                    local_s, local_frame, calls = await run_in_process(workload.plan, engine)
                    job_s, job_frame, job = await run_as_job(workload.plan, engine, client)
                    record = {
                        "kind": "job",
                        "workload": f"{name} (quick)",
                        "repeat": repeat,
                        "in_process_s": round(local_s, 3),
                        "job_s": round(job_s, 3),
                        "calls": calls,
                        "job_calls": job["progress"]["calls"],
                        "same_result": same(local_frame, job_frame),
                        **common,
                    }
                    records.append(record)
                    print(
                        f"{name} repeat {repeat}: in-process {local_s:.2f} s, as a job"
                        f" {job_s:.2f} s ({(job_s / local_s - 1) * 100:+.1f}%), {calls} calls,"
                        f" same result: {record['same_result']}",
                        flush=True,
                    )
            small = [
                WORKLOADS["medec"]("quick", n=args.stream_rows, seed=i).plan
                for i in range(args.stream_jobs)
            ]
            seconds = await stream(small, url, callers)
            records.append(
                {
                    "kind": "stream",
                    "workload": f"{args.stream_jobs} medec jobs of {args.stream_rows} notes",
                    "jobs": args.stream_jobs,
                    "wall_s": round(seconds, 2),
                    "jobs_per_minute": round(args.stream_jobs / seconds * 60, 1),
                    **common,
                }
            )
            print(f"stream: {args.stream_jobs} jobs in {seconds:.1f} s", flush=True)
            if args.fairness:
                records.append({**await fairness(url, callers, args), **common})
    finally:
        server.should_exit = True
        await serving
        await engine.close()
        database.close()
    return records


def summary(records: list[dict[str, Any]]) -> str:
    lines = []
    jobs = [r for r in records if r["kind"] == "job"]
    for name in dict.fromkeys(r["workload"] for r in jobs):
        mine = [r for r in jobs if r["workload"] == name]
        overhead = [r["job_s"] / r["in_process_s"] - 1 for r in mine]
        lines.append(f"{name}: overhead {statistics.mean(overhead) * 100:+.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    parser.add_argument("--sim-profile", default="qwen3-8b-h100")
    parser.add_argument("--kv-tokens", type=int, default=6144)
    parser.add_argument(
        "--workloads", type=lambda s: s.split(","), default=["contractnli", "medec"]
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--stream-jobs", type=int, default=12)
    parser.add_argument("--stream-rows", type=int, default=2)
    parser.add_argument("--small-rows", type=int, default=10)
    parser.add_argument("--large-rows", type=int, default=1000)
    parser.add_argument(
        "--fairness",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time a small job alone and beside a large one",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"--workloads: unknown {sorted(unknown)} (known: {sorted(WORKLOADS)})")
    records = asyncio.run(bench(args))
    previous = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*previous, *records], indent=1) + "\n")
    print(summary(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
