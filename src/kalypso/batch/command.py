"""``kalypso batch run in.jsonl -o out.jsonl``: an OpenAI-format batch file on an engine,
with live progress and a summary.

    kalypso batch run requests.jsonl -o answers.jsonl                  # vLLM on CPU
    kalypso batch run requests.jsonl -o answers.jsonl --engine http --url http://gpu:8000
    kalypso batch run requests.jsonl -o answers.jsonl --engine sim --sim-profile qwen3-8b-h100
    kalypso batch run requests.jsonl -o answers.jsonl --engine http --url http://gpu0:8000 \
        --url http://gpu1:8000                       # a replica set: one replica per server
    kalypso batch run requests.jsonl -o answers.jsonl --engine sim --replicas 4

On several engines the requests that share a document run on one replica
(:mod:`kalypso.batch.replicated`); the answers are the one-engine run's.

Exit status: 0 when every line was answered, 3 when some failed (they are in the error
file), 2 when the file was refused (nothing run) or the run failed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kalypso.batch.reader import check_file
from kalypso.batch.result import BatchResult
from kalypso.batch.run import CHUNK_REQUESTS, arun_batch
from kalypso.core.options import WORKFLOW_POLICY, RunOptions
from kalypso.core.policies import policy_names
from kalypso.core.replicas import ReplicaSet
from kalypso.engine.open import (
    add_engine_arguments,
    close_engines,
    engine_spec,
    open_engines,
    replica_count,
    replica_urls,
)
from kalypso.models import cache_dir

SOME_LINES_FAILED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="the batch file (OpenAI's JSONL format)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="answers, in order")
    parser.add_argument(
        "--errors", type=Path, default=None, help="failed lines (default OUTPUT.errors.jsonl)"
    )
    parser.add_argument(
        "--policy",
        default=WORKFLOW_POLICY,
        help=f"scheduling policy (default %(default)s; one of {', '.join(policy_names())})",
    )
    add_engine_arguments(parser, replicas=True)
    parser.add_argument(
        "--chunk-requests",
        type=int,
        default=CHUNK_REQUESTS,
        help="requests ordered and run together (default %(default)s): the memory bound",
    )
    parser.add_argument(
        "--call-timeout-s", type=float, default=600.0, help="a call slower than this fails"
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress bar")


async def run(args: argparse.Namespace, console: Console) -> int:
    """Check the file, open the engine, run, print the summary; the exit status."""
    count = replica_count(args)  # bad flags are refused before anything starts
    summary = check_file(args.input)
    console.print(f"{args.input}: {summary.requests:,} requests for {summary.model}")
    spec = engine_spec(args)
    log_path = None
    if args.engine == "vllm":
        log_path = cache_dir() / "logs" / f"batch-vllm-{int(time.time())}.log"
    options = RunOptions(policy=args.policy, call_timeout_s=args.call_timeout_s)
    engines = await open_engines(spec, count, urls=replica_urls(args), log_path=log_path)
    target = engines[0] if count == 1 else ReplicaSet(engines)
    try:
        with Progress(
            TextColumn("requests"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=args.no_progress,
            transient=True,
        ) as bar:
            task = bar.add_task("batch", total=summary.requests)

            def show(progress: BatchResult) -> None:
                bar.update(task, completed=progress.requests)

            result = await arun_batch(
                args.input,
                args.output,
                target,
                error_path=args.errors,
                options=options,
                chunk_requests=args.chunk_requests,
                on_progress=show,
                index=summary,
            )
    finally:
        await close_engines(engines)
    console.print(result.summary(), highlight=False, soft_wrap=True)
    if isinstance(target, ReplicaSet):
        console.print(target.explain(), highlight=False, markup=False, soft_wrap=True)
    console.print(f"answers: {args.output}")
    if result.failed:
        errors = args.errors or args.output.with_name(args.output.name + ".errors.jsonl")
        codes = ", ".join(f"{code} {count}" for code, count in sorted(result.errors.items()))
        console.print(f"[yellow]{result.failed} line(s) failed[/yellow] ({codes}): {errors}")
        return SOME_LINES_FAILED
    return 0
