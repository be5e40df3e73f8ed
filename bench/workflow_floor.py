"""The least time Kalypso's work on each workflow can take on this host, and so the most
any baseline's time over Kalypso's can be, whatever Kalypso's schedule.

    python -m bench.workflow_bench --engine http --deterministic \\
        --systems kalypso,querywise,opwise,all-ready,langgraph \\
        --engine-trace bench/results/steps-workflows.jsonl \\
        --out bench/results/workflows-floor-runs.json
    python -m bench.workflow_floor bench/results/workflows-floor-runs.json \\
        bench/results/steps-workflows.jsonl.gz --out bench/results/workflows-floor.json

One cost per engine step, no part of it negative, is fitted over the steps of every
timed run in the trace (:class:`bench.engine_steps.StepCost`: a fixed part, and parts
per prefill token, per decode token and per attention pair). Kalypso's *least work* on a
workflow is what any schedule of its calls must compute (:class:`LeastWork`):

- **steps**: at least the tokens of its longest chain of dependent calls (each generated
  token takes a step, and a call starts after those it depends on), at least its
  generated tokens over the engine's ``max_num_seqs`` (a step generates one token per
  running request at most), at least the block-steps its calls' decoding held over the
  cache's blocks (:mod:`kalypso.core.memory_bound`: each shared block divided among the
  calls that can hold it in one step; the requests of one step hold at most the cache),
  and at least the steps its calls' decoding needs when no step decodes more whole calls
  than fit in the cache beside each other (``least_decode_steps``);
- **prefill tokens and their attention pairs**: the ideal prefix cache's, every distinct
  full-block prefix of the prompts it sent computed once;
- **decode tokens and their attention pairs**: each generated token fed back once, the
  same under any schedule.

Its *least time* is that work at the fitted cost. A baseline that took ``T`` seconds can be
at most ``T / least`` times slower than Kalypso on this host: a target above that cannot be
met by scheduling. The fit is a model, not a proof: its mean error per step is printed
beside it, and Kalypso's own fitted time beside its measured one.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine_steps import StepCost, load_runs
from bench.workflow_bench import run_name
from kalypso.engine.protocol import EngineCapacity
from kalypso.workflow.run import WorkflowResult

REFERENCE = "kalypso"


def memory_steps(record: Mapping[str, Any]) -> int:
    """The least steps the cache's size allows: the block-steps the record's calls held
    over the cache's blocks (0 for a record without them)."""
    blocks = record.get("kv_blocks", 0)
    return math.ceil(record.get("held_block_steps", 0) / blocks) if blocks else 0


@dataclass(frozen=True)
class LeastWork:
    """The least engine work a run's calls need under any schedule."""

    steps: int
    prefill_tokens: int
    decode_tokens: int
    attention_pairs: int
    """Prefill and decode pairs together."""

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> LeastWork:
        """From a workflow record (:class:`bench.workflow_bench.WorkflowRecord` as a dict).

        Raises:
            ValueError: the record does not carry the counts (a LangGraph record, or one
                written before they were recorded).
        """
        if record.get("max_num_seqs", 0) <= 0 or record.get("requests", 0) <= 0:
            raise ValueError(
                f"{record.get('workflow')}/{record.get('system')}: the record has no engine"
                " counts (max_num_seqs, requests) to bound its work"
            )
        return cls._of_counts(
            max_num_seqs=record["max_num_seqs"],
            generated_tokens=record["output_tokens"],
            longest_chain_tokens=int(record["longest_chain_tokens"]),
            memory_steps=memory_steps(record),
            least_decode_steps=int(record.get("least_decode_steps", 0)),
            prefill_tokens=int(record["min_prefill_tokens"]),
            decode_tokens=int(record["decode_tokens"]),
            attention_pairs=int(record["min_attention_pairs"] + record["decode_attention_pairs"]),
        )

    @classmethod
    def of_result(cls, result: WorkflowResult, capacity: EngineCapacity) -> LeastWork:
        """From a run's result on an engine of ``capacity`` (as :meth:`of` from its record,
        but bounding the steps by the tokens the engine fed back rather than every output:
        a result-cache answer took no step).

        Raises:
            ValueError: as :meth:`of` (no engine request, or an engine without a most of
                running requests).
        """
        seqs = capacity.max_running_requests or 0
        if seqs <= 0 or result.requests <= 0:
            raise ValueError(
                f"{result.policy}: the run has no engine counts (max_num_seqs, requests) to"
                " bound its work"
            )
        return cls._of_counts(
            max_num_seqs=seqs,
            generated_tokens=result.decode_tokens,
            longest_chain_tokens=result.longest_chain_tokens,
            memory_steps=math.ceil(result.held_block_steps / capacity.num_blocks),
            least_decode_steps=result.least_decode_steps,
            prefill_tokens=result.min_prefill_tokens,
            decode_tokens=result.decode_tokens,
            attention_pairs=result.min_attention_pairs + result.decode_attention_pairs,
        )

    @classmethod
    def _of_counts(
        cls,
        *,
        max_num_seqs: int,
        generated_tokens: int,
        longest_chain_tokens: int,
        memory_steps: int,
        least_decode_steps: int,
        prefill_tokens: int,
        decode_tokens: int,
        attention_pairs: int,
    ) -> LeastWork:
        """The least work from a run's counts: its steps are the most of the longest
        chain's tokens, the generated tokens over the engine's sequences and the two
        memory bounds (see the module docstring)."""
        steps = max(
            longest_chain_tokens,
            math.ceil(generated_tokens / max_num_seqs),
            memory_steps,
            least_decode_steps,
        )
        return cls(steps, prefill_tokens, decode_tokens, attention_pairs)

    def parts_s(self, cost: StepCost) -> dict[str, float]:
        """This work's seconds at ``cost``, by part (as :meth:`StepCost.parts_s`)."""
        return {
            "steps": cost.step_s * self.steps,
            "prefill tokens": cost.prefill_token_s * self.prefill_tokens,
            "decode tokens": cost.decode_token_s * self.decode_tokens,
            "attention": cost.attention_pair_s * self.attention_pairs,
        }

    def time_s(self, cost: StepCost) -> float:
        """The least seconds this work takes at ``cost``."""
        return sum(self.parts_s(cost).values())


