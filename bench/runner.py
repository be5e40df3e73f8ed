"""Run workloads under several systems side by side, on one engine, and record the figures.

Each system runs the same plan on the same engine after a prefix-cache reset. Time is the
engine's clock: wall time on vLLM, virtual time on the simulator. Records are written as
a JSON list with the fields other tools read (``workload``, ``system``, ``scale``,
``engine``, ``kv_cache_tokens``, ``time_s``, ``llm_calls``, ``prompt_tokens``,
``cached_tokens``, ``prefill_tokens``, ``min_prefill_tokens``, ``continuations``,
``outputs_agree``, ...), with the engine's prefill and decode seconds over the run
(``prefill_time_s``, ``decode_time_s``: deltas of the engine's cumulative per-request
phase times, so requests running together each count their own time), the prefill floor
(``prefill_floor_s``: the run's minimum prefill, ``min_prefill_tokens`` and their
``min_attention_pairs``, at the engine's prefill cost measured once per engine;
:mod:`bench.prefill_floor`), each operator's
rows in and out (``stages``: the selectivity) and the answers' quality against the
generator's ground truth (``quality``; ``accuracy`` is the workload's headline metric).
``outputs_agree`` compares each system's output table with
operator-at-a-time's (the first system when that one is not run); ``rows_agree`` compares
only the rows kept (the decisions) and ``cells_agree`` is the fraction of equal cells, for
generated text that differs (bf16 on CPU: a prefix read from the cache is not bit-equal to
the same prefix computed in another batch).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table as RichTable

from bench.clock import engine_clock_s
from bench.external_run import ExternalRun
from bench.prefill_floor import PrefillCost, measure_prefill_cost
from bench.stamp import run_stamp
from bench.workloads import Workload
from kalypso.engine.protocol import Engine, EngineStats
from kalypso.engine.warm_up import warm_up
from kalypso.query.plan import QueryResult, compare_decisions

BASELINE = "operator-at-a-time"


@dataclass(frozen=True)
class BenchRecord:
    workload: str
    system: str
    scale: str
    engine: str
    kv_cache_tokens: int
    table_tokens: int
    time_s: float
    llm_calls: int
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    min_prefill_tokens: int
    continuations: int
    """Requests that continued a generative call stopped at its output bound."""
    continued_tokens: int
    lost_prefixes: int
    dependent_hit_rate: float
    peak_kv_reserved_blocks: int
    output_rows: int
    outputs_agree: bool
    rows_agree: bool
    """The same rows as the reference (its input-table columns equal): the same decisions."""
    cells_agree: float
    """Fraction of output cells equal to the reference's (0 when the shapes differ)."""
    decisions: int = 0
    """Constrained decisions made (filters, join predicates, classifications)."""
    decisions_differing: int = 0
    """Decisions that differ from the reference's (or that only one of the runs made)."""
    differing_not_near_ties: int = 0
    """Of those, the ones that were not near-ties: 0 is the same-answers guarantee."""
    near_ties: int = 0
    """Decisions of this run whose margin is below the run's near-tie margin."""
    model: str = "bundled"
    requests: int = 0
    """Engine requests: calls plus their continuations."""
    output_tokens: int = 0
    """Tokens decoded (one per decision)."""
    prefill_time_s: float = 0.0
    """Engine seconds in prefill over the run, summed over requests (they overlap)."""
    decode_time_s: float = 0.0
    """Engine seconds in decode over the run, summed over requests (they overlap)."""
    preemptions: int = 0
    """Running requests the engine preempted during the run (recomputed later)."""
    host: str = ""
    """The machine (:func:`kalypso.engine.host.describe_host`): ratios do not carry across hosts."""
    date: str = ""
    commit: str = ""
    """When and on which code the run was measured (:func:`bench.stamp.run_stamp`)."""
    min_attention_pairs: int = 0
    """Query-key pairs the attention of ``min_prefill_tokens`` computes (0 in records
    written before it was counted)."""
    prefill_floor_s: float | None = None
    """``min_prefill_tokens`` and ``min_attention_pairs`` at the engine's measured prefill
    cost (:mod:`bench.prefill_floor`): an estimate of the least time any schedule could
    take; None when the calibration failed."""
    stages: tuple[dict[str, Any], ...] = ()
    """Per operator: ``operator``, ``rows_in``, ``rows_out``, ``calls`` (selectivity =
    rows_out / rows_in), ``prompt_tokens``, ``cached_tokens``, ``output_tokens``."""
    accuracy_metric: str = ""
    accuracy: float | None = None
    """The workload's headline quality metric (``accuracy_metric``) against the ground
    truth."""
    quality: dict[str, float] = field(default_factory=dict)
    """Every quality metric of the workload's scorer."""


