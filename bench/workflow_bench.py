"""The workflow benchmarks (the Helium paper's section 7): every library workflow under
Kalypso's cache-aware scheduling with its optimizer, under each baseline, and under each
ablation, side by side on one engine, the prefix cache reset before each system. On
vLLM, one untimed all-ready run of the first workflow warms each engine up first.

    python -m bench.workflow_bench --engine vllm --out bench/results/workflows-quick.json
    python -m bench.workflow_bench --engine sim --scale paper --sim-profile qwen3-8b-h100 \\
        --max-num-seqs 256 --out bench/results/workflows-sim.json

Systems (``--systems``):

============================  ===========================================================
``kalypso``                   cache-aware order, CSE, prompt/result cache, KV warming
``querywise``                 one query at a time (vLLM serving each request's workflow)
``opwise`` / ``opwise-stream``  operator at a time, with a barrier / streaming
``all-ready``                 every ready call at once (LangGraph's discipline; Random)
``lspf``                      all ready calls, the engine longest-cached-prefix first
``no-cse`` ... ``no-warm``    ``kalypso`` without one part (the paper's Table 3 ablation)
``kalypso-pinned``            ``kalypso`` with explicit pins (vLLM's pinning scheduler
                              class, a server of its own; with ``--one-server`` the one
                              server the others use): held conversations and warmed
                              prefixes stay cached under soft pins
``kalypso-overcommit``        ``kalypso`` admitting against a ledger of 1.25x the cache
                              (``kv_overcommit``): more calls at once, the engine
                              preempting to make room
``kalypso-cache-ledger``      ``kalypso`` admitting against a ledger of the cache's size
                              (``kv_overcommit=1.0``), whatever its policy would choose
``langgraph``                 the real LangGraph library in its own venv, same server
============================  ===========================================================

``--repeats N`` runs every system N times per workflow, in turn (the order turned by one
place each time), and prints each system's spread over Kalypso's; ``--engine-trace
PATH`` writes the engine's steps for :mod:`bench.workflow_floor`.

Baselines run without Kalypso's optimizer (no CSE, no result cache, no warming), as the
systems they stand for have none. Trading runs its first day untimed (it warms the caches,
the result cache included) and times the second. Time is the engine's clock: wall seconds
on vLLM, virtual seconds on the simulator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from bench.clock import engine_clock_s
from bench.engine_steps import runs_path
from bench.external_run import ExternalRun, runner_env
from bench.stamp import run_stamp
from kalypso.core.options import RunOptions
from kalypso.core.policies import PolicyError, get_policy
from kalypso.core.result_cache import PromptResultCache
from kalypso.engine.open import EngineSpec, open_engine
from kalypso.engine.protocol import Engine
from kalypso.engine.vllm_settings import VLLMSettings
from kalypso.engine.vllm_step_trace import STEP_TRACE_ENV_VAR, STEP_TRACE_SCHEDULER_CLS
from kalypso.workflow.command import accuracy
from kalypso.workflow.library import BUILDERS, Workload, workload
from kalypso.workflow.plan import WorkflowOptions
from kalypso.workflow.run import WorkflowResult, arun

OFF = WorkflowOptions(merge=False, result_cache=False, warm=False)
ON = WorkflowOptions()
SYSTEMS: dict[str, tuple[str, WorkflowOptions]] = {
    "kalypso": ("cache-aware", ON),
    "querywise": ("querywise", OFF),
    "opwise": ("opwise", OFF),
    "opwise-stream": ("opwise-stream", OFF),
    "all-ready": ("all-ready", OFF),
    "lspf": ("lspf", OFF),
    "no-cse": ("cache-aware", WorkflowOptions(merge=False)),
    "no-cache": ("cache-aware", WorkflowOptions(result_cache=False)),
    "no-cas": ("all-ready", ON),
    "no-warm": ("cache-aware", WorkflowOptions(warm=False)),
    "kalypso-pinned": ("cache-aware", ON),
    "kalypso-overcommit": ("cache-aware", ON),
    "kalypso-cache-ledger": ("cache-aware", ON),
    "kalypso-unwindowed": ("cache-aware:unbounded", ON),
}
EXPLICIT_PINNING = ("kalypso-pinned",)
"""Systems run with explicit pins (soft pins for held conversations and warm-ups); the
others pin virtually."""
KV_OVERCOMMIT = {"kalypso-overcommit": 1.25, "kalypso-cache-ledger": 1.0}
"""Systems whose ledger is a fixed multiple of the cache (``RunOptions.kv_overcommit``);
the others leave its size to their policy (the cache's, or for ``kalypso`` its choice
by predicted time)."""
DEFAULT_SYSTEMS = (*SYSTEMS, "langgraph")
EXTERNAL = ("langgraph",)
WINDOWED = "kalypso:"
"""``kalypso:N``: Kalypso with the instance window set to N queries (``cache-aware:N``)."""


def system_policy(system: str) -> tuple[str, WorkflowOptions]:
    """The policy and switches a Kalypso-run system names."""
    if system.startswith(WINDOWED):
        return f"cache-aware:{system.removeprefix(WINDOWED)}", ON
    return SYSTEMS[system]


def is_system(system: str) -> bool:
    """Whether ``system`` names a system: a known one, or ``kalypso:N`` whose
    ``cache-aware:N`` the policy accepts."""
    if system in SYSTEMS or system in EXTERNAL:
        return True
    if not system.startswith(WINDOWED):
        return False
    try:
        get_policy(system_policy(system)[0])
    except PolicyError:
        return False
    return True


LANGGRAPH_PYTHON = Path(".venv-langgraph/bin/python")
RUNNER = Path(__file__).resolve().parent / "external" / "langgraph_runner.py"


@dataclass(frozen=True)
class WorkflowRecord:
    workflow: str
    system: str
    scale: str
    engine: str
    kv_cache_tokens: int
    queries: int
    time_s: float
    planning_s: float
    llm_calls: int
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    min_prefill_tokens: int
    output_tokens: int
    """Tokens generated."""
    hit_rate: float
    result_cache_hits: int
    merged_calls: int
    warmed_prefixes: int
    prefill_s: float
    decode_s: float
    preemptions: int
    """Running requests the engine preempted during the timed run (recomputed later)."""
    outputs_equal: float
    """Fraction of output cells equal to ``kalypso``'s (1.0 for ``kalypso`` itself)."""
    accuracy: float | None
    """Mean over outputs with known answers (the first number is the answer)."""
    host: str = ""
    """The machine (:func:`kalypso.engine.host.describe_host`): ratios do not carry across hosts."""
    date: str = ""
    commit: str = ""
    """When and on which code the run was measured (:func:`bench.stamp.run_stamp`)."""
    requests: int = 0
    """Engine requests (calls and their continuations; 0 for LangGraph)."""
    min_attention_pairs: int = 0
    """The least attention pairs of the run's prefill (the ideal prefix cache's)."""
    decode_tokens: int = 0
    """Tokens the decode steps fed back (each request's output but its last token)."""
    decode_attention_pairs: int = 0
    """The attention pairs of those decode tokens (the same under any schedule)."""
    longest_chain_tokens: int = 0
    """The most tokens one query's chain of dependent calls generated: the least engine
    steps the batch needs (:mod:`bench.workflow_floor`)."""
    max_num_seqs: int = 0
    """The most requests the engine ran at once."""
    held_block_steps: int = 0
    """The KV blocks the calls' decoding held, each shared block divided among the calls
    that can hold it in one step, summed over decode steps (:mod:`kalypso.core.memory_bound`)."""
    kv_blocks: int = 0
    """The blocks of the engine's KV cache."""
    least_decode_steps: int = 0
    """The least steps the calls' decoding needs in that cache, a step decoding no more
    calls than fit beside each other (:mod:`kalypso.core.memory_bound`)."""
    repeat: int = 0
    """Which repeat of the system on this workflow (``--repeats``), from 0."""


