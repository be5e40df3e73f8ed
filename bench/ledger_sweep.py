"""What-if runs of the regime benchmark's shapes cells: chosen systems, each optionally
with a fixed ledger size, on the simulator (a virtual clock: exact). The sweeps behind
docs/benchmarks.md's findings on ledger sizes and windows:

    python -m bench.ledger_sweep --cells debate:P6:88000,debate:P3:88000 \\
        --systems kalypso,kalypso@1.5,kalypso-unwindowed@1.5,kalypso:12,all-ready

A system is any of :mod:`bench.workflow_bench`'s (``kalypso:N`` fixes the instance
window at N queries), with ``@F`` for a ledger of F times the cache
(``RunOptions.kv_overcommit``). Each run gets a fresh engine of the cell's cache and the
GPU profile (``--profile cpu``: the CPU's step costs; ``--admission vllm,known-lengths``:
each system also on an engine that knows every output's length and never admits what it
would preempt, :mod:`kalypso.engine.sim.admission`). Prints one line per run and, with
``--out``, writes the records (date, commit, host).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.regimes import PROFILES, Cell, _engine
from bench.shapes import SHAPES, shaped
from bench.stamp import run_stamp
from bench.workflow_bench import is_system, run_system, system_options
from kalypso.engine.sim.admission import ADMISSIONS


def parse_cell(text: str, profile: str) -> Cell:
    """``WORKFLOW:SHAPE:KV_TOKENS`` (``debate:P6:88000``) as a shapes cell."""
    try:
        workflow, shape, kv = text.split(":")
        kv_tokens = int(kv)
    except ValueError:
        raise ValueError(f"a cell is WORKFLOW:SHAPE:KV_TOKENS, got {text!r}") from None
    if workflow not in ("mapred", "debate") or shape not in SHAPES or kv_tokens < 1:
        raise ValueError(f"no such shapes cell: {text!r} (mapred or debate, P1-P6, tokens >= 1)")
    return Cell("shapes", profile, f"{workflow}:{shape}", kv_tokens)


def parse_system(text: str) -> tuple[str, float | None]:
    """``SYSTEM`` or ``SYSTEM@F`` as (system, ledger factor or None)."""
    system, _, factor = text.partition("@")
    if not is_system(system):
        raise ValueError(f"unknown system {system!r}")
    if not factor:
        return system, None
    try:
        value = float(factor)
        system_options(system, value)  # refused as the run would refuse it, before any run
    except ValueError as exc:  # PlanError is one
        raise ValueError(f"ledger factor {factor!r} for {system}: {exc}") from None
    return system, value


async def sweep(
    cells: Sequence[Cell],
    systems: Sequence[tuple[str, float | None]],
    admissions: Sequence[str] = ("vllm",),
) -> list[dict[str, Any]]:
    """Every system on every cell, each on a fresh engine admitting by each of
    ``admissions`` (:mod:`kalypso.engine.sim.admission`): one record per run."""
    records = []
    for cell in cells:
        name, shape = cell.workload.split(":")
        job = shaped(name, SHAPES[shape])
        for (system, factor), admission in itertools.product(systems, admissions):
            engine = _engine(cell, SHAPES[shape].output_tokens, admission)
            try:
                run = await run_system(engine, job, system, kv_overcommit=factor)
            finally:
                await engine.close()
            record = {
                "profile": cell.profile,
                "workload": cell.workload,
                "kv_tokens": cell.kv_tokens,
                "system": system,
                "kv_overcommit": factor,
                "admission": admission,
                "time_s": round(run.elapsed_s, 3),
                "prefill_tokens": run.result.prefill_tokens,
                "min_prefill_tokens": run.result.min_prefill_tokens,
                "preemptions": run.preemptions,
            }
            label = system if factor is None else f"{system}@{factor:g}"
            label += "" if admission == "vllm" else f" ({admission})"
            print(
                f"{cell.workload} {cell.kv_tokens:>7} {label}:"
                f" {record['time_s']:.2f} s, prefill {record['prefill_tokens']:,}"
                f" (least {record['min_prefill_tokens']:,}), {run.preemptions} preemptions",
                flush=True,
            )
            records.append(record)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", required=True, help="WORKFLOW:SHAPE:KV_TOKENS, comma-separated")
    parser.add_argument("--systems", required=True, help="SYSTEM or SYSTEM@F, comma-separated")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="gpu")
    parser.add_argument(
        "--admission",
        default="vllm",
        help=f"the engines' admission, comma-separated of {ADMISSIONS}: vLLM's, or a what-if"
        " that knows every output's length (each system runs under each)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        cells = [parse_cell(c, args.profile) for c in args.cells.split(",")]
        systems = [parse_system(s) for s in args.systems.split(",")]
        admissions = args.admission.split(",")
        if unknown := set(admissions) - set(ADMISSIONS):
            raise ValueError(f"unknown admission {sorted(unknown)}: want {ADMISSIONS}")
    except ValueError as exc:
        parser.error(str(exc))
    stamp = asdict(run_stamp())  # the code and host as the runs start
    records = asyncio.run(sweep(cells, systems, admissions))
    if args.out is not None:
        args.out.write_text(json.dumps([{**r, **stamp} for r in records], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
