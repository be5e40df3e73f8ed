"""``python -m bench``: run workloads side by side on real vLLM (CPU) or the simulator.

    python -m bench --engine sim --workload medec --kv-sweep 0.3,1.0 --out x.json

``python -m bench --help`` lists the options. SIGTERM ends a run like Ctrl-C, so the vLLM
servers it started are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from bench.external_run import ExternalRun, runner_env
from bench.runner import (
    external_record,
    needs_pinning,
    run_systems,
    summary_table,
    write_records,
)
from bench.stamp import run_stamp
from bench.workloads import QUOTE_TOKENS, WORKLOADS
from kalypso.engine.protocol import Engine

DEFAULT_SYSTEMS = "suite"
DEFAULT_SWEEP_SYSTEMS = "operator-at-a-time,adaptive"
DEFAULT_BLOCK_SIZE_TOKENS = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="all", help=f"all or one of {sorted(WORKLOADS)}")
    parser.add_argument("--scale", choices=("quick", "paper"), default="quick")
    parser.add_argument(
        "--size",
        type=int,
        default=None,
        help="documents per workload (contracts, notes, articles, claims) in place of the"
        " scale's default",
    )
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
        "--pz-python",
        type=Path,
        default=None,
        help="python of a Palimpzest venv: also run the workload with Palimpzest"
        " (like --lotus-python)",
    )
    parser.add_argument(
        "--systems",
        default=DEFAULT_SYSTEMS,
        help="suite (each workload's default systems: operator-at-a-time, adaptive, plus"
        " static splits on two-stage shapes), more (adaptive, adaptive+explicit, plus fixed"
        " output budgets on medec) or comma-separated policies, optionally with +explicit,"
        " +fixed, +fixed:N, +nocap or +inflight:N (adaptive+explicit,"
        " operator-at-a-time+inflight:64)",
    )
    parser.add_argument(
        "--kv-sweep",
        default="",
        help="comma-separated extra KV fractions (e.g. 0.2,0.45,1.0): each workload also"
        " runs --sweep-systems at these KV sizes, one engine per size (paper Figure 8)",
    )
    parser.add_argument(
        "--kv-sweep-tokens",
        default="",
        help="comma-separated extra KV sizes in tokens (like --kv-sweep, absolute)",
    )
    parser.add_argument("--sweep-systems", default=DEFAULT_SWEEP_SYSTEMS)
    parser.add_argument(
        "--model",
        default="bundled",
        help="bundled (SmolLM2-135M-Instruct), gemma3-270m (Gemma 3 270M base, converted by"
        " bench.models on first use) or a model folder",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="vLLM in float32 (the same-answers mode; also far faster than bf16 on CPUs"
        " without AVX-512)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE_TOKENS,
        help="vLLM KV block size in tokens, the prefix cache's granularity (default 32: the"
        " smallest the CPU kernels run at full speed; the paper's GPUs use 16)",
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
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON file for the records (default bench/results/<engine>-<scale>.json); an"
        " existing file is kept as <name>.previous.json unless --append",
    )
    parser.add_argument(
        "--append", action="store_true", help="add to the --out file instead of starting it anew"
    )


def _kv_tokens(kv_tokens: int, longest_tokens: int) -> int:
    """The KV size asked for, with room for at least two of the longest documents plus
    prompt and output (a smaller cache cannot run one request)."""
    return max(kv_tokens, 2 * longest_tokens + 1024)


async def _engine_for(
    args: argparse.Namespace,
    systems: list[str],
    kv_tokens: int,
    *,
    scheduler_cls: str | None = None,
) -> Engine:
    if args.engine == "sim":
        from kalypso.engine.sim import SimEngine, get_profile

        profile = get_profile(args.sim_profile)
        block = profile.capacity.block_size_tokens
        blocks = max(4, kv_tokens // block)
        return SimEngine(profile, num_blocks=blocks, max_model_len_tokens=blocks * block)
    from kalypso.engine.open import EngineSpec, open_engine
    from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token

    model = _model_path(args.model)
    dtype = "float32" if args.deterministic else "bfloat16"
    per_token = kv_bytes_per_token(model, dtype) or 23_040
    settings = VLLMSettings(
        model=model,
        kv_cache_bytes=kv_tokens * per_token,
        max_num_seqs=16,
        block_size_tokens=args.block_size,
        deterministic=args.deterministic,
        scheduler_cls=scheduler_cls,
    )
    # a started server opens its admin endpoints (prefix-cache resets between systems)
    return await open_engine(
        EngineSpec(kind=args.engine, settings=settings, pinning=needs_pinning(systems))
    )


@functools.cache
def _model_path(name: str) -> str:
    from bench.models import resolve

    return resolve(name)


EXTERNAL_WORKLOADS = {"lotus": ("contractnli", "medec"), "palimpzest": ("contractnli", "medec")}
"""The workloads each external library can express here (FEVER and BioDEX need index search
with distance thresholds, which neither has as an operator we can point at our corpus)."""


def _run_external(
    baseline: str, python: Path, engine: Any, workload: Any, console: Console
) -> ExternalRun | None:
    """Run ``workload`` with an external library's own operators against the server the
    engine was started with: ``bench/external/<baseline>_runner.py`` in that library's venv."""
    if not hasattr(engine, "server"):
        console.print(f"  {baseline}: needs --engine http (a server both can reach); skipped")
        return None
    if workload.name not in EXTERNAL_WORKLOADS[baseline]:
        console.print(f"  {baseline}: {workload.name} not expressed with {baseline}; skipped")
        return None
    script = "lotus_runner.py" if baseline == "lotus" else "pz_runner.py"
    runner = Path(__file__).resolve().parent / "external" / script
    started = time.monotonic()
    console.print(f"  {workload.name} / {baseline}: running external/{runner.name}")
    with tempfile.TemporaryDirectory() as folder:
        job_path, out_path = Path(folder) / "job.json", Path(folder) / "out.json"
        job = {
            "workload": workload.name,
            "tables": workload.tables,
            "base_url": engine.server.base_url,
            "model": engine.server.served_model_name,
            "quote_tokens": QUOTE_TOKENS,
        }
        job_path.write_text(json.dumps(job, default=str))
        done = subprocess.run(
            [str(python), str(runner), str(job_path), str(out_path)],
            capture_output=True,
            text=True,
            env=runner_env(),
        )
        if done.returncode != 0:
            console.print(f"[red]{baseline} failed[/red]: {done.stderr[-2000:]}")
            return None
        try:
            result = ExternalRun.model_validate_json(out_path.read_text())
        except ValidationError as exc:
            console.print(f"[red]{baseline} wrote a malformed record[/red]: {exc}")
            return None
    shown = result.model_dump(exclude={"rows", "stages", "outputs"})
    console.print(
        f"  {workload.name} / {baseline}: done in {time.monotonic() - started:.0f} s: {shown}"
    )
    return result