@dataclass(frozen=True)
class SystemRun:
    """One system's timed run of a workload (Trading: its last day)."""

    result: WorkflowResult
    started_s: float
    """When the timed run began, on the engine's clock (:func:`bench.clock.engine_clock_s`)."""
    elapsed_s: float
    prefill_s: float
    """Seconds the engine's requests spent in prefill, summed over requests."""
    decode_s: float
    preemptions: int


def system_options(system: str, kv_overcommit: float | None = None) -> RunOptions:
    """The run options ``system`` runs with; ``kv_overcommit`` sizes its ledger instead
    of the system's own choice (:data:`KV_OVERCOMMIT`).

    Raises:
        PlanError: a ledger size or combination the options refuse.
    """
    return RunOptions(
        policy=system_policy(system)[0],
        system_prompt="",
        pinning="explicit" if system in EXPLICIT_PINNING else "virtual",
        kv_overcommit=kv_overcommit if kv_overcommit is not None else KV_OVERCOMMIT.get(system),
    )


async def run_system(
    engine: Engine, job: Workload, system: str, kv_overcommit: float | None = None
) -> SystemRun:
    """One system on ``job``, every day of it, the last timed, with
    :func:`system_options`."""
    switches = system_policy(system)[1]
    options = system_options(system, kv_overcommit)
    cache = PromptResultCache(engine.name)
    await engine.reset_prefix_cache()
    run: SystemRun | None = None
    for flow, inputs in zip(job.workflows, job.inputs, strict=True):
        before = await engine.stats()
        started = engine_clock_s(engine)
        result = await arun(flow, engine, inputs, options, workflow_options=switches, cache=cache)
        elapsed = engine_clock_s(engine) - started
        after = await engine.stats()
        run = SystemRun(
            result,
            started,
            elapsed,
            prefill_s=after.prefill_time_s - before.prefill_time_s,
            decode_s=after.decode_time_s - before.decode_time_s,
            preemptions=after.preemptions - before.preemptions,
        )
    assert run is not None
    return run


