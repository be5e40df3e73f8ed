"""The regime benchmark: Kalypso's default policies against the baselines, cell by cell,
under a GPU's step costs and a CPU's, on the simulator (a virtual clock: exact, to within
0.2% where index lookups run on threads beside it).

    python -m bench.regimes --out bench/results/regimes-sim.json    # every grid (make bench-paper)
    python -m bench.regimes --grids shapes --profiles gpu --workers 2  # keeps the other cells'
    python -m bench.regimes --grids shapes --profiles gpu --workloads debate:P6 --kv-tokens 88000
    python -m bench.regimes --report bench/results/regimes-sim.json # tables and heatmaps again

Grids (a cell is one workload at one KV size; every system runs it on a fresh engine):

``relational``
    ContractNLI, MEDEC, BioDEX and FEVER at the paper's scale, at the paper's KV sizes for
    Llama-3.3-70B (memory settings 0.9, 0.6 and 0.5: 581,700, 233,800 and 117,800
    tokens). Kalypso's default (``adaptive``) against operator-at-a-time and, on the two
    two-stage plans, the static splits 1:9 to 9:1. FEVER's corpus is 5,000 passages (its
    prompts carry 5 whatever the corpus; the paper's 50,000 take minutes to index here).
``workflows``
    The six library workflows at the paper's scale, at the profile's full KV cache.
``shapes``
    The Helium paper's Figure 10 shapes (:mod:`bench.shapes`) on MapRed and Debate, at the
    full cache, half and a quarter (Figure 9b's sweep): 352,000, 176,000, 88,000 tokens.

The workflow grids run Kalypso (its default, ``cache-aware``, with its optimizer) against
all-ready, opwise, lspf and querywise. Profiles: ``gpu`` is ``llama-3.3-70b-4xgpu``
(relational) and ``qwen3-8b-h100`` (workflows), the papers' settings; ``cpu`` is
``smollm2-cpu-f32`` on the same caches, blocks of 16 tokens and 256 sequences, so that a
cell differs between the two profiles only in what a step costs.

A cell's figure is Kalypso's speed-up over the best baseline there (the fastest system
that is not Kalypso's default). A workflow cell also records its *least time*
(:func:`cell_least_s`), which no schedule of its calls beats under the profile, so the
best baseline's time over it is the most any schedule could gain there (not for a job of
several days: the timed last day starts with the earlier days' prefixes cached). Records
(one per system and cell) carry the date, the commit and the host; one heatmap PNG per
grid and profile goes next to the records.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.stamp import run_stamp
from kalypso.engine.sim import SimEngine, SimOutputModel, get_profile

if TYPE_CHECKING:
    from kalypso.workflow.run import WorkflowResult

GRIDS = ("relational", "workflows", "shapes")
PROFILES = {
    "gpu": {"relational": "llama-3.3-70b-4xgpu", "workflows": "qwen3-8b-h100"},
    "cpu": {"relational": "smollm2-cpu-f32", "workflows": "smollm2-cpu-f32"},
}
BLOCK_SIZE_TOKENS = 16
MAX_NUM_SEQS = 256
MAX_STEP_TOKENS = 2048
"""The engines' batch limits: vLLM's defaults for a server on GPUs other than an 80 GB
H100 or H200 (there: 1024 sequences and 8192 tokens, ``--engine-limits 1024,8192``)."""
DEFAULT_LIMITS = (MAX_NUM_SEQS, MAX_STEP_TOKENS)


def parse_engine_limits(text: str) -> tuple[int, int]:
    """``--engine-limits SEQS,TOKENS`` (``bench.regimes``, ``bench.replicas``).

    Raises:
        argparse.ArgumentTypeError: not two whole numbers of at least 1.
    """
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"want two numbers >= 1 (SEQS,TOKENS), got {text!r}")
    return int(parts[0]), int(parts[1])


RELATIONAL_KV_TOKENS = (581_700, 233_800, 117_800)
WORKFLOW_KV_TOKENS = (352_000, 176_000, 88_000)
"""The Qwen3-8B profile's full cache, half and a quarter."""
RELATIONAL_WORKLOADS = ("contractnli", "medec", "biodex", "fever")
TWO_STAGE = ("contractnli", "biodex")
SPLITS = tuple(f"static:{share}" for share in (0.1, 0.3, 0.5, 0.7, 0.9))
FEVER_PASSAGES = 5_000
RELATIONAL_DEFAULT = "adaptive"
RELATIONAL_BASELINE = "operator-at-a-time"
WORKFLOW_DEFAULT = "kalypso"
WORKFLOW_BASELINES = ("all-ready", "opwise", "lspf", "querywise")
LIBRARY = ("mapred", "debate", "reflect", "iterative", "parallel", "trading")
NEVER_SLOWER = 1.01
"""Kalypso's time may be at most this times the best baseline's in every cell."""
THRASH_PREFILL = 1.3
"""A Debate cell where all-ready computes this times the least prefill: the baselines
thrash, and Kalypso should be at least :data:`THRASH_SPEEDUP` faster than the best."""
THRASH_SPEEDUP = 1.10