def _positive_count(modifier: str, prefix: str) -> int | None:
    """N of a ``prefix``N modifier with N a positive integer, else None."""
    text = modifier.removeprefix(prefix)
    if text != modifier and text.isdigit() and int(text) > 0:
        return int(text)
    return None


def system_options(system: str) -> dict[str, Any]:
    """``arun`` options for a system name: a policy, optionally with modifiers -
    ``+explicit`` (explicit pinning), ``+fixed`` (each operator's own first bound, no
    estimator), ``+fixed:N`` (every generative operator starts at N output tokens),
    ``+nocap`` (tasks sized at the estimate even when their caps fit: the sizing before
    "reserve the cap when it fits") and ``+inflight:N`` (at most N calls in flight; plain
    operator-at-a-time keeps the engine's ``max_num_seqs`` in flight), e.g.
    ``adaptive+explicit``, ``adaptive+fixed:8`` or ``operator-at-a-time+inflight:64``."""
    policy, *modifiers = system.split("+")
    options: dict[str, Any] = {"policy": policy}
    for modifier in modifiers:
        if modifier == "explicit":
            options["pinning"] = "explicit"
        elif modifier == "fixed":
            options["estimate_bounds"] = False
        elif modifier == "nocap":
            options["reserve_cap_when_it_fits"] = False
        elif (tokens := _positive_count(modifier, "fixed:")) is not None:
            options["fixed_bound_tokens"] = tokens
        elif (calls := _positive_count(modifier, "inflight:")) is not None:
            options["max_tasks_in_flight"] = calls
        else:
            raise ValueError(f"unknown system modifier {modifier!r} in {system!r}")
    return options


def needs_pinning(systems: list[str]) -> bool:
    return any(system_options(s).get("pinning") == "explicit" for s in systems)


def quality(workload: Workload, frame: pd.DataFrame) -> tuple[str, float | None, dict[str, float]]:
    """The workload's headline metric, its value and every metric of ``frame``."""
    metrics = workload.score(frame)
    name = next(iter(metrics), "")
    return name, metrics.get(name), metrics


def stages_of(result: QueryResult) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "operator": s.operator,
            "rows_in": s.rows_in,
            "rows_out": s.rows_out,
            "calls": s.calls,
            "prompt_tokens": s.prompt_tokens,
            "cached_tokens": s.cached_tokens,
            "output_tokens": s.output_tokens,
        }
        for s in result.operator_stats
    )


async def _warm_run(
    engine: Engine, workload: Workload, console: Console | None, progress: Callable[[], str]
) -> None:
    """One untimed run of ``workload`` under ``adaptive`` (see ``run_systems``). A failure is
    shown and the timed runs go on: each system's own run reports its own failure."""
    started = time.monotonic()
    try:
        await workload.plan.arun(engine, policy="adaptive")
    except Exception as exc:
        if console is not None:
            console.print(f"{progress()}{workload.name}: [red]warm-up run failed[/red]: {exc}")
        return
    if console is not None:
        console.print(
            f"{progress()}{workload.name}: untimed warm-up run (adaptive) took"
            f" {time.monotonic() - started:.1f} s"
        )


async def _prefill_cost(
    engine: Engine, workload: Workload, console: Console | None, progress: Callable[[], str]
) -> PrefillCost | None:
    """The engine's prefill cost, for the records' ``prefill_floor_s``; None (shown)
    when the calibration fails, which must not end the suite."""
    try:
        cost = await measure_prefill_cost(engine, workload.table_text)
    except Exception as exc:
        if console is not None:
            console.print(
                f"{progress()}{workload.name}: [red]prefill calibration failed[/red]: {exc}"
            )
        return None
    if console is not None:
        console.print(f"{progress()}{workload.name}: {cost.explain()}")
    return cost


def _phase_delta(before: EngineStats, after: EngineStats) -> tuple[float, float, int]:
    """Prefill seconds, decode seconds and preemptions between two snapshots."""
    return (
        round(after.prefill_time_s - before.prefill_time_s, 3),
        round(after.decode_time_s - before.decode_time_s, 3),
        after.preemptions - before.preemptions,
    )