def equal_fraction(frame: pd.DataFrame, reference: pd.DataFrame) -> float:
    if frame.shape != reference.shape or frame.size == 0:
        return 0.0
    return round(
        float(frame.reset_index(drop=True).eq(reference.reset_index(drop=True)).to_numpy().mean()),
        4,
    )


async def run_langgraph(engine: Engine, job: Workload, scale: str) -> ExternalRun | None:
    """The workflow with the real LangGraph library, in its own venv, on this server."""
    server = getattr(engine, "server", None)
    if server is None or not LANGGRAPH_PYTHON.exists():
        print("  langgraph: needs --engine http and `make langgraph-venv`; skipped", flush=True)
        return None
    await engine.reset_prefix_cache()
    with tempfile.TemporaryDirectory() as folder:
        job_path, out_path = Path(folder) / "job.json", Path(folder) / "out.json"
        spec = {
            "workflow": job.name,
            "scale": scale,
            "base_url": server.base_url,
            "model": server.served_model_name,
        }
        job_path.write_text(json.dumps(spec))
        command = [str(LANGGRAPH_PYTHON), str(RUNNER), str(job_path), str(out_path)]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, env=runner_env()
        )
        if done.returncode != 0:
            print(f"  langgraph failed: {done.stderr[-2000:]}", flush=True)
            return None
        try:
            return ExternalRun.model_validate_json(out_path.read_text())
        except ValidationError as exc:
            print(f"  langgraph wrote a malformed record: {exc}", flush=True)
            return None


async def warm_up_engine(engine: Engine, job: Workload) -> None:
    """One untimed all-ready run of ``job`` (each system's run resets the prefix cache
    first): a fresh vLLM engine's first run pays one-off costs (first kernel runs at each
    batch shape, memory growth) that cost the system measured first 3-6% on MapRed
    (BENCHMARKS.md), so no system is measured on a cold engine. The simulator has no such
    costs and skips this."""
    started = time.monotonic()
    await run_system(engine, job, "all-ready")
    print(
        f"  warm-up ({job.name}, all-ready, untimed): {time.monotonic() - started:.1f} s",
        flush=True,
    )


