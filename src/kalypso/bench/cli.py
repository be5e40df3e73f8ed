"""``kalypso bench``: run workloads side by side on real vLLM (CPU) or the simulator."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console

from kalypso.bench.runner import needs_pinning, run_systems, summary_table, write_records
from kalypso.bench.workloads import WORKLOADS
from kalypso.engine.protocol import Engine

DEFAULT_SYSTEMS = "operator-at-a-time,adaptive"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="all", help=f"all or one of {sorted(WORKLOADS)}")
    parser.add_argument("--scale", choices=("quick", "paper"), default="quick")
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
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
    from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS

    settings = VLLMSettings(kv_cache_bytes=kv_bytes, max_num_seqs=16)
    if needs_pinning([s.strip() for s in args.systems.split(",")]):
        settings = dataclasses.replace(settings, scheduler_cls=PINNING_SCHEDULER_CLS)
    return await LocalVLLMEngine.start(settings)


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
        engine = await _engine_for(args, table_tokens, max(lengths))
        try:
            console.print(
                f"{name} ({args.scale}): table {table_tokens} tokens,"
                f" KV cache {engine.capacity.total_tokens} tokens on {engine.name}"
            )
            records = await run_systems(engine, workload, systems, console=console)
        finally:
            await engine.close()
        write_records(records, out)
        all_records.extend(records)
    Console(width=160).print(summary_table(all_records))
    console.print(f"records appended to {out}")
    return 0
