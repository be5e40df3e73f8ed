"""``kalypso bench``: run workloads side by side on real vLLM (CPU) or the simulator."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from kalypso.bench.runner import (
    lotus_record,
    needs_pinning,
    run_systems,
    summary_table,
    write_records,
)
from kalypso.bench.workloads import WORKLOADS
from kalypso.engine.protocol import Engine

DEFAULT_SYSTEMS = "operator-at-a-time,adaptive"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="all", help=f"all or one of {sorted(WORKLOADS)}")
    parser.add_argument("--scale", choices=("quick", "paper"), default="quick")
    parser.add_argument(
        "--engine",
        choices=("vllm", "http", "sim"),
        default="vllm",
        help="vllm: in-process; http: a vLLM server started for the run (needed for --lotus)",
    )
    parser.add_argument(
        "--lotus-python",
        type=Path,
        default=None,
        help="python of a Lotus venv (make lotus-venv): also run the workload with Lotus"
        " against the same server (--engine http; contractnli and medec)",
    )
    parser.add_argument(
        "--systems",
        default=DEFAULT_SYSTEMS,
        help="comma-separated policies, optionally with +explicit or +fixed (adaptive+explicit)",
    )
    parser.add_argument(
        "--kv-fraction",
        type=float,
        default=0.09,
        help="KV cache size as a fraction of the table's tokens (default 0.09: under a tenth)",
    )
    parser.add_argument(
        "--kv-tokens",
        type=int,
        default=None,
        help="KV cache size in tokens (overrides --kv-fraction)",
    )
    parser.add_argument(
        "--sim-profile", default="llama-3.3-70b-4xgpu", help="cost profile for --engine sim"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON file to append records to")


def _kv_tokens(args: argparse.Namespace, table_tokens: int, longest_tokens: int) -> int:
    """The KV size asked for, with room for at least two of the longest documents plus
    prompt and output (a smaller cache cannot run one request)."""
    asked = int(args.kv_tokens or table_tokens * args.kv_fraction)
    return max(asked, 2 * longest_tokens + 1024)


async def _engine_for(args: argparse.Namespace, table_tokens: int, longest_tokens: int) -> Engine:
    if args.engine == "sim":
        from kalypso.engine.sim import SimEngine, get_profile

        profile = get_profile(args.sim_profile)
        block = profile.capacity.block_size_tokens
        blocks = max(4, _kv_tokens(args, table_tokens, longest_tokens) // block)
        return SimEngine(profile, num_blocks=blocks, max_model_len_tokens=blocks * block)
    from kalypso.engine.vllm_local import LocalVLLMEngine
    from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
    from kalypso.models import resolve_model

    per_token = kv_bytes_per_token(resolve_model()) or 23_040
    kv_bytes = _kv_tokens(args, table_tokens, longest_tokens) * per_token
    if args.engine == "http":
        return await _http_engine(args, kv_bytes)
    from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS

    settings = VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=16)
    if needs_pinning([s.strip() for s in args.systems.split(",")]):
        settings = dataclasses.replace(settings, scheduler_cls=PINNING_SCHEDULER_CLS)
    return await LocalVLLMEngine.start(settings)


async def _http_engine(args: argparse.Namespace, kv_bytes: int) -> Engine:
    """A server started for this run; closing the engine stops it."""
    from kalypso.engine.vllm_http import HTTPVLLMEngine
    from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS
    from kalypso.engine.vllm_server import VLLMServer
    from kalypso.engine.vllm_settings import VLLMSettings

    pinning = needs_pinning([s.strip() for s in args.systems.split(",")])
    settings = VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=16)
    if pinning:
        settings = dataclasses.replace(settings, scheduler_cls=PINNING_SCHEDULER_CLS)
    server = await asyncio.to_thread(VLLMServer.start, settings)
    try:
        engine = await HTTPVLLMEngine.connect(server.base_url, pinning=pinning)
    except BaseException:
        server.stop()
        raise
    return _ServerOwningEngine(engine, server)


class _ServerOwningEngine:
    """An HTTP engine that also stops the server it was started with."""

    def __init__(self, engine: Any, server: Any) -> None:
        self._engine = engine
        self.server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def close(self) -> None:
        try:
            await self._engine.close()
        finally:
            self.server.stop()


def _run_lotus(
    args: argparse.Namespace, engine: Any, workload: Any, console: Console
) -> dict[str, Any] | None:
    if args.lotus_python is None or not hasattr(engine, "server"):
        return None
    if workload.name not in ("contractnli", "medec"):
        console.print(f"  lotus: {workload.name} not expressed with Lotus here; skipped")
        return None
    runner = Path(__file__).resolve().parents[3] / "bench" / "lotus_runner.py"
    with tempfile.TemporaryDirectory() as folder:
        job_path, out_path = Path(folder) / "job.json", Path(folder) / "out.json"
        job = {
            "workload": workload.name,
            "tables": workload.tables,
            "base_url": engine.server.base_url,
            "model": engine.server.served_model_name,
        }
        job_path.write_text(json.dumps(job, default=str))
        done = subprocess.run(
            [str(args.lotus_python), str(runner), str(job_path), str(out_path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            console.print(f"[red]lotus failed[/red]: {done.stderr[-2000:]}")
            return None
        result: dict[str, Any] = json.loads(out_path.read_text())
    console.print(f"  {workload.name} / lotus: {result}")
    return result


async def run_bench(args: argparse.Namespace, console: Console) -> int:
    names = sorted(WORKLOADS) if args.workload == "all" else [args.workload]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    out = args.out or Path("bench/results") / f"{args.engine}-{args.scale}.json"
    all_records = []
    for name in names:
        if name not in WORKLOADS:
            console.print(f"[red]unknown workload {name!r}; choose from {sorted(WORKLOADS)}[/red]")
            return 2
        workload = WORKLOADS[name](args.scale)
        from kalypso.engine.sim.tokenizer import WordTokenizer

        counter = WordTokenizer() if args.engine == "sim" else None
        if counter is not None:
            lengths = [len(counter.encode(t)) for t in workload.table_text]
        else:
            from kalypso.engine.hf_tokenizer import load_hf_tokenizer
            from kalypso.models import resolve_model

            tokenizer = load_hf_tokenizer(resolve_model())
            lengths = [len(tokenizer.encode(t)) for t in workload.table_text]
        table_tokens = sum(lengths)
        longest = max(max(lengths), workload.min_kv_tokens // 2)
        engine = await _engine_for(args, table_tokens, longest)
        try:
            console.print(
                f"{name} ({args.scale}): table {table_tokens} tokens,"
                f" KV cache {engine.capacity.total_tokens} tokens on {engine.name}"
            )
            records = await run_systems(engine, workload, systems, console=console)
            await engine.reset_prefix_cache()
            lotus = _run_lotus(args, engine, workload, console)
            if lotus is not None:
                records.append(lotus_record(lotus, records, workload))
        finally:
            await engine.close()
        write_records(records, out)
        all_records.extend(records)
    Console(width=160).print(summary_table(all_records))
    console.print(f"records appended to {out}")
    return 0