async def bench_engine(
    spec: EngineSpec,
    names: Sequence[str],
    systems: Sequence[str],
    scale: str,
    references: dict[str, pd.DataFrame],
    windows: list[dict[str, float | str]] | None = None,
    repeats: int = 1,
) -> list[WorkflowRecord]:
    """Run ``systems`` on each workflow on one engine, ``repeats`` times in turn (every
    system once, then again, the order turned each time: :func:`rotated`). ``references``
    maps a workflow to ``kalypso``'s outputs (set by its first run; read by the other
    systems, on this engine or a later one).
    Each timed run's window (``{"run": run_name(...), "start_s", "end_s"}``, on the
    engine's clock) is appended to ``windows`` when it is given."""
    engine = await open_engine(spec)
    records: list[WorkflowRecord] = []
    try:
        if spec.kind != "sim":
            await warm_up_engine(engine, workload(names[0], scale))
        for name in names:
            job = workload(name, scale)
            for repeat in range(repeats):
                for system in rotated(systems, repeat):
                    record, (start_s, end_s) = await measure(
                        engine, job, scale, system, references, repeat
                    )
                    if windows is not None:
                        windows.append(_window(name, system, repeat, start_s, end_s))
                    if record is not None:
                        records.append(record)
    finally:
        await engine.close()
    return records


async def measure(
    engine: Engine,
    job: Workload,
    scale: str,
    system: str,
    references: dict[str, pd.DataFrame],
    repeat: int,
) -> tuple[WorkflowRecord | None, tuple[float, float]]:
    """One timed run of ``system`` on ``job``: its record (None: LangGraph skipped or
    failed) and the timed window on the engine's clock (LangGraph's: its whole process;
    Trading's: its last day)."""
    name = job.name
    reference = references.get(name)
    if system == "langgraph":
        start_s = engine_clock_s(engine)
        measured = await run_langgraph(engine, job, scale)
        window = (start_s, engine_clock_s(engine))
        if measured is None:
            return None, window
        return external_record(engine, job, scale, measured, reference, repeat), window
    run = await run_system(engine, job, system)
    result, elapsed = run.result, run.elapsed_s
    if system == "kalypso" and reference is None:
        references[name] = reference = result.outputs
    scores = accuracy(result, dict(job.expected))
    record = WorkflowRecord(
        workflow=name,
        system=system,
        scale=scale,
        engine=engine.name,
        host=run_stamp().host,
        date=run_stamp().date,
        commit=run_stamp().commit,
        kv_cache_tokens=engine.capacity.total_tokens,
        queries=job.queries,
        time_s=round(elapsed, 3),
        planning_s=round(result.planning_s, 4),
        llm_calls=result.llm_calls,
        prompt_tokens=result.prompt_tokens,
        cached_tokens=result.cached_tokens,
        prefill_tokens=result.prefill_tokens,
        min_prefill_tokens=result.min_prefill_tokens,
        output_tokens=result.output_tokens,
        hit_rate=round(result.hit_rate, 4),
        result_cache_hits=result.cache.hits if result.cache else 0,
        merged_calls=len(result.rewrites.merged),
        warmed_prefixes=result.warm.prefixes if result.warm else 0,
        prefill_s=round(run.prefill_s, 3),
        decode_s=round(run.decode_s, 3),
        preemptions=run.preemptions,
        outputs_equal=1.0 if reference is None else equal_fraction(result.outputs, reference),
        accuracy=round(sum(scores.values()) / len(scores), 4) if scores else None,
        requests=result.requests,
        min_attention_pairs=result.min_attention_pairs,
        decode_tokens=result.decode_tokens,
        decode_attention_pairs=result.decode_attention_pairs,
        longest_chain_tokens=result.longest_chain_tokens,
        max_num_seqs=engine.capacity.max_running_requests or 0,
        held_block_steps=result.held_block_steps,
        kv_blocks=engine.capacity.num_blocks,
        least_decode_steps=result.least_decode_steps,
        repeat=repeat,
    )
    print(
        f"  {name:9} {system:18} {elapsed:8.2f} s  calls {result.llm_calls:4d}"
        f"  prefill {result.prefill_tokens:7d} (min {result.min_prefill_tokens})"
        f"  hit {result.hit_rate:.0%}  equal {record.outputs_equal:.2f}",
        flush=True,
    )
    return record, (run.started_s, run.started_s + elapsed)


def rotated(systems: Sequence[str], repeat: int) -> list[str]:
    """The order of ``systems`` in repeat ``repeat``: the first repeat's as given, each
    later one turned by one more place, so each system runs first as often as the others
    (the first run of a workflow on an engine pays one-off costs: Kalypso's first Reflect
    took 4.7% longer than its next two, after a warm-up, BENCHMARKS.md)."""
    turn = repeat % len(systems) if systems else 0
    return [*systems[turn:], *systems[:turn]]