@dataclass(frozen=True)
class FloorRow:
    """One system's run of one workflow against Kalypso's least time there."""

    workflow: str
    system: str
    time_s: float
    over_kalypso: float
    """Measured: this system's time over Kalypso's."""
    most_over_kalypso: float
    """This system's time over Kalypso's least time: the most ``over_kalypso`` can be."""
    fitted_s: float | None
    """The fit's seconds for this run's engine steps (None without a window in the trace)."""


@dataclass(frozen=True)
class WorkflowFloor:
    """Kalypso's least work and time on one workflow, and every system's row."""

    workflow: str
    repeat: int
    least: LeastWork
    least_s: float
    least_parts_s: dict[str, float]
    kalypso_s: float
    rows: tuple[FloorRow, ...]
    kalypso_parts_s: dict[str, float] | None = None
    """Kalypso's traced steps at the fitted cost, by part (None without its window):
    beside ``least_parts_s``, where its time above the least goes."""

    def explain(self) -> str:
        """A few lines: the least work, its time by part, then one line per system."""
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in self.least_parts_s.items())
        repeat = f" (repeat {self.repeat})" if self.repeat else ""
        lines = [
            f"{self.workflow}{repeat}: kalypso {self.kalypso_s:.1f} s, least {self.least_s:.1f} s"
            f" ({self.least.steps} steps, {self.least.prefill_tokens:,} prefill and"
            f" {self.least.decode_tokens:,} decode tokens,"
            f" {self.least.attention_pairs / 1e6:.1f}M pairs: {parts})"
        ]
        if self.kalypso_parts_s is not None:
            above = ", ".join(
                f"{name} {self.kalypso_parts_s[name] - least_s:+.1f} s"
                for name, least_s in self.least_parts_s.items()
            )
            lines.append(f"  kalypso's traced steps above the least: {above}")
        for row in self.rows:
            fitted = f", fitted {row.fitted_s:.1f} s" if row.fitted_s is not None else ""
            lines.append(
                f"  {row.system:18} {row.time_s:7.1f} s{fitted}: {row.over_kalypso:.2f}x"
                f" kalypso, at most {row.most_over_kalypso:.2f}x"
            )
        return "\n".join(lines)


def fit_cost(
    runs: Mapping[str, Sequence[tuple[dict[str, float], float]]],
) -> tuple[StepCost, float]:
    """One cost over every run's steps, no part of it negative
    (:meth:`StepCost.fit_nonnegative`: a negative part would lower the least time below
    what the work costs), and its mean absolute error per step (seconds).

    Raises:
        ValueError: fewer than five steps in all.
    """
    pooled = [pair for run in runs.values() for pair in run]
    cost = StepCost.fit_nonnegative(
        [step for step, _ in pooled], [seconds for _, seconds in pooled]
    )
    errors = [seconds - sum(cost.parts_s([step]).values()) for step, seconds in pooled]
    return cost, float(np.abs(errors).mean())