@dataclass(frozen=True)
class Cell:
    """One workload at one KV size, under one profile: every system runs it."""

    grid: str
    profile: str
    workload: str
    kv_tokens: int
    max_num_seqs: int = MAX_NUM_SEQS
    max_step_tokens: int = MAX_STEP_TOKENS

    @property
    def default_limits(self) -> bool:
        """Whether the engines run with :data:`MAX_NUM_SEQS` and :data:`MAX_STEP_TOKENS`."""
        return (self.max_num_seqs, self.max_step_tokens) == DEFAULT_LIMITS

    @property
    def systems(self) -> list[str]:
        if self.grid == "relational":
            splits = SPLITS if self.workload in TWO_STAGE else ()
            return [RELATIONAL_DEFAULT, RELATIONAL_BASELINE, *splits]
        return [WORKFLOW_DEFAULT, *WORKFLOW_BASELINES]

    @property
    def default(self) -> str:
        return RELATIONAL_DEFAULT if self.grid == "relational" else WORKFLOW_DEFAULT

    @property
    def profile_name(self) -> str:
        return PROFILES[self.profile]["relational" if self.grid == "relational" else "workflows"]


def cells(
    grids: Sequence[str],
    profiles: Sequence[str],
    limits: tuple[int, int] = DEFAULT_LIMITS,
) -> list[Cell]:
    """Every cell of ``grids`` under ``profiles``, the slowest grids first, with the
    engines' ``limits`` (sequences, tokens a step)."""
    return [
        replace(cell, max_num_seqs=limits[0], max_step_tokens=limits[1])
        for cell in _cells(grids, profiles)
    ]


def _cells(grids: Sequence[str], profiles: Sequence[str]) -> list[Cell]:
    out = []
    for profile in profiles:
        for grid in grids:
            if grid == "relational":
                out += [
                    Cell(grid, profile, w, kv)
                    for w in RELATIONAL_WORKLOADS
                    for kv in RELATIONAL_KV_TOKENS
                ]
            elif grid == "workflows":
                out += [Cell(grid, profile, w, WORKFLOW_KV_TOKENS[0]) for w in LIBRARY]
            else:
                out += [
                    Cell(grid, profile, f"{w}:{s}", kv)
                    for w in ("mapred", "debate")
                    for s in ("P1", "P2", "P3", "P4", "P5", "P6")
                    for kv in WORKFLOW_KV_TOKENS
                ]
    return out


def chosen(todo: Sequence[Cell], workloads: Sequence[str], kv_tokens: Sequence[int]) -> list[Cell]:
    """The cells of ``todo`` of one of ``workloads`` and one of ``kv_tokens`` (either empty:
    any).

    Raises:
        ValueError: a workload or a size no cell of ``todo`` has (a typo would run nothing).
    """
    known_workloads, known_sizes = {c.workload for c in todo}, {c.kv_tokens for c in todo}
    unknown = [w for w in workloads if w not in known_workloads]
    unknown += [str(k) for k in kv_tokens if k not in known_sizes]
    if unknown:
        raise ValueError(f"no cell of the chosen grids and profiles has {', '.join(unknown)}")
    return [
        c
        for c in todo
        if (not workloads or c.workload in workloads)
        and (not kv_tokens or c.kv_tokens in kv_tokens)
    ]


def _engine(cell: Cell, output_tokens: int | None = None, admission: str = "vllm") -> SimEngine:
    """A fresh simulator for ``cell``: the profile's step costs, the cell's cache, and the
    GPU profile's context on both profiles (so that a cell runs the same prompts), admitting
    requests by ``admission`` (vLLM's rule unless a study asks for another)."""
    blocks = cell.kv_tokens // BLOCK_SIZE_TOKENS
    gpu = PROFILES["gpu"]["relational" if cell.grid == "relational" else "workflows"]
    context = min(get_profile(gpu).capacity.max_model_len_tokens, blocks * BLOCK_SIZE_TOKENS)
    outputs = None
    if output_tokens is not None:
        outputs = SimOutputModel(min_output_tokens=output_tokens, max_output_tokens=output_tokens)
    return SimEngine(
        get_profile(cell.profile_name),
        num_blocks=blocks,
        block_size_tokens=BLOCK_SIZE_TOKENS,
        max_model_len_tokens=context,
        max_num_seqs=cell.max_num_seqs,
        max_num_batched_tokens=cell.max_step_tokens,
        outputs=outputs,
        admission=admission,
    )