def run_name(workflow: str, system: str, repeat: int) -> str:
    """A timed run's name in the step trace's windows: ``WORKFLOW/SYSTEM``, with ``#N``
    after it for the N-th repeat (N >= 1)."""
    return f"{workflow}/{system}" + (f"#{repeat}" if repeat else "")


def _window(
    workflow: str, system: str, repeat: int, start_s: float, end_s: float
) -> dict[str, float | str]:
    return {"run": run_name(workflow, system, repeat), "start_s": start_s, "end_s": end_s}


def external_record(
    engine: Engine,
    job: Workload,
    scale: str,
    run: ExternalRun,
    reference: pd.DataFrame | None,
    repeat: int = 0,
) -> WorkflowRecord:
    """The LangGraph run's record (its own prompts: outputs compared, not required equal)."""
    outputs = pd.DataFrame(run.outputs)
    print(
        f"  {job.name:9} {'langgraph':18} {run.time_s:8.2f} s  calls {run.llm_calls}"
        f"  prefill {run.prefill_tokens:7d}  hit {run.hit_rate:.0%}",
        flush=True,
    )
    return WorkflowRecord(
        workflow=job.name,
        system="langgraph",
        scale=scale,
        engine=engine.name,
        host=run_stamp().host,
        date=run_stamp().date,
        commit=run_stamp().commit,
        kv_cache_tokens=engine.capacity.total_tokens,
        queries=job.queries,
        time_s=round(run.time_s, 3),
        planning_s=0.0,
        llm_calls=run.llm_calls,
        prompt_tokens=run.prompt_tokens,
        cached_tokens=run.cached_tokens,
        prefill_tokens=run.prefill_tokens,
        min_prefill_tokens=0,
        output_tokens=run.output_tokens,
        hit_rate=round(run.hit_rate, 4),
        result_cache_hits=0,
        merged_calls=0,
        warmed_prefixes=0,
        prefill_s=round(run.prefill_time_s, 3),
        decode_s=round(run.decode_time_s, 3),
        preemptions=run.preemptions,
        outputs_equal=0.0 if reference is None else equal_fraction(outputs, reference),
        accuracy=None,
        repeat=repeat,
    )


def engine_spec(
    args: argparse.Namespace, *, lspf: bool, pinning: bool = False, trace: bool = False
) -> EngineSpec:
    """The engine of one server; ``trace`` runs vLLM's scheduler through the step-trace
    class (:mod:`kalypso.engine.vllm_step_trace`)."""
    if args.engine == "sim":
        profile_blocks = args.sim_kv_tokens // args.block_size if args.sim_kv_tokens else None
        return EngineSpec(
            kind="sim",
            sim_profile=args.sim_profile,
            sim_blocks=profile_blocks,
            sim_block_size_tokens=args.block_size,
            sim_max_num_seqs=args.max_num_seqs,
            sim_output_tokens=args.sim_output_tokens,
            lspf=lspf,
        )
    settings = VLLMSettings(
        kv_cache_bytes=args.kv_cache_bytes,
        block_size_tokens=args.block_size,
        max_num_seqs=args.max_num_seqs,
        deterministic=args.deterministic,
        scheduler_cls=STEP_TRACE_SCHEDULER_CLS if trace else None,
    )
    return EngineSpec(kind=args.engine, settings=settings, lspf=lspf, pinning=pinning)