SAME_WORK = ("min_prefill_tokens", "output_tokens", "decode_tokens", "longest_chain_tokens")
"""Counts two deterministic runs of Kalypso's calls on one workflow must share."""


def least_from(
    reference: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any]:
    """The ``kalypso`` record of ``reference``'s workflow in ``others`` (a later run that
    counted more), checked to be the same work; ``reference`` when there is none.

    Raises:
        ValueError: the two runs' counts differ (not the same calls).
    """
    for other in others:
        if other["system"] != REFERENCE or other["workflow"] != reference["workflow"]:
            continue
        differ = [k for k in SAME_WORK if other.get(k) != reference.get(k)]
        if differ:
            raise ValueError(
                f"{reference['workflow']}: the runs differ in {differ}, so they did not make"
                " the same calls"
            )
        return other
    return reference


def floors(
    records: Sequence[Mapping[str, Any]],
    cost: StepCost,
    runs: Mapping[str, Sequence[tuple[dict[str, float], float]]] | None = None,
    counts: Sequence[Mapping[str, Any]] = (),
) -> list[WorkflowFloor]:
    """Each workflow with a ``kalypso`` record (each repeat of it): its least work and
    time, and the row of each system of the same repeat, in the records' order. ``runs``
    (by :func:`bench.workflow_bench.run_name`) gives fitted times; Kalypso's least work
    comes from its record in ``counts`` when there is one (:func:`least_from`).

    Raises:
        ValueError: a ``kalypso`` record without the counts (see :meth:`LeastWork.of`).
    """
    out = []
    for reference in (r for r in records if r["system"] == REFERENCE):
        workflow, repeat = reference["workflow"], reference.get("repeat", 0)
        least = LeastWork.of(least_from(reference, counts))
        least_s = least.time_s(cost)
        rows = []
        for record in records:
            if (record["workflow"], record.get("repeat", 0)) != (workflow, repeat):
                continue
            steps = (runs or {}).get(run_name(workflow, record["system"], repeat))
            fitted = sum(cost.parts_s([s for s, _ in steps]).values()) if steps else None
            rows.append(
                FloorRow(
                    workflow=workflow,
                    system=record["system"],
                    time_s=record["time_s"],
                    over_kalypso=round(record["time_s"] / reference["time_s"], 4),
                    most_over_kalypso=round(record["time_s"] / least_s, 4),
                    fitted_s=None if fitted is None else round(fitted, 3),
                )
            )
        own = (runs or {}).get(run_name(workflow, REFERENCE, repeat))
        own_parts = cost.parts_s([step for step, _ in own]) if own else None
        out.append(
            WorkflowFloor(
                workflow=workflow,
                repeat=repeat,
                least=least,
                least_s=round(least_s, 3),
                least_parts_s={k: round(v, 3) for k, v in least.parts_s(cost).items()},
                kalypso_s=reference["time_s"],
                rows=tuple(rows),
                kalypso_parts_s=None
                if own_parts is None
                else {k: round(v, 3) for k, v in own_parts.items()},
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="workflow_bench records (JSON)")
    parser.add_argument("trace", type=Path, help="the step trace of the same runs")
    parser.add_argument(
        "--counts",
        type=Path,
        default=None,
        help="records of a later run whose kalypso records give the least work (they must"
        " count the same calls; newer records count more, such as private block-steps)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the floors as JSON")
    args = parser.parse_args(argv)
    records = json.loads(args.records.read_text())
    counts = json.loads(args.counts.read_text()) if args.counts else []
    runs = load_runs(args.trace)
    try:
        cost, error_s = fit_cost(runs)
        found = floors(records, cost, runs, counts)
    except ValueError as error:
        raise SystemExit(f"cannot bound: {error}") from error
    steps = sum(len(run) for run in runs.values())
    print(f"fit over {steps} steps of {len(runs)} runs: {cost.explain()}")
    print(f"  mean |error| per step {error_s:.3f} s")
    for floor in found:
        print(floor.explain())
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "cost": asdict(cost),
            "mean_abs_error_s": round(error_s, 4),
            "steps": steps,
            "workflows": [asdict(f) for f in found],
        }
        args.out.write_text(json.dumps(body, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