async def _relational(cell: Cell) -> list[dict[str, Any]]:
    from bench.runner import run_systems
    from bench.workloads import WORKLOADS, fever

    workload = (
        fever("paper", passages=FEVER_PASSAGES)
        if cell.workload == "fever"
        else WORKLOADS[cell.workload]("paper")
    )
    engine = _engine(cell)
    try:
        records = await run_systems(engine, workload, cell.systems, warm_run=False)
    finally:
        await engine.close()
    return [
        {
            "time_s": r.time_s,
            "system": r.system,
            "prefill_tokens": r.prefill_tokens,
            "min_prefill_tokens": r.min_prefill_tokens,
            "llm_calls": r.llm_calls,
            "outputs_equal": r.outputs_agree,
            "engine": r.engine,
        }
        for r in records
    ]


async def _workflow(cell: Cell) -> list[dict[str, Any]]:
    from bench.shapes import SHAPES, shaped
    from bench.workflow_bench import equal_fraction, run_system
    from kalypso.workflow.library import workload as library

    output = None
    if cell.grid == "shapes":
        name, shape = cell.workload.split(":")
        job = shaped(name, SHAPES[shape])
        output = SHAPES[shape].output_tokens
    else:
        job = library(cell.workload, "paper")
    rows = []
    reference = None
    least_s = None
    for system in cell.systems:
        engine = _engine(cell, output)
        try:
            run = await run_system(engine, job, system)
        finally:
            await engine.close()
        result = run.result
        if reference is None:  # the default's run, the first
            reference = result.outputs
            if len(job.workflows) == 1:  # a later day starts on the earlier days' cache
                least_s = round(cell_least_s(result, engine), 3)
        rows.append(
            {
                "time_s": round(run.elapsed_s, 3),
                "system": system,
                "prefill_tokens": result.prefill_tokens,
                "min_prefill_tokens": result.min_prefill_tokens,
                "llm_calls": result.llm_calls,
                "outputs_equal": equal_fraction(result.outputs, reference) == 1.0,
                "engine": engine.name,
                "policy": result.policy,
                "least_s": least_s,
            }
        )
    return rows


def cell_least_s(result: WorkflowResult, engine: SimEngine) -> float:
    """The least time any schedule of ``result``'s calls takes on ``engine``: their least
    work (:class:`bench.workflow_floor.LeastWork`: the steps the longest chain, the
    engine's sequences and its cache need, the ideal prefix cache's prefill, the decode)
    at the engine's own step cost, which is the simulator's clock."""
    from bench.engine_steps import StepCost
    from bench.workflow_floor import LeastWork

    least = LeastWork.of_result(result, engine.capacity)
    return least.time_s(StepCost.of_model(engine.cost_model))


def run_cell(cell: Cell, stamp: dict[str, str]) -> list[dict[str, Any]]:
    """Every system of ``cell``, one record each (run in a worker process)."""
    started = time.monotonic()
    runner = _relational if cell.grid == "relational" else _workflow
    rows = asyncio.run(runner(cell))
    took = round(time.monotonic() - started, 1)
    return [{**asdict(cell), **row, **stamp, "wall_s": took} for row in rows]


def stamp() -> dict[str, str]:
    """The date, the commit and the host (:func:`bench.stamp.run_stamp`) of this run."""
    return asdict(run_stamp())


@dataclass(frozen=True)
class Verdict:
    """One cell's outcome: Kalypso's time, the best baseline, the speed-up, and whether
    the baselines thrash there."""

    cell: Cell
    default_s: float
    best: str
    best_s: float
    thrash: bool
    outputs_equal: bool
    least_s: float | None = None
    """The least time any schedule takes there (workflow cells; None in a record without
    it): :func:`cell_least_s`."""

    @property
    def speedup(self) -> float:
        return self.best_s / self.default_s

    @property
    def most_speedup(self) -> float | None:
        """The most any schedule could be faster than the best baseline there."""
        return self.best_s / self.least_s if self.least_s else None

    @property
    def never_slower(self) -> bool:
        return self.default_s <= NEVER_SLOWER * self.best_s

    @property
    def thrash_met(self) -> bool | None:
        return self.speedup >= THRASH_SPEEDUP if self.thrash else None