async def main_async(args: argparse.Namespace) -> list[WorkflowRecord]:
    names = list(BUILDERS) if args.workflows == "all" else args.workflows.split(",")
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if not is_system(s)]
    if unknown:
        raise SystemExit(
            f"unknown systems {unknown}; known: {[*SYSTEMS, *EXTERNAL]} and {WINDOWED}N"
        )
    if "kalypso" in systems:
        systems.remove("kalypso")
        systems.insert(0, "kalypso")
    pinned = [s for s in systems if s in EXPLICIT_PINNING]
    plain = [s for s in systems if s != "lspf" and (args.one_server or s not in EXPLICIT_PINNING)]
    references: dict[str, pd.DataFrame] = {}
    windows: list[dict[str, float | str]] | None = None
    if args.engine_trace is not None:
        if args.engine == "sim" or pinned or "lspf" in systems:
            raise SystemExit(
                "--engine-trace needs a vLLM engine and systems on vLLM's own scheduler"
                " (not lspf or the pinned ones, whose scheduler classes are their own)"
            )
        trace = args.engine_trace.resolve()
        trace.unlink(missing_ok=True)
        os.environ[STEP_TRACE_ENV_VAR] = str(trace)
        windows = []
    spec = engine_spec(
        args,
        lspf=False,
        pinning=args.one_server and bool(pinned),
        trace=windows is not None,
    )
    try:
        records = await bench_engine(
            spec, names, plain, args.scale, references, windows, args.repeats
        )
    finally:
        if windows is not None:
            runs_path(args.engine_trace).write_text(json.dumps(windows, indent=1) + "\n")
    if "lspf" in systems:
        spec = engine_spec(args, lspf=True)
        records += await bench_engine(
            spec, names, ["lspf"], args.scale, references, repeats=args.repeats
        )
    if pinned and not args.one_server:  # the pinning scheduler class: a server of its own
        spec = engine_spec(args, lspf=False, pinning=True)
        records += await bench_engine(
            spec, names, pinned, args.scale, references, repeats=args.repeats
        )
    return records


def _token_range(text: str) -> tuple[int, int]:
    """``"FEWEST,MOST"`` as two positive integers, fewest first."""
    try:
        fewest, most = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FEWEST,MOST, got {text!r}") from None
    if not 1 <= fewest <= most:
        raise argparse.ArgumentTypeError(f"expected 1 <= FEWEST <= MOST, got {text!r}")
    return fewest, most


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("vllm", "http", "sim"), default="vllm")
    parser.add_argument("--scale", choices=("small", "paper"), default="small")
    parser.add_argument("--workflows", default="all", help="comma-separated names, or all")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS))
    parser.add_argument("--kv-cache-bytes", type=int, default=64 * 2**20)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=16,
        help="most requests the engine runs at once, vLLM's and the simulator's (default 16,"
        " the CPU runs'; the paper-scale simulator runs pass 256)",
    )
    parser.add_argument("--sim-profile", default="qwen3-8b-h100")
    parser.add_argument("--sim-kv-tokens", type=int, default=None)
    parser.add_argument(
        "--sim-output-tokens",
        type=_token_range,
        default=None,
        help="FEWEST,MOST tokens of the simulator's answers before max_tokens cuts them"
        " (default 8,48); a real run's output_tokens per call calibrates it",
    )
    parser.add_argument(
        "--one-server",
        action="store_true",
        help="run the pinned systems on the same server as the others (it then runs the"
        " pinning scheduler class), to compare them without a second server",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every system this many times per workflow, in turn (each system once,"
        " then again), and print each system's spread over Kalypso's",
    )
    parser.add_argument(
        "--engine-trace",
        type=Path,
        default=None,
        help="run vLLM with the step-trace scheduler, write its steps to ENGINE_TRACE and"
        " each timed run's window beside it, for `python -m bench.workflow_floor`",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/workflows.json"))
    return parser


def spread(records: Sequence[WorkflowRecord]) -> str:
    """Each system's time over Kalypso's in the same repeat, per workflow: the mean, the
    least and the most, over the repeats that have both (one line per system)."""
    kalypso = {(r.workflow, r.repeat): r.time_s for r in records if r.system == "kalypso"}
    ratios: dict[tuple[str, str], list[float]] = {}
    for r in records:
        base = kalypso.get((r.workflow, r.repeat))
        if r.system != "kalypso" and base:
            ratios.setdefault((r.workflow, r.system), []).append(r.time_s / base)
    lines = []
    for (workflow, system), values in ratios.items():
        lines.append(
            f"  {workflow:9} {system:18} over kalypso: mean {sum(values) / len(values):.3f}x,"
            f" {min(values):.3f}x to {max(values):.3f}x over {len(values)} repeats"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run_stamp()  # the code and host as the run starts
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, got {args.repeats}")
    records = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([asdict(r) for r in records], indent=1) + "\n")
    if args.repeats > 1:
        print(spread(records))
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