async def run_systems(
    engine: Engine,
    workload: Workload,
    systems: list[str],
    *,
    console: Console | None = None,
    model: str = "bundled",
    progress: Callable[[], str] = str,
    warm_run: bool = True,
) -> list[BenchRecord]:
    """Run ``workload`` once per system on ``engine``; returns one record per system.
    With a console, prints a progress line as each run starts and ends, each behind
    ``progress()`` (the caller's elapsed time).

    With ``warm_run`` the workload first runs once under ``adaptive``, untimed and
    unrecorded; without it, only :func:`~kalypso.engine.warm_up.warm_up`'s few requests
    run first. A fresh vLLM server on CPU can run its first workload up to a quarter slower
    than the same workload again (BioDEX: operator-at-a-time 54.6 s first, 43.1 s third in
    one invocation, on one host, after the few requests; BENCHMARKS.md), and whichever
    system ran first paid for it."""
    table_tokens = sum(len(engine.tokenizer.encode(t)) for t in workload.table_text)
    workload.plan.prepare()  # indexes and embedder: one-off work no system should be timed on
    if warm_run:
        await _warm_run(engine, workload, console, progress)  # takes warm_up's costs too
    else:
        await warm_up(engine, workload.table_text)
    cost = await _prefill_cost(engine, workload, console, progress)
    results: dict[str, tuple[QueryResult, float, tuple[float, float, int]]] = {}
    for position, system in enumerate(systems, 1):
        await engine.reset_prefix_cache()
        if console is not None:
            console.print(
                f"{progress()}{workload.name} / {system} ({position}/{len(systems)},"
                f" KV {engine.capacity.total_tokens} tokens): running"
            )
        before = await engine.stats()
        started = engine_clock_s(engine)
        try:
            result = await workload.plan.arun(engine, **system_options(system))
        except Exception as exc:  # one failed run must not end the suite
            if console is not None:
                console.print(f"{progress()}{workload.name} / {system}: [red]failed[/red]: {exc}")
            continue
        elapsed_s = engine_clock_s(engine) - started
        results[system] = (result, elapsed_s, _phase_delta(before, await engine.stats()))
        if console is not None:
            metric, value, _ = quality(workload, result.frame)
            selectivity = " -> ".join(f"{s['rows_out']}/{s['rows_in']}" for s in stages_of(result))
            console.print(
                f"{progress()}{workload.name} / {system}: {elapsed_s:.1f} s, rows {selectivity},"
                f" {metric} {value}; {result.report()}"
            )
    if not results:
        return []
    reference = results[BASELINE][0] if BASELINE in results else next(iter(results.values()))[0]
    input_columns = sorted({str(k) for rows in workload.tables.values() for r in rows for k in r})
    records = []
    for system, (result, elapsed_s, (prefill_s, decode_s, preemptions)) in results.items():
        differing, ties = compare_decisions(result, reference)
        metric, value, metrics = quality(workload, result.frame)
        records.append(
            BenchRecord(
                workload=workload.name,
                system=system,
                scale=workload.scale,
                engine=engine.name,
                host=run_stamp().host,
                date=run_stamp().date,
                commit=run_stamp().commit,
                kv_cache_tokens=engine.capacity.total_tokens,
                table_tokens=table_tokens,
                time_s=round(elapsed_s, 3),
                llm_calls=result.llm_calls,
                prompt_tokens=result.prompt_tokens,
                cached_tokens=result.cached_tokens,
                prefill_tokens=result.prefill_tokens,
                min_prefill_tokens=result.min_prefill_tokens,
                min_attention_pairs=result.min_attention_pairs,
                continuations=result.continuations,
                continued_tokens=result.continued_tokens,
                lost_prefixes=result.lost_prefixes,
                dependent_hit_rate=round(result.dependent_hit_rate, 4),
                peak_kv_reserved_blocks=result.peak_reserved_blocks,
                output_rows=len(result.frame),
                outputs_agree=bool(result.frame.equals(reference.frame)),
                rows_agree=rows_agree(result.frame, reference.frame, input_columns),
                cells_agree=cells_agree(result.frame, reference.frame),
                decisions=len(result.decisions),
                decisions_differing=differing,
                differing_not_near_ties=differing - len(ties),
                near_ties=len(result.near_ties),
                model=model,
                requests=result.requests,
                output_tokens=result.output_tokens,
                prefill_time_s=prefill_s,
                decode_time_s=decode_s,
                preemptions=preemptions,
                prefill_floor_s=(
                    round(cost.floor_s(result.min_prefill_tokens, result.min_attention_pairs), 3)
                    if cost is not None
                    else None
                ),
                stages=stages_of(result),
                accuracy_metric=metric,
                accuracy=value,
                quality=metrics,
            )
        )
    return records