def _elapsed(started: float) -> Callable[[], str]:
    """A progress prefix: the wall time since ``started``, as ``[mm:ss] ``."""

    def prefix() -> str:
        elapsed = int(time.monotonic() - started)
        return f"[{elapsed // 60:3d}:{elapsed % 60:02d}] "

    return prefix


def _systems(spec: str, workload: Any) -> list[str]:
    if spec == "suite":
        return list(workload.suite_systems())
    if spec == "more":
        return list(workload.more_systems())
    return [s.strip() for s in spec.split(",") if s.strip()]


def _positive_numbers(spec: str, option: str) -> list[float]:
    try:
        numbers = [float(f) for f in spec.split(",") if f.strip()]
    except ValueError as exc:
        raise SystemExit(f"{option}: {exc}") from exc
    if any(n <= 0 for n in numbers):
        raise SystemExit(f"{option}: values must be positive")
    return numbers


@functools.cache
def _tokenizer(engine_kind: str, model: str) -> Any:
    """The tokenizer the engine will use, loaded once per process (to size KV caches
    before the engine starts)."""
    if engine_kind == "sim":
        from kalypso.engine.sim.tokenizer import WordTokenizer

        return WordTokenizer()
    from kalypso.engine.hf_tokenizer import load_hf_tokenizer

    return load_hf_tokenizer(_model_path(model))