def verdicts(records: Sequence[dict[str, Any]]) -> list[Verdict]:
    """One verdict per cell of ``records`` (cells missing their default are skipped)."""
    by_cell: dict[Cell, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_cell.setdefault(_cell_of(r), {})[r["system"]] = r
    out = []
    for cell, systems in by_cell.items():
        default = systems.get(cell.default)
        baselines = {s: r for s, r in systems.items() if s != cell.default}
        if default is None or not baselines:
            continue
        best = min(baselines, key=lambda s: baselines[s]["time_s"])
        ready = systems.get("all-ready")
        thrash = (
            cell.workload.startswith("debate")
            and ready is not None
            and ready["prefill_tokens"] >= THRASH_PREFILL * ready["min_prefill_tokens"]
        )
        out.append(
            Verdict(
                cell,
                default["time_s"],
                best,
                baselines[best]["time_s"],
                thrash,
                all(r["outputs_equal"] for r in systems.values()),
                default.get("least_s"),
            )
        )
    return out


def summary(records: Sequence[dict[str, Any]]) -> str:
    """A table per grid and profile, and the targets."""
    found = verdicts(records)
    lines = []
    for grid in GRIDS:
        for profile in PROFILES:
            rows = [v for v in found if v.cell.grid == grid and v.cell.profile == profile]
            if not rows:
                continue
            lines.append(f"\n{grid}, {profile} ({rows[0].cell.profile_name}):")
            for v in rows:
                flag = "" if v.never_slower else "  SLOWER"
                if v.thrash:
                    flag += "  thrash: " + ("met" if v.thrash_met else "MISSED")
                if v.least_s:
                    flag += f"  least {v.least_s:.2f} s (any schedule <= {v.most_speedup:.2f}x)"
                lines.append(
                    f"  {v.cell.workload:12} KV {v.cell.kv_tokens:>7,}  kalypso {v.default_s:9.2f}"
                    f" s  best {v.best:18} {v.best_s:9.2f} s  {v.speedup:5.2f}x{flag}"
                    + ("" if v.outputs_equal else "  OUTPUTS DIFFER")
                )
    slower = [v for v in found if not v.never_slower]
    thrash = [v for v in found if v.thrash]
    lines.append(
        f"\nnever slower than {NEVER_SLOWER}x the best baseline: {len(found) - len(slower)}"
        f" of {len(found)} cells"
    )
    lines.append(
        f"thrashing Debate cells at >= {THRASH_SPEEDUP}x: {sum(bool(v.thrash_met) for v in thrash)}"
        f" of {len(thrash)}"
    )
    bounded = [v for v in thrash if v.most_speedup is not None]
    if bounded:
        excluded = sum(v.most_speedup < THRASH_SPEEDUP for v in bounded if v.most_speedup)
        lines.append(
            f"  of the {len(bounded)} with a least time, {excluded} where no schedule reaches"
            f" {THRASH_SPEEDUP}x"
        )
    return "\n".join(lines)


def heatmaps(records: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """One PNG per grid and profile: Kalypso's speed-up over the best baseline per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    written = []
    found = verdicts(records)
    for grid in GRIDS:
        for profile in PROFILES:
            rows_of = [v for v in found if v.cell.grid == grid and v.cell.profile == profile]
            if not rows_of:
                continue
            names = list(dict.fromkeys(v.cell.workload for v in rows_of))
            sizes = sorted({v.cell.kv_tokens for v in rows_of}, reverse=True)
            grid_values = [[float("nan")] * len(sizes) for _ in names]
            for v in rows_of:
                grid_values[names.index(v.cell.workload)][sizes.index(v.cell.kv_tokens)] = v.speedup
            figure, axes = plt.subplots(figsize=(3.0 + 1.1 * len(sizes), 1.4 + 0.4 * len(names)))
            image = axes.imshow(grid_values, cmap="RdYlGn", norm=TwoSlopeNorm(1.0, 0.5, 2.0))
            axes.set_xticks(range(len(sizes)), [f"{s // 1000:,}k" for s in sizes])
            axes.set_yticks(range(len(names)), names)
            axes.set_xlabel("KV cache (tokens)")
            axes.set_aspect("auto")
            for i, row in enumerate(grid_values):
                for j, value in enumerate(row):
                    if value == value:
                        axes.text(j, i, f"{value:.2f}x", ha="center", va="center", fontsize=8)
            title = f"{grid}, {rows_of[0].cell.profile_name}: Kalypso over the best baseline"
            axes.set_title(title, fontsize=9)
            figure.colorbar(image, ax=axes, shrink=0.8)
            figure.tight_layout()
            path = out.with_name(f"{out.stem}-{grid}-{profile}.png")
            figure.savefig(path, dpi=110)
            plt.close(figure)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grids", default=",".join(GRIDS), help=f"comma-separated of {GRIDS}")
    parser.add_argument("--profiles", default="gpu,cpu", help="comma-separated of gpu, cpu")
    parser.add_argument(
        "--workloads", default="", help="only these workloads (debate:P6, medec), comma-separated"
    )
    parser.add_argument(
        "--kv-tokens", default="", help="only these KV sizes in tokens, comma-separated"
    )
    parser.add_argument(
        "--engine-limits",
        type=parse_engine_limits,
        default=DEFAULT_LIMITS,
        help=f"the engines' sequences and tokens a step (default {MAX_NUM_SEQS},"
        f"{MAX_STEP_TOKENS}; vLLM's own on an 80 GB H100: 1024,8192); other limits want an"
        " --out of their own",
    )
    parser.add_argument("--workers", type=int, default=2, help="cells run in parallel")
    parser.add_argument("--out", type=Path, default=Path("bench/results/regimes-sim.json"))
    parser.add_argument(
        "--report", type=Path, default=None, help="summarize and plot these records; run nothing"
    )
    args = parser.parse_args(argv)
    if args.report is not None:
        found = json.loads(args.report.read_text())
        print(summary(found))
        for path in heatmaps(found, args.report):
            print(f"wrote {path}")
        return 0
    grids = [g for g in args.grids.split(",") if g]
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [g for g in grids if g not in GRIDS] + [p for p in profiles if p not in PROFILES]
    if unknown or args.workers < 1:
        parser.error(f"unknown grids or profiles {unknown}, or --workers below 1")
    try:
        sizes = [int(k) for k in args.kv_tokens.split(",") if k]
        todo = chosen(
            cells(grids, profiles, args.engine_limits),
            [w for w in args.workloads.split(",") if w],
            sizes,
        )
    except ValueError as exc:
        parser.error(str(exc))
    label = stamp()
    records = _kept_records(args.out, set(todo))
    started = time.monotonic()
    print(f"{len(todo)} cells on {args.workers} workers ({label})", flush=True)
    order = {cell: i for i, cell in enumerate(cells(GRIDS, list(PROFILES)))}
    failed: list[str] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(run_cell, cell, label): cell for cell in todo}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            cell = futures[future]
            elapsed = time.monotonic() - started
            where = f"[{elapsed:6.0f} s] {done}/{len(todo)} {cell.grid} {cell.profile}"
            where += f" {cell.workload} KV {cell.kv_tokens:,}"
            try:
                rows = future.result()
            except Exception as exc:  # one failed cell must not lose the others
                failed.append(f"{where}: {exc!r}")
                print(f"{where}: FAILED: {exc!r}", flush=True)
                continue
            records += rows
            records.sort(key=lambda r: _position(_cell_of(r), order))
            args.out.write_text(json.dumps(records, indent=1) + "\n")  # kept as it grows
            times = ", ".join(f"{r['system']} {r['time_s']:.1f}" for r in rows)
            print(f"{where}: {times}", flush=True)
    print(summary(records))
    for line in failed:
        print(f"failed: {line}")
    for path in heatmaps(records, args.out):
        print(f"wrote {path}")
    print(f"records written to {args.out}; {time.monotonic() - started:.0f} s in all")
    return 1 if failed else 0


def _kept_records(out: Path, todo: set[Cell]) -> list[dict[str, Any]]:
    """The records already in ``out`` of the cells not in ``todo`` (a run of some grids
    or profiles replaces theirs and keeps the others')."""
    if not out.exists():
        return []
    found: list[dict[str, Any]] = json.loads(out.read_text())
    kept = [r for r in found if _cell_of(r) not in todo]
    if kept:
        print(f"keeping {len(kept)} records of other cells from {out}", flush=True)
    return kept


def _position(cell: Cell, order: dict[Cell, int]) -> tuple[int, int, int]:
    """Where ``cell``'s records go in a file: by grid, profile, workload and size, then by
    the engines' limits."""
    grid_cell = replace(cell, max_num_seqs=MAX_NUM_SEQS, max_step_tokens=MAX_STEP_TOKENS)
    return order[grid_cell], cell.max_num_seqs, cell.max_step_tokens


def _cell_of(record: dict[str, Any]) -> Cell:
    return Cell(
        record["grid"],
        record["profile"],
        record["workload"],
        record["kv_tokens"],
        record.get("max_num_seqs", MAX_NUM_SEQS),
        record.get("max_step_tokens", MAX_STEP_TOKENS),
    )


if __name__ == "__main__":
    sys.exit(main())