def rows_agree(frame: pd.DataFrame, reference: pd.DataFrame, input_columns: list[str]) -> bool:
    columns = [c for c in input_columns if c in reference.columns]
    if frame.shape != reference.shape or not columns:
        return bool(frame.shape == reference.shape and frame.equals(reference))
    return bool(
        frame[columns].reset_index(drop=True).equals(reference[columns].reset_index(drop=True))
    )


def cells_agree(frame: pd.DataFrame, reference: pd.DataFrame) -> float:
    if frame.shape != reference.shape or frame.size == 0:
        return float(frame.shape == reference.shape)
    equal = frame.reset_index(drop=True).eq(reference.reset_index(drop=True))
    return round(float(equal.to_numpy().mean()), 4)


def external_record(
    system: str, run: ExternalRun, records: list[BenchRecord], workload: Workload
) -> BenchRecord:
    """A record for a run of an external library (Lotus, Palimpzest) on the same server.
    It builds its own prompts, so its outputs are not compared with ours (``outputs_agree``
    is false by construction); its output rows are scored against the ground truth."""
    reference = records[0]
    metric, value, metrics = (
        quality(workload, pd.DataFrame(run.rows)) if run.rows is not None else ("", None, {})
    )
    return BenchRecord(
        workload=workload.name,
        system=system,
        scale=workload.scale,
        engine=reference.engine,
        host=reference.host,
        date=reference.date,
        commit=reference.commit,
        kv_cache_tokens=reference.kv_cache_tokens,
        table_tokens=reference.table_tokens,
        time_s=run.time_s,
        llm_calls=run.llm_calls,
        prompt_tokens=run.prompt_tokens,
        cached_tokens=run.cached_tokens,
        prefill_tokens=run.prefill_tokens,
        min_prefill_tokens=reference.min_prefill_tokens,
        min_attention_pairs=reference.min_attention_pairs,
        continuations=0,
        continued_tokens=0,
        lost_prefixes=0,
        dependent_hit_rate=0.0,
        peak_kv_reserved_blocks=0,
        output_rows=run.output_rows,
        outputs_agree=False,
        rows_agree=False,
        cells_agree=0.0,
        model=reference.model,
        requests=run.llm_calls,
        output_tokens=run.output_tokens,
        prefill_time_s=round(run.prefill_time_s, 3),
        decode_time_s=round(run.decode_time_s, 3),
        preemptions=run.preemptions,
        stages=run.stages,
        accuracy_metric=metric,
        accuracy=value,
        quality=metrics,
    )


def write_records(records: list[BenchRecord], path: Path) -> None:
    """Append ``records`` to the JSON list at ``path`` (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = json.loads(path.read_text()) if path.exists() else []
    existing.extend(asdict(r) for r in records)
    path.write_text(json.dumps(existing, indent=1) + "\n")


def summary_table(records: list[BenchRecord]) -> RichTable:
    table = RichTable(title="benchmark (speed-up vs operator-at-a-time, same workload)")
    headers = (
        "workload",
        "system",
        "time (s)",
        "speed-up",
        "prefill",
        "min prefill",
        "prefill/min",
        "dep. hit rate",
        "lost",
        "continued",
        "prefill s",
        "decode s",
        "rows",
        "accuracy",
        "decisions differ (not ties)",
        "cells agree",
    )
    for header in headers:
        table.add_column(header, justify="left" if header in ("workload", "system") else "right")
    base = {r.workload: r.time_s for r in records if r.system == BASELINE}
    for r in records:
        speedup = f"{base[r.workload] / r.time_s:.2f}x" if r.workload in base and r.time_s else "-"
        ratio = r.prefill_tokens / r.min_prefill_tokens if r.min_prefill_tokens else 0.0
        table.add_row(
            r.workload,
            r.system,
            f"{r.time_s:.1f}",
            speedup,
            str(r.prefill_tokens),
            str(r.min_prefill_tokens),
            f"{ratio:.2f}",
            f"{r.dependent_hit_rate:.2f}",
            str(r.lost_prefixes),
            str(r.continuations),
            f"{r.prefill_time_s:.1f}",
            f"{r.decode_time_s:.1f}",
            " -> ".join(f"{s['rows_out']}/{s['rows_in']}" for s in r.stages) or "-",
            "-" if r.accuracy is None else f"{r.accuracy_metric} {r.accuracy:.3f}",
            f"{r.decisions_differing} ({r.differing_not_near_ties})",
            f"{r.cells_agree:.3f}",
        )
    return table