def _document_lengths(args: argparse.Namespace, workload: Any) -> list[int]:
    counter = _tokenizer(args.engine, args.model)
    return [len(counter.encode(t)) for t in workload.table_text]


async def run_bench(args: argparse.Namespace, console: Console) -> int:
    names = sorted(WORKLOADS) if args.workload == "all" else [args.workload]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        console.print(
            f"[red]unknown workload {unknown[0]!r}; choose from {sorted(WORKLOADS)}[/red]"
        )
        return 2
    out = args.out or Path("bench/results") / f"{args.engine}-{args.scale}.json"
    sweep_fractions = _positive_numbers(args.kv_sweep, "--kv-sweep")
    sweep_tokens = [int(t) for t in _positive_numbers(args.kv_sweep_tokens, "--kv-sweep-tokens")]
    if args.size is not None and args.size < 1:
        raise SystemExit(f"--size must be at least 1, got {args.size}")
    if out.exists() and not args.append:
        previous = out.with_suffix(".previous.json")
        out.replace(previous)
        console.print(f"earlier records in {out} moved to {previous}")
    started = time.monotonic()
    all_records = []
    for name in names:
        workload = WORKLOADS[name](args.scale, n=args.size)
        lengths = _document_lengths(args, workload)
        table_tokens = sum(lengths)
        longest = max(max(lengths), workload.min_kv_tokens // 2)
        main_kv = int(args.kv_tokens or table_tokens * args.kv_fraction)
        sweep = [int(table_tokens * f) for f in sweep_fractions] + sweep_tokens
        settings = [(main_kv, _systems(args.systems, workload), True)]
        for position, kv in enumerate(sweep):
            systems = _systems(args.sweep_systems, workload)
            if args.systems == "suite" and position == 0:
                # the static splits at a second KV size (adaptive vs the best split)
                systems += [s for s in workload.sweep_ablations if s not in systems]
            settings.append((kv, systems, False))
        run_sizes: set[int] = set()
        carried: list[str] = []
        for asked_tokens, asked_systems, with_baselines in settings:
            kv_tokens = _kv_tokens(asked_tokens, longest)
            if kv_tokens in run_sizes:
                # a size raised to one already run: its extra systems go to the next size
                carried += [s for s in asked_systems if s not in carried]
                console.print(f"  {name}: KV {asked_tokens} tokens is raised to a size already run")
                continue
            systems = asked_systems + [
                s for s in carried if s not in asked_systems and not with_baselines
            ]
            carried = []
            run_sizes.add(kv_tokens)
            try:
                engine = await _engine_for(args, systems, kv_tokens)
            except Exception as exc:  # a failed size must not end the suite
                console.print(f"[red]{name}: no engine at KV {kv_tokens} tokens[/red]: {exc}")
                continue
            try:
                console.print(
                    f"[bold]{name}[/bold] ({args.scale}, {args.model}): table {table_tokens}"
                    f" tokens, KV cache {engine.capacity.total_tokens} tokens on {engine.name};"
                    f" {len(systems)} systems; {time.monotonic() - started:.0f} s elapsed"
                )
                records = await run_systems(
                    engine,
                    workload,
                    systems,
                    console=console,
                    model=args.model,
                    progress=_elapsed(started),
                )
                if with_baselines:
                    for baseline, python in (
                        ("lotus", args.lotus_python),
                        ("palimpzest", args.pz_python),
                    ):
                        if python is None:
                            continue
                        await engine.reset_prefix_cache()
                        external = await asyncio.to_thread(
                            _run_external, baseline, python, engine, workload, console
                        )
                        if external is not None:
                            records.append(external_record(baseline, external, records, workload))
            finally:
                await engine.close()
            write_records(records, out)
            all_records.extend(records)
    Console(width=160).print(summary_table(all_records))
    console.print(f"records written to {out}; {time.monotonic() - started:.0f} s in all")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="run workloads side by side under several policies"
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from kalypso.cli import run_command

    args = build_parser().parse_args(argv)
    run_stamp()  # the code and host as the run starts
    console = Console(stderr=True)
    return run_command(lambda: asyncio.run(run_bench(args, console)), console)


if __name__ == "__main__":
    sys.exit(main())
